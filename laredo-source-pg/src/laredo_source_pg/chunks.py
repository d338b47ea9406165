"""Key-range chunks for a chunked baseline or an on-demand backfill (issue 32).

One chunk is one short ``REPEATABLE READ READ ONLY`` transaction on a connection of its own:
``pg_current_snapshot()`` (the transaction's snapshot), the keyset query ``WHERE (key) > (last)
[AND row filter] [AND (where)] ORDER BY key LIMIT n`` with the key bounds as parameters, and
the high mark: ``pg_current_wal_lsn()`` on a primary, ``pg_last_wal_replay_lsn()`` on a hot
standby — at or after the commit record of every transaction the snapshot sees (with
``synchronous_commit = off`` a commit can be visible before it is written: such a change may
then be applied after the chunk that holds it, and the target still ends equal). No
write anywhere (so it works on a standby, PostgreSQL 13+); the engine merges the chunk with the
stream (:mod:`laredo.engine.backfill`).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Sequence
from typing import Any

import psycopg
from laredo.batches import RowBatch, tuple_maker
from laredo.engine.backfill import ChunkRead, TxSnapshot
from laredo.errors import ConfigError, SourceError
from laredo.types import ColumnDefinition, TableIdentifier, primary_key_columns
from psycopg import sql

from .baseline import MarkedRows, load_each
from .binary import BinaryPlan, binary_plan, check_raw_range, register_raw_loaders, rejected_row
from .catalog import Catalog, Connections, table_sql
from .dsn import mask_text
from .lsn import parse_lsn

__all__ = ["ChunkReader", "check_where"]

_IDENTITY_INDEX = """
SELECT a.attname::text FROM pg_class c
JOIN pg_index i ON i.indrelid = c.oid AND i.indisreplident
CROSS JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, ord)
JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum = k.attnum
WHERE c.oid = to_regclass(format('%%I.%%I', %s::text, %s::text)) AND c.relreplident = 'i'
ORDER BY k.ord
"""
_ESTIMATE = """
WITH r AS (SELECT to_regclass(format('%%I.%%I', %s::text, %s::text)) AS oid)
SELECT CASE WHEN bool_and(c.reltuples < 0) THEN -1
            ELSE sum(greatest(c.reltuples, 0)) END::bigint
FROM r, pg_class c
WHERE (c.oid = r.oid AND c.relkind <> 'p')
   OR c.oid IN (SELECT t.relid FROM pg_partition_tree(r.oid) t WHERE t.isleaf)
