"""``BaselineReader``: the tables' rows under a snapshot that lines up with the stream.

Three cases, one guarantee (the returned position splits the history exactly: every change
after it is streamed, none before it):

* ephemeral, stream not running: a new temporary slot exports the snapshot; the position is
  its consistent point.
* stateful, stream not running: a temporary slot on a helper connection exports the snapshot;
  once every table is read, the named slot is created as a copy of it, so a crash mid-baseline
  never leaves a slot to resume from.
* stream running (a single-table reload): a temporary slot on a helper connection exports a
  fresh snapshot whose consistent point is the position; changes streamed meanwhile overlap
  idempotently.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import psycopg
from laredo.batches import RowBatch, row_maker
from laredo.errors import SourceError
from laredo.types import Row, TableIdentifier, Unrepresentable
from psycopg import pq, sql
from psycopg.types.string import TextLoader

from .binary import binary_plan, check_raw_range, rejected_row
from .catalog import Catalog, Connections, table_sql
from .dsn import mask_text
from .failover import standby
from .lsn import format_lsn
from .options import PostgresSourceOptions
from .partitions import partition_fingerprints
from .slot import ExportedSnapshot, SlotManager, import_snapshot, log_standby_wait
from .typmods import NUMERIC
from .values import load_or_mark

logger = logging.getLogger(__name__)

__all__ = [
    "BaselineReader",
    "BatchCallback",
    "row_chunks",
]

BatchCallback = Callable[[TableIdentifier, Sequence[Row]], None]
"""Receives a table's rows in chunks: a :class:`~laredo.batches.RowBatch` (value tuples, read as
row dicts by anyone who iterates it)."""


LOAD_CHUNK = 2_000
"""Rows loaded (and handed on) at once in a baseline, at most: the loaded tuples are
temporaries the target packs and drops, so a small chunk leaves small holes in the heap (2,000
rows cost no measurable CPU over 10,000 and about 1 B/row less resident memory)."""

_SCALAR_OIDS = frozenset(
    {16, 17, 18, 19, 20, 21, 23, 25, 26, 114, 700, 701, 1042, 1043, 1082, 1083, 1114, 1184, 1186}
    | {1266, NUMERIC, 2950, 3802}
)
"""Built-in scalar types (bool, bytea, char, name, int8/2/4, text, oid, json, float4/8, bpchar,
varchar, date, time, timestamp, timestamptz, interval, timetz, numeric, uuid, jsonb): no column
of them loads through the numeric loader but a numeric one."""


def numeric_as_text(cur: psycopg.Cursor[Any], oids: Sequence[int]) -> frozenset[int]:
    """Load ``numeric`` columns as their text on ``cur`` (positions returned, for
    :class:`~laredo.batches.RowBatch` ``decimals``) when every column is a built-in scalar
    (an array, range or composite could hold numerics that must stay ``Decimal``): a packing
    target stores a decimal as its text, so building the ``Decimal`` first is wasted. The rows'
    dicts still hold ``Decimal(text)``: what psycopg's numeric loader returns."""
    positions = frozenset(i for i, oid in enumerate(oids) if oid == NUMERIC)
    if not positions or not all(oid in _SCALAR_OIDS for oid in oids):
        return frozenset()
    cur.adapters.register_loader(NUMERIC, TextLoader)
    return positions


def row_chunks(
    cur: psycopg.Cursor[Any], query: Any, size: int, *, binary: bool = False
) -> Iterator[list[Any]]:
    """The rows of ``query`` as lists of tuples, ``size`` rows at a time (the last may be
    shorter), streamed: at most one chunk is held.

    ``Cursor.stream(size=...)`` receives chunks but yields row by row through a Python
    generator (about half the client CPU of a baseline); this loads each received chunk with
    one call into psycopg's C row loader. It uses the internals ``stream()`` is built on
    (``psycopg`` is pinned; ``test_row_chunks_fast_path`` fails if they move) and falls back
    to ``stream()`` when they are missing. Leaving early cancels the query, as ``stream()``
    does."""
    if not _FAST_CHUNKS:
        chunk: list[Any] = []
        for r in cur.stream(query, size=size, binary=binary):
            chunk.append(r)
            if len(chunk) >= size:
                yield chunk
                chunk = []
        if chunk:
            yield chunk
        return
    conn = cur._conn
    with conn.lock:
        first = True
        try:
            conn.wait(cur._stream_send_gen(query, None, binary=binary, size=size))
            while res := conn.wait(cur._stream_fetchone_gen(first)):
                first = False
                if res.ntuples:
                    try:
                        rows = cur._tx.load_rows(0, res.ntuples, cur._make_row)
                    except Exception:  # a value psycopg cannot load (year 10000, 'infinity')
                        rows = load_each(cur, res)
                    yield rows
        finally:
            if conn.pgconn.transaction_status == pq.TransactionStatus.ACTIVE:
                conn._try_cancel()
                with contextlib.suppress(Exception):
                    while conn.wait(cur._stream_fetchone_gen(first=False)):
                        pass
                with contextlib.suppress(Exception):
                    conn.wait(cur._stream_fetchone_gen(first=False))


