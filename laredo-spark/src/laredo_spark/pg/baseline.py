"""Parallel consistent baseline of PostgreSQL tables on Spark.

1. The driver initialises the ``postgresql`` source (publication, column discovery), then
   creates the replication slot with ``CREATE_REPLICATION_SLOT ... LOGICAL pgoutput
   EXPORT_SNAPSHOT`` on a replication connection it keeps open and idle: the exported snapshot
   stays importable only while that connection lives.
2. Each table is cut into ctid ranges (TID range scans, PostgreSQL 14+) from its size in pages;
   the last range is open-ended. Every Spark task reads its range in
   ``BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY; SET TRANSACTION SNAPSHOT '<name>'``, so
   all tasks see exactly the database state at the slot's consistent point, with psycopg's own
   loaders (the same values the local baseline produces).
3. The pipeline's filters and transforms run as Spark expressions (:mod:`laredo_spark.compile`).
4. The rows are written as one Laredo snapshot (any snapshot store and serializer plugin) whose
   source position is the slot's consistent point. The local engine (or ``laredo serve``)
   configured with the same store and a ``stateful`` source on the same slot restores it and
   streams from that point: no gap, no duplicate.

Executors need ``laredo-spark[postgresql]`` installed and network access to PostgreSQL; the
connection string travels to them in the data source options (it may appear in query plans:
prefer a password file or ``PGPASSWORD`` on the executors over a password in the string).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import math
import os
import tempfile
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from laredo.errors import ConfigError, MissingDependencyError, SourceError
from laredo.pipeline import Pipeline
from laredo.types import (
    ColumnDefinition,
    SnapshotDescriptor,
    SnapshotMetadata,
    SourceConfig,
    TableIdentifier,
    TableSnapshotInfo,
)
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from .compile import apply_chain
from .frame import LaredoFrame, _loads, encode_json, kind_of_column, spark_schema

logger = logging.getLogger(__name__)

__all__ = [
    "BaselineResult",
    "ExportedSnapshot",
    "PgSliceDataSource",
    "ctid_slices",
    "read_slice",
    "spark_baseline",
]


def _psycopg() -> Any:
    try:
        import psycopg
    except ImportError:
        raise MissingDependencyError("laredo-spark[postgresql]", "PostgreSQL baselines") from None
    return psycopg


def _mask(text: str) -> str:
    try:
        from laredo_source_pg.dsn import mask_text
    except ImportError:  # pragma: no cover
        return "<connection>"
    return mask_text(text)


def _qualified(table: TableIdentifier) -> Any:
    from psycopg import sql

    return sql.SQL("{}.{}").format(sql.Identifier(table.schema), sql.Identifier(table.table))


def _format_lsn(lsn: int) -> str:
    return f"{lsn >> 32:X}/{lsn & 0xFFFFFFFF:08X}"


def _parse_lsn(text: str) -> int:
    hi, _, lo = text.partition("/")
    return (int(hi, 16) << 32) | int(lo, 16)


class ExportedSnapshot:
    """A logical replication slot created with an exported snapshot, kept importable.

    ``with ExportedSnapshot(dsn, "slot") as snap:`` creates the slot (dropping an inactive slot
    of that name first when ``replace=True``) and holds the replication connection open until
    the block ends; ``snap.snapshot_name`` is what ``SET TRANSACTION SNAPSHOT`` takes and
    ``snap.consistent_point`` (an LSN int) is where the slot's stream starts. The slot itself
    outlives the block unless ``temporary=True``.
    """

    def __init__(
        self, dsn: str, slot_name: str, *, temporary: bool = False, replace: bool = True
    ) -> None:
        self.dsn = dsn
        self.slot_name = slot_name
        self.temporary = temporary
        self.replace = replace
        self.snapshot_name = ""
        self.consistent_point = 0
        self._repl: Any = None

    @property
    def position(self) -> str:
        """The consistent point as text (``X/XXXXXXXX``)."""
        return _format_lsn(self.consistent_point)

    def __enter__(self) -> ExportedSnapshot:
        psycopg = _psycopg()
        from psycopg import sql

        if self.replace:
            self._drop_existing()
        try:
            self._repl = psycopg.connect(
                self.dsn,
                autocommit=True,
                replication="database",
                application_name=f"laredo-spark:{self.slot_name}",
            )
            temp = sql.SQL(" TEMPORARY") if self.temporary else sql.SQL("")
            row = self._repl.execute(
                sql.SQL("CREATE_REPLICATION_SLOT {}{} LOGICAL pgoutput EXPORT_SNAPSHOT").format(
                    sql.Identifier(self.slot_name), temp
                )
            ).fetchone()
        except psycopg.Error as exc:
            self.close()
            raise SourceError(
                f"cannot create replication slot {self.slot_name!r} with an exported snapshot "
                f"on {_mask(self.dsn)!r}: {_mask(str(exc)).strip()}"
            ) from None
        assert row is not None
        self.consistent_point = _parse_lsn(str(row[1]))
        self.snapshot_name = str(row[2])
        logger.info(
            "created slot %s at %s, exported snapshot %s",
            self.slot_name,
            self.position,
            self.snapshot_name,
        )
        return self

    def _drop_existing(self) -> None:
        psycopg = _psycopg()
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            row = conn.execute(
                "SELECT active FROM pg_replication_slots WHERE slot_name = %s", (self.slot_name,)
            ).fetchone()
            if row is None:
                return
            if row[0]:
                raise SourceError(
                    f"replication slot {self.slot_name!r} is in use by another consumer; stop it "
                    "before a Spark baseline re-creates the slot"
                )
            conn.execute("SELECT pg_drop_replication_slot(%s)", (self.slot_name,))
            logger.info("dropped existing replication slot %s for a new baseline", self.slot_name)

    def close(self) -> None:
        repl, self._repl = self._repl, None
        if repl is not None:
            with contextlib.suppress(Exception):
                repl.close()

    def __exit__(self, *exc: object) -> None:
        self.close()


def ctid_slices(
    conn: Any, table: TableIdentifier, partitions: int, max_pages: int = 2048
) -> list[tuple[int | None, int | None]]:
    """Disjoint page ranges ``[lo, hi)`` covering the table (``None``: unbounded).

    At least ``partitions`` ranges (fewer for tiny tables), and more when needed so no range
    exceeds ``max_pages`` (2048 pages = 16 MB of table: each range's rows travel to the driver
    as one task result, which must fit its memory). Sizes come from ``pg_relation_size``; the
    first range starts at the beginning and the last is open-ended, so the ranges cover every
    tuple whatever the size is when tasks run."""
    row = conn.execute(
        "SELECT pg_relation_size(to_regclass(format('%%I.%%I', %s::text, %s::text))) "
        "/ current_setting('block_size')::bigint",
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


_ARROW = {
    "bool": lambda pa: pa.bool_(),
    "int": lambda pa: pa.int64(),
    "float": lambda pa: pa.float64(),
    "str": lambda pa: pa.string(),
    "bytes": lambda pa: pa.binary(),
    "date": lambda pa: pa.date32(),
    "json": lambda pa: pa.string(),
}


def _record_batch(
    pa: Any, types: list[Any], names: list[str], json_idx: list[int], rows: list[Any]
) -> Any:
    columns = [list(c) for c in zip(*rows, strict=True)]
    for i in json_idx:
        columns[i] = [encode_json(v) for v in columns[i]]
    arrays = [pa.array(c, type=t) for c, t in zip(columns, types, strict=True)]
    return pa.RecordBatch.from_arrays(arrays, names=names)


def read_slice(plan: Mapping[str, Any], lo: int | None, hi: int | None) -> Iterator[Any]:
    """Rows of one ctid range under the exported snapshot, as Arrow record batches in the
    frame's kinds (runs in tasks)."""
    psycopg = _psycopg()
    from psycopg import sql

    kinds: dict[str, str] = plan["kinds"]
    names = list(kinds)
    table = TableIdentifier(plan["schema"], plan["table"])
    conds: list[Any] = []
    if lo is not None:
        conds.append(sql.SQL("ctid >= {}::tid").format(sql.Literal(f"({lo},0)")))
    if hi is not None:
        conds.append(sql.SQL("ctid < {}::tid").format(sql.Literal(f"({hi},0)")))
    if plan.get("row_filter"):
        conds.append(sql.SQL("({})").format(sql.SQL(plan["row_filter"])))
    query = sql.SQL("SELECT {} FROM {}").format(
        sql.SQL(", ").join(sql.Identifier(n) for n in names), _qualified(table)
    )
    if conds:
        query = sql.SQL("{} WHERE {}").format(query, sql.SQL(" AND ").join(conds))
    json_idx = [i for i, n in enumerate(names) if kinds[n] == "json"]
    import pyarrow as pa

    arrow_types = [_ARROW[kinds[n]](pa) for n in names]
    fetch = int(plan.get("fetch_size") or 10_000)
    try:
        with psycopg.connect(plan["dsn"], autocommit=True) as conn:
            conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
            conn.execute(
                sql.SQL("SET TRANSACTION SNAPSHOT {}").format(sql.Literal(plan["snapshot"]))
            )
            with conn.cursor(name="laredo_spark_slice") as cur:
                cur.itersize = fetch
                cur.execute(query)
                while True:
                    rows = cur.fetchmany(fetch)
                    if not rows:
                        break
                    yield _record_batch(pa, arrow_types, names, json_idx, rows)
            conn.execute("COMMIT")
    except psycopg.Error as exc:
        raise SourceError(
            f"spark baseline of {table} pages [{lo}, {hi}): {_mask(str(exc)).strip()}"
        ) from None


