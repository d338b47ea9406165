"""Parallel consistent baseline of PostgreSQL tables on Spark: tasks read, transform and write;
the driver only plans and commits.

1. The driver initialises the ``postgresql`` source (publication, column discovery), checks it
   can write the snapshot store, then creates the replication slot with
   ``CREATE_REPLICATION_SLOT ... LOGICAL pgoutput EXPORT_SNAPSHOT`` on a replication connection
   it keeps open and idle: the exported snapshot stays importable only while it lives.
2. Each table is cut into ctid page ranges (TID range scans, PostgreSQL 14+). One Spark job per
   pipeline: every task reads its range under the exported snapshot
   (:mod:`laredo_spark.pg.slices`, Arrow record batches), the pipeline's filters and
   transforms run as Spark expressions (:mod:`laredo_spark.compile`), and the task writes its
   rows as one part of the snapshot through the configured store and serializer
   (:mod:`laredo_spark.parts`: Spark's commit protocol; Parquet by default).
3. The driver commits the snapshot: its manifest lists each pipeline's parts (the ones Spark
   accepted, one per task) and the slot's consistent point as the source position, and is
   written last: the snapshot is listed complete or not at all. On any failure the staged
   parts are removed and the slot this baseline created is dropped.
4. The local engine (or ``laredo serve``) configured with the same store and a ``stateful``
   source on the same slot restores the snapshot and streams from that point: no gap, no
   duplicate.

No row passes through the driver's Python process: it handles metadata (columns, slices,
commit messages of a few hundred bytes per task, the manifest) only.

Executors need ``laredo-spark[postgresql]``, network access to PostgreSQL and write access to
the snapshot store. Every connection, the driver's and each task's, is opened by the PostgreSQL
source's own code (:func:`laredo_source_pg.connect`) from the source's options: its
``connection_provider`` runs on the executors, password files and TLS settings apply there. The
options reach the tasks inside the pickled data source class, never as text of a query plan, the
UI or the event log.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import threading
import time
import uuid
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from laredo.errors import ConfigError, SnapshotError
from laredo.pipeline import Pipeline
from laredo.plugins import source as build_source
from laredo.snapshots.layout import ManifestSnapshotStore, check_snapshot_id
from laredo.snapshots.manifest import SnapshotArtifact
from laredo.snapshots.parquet import ParquetSerializer
from laredo.types import (
    SnapshotDescriptor,
    SnapshotMetadata,
    SourceConfig,
    TableIdentifier,
    TableSnapshotInfo,
)

from ..compile import apply_chain
from ..errors import task_failure
from ..frame import LaredoFrame
from ..kinds import kind_of_column
from ..parts import (
    PartsJob,
    SnapshotPartsDataSource,
    frame_for_serializer,
    frame_zones,
    part_partition,
    write_parts,
)
from .slices import plan_slices, slices_data_source
from .slot import ExportedSnapshot, drop_slot

logger = logging.getLogger(__name__)

__all__ = ["BaselineResult", "spark_baseline"]


@dataclasses.dataclass(frozen=True)
class BaselineResult:
    """What :func:`spark_baseline` wrote."""

    snapshot_id: str
    position: str
    row_counts: dict[str, int]
    descriptor: SnapshotDescriptor
    seconds: float
    phases: dict[str, float] = dataclasses.field(default_factory=dict)
    """Seconds per phase: ``init`` (source init + validation + store check), ``slot`` (slot +
    slices), ``write`` (the Spark jobs: tasks read, transform and write the parts),
    ``commit`` (the manifest)."""


class _JobProgress:
    """Logs ``k/N partitions written`` (with an ETA) while a Spark job of this thread runs,
    from Spark's status tracker (the driver sees task completions, not rows)."""

    def __init__(self, spark: Any, pid: str, total: int, interval: float = 2.0) -> None:
        self.sc = spark.sparkContext
        self.pid = pid
        self.total = total
        self.interval = interval
        self.group = f"laredo-baseline-{uuid.uuid4().hex[:12]}"
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._t0 = time.monotonic()

    def __enter__(self) -> _JobProgress:
        self.sc.setLocalProperty("spark.jobGroup.id", self.group)
        self.sc.setLocalProperty("spark.job.description", f"laredo spark baseline {self.pid}")
        self._thread = threading.Thread(target=self._run, name="laredo-progress", daemon=True)
        self._thread.start()
        return self

    def _done(self) -> int:
        tracker = self.sc.statusTracker()
        done = 0
        for job_id in tracker.getJobIdsForGroup(self.group):
            job = tracker.getJobInfo(job_id)
            for stage_id in job.stageIds if job else ():
                stage = tracker.getStageInfo(stage_id)
                if stage is not None:
                    done += stage.numCompletedTasks
        return done

    def _run(self) -> None:
        last = 0
        while not self._stop.wait(self.interval):
            try:
                done = self._done()
            except Exception:  # the tracker is best effort
                continue
            if done != last and done < self.total:
                last = done
                elapsed = time.monotonic() - self._t0
                eta = elapsed / done * (self.total - done)
                logger.info(
                    "spark baseline %s: %d/%d partitions written (%.1fs, ETA %.0fs)",
                    self.pid,
                    done,
                    self.total,
                    elapsed,
                    eta,
                )

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
        self.sc.setLocalProperty("spark.jobGroup.id", None)
        self.sc.setLocalProperty("spark.job.description", None)