class MarkedRows(list[tuple[Any, ...]]):
    """A chunk loaded value by value (a loader refused a value): its tuples may hold
    :class:`~laredo.types.Unrepresentable` markers."""


def load_each(cur: psycopg.Cursor[Any], res: Any) -> MarkedRows:
    """``res``'s rows as tuples, each value through :func:`~.values.load_or_mark` (the slow
    path of a chunk whose fast load raised)."""
    tx = cur._tx
    oids = [res.ftype(c) for c in range(res.nfields)]
    loads = [tx.get_loader(oid, res.fformat(c)).load for c, oid in enumerate(oids)]
    rows = MarkedRows()
    for r in range(res.ntuples):
        values = []
        for c, load in enumerate(loads):
            v = res.get_value(r, c)
            values.append(None if v is None else load_or_mark(load, oids[c], v))
        rows.append(tuple(values))
    return rows


def split_marked(
    names: tuple[str, ...], rows: list[Any], decimals: frozenset[int]
) -> tuple[list[Any], tuple[Row, ...]]:
    """``rows`` without those holding an Unrepresentable marker, and those as row dicts."""
    keep: list[Any] = []
    bad: list[Any] = []
    for row in rows:
        (bad if any(type(v) is Unrepresentable for v in row) else keep).append(row)
    make = row_maker(names, decimals)
    return keep, tuple(make(row) for row in bad)


_FAST_CHUNKS = all(
    hasattr(psycopg.Cursor, name) for name in ("_stream_send_gen", "_stream_fetchone_gen")
) and hasattr(psycopg.Connection, "_try_cancel")
"""psycopg's chunk internals are there (see :func:`row_chunks`)."""