@dataclasses.dataclass(frozen=True)
class SlicePartition(InputPartition):
    index: int
    lo: int | None
    hi: int | None


class PgSliceReader(DataSourceReader):
    def __init__(self, plan: dict[str, Any]) -> None:
        self.plan = plan

    def partitions(self) -> list[SlicePartition]:
        return [SlicePartition(i, lo, hi) for i, (lo, hi) in enumerate(self.plan["slices"])]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        assert isinstance(partition, SlicePartition)
        yield from read_slice(self.plan, partition.lo, partition.hi)


class PgSliceDataSource(DataSource):
    """``spark.read.format("laredo-pg-slices").option("plan", json)``: one table's ctid
    slices under an exported snapshot. Built by :func:`spark_baseline`; the plan holds
    ``dsn, snapshot, schema, table, kinds, slices, row_filter, fetch_size``."""

    @classmethod
    def name(cls) -> str:
        return "laredo-pg-slices"

    def _plan(self) -> dict[str, Any]:
        plan: dict[str, Any] = json.loads(self.options["plan"])
        return plan

    def schema(self) -> Any:
        return spark_schema(self._plan()["kinds"])

    def reader(self, schema: Any) -> PgSliceReader:
        return PgSliceReader(self._plan())


def _progress(observer: Any, pid: str, table: TableIdentifier, estimate: int, t0: float) -> Any:
    """Progress callback: ``observer.on_baseline_row_loaded`` and an INFO log with the ETA
    (from ``pg_class.reltuples``, rows before filters: an upper bound when filters drop rows)."""

    def report(count: int) -> None:
        elapsed = time.monotonic() - t0
        rate = count / elapsed if elapsed > 0 else 0.0
        eta = ""
        if estimate > count and rate > 0:
            eta = f", ETA {((estimate - count) / rate):.0f}s of ~{estimate} rows"
        logger.info("spark baseline %s: %d rows (%.0f rows/s%s)", pid, count, rate, eta)
        if observer is not None:
            observer.on_baseline_row_loaded(pid, table, count)

    return report


