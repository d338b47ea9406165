"""Key-range chunks of a table for the resumable (``baseline.mode = chunked``) Spark baseline.

:func:`plan_chunks` cuts each table at every ``chunk_rows``-th key (the primary key, else the
``REPLICA IDENTITY USING INDEX`` columns, as the PostgreSQL source's chunked reads use; one
``row_number() OVER (ORDER BY key)`` pass under the exported snapshot, keys as text), so chunk
``i`` is the key range ``(bounds[i-1], bounds[i]]`` (the first unbounded below, the last above;
no bound at the last row, so no chunk is empty when planned):
the chunks partition the key space whatever the snapshot they are read under, which is what
lets a resumed run read only the unfinished ones at a newer snapshot. :func:`chunk_query` is
one chunk's ``SELECT`` (the bounds cast back to the key columns' types), run in a Spark task.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from laredo.errors import ConfigError, LaredoError, SourceError
from laredo.secrets import mask_text
from laredo.types import TableIdentifier

from ..kinds import zone_name
from .slot import require_psycopg

try:  # the laredo-spark[postgresql] extra
    from laredo_source_pg import connect, import_snapshot
    from psycopg import sql
except ImportError:  # pragma: no cover - depends on the installed extras
    pass

__all__ = ["TableChunks", "check_keys", "chunk_query", "plan_chunks", "under_snapshot"]

_T = TypeVar("_T")

Bound = tuple[str, ...] | None
"""A key as text (one value per key column); ``None``: unbounded."""


@dataclasses.dataclass(frozen=True)
class TableChunks:
    """One table's chunk plan: its key columns, their SQL types (``format_type``) and
    the inner bounds (chunk ``i`` is ``(bounds[i-1], bounds[i]]``; ``len(bounds) + 1``
    chunks)."""

    key: tuple[str, ...]
    types: tuple[str, ...]
    bounds: tuple[tuple[str, ...], ...]

    @property
    def count(self) -> int:
        return len(self.bounds) + 1

    def chunk(self, i: int) -> tuple[Bound, Bound]:
        """Chunk ``i``'s ``(lo, hi]`` bounds."""
        lo = self.bounds[i - 1] if i > 0 else None
        hi = self.bounds[i] if i < len(self.bounds) else None
        return lo, hi

    def to_json(self) -> dict[str, Any]:
        return {"key": list(self.key), "types": list(self.types), "bounds": list(self.bounds)}

    @staticmethod
    def from_json(data: Mapping[str, Any]) -> TableChunks:
        """The plan :meth:`to_json` wrote; ``ValueError`` naming what is malformed (it is read
        back from a store: every value's type and each bound's width are checked)."""
        key, types = _texts(data["key"], "key"), _texts(data["types"], "types")
        bounds = data["bounds"]
        if not key or len(types) != len(key) or not isinstance(bounds, list):
            raise ValueError("malformed chunk plan: key, types and bounds do not match")
        return TableChunks(key, types, tuple(_texts(b, "bound", len(key)) for b in bounds))


def _texts(values: Any, what: str, width: int | None = None) -> tuple[str, ...]:
    """``values`` (a JSON list of strings, ``width`` long if given) as a tuple."""
    if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
        raise ValueError(f"malformed chunk plan: {what} is not a list of strings")
    if width is not None and len(values) != width:
        raise ValueError(f"malformed chunk plan: a {what} of {len(values)} values, not {width}")
    return tuple(values)


def _key_types(conn: Any, table: TableIdentifier, key: Sequence[str]) -> tuple[str, ...]:
    """The SQL types (``format_type``) of ``table``'s columns ``key``, in that order."""
    rows = conn.execute(
        "SELECT a.attname, format_type(a.atttypid, a.atttypmod) FROM pg_attribute a "
        "WHERE a.attrelid = to_regclass(format('%%I.%%I', %s::text, %s::text)) "
        "AND a.attnum > 0 AND NOT a.attisdropped",
        (table.schema, table.table),
    ).fetchall()
    types = {r[0]: r[1] for r in rows}
    return tuple(types[k] for k in key)


def _bounds(conn: Any, table: TableIdentifier, key: Sequence[str], rows: int) -> list[Any]:
    cols = sql.SQL(", ").join(sql.Identifier(k) for k in key)
    query = sql.SQL(
        "SELECT {} FROM (SELECT {}, row_number() OVER (ORDER BY {}) AS laredo_rn, "
        "count(*) OVER () AS laredo_n FROM {}.{}) s "
        "WHERE laredo_rn % {} = 0 AND laredo_rn < laredo_n ORDER BY laredo_rn"
    ).format(
        sql.SQL(", ").join(sql.SQL("{}::text").format(sql.Identifier(k)) for k in key),
        cols,
        cols,
        sql.Identifier(table.schema),
        sql.Identifier(table.table),
        sql.Literal(int(rows)),
    )
    return list(conn.execute(query).fetchall())