class BaselineReader:
    """Reads baselines for one source (see the module docstring)."""

    def __init__(
        self,
        conns: Connections,
        catalog: Catalog,
        slots: SlotManager,
        options: PostgresSourceOptions,
        closed: threading.Event,
    ) -> None:
        self._conns = conns
        self._catalog = catalog
        self._slots = slots
        self._options = options
        self._slot_name = options.slot_name
        self._stateful = options.stateful
        self._batch_size = options.batch_size
        self._closed = closed

    def read(
        self, tables: Sequence[TableIdentifier], batch_callback: BatchCallback, *, new_slot: bool
    ) -> int:
        """Deliver the rows of ``tables`` in lists of up to ``batch_size``; return the position
        the stream continues from. ``new_slot``: the stream is not running (a new slot is made;
        an existing one is dropped first)."""
        tables = list(tables)
        catalog = self._catalog
        missing = [t for t in tables if t not in catalog.columns]
        if missing:
            catalog.columns.update(catalog.discover(missing))
            still = [t for t in tables if t not in catalog.columns]
            if still:
                raise SourceError(
                    f"postgresql source: cannot baseline {', '.join(map(str, still))}: table not "
                    "found"
                )
        slots = self._slots
        snapshot: str | None = None
        position: int | None = None
        helper: ExportedSnapshot | None = None
        copy_from: str | None = None
        if new_slot and not self._stateful:
            if slots.exists:
                slots.drop()
            self._conns.close_repl()  # a fresh connection: the snapshot must be exported by it
            position, snapshot = slots.create(export=True)
        elif new_slot:
            # Stateful: the named slot appears only once the baseline is complete (copied from
            # a temporary one), so a crash mid-baseline never leaves a slot to resume from.
            if slots.exists:
                slots.drop()
            self._conns.close_repl()
            helper, position, snapshot, copy_from = self.helper_snapshot()
        else:
            # The stream is running (a single-table reload): a temporary slot on a helper
            # connection exports a snapshot whose consistent point splits the stream exactly.
            helper, position, snapshot, _name = self.helper_snapshot()
        conn = self._conns.query()
        started = time.monotonic()
        total = 0
        try:
            assert snapshot is not None and position is not None
            import_snapshot(conn, snapshot)
            # the partitions this baseline reads (a later change of them means a re-baseline)
            catalog.partitions.update(partition_fingerprints(conn, tables))
            if helper is not None and copy_from is None:
                helper.close()  # the snapshot is imported; the temporary slot may go
                helper = None
            for table in tables:
                total += self.copy_table(conn, table, batch_callback)
            conn.execute("COMMIT")
            if copy_from is not None:
                slots.copy_from(conn, copy_from, position)
        except psycopg.Error as exc:
            with contextlib.suppress(Exception):
                conn.execute("ROLLBACK")
            raise SourceError(
                f"postgresql source: baseline failed: {mask_text(str(exc)).strip()}"
            ) from None
        except BaseException:
            with contextlib.suppress(Exception):
                conn.execute("ROLLBACK")
            raise
        finally:
            if helper is not None:
                helper.close()
        assert position is not None
        elapsed = time.monotonic() - started
        logger.info(
            "baseline of %d table(s), %d rows in %.2fs at %s",
            len(tables),
            total,
            elapsed,
            format_lsn(position),
        )
        return position

    def count_at(self, table: TableIdentifier) -> tuple[int, int]:
        """The table's row count (row filter applied) exactly at a position of the stream, and
        that position: ``count(*)`` under a temporary slot's exported snapshot, on connections
        of its own (any thread may call it while the stream runs)."""
        helper, position, snapshot, _name = self.helper_snapshot()
        try:
            conn = self._conns.connect()
            try:
                import_snapshot(conn, snapshot)
                query = sql.SQL("SELECT count(*) FROM {}").format(table_sql(table))
                rf = self._catalog.row_filters.get(table)
                if rf:
                    query = sql.SQL("{} WHERE {}").format(query, sql.SQL(rf))
                row = conn.execute(query).fetchone()
                conn.execute("COMMIT")
            finally:
                conn.close()
        except psycopg.Error as exc:
            raise SourceError(
                f"postgresql source: counting {table} failed: {mask_text(str(exc)).strip()}"
            ) from None
        finally:
            helper.close()
        return (int(row[0]) if row is not None else 0), position

    def helper_snapshot(self) -> tuple[ExportedSnapshot, int, str, str]:
        """A temporary slot on a new replication connection, exporting a snapshot.

        Returns (the open slot: the snapshot lives until it is closed, the consistent point,
        the snapshot name, the temporary slot's name)."""
        name = f"{self._slot_name[:40]}_r{os.getpid()}_{int(time.time() * 1000) % 10**8}"
        if standby(self._conns.query()):
            log_standby_wait(name)
        helper = ExportedSnapshot(
            self._options,
            name,
            temporary=True,
            replace=False,
            repl=lambda: self._conns.connect(replication=True),
        ).__enter__()
        return helper, helper.consistent_point, helper.snapshot_name, name

    def copy_table(
        self,
        conn: psycopg.Connection[Any],
        table: TableIdentifier,
        batch_callback: BatchCallback,
    ) -> int:
        """Stream one table's rows (published columns, row filter applied) in batches; returns
        the row count."""
        columns = self._catalog.columns[table]
        cols = tuple(c.name for c in columns)
        size = min(self._batch_size, LOAD_CHUNK)
        count = 0
        closed = self._closed

        # One query streamed in chunks of ``size`` rows (no DECLARE/FETCH round trips); each
        # chunk's rows are loaded as tuples by psycopg's C loaders in one call, and the batch
        # builds dicts only for a consumer that asks (a target storing tuples never does).
        with conn.cursor() as cur:
            plan = binary_plan(cur, columns)
            if plan is not None:
                select: sql.Composable = plan.select
            else:
                select = sql.SQL(", ").join(sql.Identifier(n) for n in cols)
                decimals = numeric_as_text(cur, [c.type_oid for c in columns])
            query = sql.SQL("SELECT {} FROM {}").format(select, table_sql(table))
            rf = self._catalog.row_filters.get(table)
            if rf:
                query = sql.SQL("{} WHERE {}").format(query, sql.SQL(rf))
            for rows in row_chunks(cur, query, size, binary=plan is not None):
                count += len(rows)
                rejected: tuple[Row, ...] = ()
                if plan is None:
                    if type(rows) is MarkedRows:
                        rows, rejected = split_marked(cols, rows, decimals)
                    batch = RowBatch(cols, rows, decimals, rejected=rejected)
                else:
                    if plan.stamps or plan.days:
                        bad = check_raw_range(rows, plan)
                        if bad:
                            rejected = tuple(rejected_row(cols, rows[i], plan) for i in bad)
                            drop = set(bad)
                            rows = [r for n, r in enumerate(rows) if n not in drop]
                    batch = plan.batch(cols, rows)
                    batch.rejected = rejected
                if rejected:
                    logger.error(
                        "baseline of %s: %d row(s) hold values Python cannot represent; they go "
                        "to the dead letters",
                        table,
                        len(rejected),
                    )
                batch_callback(table, batch)
                if closed.is_set():
                    raise SourceError("postgresql source closed during baseline")
        return count