def _partition_progress(observer: Any, pid: str, total: int, t0: float) -> Any:
    """Per-partition progress: an INFO log and ``observer.on_spark_partition_done`` (if the
    observer has it) each time the driver has received a whole partition (slice)."""

    def report(index: int, done: int, rows: int) -> None:
        elapsed = time.monotonic() - t0
        eta = f", ETA {elapsed / done * (total - done):.0f}s" if done < total else ""
        logger.info(
            "spark baseline %s: partition %d done, %d rows (%d/%d partitions, %.1fs%s)",
            pid,
            index,
            rows,
            done,
            total,
            elapsed,
            eta,
        )
        hook = getattr(observer, "on_spark_partition_done", None)
        if callable(hook):
            hook(pid, index, rows, done, total)

    return report


def _by_partition(lines_df: Any, report: Any) -> Iterator[str]:
    """Typed-JSON lines of ``lines_df`` on the driver, partition by partition, calling
    ``report(partition, partitions_done, rows)`` when a partition's rows have all arrived
    (``toLocalIterator`` yields partitions in order; empty partitions are not reported)."""
    from pyspark.sql import functions as F

    col = lines_df.columns[0]
    tagged = lines_df.select(F.col(col), F.spark_partition_id().alias("__laredo_partition"))
    current: int | None = None
    count = 0
    done = 0
    for r in tagged.toLocalIterator(prefetchPartitions=True):
        if r[1] != current:
            if current is not None:
                done += 1
                report(current, done, count)
            current, count = r[1], 0
        count += 1
        yield r[0]
    if current is not None:
        report(current, done + 1, count)


