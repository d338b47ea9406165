"""What a database holds, as ``laredo init`` and ``laredo check`` need it: tables with their
keys, replica identity, columns and owner, and this role's privileges on them.

Everything here is read-only: :func:`connect_readonly` opens a session with
``default_transaction_read_only`` on, and the queries only read the system catalogs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import psycopg
from laredo.errors import TransientError
from laredo.types import TableIdentifier
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from .dsn import mask_dsn, mask_text

__all__ = [
    "TableSummary",
    "connect_readonly",
    "describe_table",
    "dsn_without_password",
    "resolve_table",
    "user_tables",
]


@dataclass(frozen=True, slots=True)
class TableSummary:
    """One relation as the catalogs describe it."""

    table: TableIdentifier
    kind: str
    """``pg_class.relkind``: ``r`` table, ``p`` partitioned table, ``v`` view, ..."""
    columns: tuple[str, ...]
    primary_key: tuple[str, ...]
    replica_identity: str
    """``d`` default (the primary key), ``n`` nothing, ``f`` full, ``i`` an index."""
    identity_index: tuple[str, ...]
    """Columns of the ``REPLICA IDENTITY USING INDEX`` index (empty otherwise)."""
    owner: str
    owned: bool
    """This role is the owner or a member of the owning role."""
    can_select: bool
    estimated_rows: int

    @property
    def is_table(self) -> bool:
        return self.kind in ("r", "p")

    @property
    def key(self) -> tuple[str, ...]:
        """The columns identifying a row: the primary key, else the replica identity index."""
        if self.primary_key:
            return self.primary_key
        return self.identity_index if self.replica_identity == "i" else ()

    def identity_problem(self) -> str | None:
        """Why updates and deletes of this table cannot be replicated (None: they can)."""
        if self.replica_identity == "n":
            return "REPLICA IDENTITY NOTHING"
        if self.replica_identity == "d" and not self.primary_key:
            return "no primary key"
        return None


_SELECT = """
SELECT n.nspname, c.relname, c.relkind::text, c.relreplident::text,
       pg_get_userbyid(c.relowner), pg_has_role(c.relowner, 'USAGE'),
       has_table_privilege(c.oid, 'SELECT'), greatest(c.reltuples, 0)::bigint,
       ARRAY(SELECT a.attname::text FROM pg_attribute a
             WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
             ORDER BY a.attnum),
       ARRAY(SELECT a.attname::text FROM pg_index i
             CROSS JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, ord)
             JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
             WHERE i.indrelid = c.oid AND i.indisprimary ORDER BY k.ord),
       ARRAY(SELECT a.attname::text FROM pg_index i
             CROSS JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, ord)
             JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
             WHERE i.indrelid = c.oid AND i.indisreplident ORDER BY k.ord)
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
"""


def _summary(row: Sequence[Any]) -> TableSummary:
    schema, name, kind, ident, owner, owned, select, rows, cols, pk, ident_idx = row
    return TableSummary(
        TableIdentifier(schema, name),
        kind,
        tuple(cols or ()),
        tuple(pk or ()),
        ident,
        tuple(ident_idx or ()),
        owner,
        bool(owned),
        bool(select),
        int(rows or 0),
    )


def connect_readonly(
    dsn: str, timeout: float = 10.0, application_name: str = "laredo-check"
) -> psycopg.Connection[Any]:
    """An autocommit session in which every transaction is read-only; ``TransientError``
    (password masked) when the server cannot be reached."""
    params = conninfo_to_dict(dsn)
    kwargs: dict[str, Any] = {}
    if "application_name" not in params:
        kwargs["application_name"] = application_name
    if "connect_timeout" not in params:
        kwargs["connect_timeout"] = max(1, round(timeout))
    try:
        conn = psycopg.connect(make_conninfo(dsn, **kwargs), autocommit=True)
    except psycopg.Error as exc:
        raise TransientError(
            f"connection to {mask_dsn(dsn)!r} failed: {mask_text(str(exc)).strip()}"
        ) from None
    conn.execute("SET default_transaction_read_only = on")
    return conn


def describe_table(conn: psycopg.Connection[Any], table: TableIdentifier) -> TableSummary | None:
    """The relation ``table`` (None when it does not exist or is not visible to this role)."""
    row = conn.execute(
        _SELECT + " WHERE c.oid = to_regclass(format('%%I.%%I', %s::text, %s::text))",
        (table.schema, table.table),
    ).fetchone()
    return _summary(row) if row else None


def resolve_table(conn: psycopg.Connection[Any], name: str) -> TableSummary | None:
    """The relation a user names (``users``, ``public.users``, ``"Mixed".name``), resolved
    like SQL does (unqualified names through the search path); None when not found."""
    try:
        with conn.transaction():
            row = conn.execute(_SELECT + " WHERE c.oid = to_regclass(%s)", (name,)).fetchone()
    except psycopg.Error:
        return None  # not a valid relation name
    return _summary(row) if row else None


def user_tables(conn: psycopg.Connection[Any], schema: str | None = None) -> list[TableSummary]:
    """Every ordinary and partitioned table outside the system schemas (partitions left out:
    their parent is the table to sync), in schema and name order; only ``schema`` if given."""
    rows = conn.execute(
        _SELECT
        + """ WHERE c.relkind IN ('r', 'p') AND NOT c.relispartition
              AND n.nspname <> 'information_schema' AND n.nspname NOT LIKE 'pg\\_%%'
              AND (%s::text IS NULL OR n.nspname = %s::text)
            ORDER BY n.nspname, c.relname""",
        (schema, schema),
    ).fetchall()
    return [_summary(r) for r in rows]


def dsn_without_password(dsn: str) -> tuple[str, bool]:
    """``dsn`` with any password removed (a URI stays a URI), and whether it had one."""
    if dsn.startswith(("postgresql://", "postgres://")):
        parts = urlsplit(dsn)
        had = parts.password is not None
        netloc = parts.netloc
        if had:
            user, _, host = netloc.rpartition("@")
            netloc = f"{user.split(':', 1)[0]}@{host}"
        query = parse_qsl(parts.query, keep_blank_values=True)
        kept = [(k, v) for k, v in query if k != "password"]
        had = had or len(kept) != len(query)
        return urlunsplit(parts._replace(netloc=netloc, query=urlencode(kept))), had
    params = conninfo_to_dict(dsn)
    had = params.pop("password", None) is not None
    return (make_conninfo("", **params) if had else dsn), had
