"""Reading a table in ctid slices under an exported snapshot (runs in Spark tasks).

``spark.read.format(slices_data_source(options).name()).option("plan", json)`` is one table of
a :func:`~laredo_spark.pg.baseline.spark_baseline`: one Spark partition per ctid page range, each
read in ``BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY; SET TRANSACTION SNAPSHOT '<name>'``
so every task sees the database exactly at the slot's consistent point, with psycopg's own
loaders (the values the local baseline produces), as Arrow record batches in the columns'
kinds (:mod:`laredo_spark.kinds`): each value is touched by Python once, here.

Tasks connect with the PostgreSQL source's own code (:func:`laredo_source_pg.connect`) from the
source's options, so its ``connection_provider``, password files and TLS settings apply on every
executor. The options never appear as text in Spark: the plan option (shown in query plans, the
UI and the event log) holds no connection details; the options ride in the data source class,
which Spark ships to the tasks pickled.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import json
import math
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import pyarrow as pa
from laredo.errors import LaredoError, SourceError
from laredo.secrets import mask_text
from laredo.types import TableIdentifier
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from ..kinds import arrow_type, base_kind, encode_json, spark_schema
from .chunks import chunk_query, select_query, under_snapshot
from .slot import require_psycopg

try:  # the laredo-spark[postgresql] extra
    from laredo_source_pg import connect, import_snapshot
    from psycopg import sql
    from psycopg.conninfo import conninfo_to_dict
except ImportError:  # pragma: no cover - depends on the installed extras
    HAVE_PSYCOPG = False  # require_psycopg() names the extra before these are used
else:
    HAVE_PSYCOPG = True

__all__ = [
    "PgSliceDataSource",
    "ctid_slices",
    "describe_server",
    "plan_slices",
    "read_chunk",
    "read_rows",
    "read_slice",
    "slices_data_source",
]


def ctid_slices(
    conn: Any, table: TableIdentifier, partitions: int, max_pages: int = 2048
) -> list[tuple[int | None, int | None]]:
    """Disjoint page ranges ``[lo, hi)`` covering the table (``None``: unbounded).

    At least ``partitions`` ranges (fewer for tiny tables), and more when needed so no range
    exceeds ``max_pages`` (2048 pages = 16 MB of table: one task's part). Sizes come from
    ``pg_relation_size``; the first range starts at the beginning and the last is open-ended,
    so the ranges cover every tuple whatever the size is when tasks run. A partitioned table is
    sized by its largest partition: a page range applies to every partition's pages."""
    row = conn.execute(
        "SELECT greatest(pg_relation_size(r.rel), (SELECT coalesce(max(pg_relation_size("
        "pt.relid)), 0) FROM pg_partition_tree(r.rel) pt WHERE pt.isleaf)) "
        "/ current_setting('block_size')::bigint "
        "FROM (SELECT to_regclass(format('%%I.%%I', %s::text, %s::text)) AS rel) r",
        (table.schema, table.table),
    ).fetchone()
    pages = int(row[0] or 0) if row else 0
    n = max(1, min(max(int(partitions), math.ceil(pages / max(1, max_pages))), pages))
    if n == 1:
        return [(None, None)]
    step = math.ceil(pages / n)
    bounds = [i * step for i in range(1, n) if i * step < pages]
    out: list[tuple[int | None, int | None]] = []
    lo: int | None = None
    for b in bounds:
        out.append((lo, b))
        lo = b
    out.append((lo, None))
    return out


def plan_slices(
    options: Any,
    snapshot_name: str,
    tables: Sequence[TableIdentifier],
    partitions: int,
    max_pages: int,
) -> tuple[dict[TableIdentifier, list[tuple[int | None, int | None]]], str]:
    """Each table's ctid slices, sized under the exported snapshot, and the session time
    zone (the zone the local engine's timestamptz values carry). ``options``: the source's
    ``PostgresSourceOptions``."""
    return under_snapshot(
        options,
        snapshot_name,
        "slices",
        lambda conn: {t: ctid_slices(conn, t, partitions, max_pages) for t in tables},
    )


def describe_server(dsn: str) -> str:
    """``host:port/dbname`` of a connection string (no credentials), for messages."""
    try:
        info = conninfo_to_dict(dsn)
    except Exception:
        return "<the source's connection>"
    host = info.get("host") or info.get("hostaddr") or "localhost"
    return f"{host}:{info.get('port') or 5432}/{info.get('dbname') or ''}"


@contextlib.contextmanager
def _no_gc() -> Iterator[None]:
    """The cycle collector paused for the block (restored as it was)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _converter(kind: str) -> Callable[[Any], Any] | None:
    base = base_kind(kind)
    if base == "json":
        return encode_json
    if base == "decimal":
        return str
    return None


def read_slice(
    plan: Mapping[str, Any], options: Any, lo: int | None, hi: int | None
) -> Iterator[Any]:
    """Rows of one ctid range under the exported snapshot, as Arrow record batches in the
    plan's kinds (runs in tasks). ``plan``: ``snapshot, schema, table, kinds`` and optionally
    ``row_filter`` (the publication's), ``fetch_size``; ``options``: the source's
    ``PostgresSourceOptions`` (connected with :func:`laredo_source_pg.connect`)."""
    names = _names(plan)
    conds: list[Any] = []
    if lo is not None:
        conds.append(sql.SQL("ctid >= {}::tid").format(sql.Literal(f"({lo},0)")))
    if hi is not None:
        conds.append(sql.SQL("ctid < {}::tid").format(sql.Literal(f"({hi},0)")))
    query = select_query(plan, names, conds)
    table = TableIdentifier(plan["schema"], plan["table"])
    yield from read_rows(plan, options, query, f"spark baseline of {table} pages [{lo}, {hi})")


def read_chunk(
    plan: Mapping[str, Any], options: Any, lo: Sequence[str] | None, hi: Sequence[str] | None
) -> Iterator[Any]:
    """Rows of one primary-key range ``(lo, hi]`` (:mod:`.chunks`) under the exported
    snapshot, as :func:`read_slice` gives them; the plan also holds ``key, key_types``."""
    names = _names(plan)
    lo_t = tuple(lo) if lo is not None else None
    hi_t = tuple(hi) if hi is not None else None
    query = chunk_query(plan, names, lo_t, hi_t)
    table = TableIdentifier(plan["schema"], plan["table"])
    where = f"spark baseline of {table} keys ({lo_t}, {hi_t}]"
    # a bounded range reads through the primary key's index: a sequential scan per chunk
    # would read the whole table once per chunk (the planner may pick one for small tables)
    prelude = None if lo_t is None and hi_t is None else "SET LOCAL enable_seqscan = off"
    yield from read_rows(plan, options, query, where, prelude)


def _names(plan: Mapping[str, Any]) -> list[str]:
    names = list(plan["kinds"])
    if not names:
        table = TableIdentifier(plan["schema"], plan["table"])
        raise SourceError(f"spark baseline of {table}: the table has no columns to read")
    return names


def read_rows(
    plan: Mapping[str, Any], options: Any, query: Any, where: str, prelude: str | None = None
) -> Iterator[Any]:
    """``query``'s rows under the plan's exported snapshot as Arrow record batches in the
    plan's kinds (``where`` starts every error message; ``prelude``: a statement run first in
    the transaction)."""
    pg = require_psycopg()
    kinds: dict[str, str] = plan["kinds"]
    names = list(kinds)
    types = [arrow_type(pa, kinds[n]) for n in names]
    convert = [_converter(kinds[n]) for n in names]
    fetch = int(plan.get("fetch_size") or 10_000)
    try:
        conn = connect(options)
    except (pg.Error, LaredoError) as exc:
        raise SourceError(
            f"{where}: a Spark task cannot connect to PostgreSQL at "
            f"{describe_server(options.connection)} (the source's 'connection'; executors need "
            f"network access and credentials): {' '.join(mask_text(str(exc)).split())}"
        ) from None
    try:
        with conn:
            import_snapshot(conn, plan["snapshot"])
            if prelude:
                conn.execute(prelude)
            with conn.cursor(name="laredo_spark_slice") as cur:
                cur.itersize = fetch
                cur.execute(query)
                # The rows are acyclic (tuples of scalars): reference counting frees them, and
                # the cycle collector, woken by every few hundred of them, would cost more
                # than the fetch itself (measured: 2.4x the CPU per row with it on). It is
                # paused while this task reads (a task's Python worker does nothing else).
                with _no_gc():
                    while rows := cur.fetchmany(fetch):
                        arrays = []
                        columns = zip(*rows, strict=True)
                        for values, typ, conv in zip(columns, types, convert, strict=True):
                            if conv is not None:
                                values = tuple(None if v is None else conv(v) for v in values)
                            arrays.append(pa.array(values, type=typ))
                        del rows, columns
                        yield pa.RecordBatch.from_arrays(arrays, names=names)
            conn.execute("COMMIT")
    except pg.Error as exc:
        raise SourceError(f"{where}: {' '.join(mask_text(str(exc)).split())}") from None


@dataclasses.dataclass(frozen=True)
class SlicePartition(InputPartition):
    index: int
    lo: int | None
    hi: int | None


@dataclasses.dataclass(frozen=True)
class ChunkPartition(InputPartition):
    index: int
    lo: tuple[str, ...] | None
    hi: tuple[str, ...] | None


class PgSliceReader(DataSourceReader):
    def __init__(self, plan: dict[str, Any], options: Any) -> None:
        self.plan = plan
        self.options = options

    def partitions(self) -> list[InputPartition]:
        chunks = self.plan.get("chunks")
        if chunks is not None:  # key ranges [lo, hi] (lists of key texts or null)
            return [
                ChunkPartition(
                    i, None if lo is None else tuple(lo), None if hi is None else tuple(hi)
                )
                for i, (lo, hi) in enumerate(chunks)
            ]
        return [SlicePartition(i, lo, hi) for i, (lo, hi) in enumerate(self.plan["slices"])]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        if isinstance(partition, ChunkPartition):
            yield from read_chunk(self.plan, self.options, partition.lo, partition.hi)
            return
        assert isinstance(partition, SlicePartition)
        yield from read_slice(self.plan, self.options, partition.lo, partition.hi)


class PgSliceDataSource(DataSource):
    """``spark.read.format(name).option("plan", json)``: one table's ctid slices under an
    exported snapshot. Used through :func:`slices_data_source` (which carries the source's
    options) by :func:`~laredo_spark.pg.baseline.spark_baseline`; the plan holds ``snapshot,
    schema, table, kinds, slices, row_filter, fetch_size`` (or, for key-range chunks,
    ``chunks, key, key_types`` instead of ``slices``)."""

    source_options: Any = None
    """The source's ``PostgresSourceOptions`` (set by :func:`slices_data_source`)."""
    short_name = "laredo-pg-slices"

    @classmethod
    def name(cls) -> str:
        return cls.short_name

    def _plan(self) -> dict[str, Any]:
        plan: dict[str, Any] = json.loads(self.options["plan"])
        return plan

    def schema(self) -> Any:
        return spark_schema(self._plan()["kinds"])

    def reader(self, schema: Any) -> PgSliceReader:
        if self.source_options is None:
            raise SourceError(
                f"{self.name()}: no source options; read slices through spark_baseline"
            )
        return PgSliceReader(self._plan(), self.source_options)


def slices_data_source(options: Any) -> type[PgSliceDataSource]:
    """A :class:`PgSliceDataSource` bound to one source's options, under a name of its own
    (register it on the session, then read ``.format(cls.name())``).

    The options travel inside the class, which Spark stores and ships to the tasks pickled:
    never as an option value, so neither a password nor a provider's settings show in query
    plans, the UI or the event log."""
    name = f"laredo-pg-slices-{uuid.uuid4().hex[:12]}"
    return type(
        "BoundPgSliceDataSource",
        (PgSliceDataSource,),
        {"source_options": options, "short_name": name, "__module__": __name__},
    )
