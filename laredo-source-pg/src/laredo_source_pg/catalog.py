"""Connections and what the system catalogs say about the tables.

:class:`Connections` owns the three connections of a source (query, replication, side) and
how they are opened (application name, timeout, the replication session's output settings).
:class:`Catalog` discovers the tables' columns, maps type OIDs, and validates that the tables
can sync (privileges, publication membership, replica identity, an invalidated slot).
Every error message masks the connection string's password.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import psycopg
from laredo.errors import ConfigError, TransientError
from laredo.types import ColumnDefinition, TableIdentifier, ValidationError
from psycopg import abc, pq
from psycopg.adapt import Transformer
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from .credentials import ConnectionProvider, build_provider
from .dsn import mask_dsn, mask_text
from .options import PostgresSourceOptions
from .partitions import PartitionFingerprint, memberships, publication_problem
from .sqltext import quote_ident, quote_literal, table_sql
from .typmods import precision_scale

logger = logging.getLogger(__name__)

__all__ = [
    "STREAM_OPTIONS",
    "Catalog",
    "Connections",
    "SlotRow",
    "check_conninfo",
    "connect",
    "precision_scale",
    "quote_ident",
    "quote_literal",
    "resolve_conninfo",
    "slot_row",
    "table_sql",
    "tls_hint",
]

STREAM_OPTIONS = "-c datestyle=ISO,YMD -c intervalstyle=postgres -c extra_float_digits=3"
"""Session settings of the replication connection: values arrive in the text forms psycopg's
loaders read, exactly as a query connection returns them."""

T = TypeVar("T")


def check_conninfo(dsn: str) -> None:
    """``ConfigError`` (password masked) unless libpq can parse ``dsn``."""
    try:
        conninfo_to_dict(dsn)
    except Exception:
        raise ConfigError(
            f"postgresql source: connection: invalid connection string "
            f"{mask_dsn(dsn)!r}; use a URI (postgresql://user@host:5432/db) or "
            "key=value pairs (host=... dbname=...)"
        ) from None


def resolve_conninfo(conninfo: str, provider: ConnectionProvider | None, what: str) -> str:
    """The connection string of one connection attempt: ``conninfo`` as configured, or what
    the connection ``provider`` makes of it (a whole string, or parameters merged into
    ``conninfo``). A failing provider is a ``TransientError`` (the attempt fails and is
    retried), its message masked; what it returns is never logged."""
    if provider is None:
        return conninfo
    try:
        got = provider(conninfo)
    except Exception as exc:
        raise TransientError(
            f"{what}: connection provider failed: {type(exc).__name__}: {mask_text(str(exc))}"
        ) from None
    if isinstance(got, str):
        return got
    if isinstance(got, Mapping):
        try:
            return make_conninfo(conninfo, **{str(k): str(v) for k, v in got.items()})
        except psycopg.Error:
            raise TransientError(
                f"{what}: the connection provider returned parameters libpq does not know "
                f"({', '.join(sorted(map(str, got)))})"
            ) from None
    raise TransientError(
        f"{what}: the connection provider returned a {type(got).__name__}; return a "
        "connection string or a mapping of libpq parameters"
    )


def tls_hint(error: str, params: Mapping[str, Any]) -> str:
    """What to check when a TLS connection failed (empty when it is not a TLS problem)."""
    text = error.lower()
    mode = str(params.get("sslmode") or "")
    if "certificate verify failed" in text:
        root = params.get("sslrootcert") or "~/.postgresql/root.crt"
        return (
            f" (sslmode={mode or 'verify-*'}: the server's certificate is not signed by a CA "
            f"in sslrootcert={root}; give the CA that signed it)"
        )
    if "does not match host name" in text or "server certificate for" in text:
        return (
            " (sslmode=verify-full: the host in the connection string must be a name or IP "
            "address the server's certificate lists; use that name, or sslmode=verify-ca)"
        )
    if "server does not support ssl" in text:
        return f" (sslmode={mode}: the server has ssl = off; turn it on, or lower sslmode)"
    return ""


class Connections:
    """The query connection (catalog, baseline), the replication connection (slot commands,
    streaming) and the side connection (reader thread, lag): never blocked by a baseline
    holding the query connection. Each reconnects on next use once broken."""

    def __init__(self, options: PostgresSourceOptions) -> None:
        self.dsn = options.connection
        self.provider = build_provider(options.connection_provider)
        """Asked for the connection string at every connect (``connection_provider``)."""
        self.slot_name = options.slot_name
        self.connect_timeout = options.connect_timeout
        self.transformer: abc.Transformer | None = None
        """psycopg's loaders of the query connection (the stream loads values with them)."""
        self._query: psycopg.Connection[Any] | None = None
        self._repl: psycopg.Connection[Any] | None = None
        self._monitor: psycopg.Connection[Any] | None = None
        self._monitor_lock = threading.Lock()

    def connect(self, *, replication: bool = False) -> psycopg.Connection[Any]:
        """A new autocommit connection; ``TransientError`` (password masked) when it fails.
        The connection provider, if any, is asked for the connection string every time."""
        kind = "replication" if replication else "query"
        what = f"postgresql source {self.slot_name!r}: {kind} connection"
        dsn = resolve_conninfo(self.dsn, self.provider, what)
        try:
            params = conninfo_to_dict(dsn)
        except psycopg.Error:
            raise TransientError(f"{what}: invalid connection string {mask_dsn(dsn)!r}") from None
        kwargs: dict[str, Any] = {}
        if "application_name" not in params:
            kwargs["application_name"] = f"laredo:{self.slot_name}"
        if "connect_timeout" not in params:
            kwargs["connect_timeout"] = max(1, round(self.connect_timeout))
        if replication:
            kwargs["replication"] = "database"
            existing = str(params.get("options", "") or "")
            kwargs["options"] = f"{existing} {STREAM_OPTIONS}".strip()
        try:
            conninfo = make_conninfo(dsn, **kwargs)
            return psycopg.connect(conninfo, autocommit=True)
        except psycopg.Error as exc:
            raise TransientError(
                f"{what} to {mask_dsn(dsn)!r} failed: {mask_text(str(exc)).strip()}"
                f"{tls_hint(str(exc), params)}"
            ) from None

    def query(self) -> psycopg.Connection[Any]:
        """The query connection, (re)opened when needed."""
        conn = self._query
        if conn is None or conn.closed or conn.broken:
            if conn is not None:
                with contextlib.suppress(Exception):
                    conn.close()
            conn = self._query = self.connect()
            self.transformer = Transformer(conn)
        return conn

    @property
    def server_version(self) -> int:
        """The server's version number (e.g. 150004), from the query connection."""
        return self.query().info.server_version

    def loaders(self) -> abc.Transformer:
        """The query connection's transformer (opening the connection if needed)."""
        if self.transformer is None:
            self.query()
        assert self.transformer is not None
        return self.transformer

    def repl(self) -> psycopg.Connection[Any]:
        """The replication connection, (re)opened when needed."""
        repl = self._repl
        if repl is None or repl.closed or repl.broken:
            self.close_repl()
            repl = self._repl = self.connect(replication=True)
        return repl

    @property
    def repl_open(self) -> bool:
        return self._repl is not None and not self._repl.closed

    def close_repl(self) -> None:
        repl, self._repl = self._repl, None
        if repl is not None:
            with contextlib.suppress(Exception):
                repl.close()

    def side(self, fn: Callable[[psycopg.Connection[Any]], T]) -> T:
        """Run ``fn`` on the side connection (reader thread and ``get_lag``)."""
        with self._monitor_lock:
            mon = self._monitor
            if mon is None or mon.closed or mon.broken:
                mon = self._monitor = self.connect()
            return fn(mon)

    def reset_query(self) -> None:
        """Close the query and side connections (they reopen on next use): after a failover
        they may still point at the old server, which no operation has noticed yet."""
        with self._monitor_lock:
            for attr in ("_query", "_monitor"):
                conn = getattr(self, attr)
                setattr(self, attr, None)
                if conn is not None:
                    with contextlib.suppress(Exception):
                        conn.close()
        self.transformer = None

    def close(self) -> None:
        """Close every connection (replication first)."""
        self.close_repl()
        for attr in ("_query", "_monitor"):
            conn = getattr(self, attr)
            setattr(self, attr, None)
            if conn is not None:
                with contextlib.suppress(Exception):
                    conn.close()