@dataclasses.dataclass(frozen=True)
class BaselineResult:
    """What :func:`spark_baseline` wrote."""

    snapshot_id: str
    position: str
    row_counts: dict[str, int]
    descriptor: SnapshotDescriptor
    seconds: float
    phases: dict[str, float] = dataclasses.field(default_factory=dict)
    """Seconds per phase: ``init`` (source init + validation), ``slot`` (slot + slices),
    ``read`` (Spark read, filters/transforms, rows to the driver), ``save`` (snapshot write)."""


class _SpooledRows:
    """Encoded rows streamed from Spark into a temp file: sized, iterable more than once."""

    def __init__(
        self,
        lines: Iterator[str],
        directory: str | None = None,
        progress: Any = None,
        every: int = 50_000,
    ) -> None:
        fd, self.path = tempfile.mkstemp(prefix="laredo-spark-", suffix=".jsonl", dir=directory)
        self.count = 0
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            next_report = every
            for line in lines:
                f.write(line)
                f.write("\n")
                self.count += 1
                if progress is not None and self.count >= next_report:
                    progress(self.count)
                    next_report += every

    def __len__(self) -> int:
        return self.count

    def __iter__(self) -> Iterator[dict[str, Any]]:
        with open(self.path, encoding="utf-8") as f:
            for line in f:
                yield _loads(line)

    def lines(self) -> Iterator[str]:
        with open(self.path, encoding="utf-8") as f:
            for line in f:
                yield line.rstrip("\n")

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.unlink(self.path)