"""
"""A table's estimated rows: ``reltuples`` (its partitions' summed for a partitioned table);
``-1`` when never vacuumed or analyzed."""

"""The columns of a table's ``REPLICA IDENTITY USING INDEX`` index, in index order (unique,
not partial, on NOT NULL columns: PostgreSQL requires it, so keyset pagination by it is
exact)."""


def raw_chunk(
    names: tuple[str, ...], rows: list[Any], plan: BinaryPlan
) -> tuple[list[Any], RowBatch | None]:
    """A binary chunk's rows and their batch; a chunk holding a raw timestamp or date Python
    cannot hold (:func:`~.binary.check_raw_range`) comes back converted, as the text read
    gives it: :class:`~.baseline.MarkedRows` with markers (dead-lettered), no batch."""
    bad = check_raw_range(rows, plan) if plan.stamps or plan.days else []
    if not bad:
        return rows, plan.batch(names, rows)
    make = tuple_maker(len(names), plan.decimals, plan.stamps, plan.days)
    drop = set(bad)
    marked = MarkedRows(
        tuple(rejected_row(names, r, plan).values()) if n in drop else make(r)
        for n, r in enumerate(rows)
    )
    return marked, None


def check_where(where: str) -> str:
    """A ``--where`` condition as it may enter the chunk query: one SQL expression, no ``;``
    and no comment (PostgreSQL parses it inside the query; a syntax error names it)."""
    text = where.strip()
    if not text:
        raise ConfigError('backfill: --where is empty: give a SQL condition, e.g. "id < 1000"')
    for bad, what in ((";", "a ';'"), ("--", "a '--' comment"), ("/*", "a '/*' comment")):
        if bad in text:
            raise ConfigError(
                f"backfill: --where must be one SQL condition without {what}: {text!r}"
            )
    return text


class ChunkReader:
    """Reads one table's key-range chunks (see the module docstring)."""

    def __init__(self, conns: Connections, catalog: Catalog) -> None:
        self._conns = conns
        self._catalog = catalog
        self._conn: psycopg.Connection[Any] | None = None
        self._standby: bool | None = None
        self._plans: dict[tuple[Any, ...], BinaryPlan | None] = {}

    def key(self, table: TableIdentifier) -> list[str] | None:
        """The columns chunks are ordered and paged by: the primary key in key order, else
        the ``REPLICA IDENTITY USING INDEX`` index's columns (``None``: neither)."""
        cols = self._catalog.columns.get(table)
        if cols is None:
            cols = self._catalog.discover([table]).get(table)
            if cols is None:
                raise SourceError(f"postgresql source: table {table} not found")
        pk = primary_key_columns(cols)
        if pk:
            return pk
        try:
            rows = self._connection().execute(_IDENTITY_INDEX, (table.schema, table.table))
            names = [r[0] for r in rows.fetchall()]
        except psycopg.Error as exc:
            raise SourceError(
                f"postgresql source: reading the replica identity of {table} failed: "
                f"{mask_text(str(exc)).strip()}"
            ) from None
        published = {c.name for c in cols}
        return names if names and published.issuperset(names) else None

    def read(
        self,
        table: TableIdentifier,
        after: Sequence[Any] | None,
        limit: int,
        where: str | None = None,
    ) -> ChunkRead:
        key = self.key(table)
        if key is None:
            raise ConfigError(
                f"postgresql source: {table} has no primary key nor replica identity index: it "
                "cannot be read in chunks (use baseline.mode = snapshot, or add a primary key)"
            )
        columns = self._catalog.columns[table]
        names = [c.name for c in columns]
        key_sql = sql.SQL(", ").join(sql.Identifier(k) for k in key)
        conds, params = self._conditions(table, key, key_sql, after, where)
        conn = self._connection()
        try:
            conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
            snap_row = conn.execute("SELECT pg_current_snapshot()::text").fetchone()
            with conn.cursor() as cur:
                plan = self._plan(cur, table, columns)
                select = (
                    plan.select
                    if plan is not None
                    else sql.SQL(", ").join(map(sql.Identifier, names))
                )
                query = sql.SQL("SELECT {} FROM {}{} ORDER BY {} LIMIT {}").format(
                    select,
                    table_sql(table),
                    sql.SQL(" WHERE ") + sql.SQL(" AND ").join(conds) if conds else sql.SQL(""),
                    key_sql,
                    sql.Literal(int(limit)),
                )
                cur.execute(query, params, binary=plan is not None)
                try:
                    values: list[Any] = cur.fetchall()
                except psycopg.DataError:  # a value a loader refuses: infinities, markers
                    assert cur.pgresult is not None
                    values = load_each(cur, cur.pgresult)
            mark = "pg_last_wal_replay_lsn()" if self._standby else "pg_current_wal_lsn()"
            high_row = conn.execute(f"SELECT {mark}::text").fetchone()
            conn.execute("COMMIT")
        except psycopg.Error as exc:
            with contextlib.suppress(Exception):
                conn.execute("ROLLBACK")
            raise SourceError(
                f"postgresql source: reading a chunk of {table} failed: "
                f"{mask_text(str(exc)).strip()}"
            ) from None
        assert snap_row is not None and high_row is not None
        raw = None
        if plan is not None and type(values) is not MarkedRows:
            values, raw = raw_chunk(tuple(names), values, plan)
        last = None
        if values:
            at = [names.index(k) for k in key]
            row = values[-1] if raw is None else raw.with_values(values[-1:]).tuples()[0]
            last = tuple(row[i] for i in at)
        return ChunkRead(
            values,
            TxSnapshot.parse(snap_row[0]),
            parse_lsn(high_row[0]),
            last,
            tuple(names),
            unrepresentable=type(values) is MarkedRows,
            raw=raw,
        )

    def _conditions(
        self,
        table: TableIdentifier,
        key: Sequence[str],
        key_sql: sql.Composable,
        after: Sequence[Any] | None,
        where: str | None,
    ) -> tuple[list[sql.Composable], list[Any]]:
        """The chunk's WHERE terms and their parameters: past ``after`` by the key, the
        publication's row filter, the backfill's ``where``."""
        conds: list[sql.Composable] = []
        params: list[Any] = []
        if after is not None:
            marks = sql.SQL(", ").join(sql.Placeholder() for _ in key)
            conds.append(sql.SQL("({}) > ({})").format(key_sql, marks))
            params.extend(after)
        rf = self._catalog.row_filters.get(table)
        if rf:
            conds.append(sql.SQL("({})").format(sql.SQL(rf)))
        if where:
            conds.append(sql.SQL("({})").format(sql.SQL(check_where(where))))
        return conds, params

    def _plan(
        self, cur: psycopg.Cursor[Any], table: TableIdentifier, columns: Sequence[ColumnDefinition]
    ) -> BinaryPlan | None:
        """The binary read of ``table``'s chunks (:func:`~.binary.binary_plan`; None: text),
        worked out once per connection and column list, its loaders registered on ``cur``."""
        key = (table, tuple((c.name, c.type_oid) for c in columns))
        if key not in self._plans:
            self._plans[key] = binary_plan(cur, columns)
        plan = self._plans[key]
        if plan is not None:
            register_raw_loaders(cur)
        return plan

    def estimate(self, table: TableIdentifier, where: str | None = None) -> int:
        """The planner's row estimate of ``table`` (``-1``: unknown), or of its rows matching
        ``where`` (``EXPLAIN`` in a read-only transaction, after :meth:`check`); no scan."""
        if where is not None:
            return self._estimate_where(table, where)
        try:
            row = self._connection().execute(_ESTIMATE, (table.schema, table.table)).fetchone()
        except psycopg.Error as exc:
            raise SourceError(
                f"postgresql source: estimating the rows of {table} failed: "
                f"{mask_text(str(exc)).strip()}"
            ) from None
        return -1 if row is None or row[0] is None else int(row[0])

    def _estimate_where(self, table: TableIdentifier, where: str) -> int:
        """The planner's estimate of ``table``'s rows matching ``where`` (``-1`` when the
        table was never vacuumed or analyzed: no statistics to estimate from)."""
        if self.estimate(table) < 0:
            return -1
        query = sql.SQL("EXPLAIN (FORMAT JSON) SELECT 1 FROM {} WHERE ({})").format(
            table_sql(table), sql.SQL(self.check(table, where))
        )
        try:
            row = self._read_only(query)
        except psycopg.Error as exc:
            raise SourceError(
                f"postgresql source: estimating the rows of {table} matching the backfill's "
                f"where failed: {mask_text(str(exc)).strip()}"
            ) from None
        plan: Any = json.loads(row[0]) if row and isinstance(row[0], str) else row and row[0]
        return int(plan[0]["Plan"]["Plan Rows"]) if plan else -1

    def check(self, table: TableIdentifier, where: str) -> str:
        """``where`` checked by :func:`check_where`, then parsed and planned by PostgreSQL
        against ``table`` (``LIMIT 0``, read only): ``ConfigError`` naming the problem."""
        text = check_where(where)
        query = sql.SQL("SELECT 1 FROM {} WHERE ({}) LIMIT 0").format(
            table_sql(table), sql.SQL(text)
        )
        try:
            self._read_only(query)
        except psycopg.Error as exc:
            raise ConfigError(
                f"backfill: --where {text!r} is not a valid condition on {table}: "
                f"{mask_text(str(exc)).strip()}"
            ) from None
        return text

    def _read_only(self, query: sql.Composed) -> Any:
        """``query``'s first row, in a read-only transaction (rolled back on an error, which
        is raised)."""
        conn = self._connection()
        try:
            conn.execute("BEGIN READ ONLY")
            row = conn.execute(query).fetchone()
            conn.execute("COMMIT")
        except psycopg.Error:
            with contextlib.suppress(Exception):
                conn.execute("ROLLBACK")
            raise
        return row

    def _connection(self) -> psycopg.Connection[Any]:
        conn = self._conn
        if conn is None or conn.closed:
            conn = self._conn = self._conns.connect()
            self._plans = {}  # a plan holds the session's time zone
            row = conn.execute("SELECT pg_is_in_recovery()").fetchone()
            self._standby = bool(row and row[0])
        return conn

    def close(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(Exception):
                self._conn.close()
            self._conn = None