def connect(
    options: PostgresSourceOptions, *, replication: bool = False
) -> psycopg.Connection[Any]:
    """A new autocommit connection opened exactly as the source opens its own: the
    ``connection_provider`` asked, TLS and every libpq parameter of ``connection`` applied, the
    application name and connect timeout set. ``TransientError`` (password masked) when it
    fails. For code that reads in other processes (Spark tasks): they receive the options, never
    a resolved connection string."""
    return Connections(options).connect(replication=replication)


@dataclass(frozen=True, slots=True)
class SlotRow:
    """A row of ``pg_replication_slots``."""

    slot_type: str
    temporary: bool
    active: bool
    confirmed: str | None
    """``confirmed_flush_lsn`` as text."""
    wal_status: str | None
    """``lost`` once the slot is invalidated."""
    database: str | None
    plugin: str | None


def slot_row(conn: psycopg.Connection[Any], slot_name: str) -> SlotRow | None:
    """The replication slot ``slot_name``, or None."""
    row = conn.execute(
        "SELECT slot_type, temporary, active, confirmed_flush_lsn::text, wal_status, database, "
        "plugin FROM pg_replication_slots WHERE slot_name = %s",
        (slot_name,),
    ).fetchone()
    return SlotRow(*row) if row else None


_COLUMNS_QUERY = """
    SELECT a.attname, t.typname, a.atttypid, a.attnum, NOT a.attnotnull,
           pg_get_expr(d.adbin, d.adrelid),
           coalesce((SELECT k.ord FROM pg_index i,
                          unnest(i.indkey) WITH ORDINALITY AS k(attnum, ord)
                     WHERE i.indrelid = a.attrelid AND i.indisprimary
                       AND k.attnum = a.attnum), 0),
           CASE WHEN a.atttypmod > 4 AND t.typname IN ('varchar', 'bpchar')
                THEN a.atttypmod - 4 ELSE 0 END,
           a.atttypmod
    FROM pg_attribute a
    JOIN pg_type t ON t.oid = a.atttypid
    LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
    WHERE a.attrelid = to_regclass(format('%%I.%%I', %s::text, %s::text))
      AND a.attnum > 0 AND NOT a.attisdropped AND a.attgenerated IN ('', %s::"char")
    ORDER BY a.attnum
"""
"""Columns as pgoutput describes them: stored generated columns only when the publication
publishes them (PostgreSQL 18's ``publish_generated_columns = stored``; pgoutput never sends
them before 18), so the baseline, the stream and snapshots carry the same columns. The
parameter after the table is ``'s'`` (include them) or ``''``."""


