"""Partitioned tables: under which name a table's changes arrive, and what its partitions are.

A pipeline names a partitioned parent (or a leaf partition, or an ordinary table). pgoutput
sends a partition's changes under the parent's name only when the publication has
``publish_via_partition_root = true`` (Laredo creates its publications so); otherwise under
the leaf's name. ``pg_publication_tables`` lists exactly the names changes arrive under, so
:func:`memberships` reads it once and classifies every configured table: the one rule used by
validation (:mod:`.catalog`) and by ``laredo check`` (:mod:`.checks`).

Attaching, detaching, dropping or truncating a partition moves rows in or out of the parent
without any row change in the stream (pgoutput sends no TRUNCATE for a leaf when it publishes
via the root). :func:`partition_fingerprints` identifies a parent's leaves and their storage
(relfilenode changes on TRUNCATE); a change of it makes the source ask for a re-baseline of
the parent (see :mod:`.catalog_watch`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

import psycopg
from laredo.types import (
    ChangeAction,
    ChangeEvent,
    ColumnDefinition,
    TableIdentifier,
    primary_key_columns,
)

from .sqltext import quote_ident

__all__ = [
    "Membership",
    "PartitionFingerprint",
    "PublicationProblem",
    "memberships",
    "merge_moves",
    "move_keys",
    "partition_fingerprints",
    "partitioned_tables",
    "publication_problem",
]

PartitionFingerprint = frozenset[tuple[int, int]]
"""A partitioned parent's leaves as ``(oid, relfilenode)`` pairs."""

MembershipKind = Literal["published", "missing", "via_partitions", "via_ancestor", "absent"]


@dataclass(frozen=True, slots=True)
class Membership:
    """How one configured table stands in the publication.

    ``published``: its changes arrive under its name. ``missing``: not published at all.
    ``via_partitions``: a partitioned parent whose partitions are published under their own
    names (``publish_via_partition_root = false``). ``via_ancestor``: a partition whose changes
    arrive under ``ancestor`` (published with ``publish_via_partition_root = true``).
    ``absent``: the table does not exist.
    """

    kind: MembershipKind
    partitioned: bool = False
    ancestor: TableIdentifier | None = None


_MEMBERSHIP = """
WITH pub AS (
    SELECT format('%%I.%%I', schemaname, tablename)::regclass AS rel
    FROM pg_publication_tables WHERE pubname = %s
)
SELECT x.s, x.t, c.relkind::text,
       EXISTS (SELECT 1 FROM pub WHERE pub.rel = c.oid),
       c.relkind = 'p' AND EXISTS (
           SELECT 1 FROM pg_partition_tree(c.oid) pt JOIN pub ON pub.rel = pt.relid
           WHERE pt.relid <> c.oid),
       anc.nspname, anc.relname
FROM unnest(%s::text[], %s::text[]) AS x(s, t)
LEFT JOIN pg_class c ON c.oid = to_regclass(format('%%I.%%I', x.s, x.t))
LEFT JOIN LATERAL (
    SELECT an.nspname, ac.relname
    FROM pg_partition_ancestors(c.oid) pa
    JOIN pub ON pub.rel = pa.relid
    JOIN pg_class ac ON ac.oid = pa.relid
    JOIN pg_namespace an ON an.oid = ac.relnamespace
    WHERE c.relispartition AND pa.relid <> c.oid
    LIMIT 1
) anc ON true
"""


def memberships(
    conn: psycopg.Connection[Any], publication: str, tables: Sequence[TableIdentifier]
) -> dict[TableIdentifier, Membership]:
    """Classify ``tables`` against ``publication`` (see :class:`Membership`); one query."""
    if not tables:
        return {}
    rows = conn.execute(
        _MEMBERSHIP,
        (publication, [t.schema for t in tables], [t.table for t in tables]),
    ).fetchall()
    out: dict[TableIdentifier, Membership] = {}
    for schema, name, relkind, listed, leaves, a_schema, a_name in rows:
        table = TableIdentifier(schema, name)
        if relkind is None:
            out[table] = Membership("absent")
            continue
        partitioned = relkind == "p"
        if listed:
            out[table] = Membership("published", partitioned)
        elif leaves:
            out[table] = Membership("via_partitions", partitioned)
        elif a_name is not None:
            out[table] = Membership(
                "via_ancestor", partitioned, TableIdentifier(str(a_schema), str(a_name))
            )
        else:
            out[table] = Membership("missing", partitioned)
    return out


def partitioned_tables(
    conn: psycopg.Connection[Any], tables: Sequence[TableIdentifier]
) -> list[TableIdentifier]:
    """The partitioned parents among ``tables``."""
    if not tables:
        return []
    rows = conn.execute(
        "SELECT x.s, x.t FROM unnest(%s::text[], %s::text[]) AS x(s, t) "
        "JOIN pg_class c ON c.oid = to_regclass(format('%%I.%%I', x.s, x.t)) "
        "WHERE c.relkind = 'p'",
        ([t.schema for t in tables], [t.table for t in tables]),
    ).fetchall()
    return [TableIdentifier(s, t) for s, t in rows]


_FINGERPRINTS = """
SELECT x.s, x.t,
       ARRAY(SELECT ARRAY[pt.relid::oid::bigint, pc.relfilenode::bigint]
               FROM pg_partition_tree(c.oid) pt JOIN pg_class pc ON pc.oid = pt.relid
              WHERE pt.isleaf)
FROM unnest(%s::text[], %s::text[]) AS x(s, t)
JOIN pg_class c ON c.oid = to_regclass(format('%%I.%%I', x.s, x.t))
WHERE c.relkind = 'p'
"""