def _source_from(source: Any) -> Any:
    if isinstance(source, Mapping):
        cfg = {k: v for k, v in source.items() if k != "type"}
        kind = str(source.get("type", "postgresql"))
        if kind not in ("postgresql", "pg"):
            raise ConfigError(
                f"spark baseline: source type {kind!r} is not supported; the parallel baseline "
                "needs a 'postgresql' source (other sources: run the local baseline)"
            )
        cfg["lease"] = False
        return build_source("postgresql", **cfg)
    return source


def _check_positive(name: str, value: Any) -> None:
    if type(value) is not int or value < 1:
        raise ConfigError(f"spark baseline: {name} must be an integer >= 1 (got {value!r})")


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
) -> BaselineResult:
    """Baseline ``pipelines`` of a PostgreSQL source on Spark and commit one snapshot (see
    the module docstring).

    ``source`` is a ``PostgresSource`` or its config mapping (``slot_mode`` must be
    ``stateful``: the slot carries the stream on after the baseline). ``pipelines`` are the
    same :class:`laredo.Pipeline` objects the engine runs (their targets are not touched here:
    the snapshot's table entries carry each pipeline's id so the engine restores each one).
    ``snapshot_store`` is a layout-2 store (``local``, ``s3``) the executors can write;
    ``serializer`` defaults to Parquet. ``partitions`` (default: Spark's default parallelism)
    is the least number of ctid slices per table; big tables get more so that no slice
    exceeds ``max_slice_pages`` pages (one task's part). The existing slot, if any, is dropped
    and re-created (it must not be in use). ``observer`` receives
    ``on_baseline_started / on_baseline_row_loaded / on_baseline_completed`` per pipeline like
    the engine's (the row count once, when the pipeline's job is done: rows never reach the
    driver) and, if it has the method, ``on_spark_partition_done(pipeline_id, partition,
    rows, parts_done, partitions)`` once per written part after the job.
    """
    started = time.monotonic()
    if partitions is not None:
        _check_positive("partitions", partitions)
    _check_positive("fetch_size", fetch_size)
    _check_positive("max_slice_pages", max_slice_pages)
    src = _source_from(source)
    opts = getattr(src, "options", None)
    if opts is None or not hasattr(opts, "connection"):
        raise ConfigError("spark baseline: source must be a postgresql source or its config")
    if opts.slot_mode != "stateful":
        raise ConfigError(
            "spark baseline: the postgresql source needs slot_mode = stateful: the stream "
            "continues from the slot the baseline creates, and a temporary slot would vanish"
        )
    if not isinstance(snapshot_store, ManifestSnapshotStore):
        raise ConfigError(
            f"spark baseline: snapshot store {snapshot_store!r} cannot take parts written by "
            "Spark tasks: use a layout-2 store (local, s3)"
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
    serializer = serializer if serializer is not None else ParquetSerializer()
    snap_id = (
        snapshot_id or datetime.now(UTC).strftime("spark-%Y%m%dT%H%M%S%fZ-") + uuid.uuid4().hex[:6]
    )
    check_snapshot_id(snap_id)
    slices_source = slices_data_source(opts)
    for ds in (slices_source, SnapshotPartsDataSource):  # also for sessions built elsewhere
        spark.dataSource.register(ds)
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
    snapshot_store.check_writable(snap_id)
    phase("init")
    row_filters = {
        TableIdentifier.parse(k): v.row_filter
        for k, v in opts.publication.tables.items()
        if v.row_filter
    }
    slot = ExportedSnapshot(opts, src.slot_name)
    try:
        with slot as snap:
            slices, zone = plan_slices(opts, snap.snapshot_name, tables, n_parts, max_slice_pages)
            phase("slot")
            infos: list[TableSnapshotInfo] = []
            counts: dict[str, int] = {}
            artifacts: list[SnapshotArtifact] = []
            keys: set[TableIdentifier] = set()
            for i, p in enumerate(pipes):
                table = p.table
                assert isinstance(table, TableIdentifier)
                key = table
                if key in keys:  # a second pipeline on the same table (as the engine names it)
                    key = TableIdentifier(table.schema, f"{table.table}~{len(keys)}")
                keys.add(key)
                cols = tuple(columns.get(table, ()))
                pid = p.pipeline_id()
                info = TableSnapshotInfo(
                    table=key,
                    row_count=0,
                    columns=cols,
                    target_type=p.resolved_target_type(),
                    position=snap.position,
                    pipeline_id=pid,
                )
                kinds = {c.name: kind_of_column(c, zone) for c in cols}
                plan = {
                    "snapshot": snap.snapshot_name,
                    "schema": table.schema,
                    "table": table.table,
                    "kinds": kinds,
                    "slices": slices[table],
                    "row_filter": row_filters.get(table),
                    "fetch_size": fetch_size,
                }
                if observer is not None:
                    observer.on_baseline_started(pid, table)
                t0 = time.monotonic()
                df = spark.read.format(slices_source.name()).option("plan", json.dumps(plan))
                frame = apply_chain(LaredoFrame(df.load(), kinds, table), p.filters, p.transforms)
                out, encoded = frame_for_serializer(frame, serializer.format_id())
                record = f"pipeline-{i:04d}"
                job = PartsJob(
                    snapshot_store,
                    snap_id,
                    key,
                    info,
                    serializer,
                    record,
                    encoded,
                    frame_zones(frame) if out is frame.df else {},
                )
                try:
                    with _JobProgress(spark, pid, len(slices[table])):
                        write_parts(out, job)
                except Exception as exc:
                    raise task_failure(
                        exc, f"spark baseline of {table} ({pid})", SnapshotError
                    ) from None
                artifact = snapshot_store.staged_artifacts(snap_id).get(record)
                if artifact is None:
                    raise SnapshotError(
                        f"spark baseline of {table} ({pid}): the write job committed no parts"
                    )
                artifacts.append(artifact)
                rows = artifact.rows
                counts[pid] = rows
                infos.append(dataclasses.replace(info, row_count=rows))
                _report(
                    observer,
                    pid,
                    table=table,
                    artifact=artifact,
                    slices=len(slices[table]),
                    rows=rows,
                    t0=t0,
                )
                logger.info(
                    "spark baseline of %s (%s): %d rows in %d parts from %d slices",
                    table,
                    pid,
                    rows,
                    len(artifact.parts),
                    len(slices[table]),
                )
            position = snap.position
        phase("write")
        meta = SnapshotMetadata(
            snapshot_id=snap_id,
            created_at=datetime.now(UTC),
            source_positions={sid: position},
            tables=tuple(infos),
            format=serializer.format_id(),
            user_meta={"runner": "spark", "trigger": "spark-baseline", **dict(user_meta or {})},
        )
        desc = snapshot_store.commit(snap_id, meta, artifacts)
        phase("commit")
    except BaseException:
        snapshot_store.abort(snap_id)
        if slot.created:
            drop_slot(opts, src.slot_name)
        raise
    return BaselineResult(
        snapshot_id=snap_id,
        position=position,
        row_counts=counts,
        descriptor=desc,
        seconds=time.monotonic() - started,
        phases=phases,
    )


def _report(
    observer: Any,
    pid: str,
    *,
    table: TableIdentifier,
    artifact: SnapshotArtifact,
    slices: int,
    rows: int,
    t0: float,
) -> None:
    if observer is None:
        return
    hook = getattr(observer, "on_spark_partition_done", None)
    if callable(hook):
        for done, part in enumerate(artifact.parts, start=1):
            hook(pid, part_partition(part), part.rows, done, slices)
    observer.on_baseline_row_loaded(pid, table, rows)
    observer.on_baseline_completed(pid, table, rows, timedelta(seconds=time.monotonic() - t0))