class _JsonlPassthrough:
    """The ``jsonl`` serializer, writing spooled typed-JSON lines as they are (no decode and
    re-encode on the driver); any other rows go through :class:`JsonlSerializer`. The file is
    the ``jsonl`` format: a header line, then one typed-JSON row per line."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def format_id(self) -> str:
        return "jsonl"

    def write(self, info: TableSnapshotInfo, rows: Any, out: Any) -> int:
        if not isinstance(rows, _SpooledRows):
            return int(self.inner.write(info, rows, out))
        from laredo.serialization import encode_table_info

        header = encode_table_info(info)
        header["row_count"] = len(rows)
        out.write(json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode() + b"\n")
        buf: list[str] = []
        for line in rows.lines():
            buf.append(line)
            if len(buf) >= 5000:
                buf.append("")
                out.write("\n".join(buf).encode())
                buf = []
        if buf:
            buf.append("")
            out.write("\n".join(buf).encode())
        return len(rows)

    def read(self, inp: Any) -> Any:
        return self.inner.read(inp)


def _source_from(source: Any) -> Any:
    if isinstance(source, Mapping):
        import laredo

        cfg = {k: v for k, v in source.items() if k != "type"}
        kind = str(source.get("type", "postgresql"))
        if kind not in ("postgresql", "pg"):
            raise ConfigError(
                f"spark baseline: source type {kind!r} is not supported; the parallel baseline "
                "needs a 'postgresql' source (other sources: run the local baseline)"
            )
        cfg["lease"] = False
        return laredo.source("postgresql", **cfg)
    return source


def spark_baseline(
    spark: Any,
    source: Any,
    pipelines: Sequence[Pipeline],
    *,
    snapshot_store: Any,
    serializer: Any = None,
    source_id: str | None = None,
    partitions: int | None = None,
    snapshot_id: str | None = None,
    user_meta: Mapping[str, Any] | None = None,
    fetch_size: int = 10_000,
    observer: Any = None,
    max_slice_pages: int = 2048,
    progress_every: int = 50_000,
) -> BaselineResult:
    """Baseline ``pipelines`` of a PostgreSQL source on Spark and save it as one snapshot.

    ``source`` is a ``PostgresSource`` or its config mapping (``slot_mode`` must be
    ``stateful``: the slot carries the stream on after the baseline). ``pipelines`` are the
    same :class:`laredo.Pipeline` objects the engine runs (their targets are not touched here:
    the snapshot's table entries carry each pipeline's id so the engine restores each one).
    ``partitions`` (default: Spark's default parallelism) is the least number of ctid slices
    per table; big tables get more so that no slice exceeds ``max_slice_pages`` pages (one
    slice's rows reach the driver as one task result). The existing slot, if any, is
    dropped and re-created (it must not be in use). ``observer`` receives
    ``on_baseline_started / on_baseline_row_loaded`` (every ``progress_every`` rows, with an
    INFO log carrying the rate and ETA) ``/ on_baseline_completed`` like the engine's.
    """
    started = time.monotonic()
    src = _source_from(source)
    opts = getattr(src, "options", None)
    if opts is None or not hasattr(opts, "connection"):
        raise ConfigError("spark baseline: source must be a postgresql source or its config")
    if opts.slot_mode != "stateful":
        raise ConfigError(
            "spark baseline: the postgresql source needs slot_mode = stateful: the stream "
            "continues from the slot the baseline creates, and a temporary slot would vanish"
        )
    pipes = list(pipelines)
    if not pipes:
        raise ConfigError("spark baseline: no pipelines given")
    sid = source_id or pipes[0].source_id
    tables: list[TableIdentifier] = []
    for p in pipes:
        t = p.table if isinstance(p.table, TableIdentifier) else TableIdentifier.parse(p.table)
        p.table = t
        if t not in tables:
            tables.append(t)
    n_parts = int(partitions or spark.sparkContext.defaultParallelism or 1)
    if serializer is None:
        from laredo.snapshots.jsonl import JsonlSerializer

        serializer = JsonlSerializer()
    phases: dict[str, float] = {}
    mark = time.monotonic()

    def phase(name: str) -> None:
        nonlocal mark
        now = time.monotonic()
        phases[name] = phases.get(name, 0.0) + now - mark
        mark = now

    try:
        columns = src.init(SourceConfig(list(tables)))
        problems = [str(e) for e in src.validate_tables(tables)]
        if problems:
            raise ConfigError([f"spark baseline: {p}" for p in problems])
    finally:
        src.close()
    phase("init")
    dsn: str = opts.connection
    row_filters = {
        TableIdentifier.parse(k): v.row_filter
        for k, v in opts.publication.tables.items()
        if v.row_filter
    }
    spools: list[_SpooledRows] = []
    try:
        with ExportedSnapshot(dsn, src.slot_name) as snap:
            psycopg = _psycopg()
            slices: dict[TableIdentifier, list[tuple[int | None, int | None]]] = {}
            with psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
                from psycopg import sql

                conn.execute(
                    sql.SQL("SET TRANSACTION SNAPSHOT {}").format(sql.Literal(snap.snapshot_name))
                )
                estimates: dict[TableIdentifier, int] = {}
                for t in tables:
                    slices[t] = ctid_slices(conn, t, n_parts, max_slice_pages)
                    est = conn.execute(
                        "SELECT reltuples::bigint FROM pg_class "
                        "WHERE oid = to_regclass(format('%%I.%%I', %s::text, %s::text))",
                        (t.schema, t.table),
                    ).fetchone()
                    estimates[t] = max(0, int(est[0])) if est and est[0] is not None else 0
                conn.execute("COMMIT")
            phase("slot")
            infos: list[TableSnapshotInfo] = []
            data: dict[TableIdentifier, _SpooledRows] = {}
            counts: dict[str, int] = {}
            for p in pipes:
                table = p.table
                assert isinstance(table, TableIdentifier)
                cols: list[ColumnDefinition] = list(columns.get(table, []))
                kinds = {c.name: kind_of_column(c) for c in cols}
                plan = {
                    "dsn": dsn,
                    "snapshot": snap.snapshot_name,
                    "schema": table.schema,
                    "table": table.table,
                    "kinds": kinds,
                    "slices": slices[table],
                    "row_filter": row_filters.get(table),
                    "fetch_size": fetch_size,
                }
                pid = p.pipeline_id()
                if observer is not None:
                    observer.on_baseline_started(pid, table)
                t0 = time.monotonic()
                df = spark.read.format("laredo-pg-slices").option("plan", json.dumps(plan)).load()
                frame = apply_chain(LaredoFrame(df, kinds, table), p.filters, p.transforms)
                lines = _by_partition(
                    frame.json_lines(),
                    _partition_progress(observer, pid, len(slices[table]), t0),
                )
                spool = _SpooledRows(
                    lines,
                    progress=_progress(observer, pid, table, estimates.get(table, 0), t0),
                    every=progress_every,
                )
                phase("read")
                spools.append(spool)
                key = table
                if key in data:  # a second pipeline on the same table (as the engine names it)
                    key = TableIdentifier(table.schema, f"{table.table}~{len(data)}")
                data[key] = spool
                counts[pid] = len(spool)
                infos.append(
                    TableSnapshotInfo(
                        table=key,
                        row_count=len(spool),
                        columns=tuple(cols),
                        target_type=p.resolved_target_type(),
                        position=snap.position,
                        pipeline_id=pid,
                    )
                )
                if observer is not None:
                    from datetime import timedelta

                    observer.on_baseline_completed(
                        pid, table, len(spool), timedelta(seconds=time.monotonic() - t0)
                    )
                logger.info(
                    "spark baseline of %s (%s): %d rows in %d slices",
                    table,
                    pid,
                    len(spool),
                    len(slices[table]),
                )
            position = snap.position
        sid_snap = (
            snapshot_id
            or datetime.now(UTC).strftime("spark-%Y%m%dT%H%M%S%fZ-") + uuid.uuid4().hex[:6]
        )
        meta = SnapshotMetadata(
            snapshot_id=sid_snap,
            created_at=datetime.now(UTC),
            source_positions={sid: position},
            tables=tuple(infos),
            format=serializer.format_id(),
            user_meta={"runner": "spark", "trigger": "spark-baseline", **dict(user_meta or {})},
        )
        from laredo.snapshots.jsonl import JsonlSerializer

        writer = (
            _JsonlPassthrough(serializer) if type(serializer) is JsonlSerializer else serializer
        )
        desc = snapshot_store.save(sid_snap, meta, data, writer)
        phase("save")
    finally:
        for s in spools:
            s.close()
    return BaselineResult(
        snapshot_id=sid_snap,
        position=position,
        row_counts=counts,
        descriptor=desc,
        seconds=time.monotonic() - started,
        phases=phases,
    )