def partition_fingerprints(
    conn: psycopg.Connection[Any], tables: Sequence[TableIdentifier]
) -> dict[TableIdentifier, PartitionFingerprint]:
    """For each partitioned parent among ``tables``: its leaves and their storage, as seen by
    ``conn``'s snapshot (inside a baseline's transaction: exactly the baseline's partitions)."""
    if not tables:
        return {}
    rows = conn.execute(
        _FINGERPRINTS, ([t.schema for t in tables], [t.table for t in tables])
    ).fetchall()
    return {
        TableIdentifier(s, t): frozenset((int(a), int(b)) for a, b in (leaves or ()))
        for s, t, leaves in rows
    }


@dataclass(frozen=True, slots=True)
class PublicationProblem:
    """Why a table's changes do not arrive under its name, and the fix."""

    code: str
    message: str
    fix: str

    @property
    def text(self) -> str:
        return f"{self.message}; {self.fix}"


def publication_problem(
    table: TableIdentifier,
    member: Membership | None,
    publication: str,
    create: bool | None,
) -> PublicationProblem | None:
    """Why ``table``'s changes do not arrive under its name (None: they do), with the fix.

    A fix already in place is never suggested: ``publication.create = true`` is offered only
    when it is not set."""
    if member is None or member.kind in ("published", "absent"):
        return None
    pub = quote_ident(publication)
    qualified = f"{quote_ident(table.schema)}.{quote_ident(table.table)}"
    manage = (
        ""
        if create
        else " (or set publication.create = true so that Laredo keeps the publication in line)"
    )
    if member.kind == "via_partitions":
        return PublicationProblem(
            "PARTITIONS_PUBLISHED_SEPARATELY",
            f"partitioned table {table} is published through its partitions: publication "
            f"{publication!r} has publish_via_partition_root = false, so its changes arrive "
            "under the partitions' names",
            f"run ALTER PUBLICATION {pub} SET (publish_via_partition_root = true){manage}",
        )
    if member.kind == "via_ancestor":
        return PublicationProblem(
            "PARTITION_PUBLISHED_VIA_ROOT",
            f"partition {table}'s changes arrive under its parent {member.ancestor}: publication "
            f"{publication!r} publishes {member.ancestor} with publish_via_partition_root = "
            "true",
            f"name {member.ancestor} in the pipeline (a filter can keep this partition's rows), "
            "or stream the partition from a source whose publication does not include its "
            "parent",
        )
    return PublicationProblem(
        "TABLE_NOT_IN_PUBLICATION",
        f"table {table} is not in publication {publication!r}",
        f"run ALTER PUBLICATION {pub} ADD TABLE {qualified}{manage}",
    )


def move_keys(
    conn: psycopg.Connection[Any], columns: Mapping[TableIdentifier, Sequence[ColumnDefinition]]
) -> dict[TableIdentifier, tuple[str, ...]]:
    """For each partitioned parent among ``columns``' tables: its key columns that are not
    partition key columns (a row that moves keeps them). Parents whose key is all partition
    key are left out (a move cannot be told from a delete and an unrelated insert)."""
    tables = list(columns)
    if not tables:
        return {}
    rows = conn.execute(
        """
        SELECT x.s, x.t, ARRAY(SELECT a.attname::text FROM pg_attribute a
                                WHERE a.attrelid = c.oid AND a.attnum = ANY(pt.partattrs))
        FROM unnest(%s::text[], %s::text[]) AS x(s, t)
        JOIN pg_class c ON c.oid = to_regclass(format('%%I.%%I', x.s, x.t))
        JOIN pg_partitioned_table pt ON pt.partrelid = c.oid
        """,
        ([t.schema for t in tables], [t.table for t in tables]),
    ).fetchall()
    out: dict[TableIdentifier, tuple[str, ...]] = {}
    for schema, name, part_cols in rows:
        table = TableIdentifier(schema, name)
        parts = set(part_cols or ())
        keep = tuple(n for n in primary_key_columns(columns[table]) if n not in parts)
        if keep:
            out[table] = keep
    return out


_INSERT, _UPDATE, _DELETE = ChangeAction.INSERT, ChangeAction.UPDATE, ChangeAction.DELETE


def merge_moves(items: list[Any], keys: Mapping[TableIdentifier, tuple[str, ...]]) -> list[Any]:
    """Make each row moved to another partition the one UPDATE it was.

    PostgreSQL runs such an update as a DELETE from the old partition and an INSERT into the
    new one; under ``publish_via_partition_root`` both arrive for the parent, adjacent in
    their transaction. A DELETE followed by an INSERT of the same parent with equal ``keys``
    columns becomes an UPDATE whose ``old_values`` is the DELETE's (the old key). A pair split
    across two chunks of a transaction larger than ``batch_size`` stays a DELETE and an INSERT
    (the replica ends the same)."""
    out: list[Any] | None = None
    prev: Any = None
    for i, item in enumerate(items):
        if (
            type(item) is ChangeEvent
            and item.action is _INSERT
            and type(prev) is ChangeEvent
            and prev.action is _DELETE
            and prev.table == item.table
        ):
            cols = keys.get(item.table)
            old, new = prev.old_values, item.new_values
            if (
                cols
                and old is not None
                and new is not None
                and all(c in old and old[c] == new.get(c) for c in cols)
            ):
                if out is None:
                    out = list(items[: i - 1])
                else:
                    out.pop()
                merged = replace(item, action=_UPDATE, old_values=old)
                out.append(merged)
                prev = merged
                continue
        if out is not None:
            out.append(item)
        prev = item
    return items if out is None else out