class Catalog:
    """The configured tables and their columns, as the baseline and the stream see them.

    ``published_columns`` (explicit publication column lists) and ``row_filters`` come from the
    publication (PostgreSQL 15+): discovery leaves unpublished columns out, the baseline applies
    the row filter, so baseline and stream carry the same rows and columns.
    """

    def __init__(self, conns: Connections, options: PostgresSourceOptions) -> None:
        self._conns = conns
        self._options = options
        self._tables: list[TableIdentifier] = []
        self.tracked: dict[tuple[str, str], TableIdentifier] = {}
        """``(schema, table) -> table`` of the configured tables; one dict, updated in place, so
        a running stream sees tables added or removed while it runs."""
        self.columns: dict[TableIdentifier, list[ColumnDefinition]] = {}
        self.row_filters: dict[TableIdentifier, str] = {}
        self.published_columns: dict[TableIdentifier, set[str]] = {}
        self.generated = ""
        """``'s'`` when the publication publishes stored generated columns (PostgreSQL 18+):
        discovery then includes them; ``''`` otherwise."""
        self.move_keys: dict[TableIdentifier, tuple[str, ...]] = {}
        """Partitioned parents -> key columns a row moved to another partition keeps (see
        :func:`.partitions.merge_moves`)."""
        self.partitions: dict[TableIdentifier, PartitionFingerprint] = {}
        """Partitioned parents -> their leaves as the last baseline (or catalog check) saw them."""

    @property
    def tables(self) -> list[TableIdentifier]:
        """The configured tables."""
        return self._tables

    @tables.setter
    def tables(self, tables: Sequence[TableIdentifier]) -> None:
        self._tables = list(tables)
        wanted = {(t.schema, t.table): t for t in self._tables}
        for key in [k for k in self.tracked if k not in wanted]:
            del self.tracked[key]
        self.tracked.update(wanted)

    def existing(self, tables: Sequence[TableIdentifier]) -> list[TableIdentifier]:
        """The tables of ``tables`` that exist (visible to this role)."""
        conn = self._conns.query()
        out = []
        for t in tables:
            row = conn.execute(
                "SELECT to_regclass(format('%%I.%%I', %s::text, %s::text)) IS NOT NULL",
                (t.schema, t.table),
            ).fetchone()
            if row and row[0]:
                out.append(t)
        return out

    def discover(
        self, tables: Sequence[TableIdentifier], conn: psycopg.Connection[Any] | None = None
    ) -> dict[TableIdentifier, list[ColumnDefinition]]:
        """Columns of the existing tables among ``tables`` (missing ones are left out)."""
        conn = conn or self._conns.query()
        out: dict[TableIdentifier, list[ColumnDefinition]] = {}
        for t in tables:
            rows = conn.execute(_COLUMNS_QUERY, (t.schema, t.table, self.generated)).fetchall()
            if not rows:
                continue
            published = self.published_columns.get(t)
            cols = []
            for name, typname, oid, attnum, nullable, default, pk_ord, maxlen, typmod in rows:
                if published is not None and name not in published:
                    continue
                precision, scale = precision_scale(typname, int(typmod))
                cols.append(
                    ColumnDefinition(
                        name=name,
                        type=typname,
                        ordinal_position=int(attnum),
                        nullable=bool(nullable),
                        primary_key=bool(pk_ord),
                        primary_key_ordinal=int(pk_ord),
                        type_oid=int(oid),
                        default_value=default,
                        max_length=int(maxlen),
                        precision=precision,
                        scale=scale,
                    )
                )
            out[t] = cols
        return out

    def result_oid(self, oid: int) -> int:
        """The type OID a query result reports for a column of type ``oid``: a domain's base
        type (pgoutput sends the domain, a SELECT the base type), so both paths load alike."""
        tx = self._conns.transformer
        if tx is None or tx.adapters.get_loader(oid, pq.Format.TEXT) is not None:
            return oid
        try:
            row = self._conns.side(
                lambda conn: conn.execute(
                    "SELECT typtype, typbasetype FROM pg_type WHERE oid = %s", (oid,)
                ).fetchone()
            )
        except Exception:
            return oid
        if row is not None and row[0] == "d" and row[1]:
            return self.result_oid(int(row[1]))
        return oid

    def validate_tables(self, tables: Sequence[TableIdentifier]) -> list[ValidationError]:
        """Problems that would stop the tables from syncing, each with a code:

        TABLE_NOT_FOUND, MISSING_SELECT_PRIVILEGE, MISSING_REPLICATION_PRIVILEGE,
        PUBLICATION_NOT_FOUND, TABLE_NOT_IN_PUBLICATION, PARTITIONS_PUBLISHED_SEPARATELY,
        PARTITION_PUBLISHED_VIA_ROOT, REPLICA_IDENTITY, SLOT_INVALIDATED.
        """
        conn = self._conns.query()
        publication = self._options.publication_name
        errors: list[ValidationError] = []
        row = conn.execute(
            "SELECT rolsuper, rolreplication, current_user FROM pg_roles "
            "WHERE rolname = current_user"
        ).fetchone()
        if row is not None and not (row[0] or row[1]):
            errors.append(
                ValidationError(
                    None,
                    "MISSING_REPLICATION_PRIVILEGE",
                    f"role {row[2]!r} lacks REPLICATION; run ALTER ROLE {quote_ident(row[2])} "
                    "REPLICATION",
                )
            )
        pub = conn.execute(
            "SELECT puballtables, pubupdate OR pubdelete FROM pg_publication WHERE pubname = %s",
            (publication,),
        ).fetchone()
        create = self._options.publication.create
        if pub is None:
            hint = (
                "let Laredo create it: remove publication.create = false"
                if create is False
                else "let Laredo create it: it tried and could not (laredo check says why)"
            )
            errors.append(
                ValidationError(
                    None,
                    "PUBLICATION_NOT_FOUND",
                    f"publication {publication!r} does not exist; create it "
                    f"(CREATE PUBLICATION {quote_ident(publication)} FOR TABLE ...) "
                    f"or {hint}",
                )
            )
        members = memberships(conn, publication, tables) if pub is not None else {}
        needs_identity = pub is None or bool(pub[1])
        for t in tables:
            info = conn.execute(
                """
                SELECT c.relreplident,
                       EXISTS (SELECT 1 FROM pg_index i
                               WHERE i.indrelid = c.oid AND i.indisprimary),
                       has_table_privilege(c.oid, 'SELECT'), c.relkind
                FROM pg_class c WHERE c.oid = to_regclass(format('%%I.%%I', %s::text, %s::text))
                """,
                (t.schema, t.table),
            ).fetchone()
            if info is None:
                errors.append(
                    ValidationError(
                        t,
                        "TABLE_NOT_FOUND",
                        f"table {t} does not exist (or is not visible to this role); check the "
                        "schema and table name",
                    )
                )
                continue
            replident, has_pk, can_select, _relkind = info
            qualified = f"{quote_ident(t.schema)}.{quote_ident(t.table)}"
            if not can_select:
                errors.append(
                    ValidationError(
                        t,
                        "MISSING_SELECT_PRIVILEGE",
                        f"no SELECT privilege on {t}; run GRANT SELECT ON {qualified} TO <role>",
                    )
                )
            if pub is not None and not pub[0]:
                problem = publication_problem(t, members.get(t), publication, create)
                if problem is not None:
                    errors.append(ValidationError(t, problem.code, problem.text))
            if needs_identity and (replident == "n" or (replident == "d" and not has_pk)):
                why = "REPLICA IDENTITY NOTHING" if replident == "n" else "no primary key"
                errors.append(
                    ValidationError(
                        t,
                        "REPLICA_IDENTITY",
                        f"table {t} has {why}: its updates and deletes cannot be replicated "
                        f"(and fail on the source); add a primary key or run ALTER TABLE "
                        f"{qualified} REPLICA IDENTITY FULL",
                    )
                )
        if self._options.stateful:
            slot = slot_row(conn, self._options.slot_name)
            if slot is not None and slot.wal_status == "lost":
                errors.append(
                    ValidationError(
                        None,
                        "SLOT_INVALIDATED",
                        f"replication slot {self._options.slot_name!r} was invalidated (the "
                        "WAL it needed was removed, e.g. max_slot_wal_keep_size); reset the "
                        "source (laredo reset-source)"
                        + (
                            " or set on_slot_invalidated = rebaseline"
                            if self._options.on_slot_invalidated == "fail"
                            else " (the next start re-creates it and re-baselines)"
                        ),
                    )
                )
        return errors