def check_keys(keys: Mapping[TableIdentifier, Sequence[str] | None]) -> None:
    """``ConfigError`` naming the first table without a chunk key, and the fixes."""
    for t, key in keys.items():
        if not key:
            raise ConfigError(
                f"spark baseline: {t} has no primary key nor replica identity index, so "
                "baseline.mode = chunked cannot cut it into resumable key ranges: add a primary "
                "key (or ALTER TABLE ... REPLICA IDENTITY USING INDEX a unique index on NOT NULL "
                "columns), or set baseline { mode = snapshot } on the source"
            )


def plan_chunks(
    options: Any,
    snapshot_name: str,
    keys: Mapping[TableIdentifier, Sequence[str] | None],
    chunk_rows: int,
) -> tuple[dict[TableIdentifier, TableChunks], str]:
    """Each table's chunks of about ``chunk_rows`` rows, cut under the exported snapshot by
    its key (``keys``: the source's :meth:`chunk_key`, the primary key or else the
    ``REPLICA IDENTITY USING INDEX`` columns), and the session time zone. ``ConfigError``
    naming a table without either (:func:`check_keys`)."""
    check_keys(keys)

    def cut(conn: Any) -> dict[TableIdentifier, TableChunks]:
        out: dict[TableIdentifier, TableChunks] = {}
        for t, key in keys.items():
            assert key
            types = _key_types(conn, t, key)
            bounds = tuple(tuple(r) for r in _bounds(conn, t, key, chunk_rows))
            out[t] = TableChunks(tuple(key), types, bounds)
        return out

    return under_snapshot(options, snapshot_name, "chunks", cut)


def under_snapshot(
    options: Any, snapshot_name: str, what: str, plan: Callable[[Any], _T]
) -> tuple[_T, str]:
    """``plan(conn)`` on a connection that imported the exported snapshot, and the session
    time zone (the zone the local engine's timestamptz values carry); ``SourceError``
    "planning the ``what`` failed" (masked) when it fails. ``options``: the source's
    ``PostgresSourceOptions``."""
    pg = require_psycopg()
    try:
        with connect(options) as conn:
            import_snapshot(conn, snapshot_name)
            out = plan(conn)
            conn.execute("COMMIT")
            zone = zone_name(conn.info.timezone) or "UTC"
    except (pg.Error, LaredoError) as exc:
        raise SourceError(
            f"spark baseline: planning the {what} failed: {mask_text(str(exc)).strip()}"
        ) from None
    return out, zone


def _row(key: Sequence[str], types: Sequence[str], values: Sequence[str], op: str) -> Any:
    return sql.SQL("({}) {} ({})").format(
        sql.SQL(", ").join(sql.Identifier(k) for k in key),
        sql.SQL(op),
        sql.SQL(", ").join(
            sql.SQL("{}::{}").format(sql.Literal(v), sql.SQL(t))
            for v, t in zip(values, types, strict=True)
        ),
    )


def chunk_query(plan: Mapping[str, Any], names: Sequence[str], lo: Bound, hi: Bound) -> Any:
    """``SELECT names FROM table WHERE (key) > lo AND (key) <= hi [AND row filter]`` (the
    plan's ``schema, table, key, key_types, row_filter``); bounds are literals cast to the key
    types, which PostgreSQL's own text input parses back exactly."""
    key, types = plan["key"], plan["key_types"]
    conds: list[Any] = []
    if lo is not None:
        conds.append(_row(key, types, lo, ">"))
    if hi is not None:
        conds.append(_row(key, types, hi, "<="))
    return select_query(plan, names, conds)


def select_query(plan: Mapping[str, Any], names: Sequence[str], conds: list[Any]) -> Any:
    """``SELECT names FROM the plan's table WHERE conds AND its row filter`` (a
    ``psycopg.sql`` composition; ``conds`` are compositions too)."""
    if plan.get("row_filter"):
        conds = [*conds, sql.SQL("({})").format(sql.SQL(plan["row_filter"]))]
    query = sql.SQL("SELECT {} FROM {}.{}").format(
        sql.SQL(", ").join(sql.Identifier(n) for n in names),
        sql.Identifier(plan["schema"]),
        sql.Identifier(plan["table"]),
    )
    if conds:
        query = sql.SQL("{} WHERE {}").format(query, sql.SQL(" AND ").join(conds))
    return query
