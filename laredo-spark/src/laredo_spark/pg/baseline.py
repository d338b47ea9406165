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

Steps 1, 2's reading and the drop on failure are :func:`laredo_spark.pg.driver.run_pg_baseline`'s
(shared with the Delta baseline); :class:`SnapshotPartsSink` writes the parts and commits.

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

import contextlib
import dataclasses
import logging
import threading
import time
import uuid
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from laredo.errors import ConfigError, SnapshotError
from laredo.events import BaselineCompleted, BaselineRowLoaded, BaselineStarted
from laredo.observers import as_observer
from laredo.pipeline import Pipeline
from laredo.snapshots.layout import ManifestSnapshotStore, check_snapshot_id
from laredo.snapshots.manifest import (
    TABLE,
    SnapshotArtifact,
    SnapshotPart,
    decode_artifact,
    encode_artifact,
)
from laredo.snapshots.parquet import ParquetSerializer
from laredo.types import (
    ColumnDefinition,
    SnapshotDescriptor,
    SnapshotMetadata,
    TableIdentifier,
    TableSnapshotInfo,
)

from ..errors import task_failure
from ..parts import (
    PartsJob,
    SnapshotPartsDataSource,
    frame_for_serializer,
    frame_zones,
    part_partition,
    write_parts,
)
from .chunked import run_baseline
from .driver import PipelineFrame, source_from
from .progress import ChunkRun, ProgressFiles

logger = logging.getLogger(__name__)

__all__ = ["BaselineResult", "SnapshotPartsSink", "spark_baseline"]


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
    chunks: tuple[int, int] | None = None
    """A chunked baseline's chunks read by this run and its total (fewer read: it resumed);
    ``None``: the one-pass baseline."""


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


@dataclasses.dataclass
class SnapshotPartsSink:
    """Writes each pipeline's rows as parts of one snapshot (:mod:`laredo_spark.parts`) and
    commits its manifest, listing the slot's consistent point, last; aborts the staged parts
    on failure. The sink of :func:`spark_baseline` (driver: :func:`run_pg_baseline`)."""

    snapshot_store: Any
    serializer: Any
    snapshot_id: str
    user_meta: Mapping[str, Any]
    observer: Any = None
    label: str = "spark baseline"
    data_sources: tuple[Any, ...] = (SnapshotPartsDataSource,)
    infos: list[TableSnapshotInfo] = dataclasses.field(default_factory=list)
    counts: dict[str, int] = dataclasses.field(default_factory=dict)
    artifacts: list[SnapshotArtifact] = dataclasses.field(default_factory=list)
    keys: set[TableIdentifier] = dataclasses.field(default_factory=set)
    descriptor: SnapshotDescriptor | None = None
    chunk_keys: dict[int, TableIdentifier] = dataclasses.field(default_factory=dict)
    progress: ProgressFiles | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.snapshot_store, ManifestSnapshotStore):
            raise ConfigError(
                f"spark baseline: snapshot store {self.snapshot_store!r} cannot take parts "
                "written by Spark tasks: use a layout-2 store (local, s3)"
            )
        check_snapshot_id(self.snapshot_id)

    def check(self, pipelines: Sequence[Pipeline], source_id: str) -> None:
        self.snapshot_store.check_writable(self.snapshot_id)

    def write(self, spark: Any, job: PipelineFrame) -> None:
        table, p, snap_id = job.table, job.pipeline, self.snapshot_id
        key = table
        if key in self.keys:  # a second pipeline on the same table (as the engine names it)
            key = TableIdentifier(table.schema, f"{table.table}~{len(self.keys)}")
        self.keys.add(key)
        pid = p.pipeline_id()
        info = TableSnapshotInfo(
            table=key,
            row_count=0,
            columns=job.columns,
            target_type=p.resolved_target_type(),
            position=job.position,
            pipeline_id=pid,
        )
        if self.observer is not None:
            self.observer.on_event(BaselineStarted(pid, table))
        t0 = time.monotonic()
        frame = job.frame
        out, encoded = frame_for_serializer(frame, self.serializer.format_id())
        record = f"pipeline-{job.index:04d}"
        zones = frame_zones(frame) if out is frame.df else {}
        parts = PartsJob(
            self.snapshot_store, snap_id, key, info, self.serializer, record, encoded, zones
        )
        try:
            with _JobProgress(spark, pid, job.slices):
                write_parts(out, parts)
        except Exception as exc:
            raise task_failure(exc, f"spark baseline of {table} ({pid})", SnapshotError) from None
        artifact = self.snapshot_store.staged_artifacts(snap_id).get(record)
        if artifact is None:
            raise SnapshotError(
                f"spark baseline of {table} ({pid}): the write job committed no parts"
            )
        self.artifacts.append(artifact)
        rows = self.counts[pid] = artifact.rows
        self.infos.append(dataclasses.replace(info, row_count=rows))
        _report(self.observer, pid, table=table, artifact=artifact, slices=job.slices, t0=t0)
        logger.info(
            "spark baseline of %s (%s): %d rows in %d parts from %d slices",
            table,
            pid,
            rows,
            len(artifact.parts),
            job.slices,
        )

    def commit(self, source_id: str, position: str) -> None:
        meta = SnapshotMetadata(
            snapshot_id=self.snapshot_id,
            created_at=datetime.now(UTC),
            source_positions={source_id: position},
            tables=tuple(self.infos),
            format=self.serializer.format_id(),
            user_meta={"runner": "spark", "trigger": "spark-baseline", **dict(self.user_meta)},
        )
        self.descriptor = self.snapshot_store.commit(self.snapshot_id, meta, self.artifacts)

    def abort(self) -> None:
        self.snapshot_store.abort(self.snapshot_id)

    # -- the resumable (chunked) baseline: :class:`~laredo_spark.pg.chunked.ChunkedSink` -----
    @property
    def output_kind(self) -> str:
        """Part of the run's fingerprint: parts of one format only."""
        return f"snapshot-parts/{self.serializer.format_id()}"

    @property
    def output_id(self) -> str:
        return self.snapshot_id

    @output_id.setter
    def output_id(self, value: str) -> None:
        self.snapshot_id = value

    def _progress(self, source_id: str, slot: str) -> ProgressFiles:
        if self.progress is None:
            self.progress = ProgressFiles(self.snapshot_store, source_id, slot)
        return self.progress

    def load_run(self, source_id: str, slot: str) -> ChunkRun | None:
        """The interrupted run kept in the store; its snapshot id is adopted."""
        progress = self._progress(source_id, slot)
        run = progress.load()
        if run is not None and not _sound(run):
            logger.warning(
                "spark baseline: the snapshot id or the finished chunks' parts in %s's run "
                "record are malformed (a damaged record); starting over",
                progress.id,
            )
            progress.clear()
            with contextlib.suppress(SnapshotError):  # its staged parts, if the id is one
                self.snapshot_store.abort(run.output_id)
            return None
        if run is not None and self.snapshot_store.files.exists(run.output_id):
            logger.info("spark baseline: snapshot %s was committed; starting anew", run.output_id)
            progress.clear()  # the driver died between the commit and removing the record
            return None
        if run is not None and run.output_id != self.snapshot_id:
            self.snapshot_store.abort(self.snapshot_id)  # the check's probe, nothing else
            self.snapshot_id = run.output_id
        return run

    def save_run(self, run: ChunkRun) -> None:
        assert self.progress is not None
        self.progress.save(run)

    def begin_run(
        self, run: ChunkRun, columns: Mapping[TableIdentifier, Sequence[ColumnDefinition]]
    ) -> None:
        self.save_run(run)

    def _key(self, job: PipelineFrame) -> TableIdentifier:
        """The pipeline's table key in the snapshot (``users~1`` for a second pipeline on
        ``users``, as the engine names it), the same on every wave."""
        key = self.chunk_keys.get(job.index)
        if key is None:
            key = job.table
            if key in self.chunk_keys.values():
                key = TableIdentifier(job.table.schema, f"{job.table.table}~{len(self.chunk_keys)}")
            self.chunk_keys[job.index] = key
        return key

    def _info(self, job: PipelineFrame, key: TableIdentifier) -> TableSnapshotInfo:
        return TableSnapshotInfo(
            table=key,
            row_count=0,
            columns=job.columns,
            target_type=job.pipeline.resolved_target_type(),
            position=job.position,
            pipeline_id=job.pipeline.pipeline_id(),
        )

    def write_chunks(
        self, spark: Any, job: PipelineFrame, chunks: Sequence[int], run: ChunkRun
    ) -> ChunkRun:
        """One Spark job writes the chunks' parts (task ``i`` reads ``chunks[i]``); then the
        progress record lists each chunk's parts (chunks without rows: none)."""
        key, pid = self._key(job), job.pipeline.pipeline_id()
        info = self._info(job, key)
        frame = job.frame
        out, encoded = frame_for_serializer(frame, self.serializer.format_id())
        record = f"pipeline-{job.index:04d}"
        wave = f"{record}-chunk-{chunks[0]:06d}"
        zones = frame_zones(frame) if out is frame.df else {}
        parts = PartsJob(
            self.snapshot_store, self.snapshot_id, key, info, self.serializer, wave, encoded, zones
        )
        try:
            with _JobProgress(spark, pid, len(chunks)):
                write_parts(out, parts)
        except Exception as exc:
            raise task_failure(
                exc, f"spark baseline of {job.table} ({pid})", SnapshotError
            ) from None
        artifact = self.snapshot_store.staged_artifacts(self.snapshot_id).get(wave)
        if artifact is None:
            raise SnapshotError(
                f"spark baseline of {job.table} ({pid}): the write job committed no parts"
            )
        by_task: dict[int, list[SnapshotPart]] = {}
        for part in artifact.parts:
            task = part_partition(part)
            if task is None or not 0 <= task < len(chunks):
                raise SnapshotError(f"spark baseline of {job.table}: unexpected part {part.path}")
            by_task.setdefault(task, []).append(part)
        for task, chunk in enumerate(chunks):
            chunk_artifact = dataclasses.replace(artifact, parts=tuple(by_task.get(task, ())))
            run = run.finished(record, chunk, encode_artifact(chunk_artifact))
        self.save_run(run)
        return run

    def table_done(self, job: PipelineFrame, run: ChunkRun) -> None:
        """The pipeline's artifact: every chunk's parts, in key order."""
        key = self._key(job)
        done = run.done.get(f"pipeline-{job.index:04d}", {})
        parts = tuple(p for c in sorted(done) for p in decode_artifact(done[c]).parts)
        artifact = SnapshotArtifact(
            TABLE, key, parts, job.pipeline.pipeline_id(), None, job.position
        )
        self.artifacts.append(artifact)
        pid = job.pipeline.pipeline_id()
        self.counts[pid] = artifact.rows
        self.infos.append(dataclasses.replace(self._info(job, key), row_count=artifact.rows))
        if self.observer is not None:
            self.observer.on_baseline_row_loaded(pid, job.table, artifact.rows)

    def discard(self, run: ChunkRun) -> None:
        self.snapshot_store.abort(run.output_id)
        assert self.progress is not None
        self.progress.clear()

    def forget(self, run: ChunkRun) -> None:
        assert self.progress is not None
        self.progress.clear()


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
    chunk_rows: int | None = None,
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
    and re-created (it must not be in use). ``observer`` receives ``BaselineStarted``,
    ``BaselineRowLoaded`` and ``BaselineCompleted`` (:mod:`laredo.events`) per pipeline like
    the engine's (the row count once, when the pipeline's job is done: rows never reach the
    driver) and, if it has the method, ``on_spark_partition_done(pipeline_id, partition,
    rows, parts_done, partitions)`` once per written part after the job.

    With ``baseline { mode = chunked, chunk_rows = N }`` on the source (or ``chunk_rows``
    given; ``0`` forces the one-pass baseline) the baseline is resumable: see
    :mod:`laredo_spark.pg.chunked`. A run interrupted after its plan was recorded keeps the
    slot and the finished chunks; the next call with the same configuration resumes.
    """
    started = time.monotonic()
    sink = SnapshotPartsSink(
        snapshot_store,
        serializer if serializer is not None else ParquetSerializer(),
        snapshot_id or datetime.now(UTC).strftime("spark-%Y%m%dT%H%M%S%fZ-") + uuid.uuid4().hex[:6],
        user_meta or {},
        None if observer is None else as_observer(observer),
    )
    src = source_from(source, sink.label)
    rows = src.baseline_chunk_rows() if chunk_rows is None else chunk_rows
    done, chunks = run_baseline(
        spark,
        src,
        pipelines,
        sink,
        chunk_rows=rows,
        source_id=source_id,
        partitions=partitions,
        fetch_size=fetch_size,
        max_slice_pages=max_slice_pages,
    )
    assert sink.descriptor is not None
    return BaselineResult(
        snapshot_id=sink.snapshot_id,
        position=done.position,
        row_counts=sink.counts,
        descriptor=sink.descriptor,
        seconds=time.monotonic() - started,
        phases=done.phases,
        chunks=chunks,
    )


def _sound(run: ChunkRun) -> bool:
    """The run's output id is a snapshot id and every finished chunk's payload an artifact
    (its parts) :func:`decode_artifact` reads (the record comes from a store: trusted for
    nothing)."""
    try:
        check_snapshot_id(run.output_id)
        for chunks in run.done.values():
            for payload in chunks.values():
                decode_artifact(payload)
    except (SnapshotError, ValueError, KeyError, TypeError, AttributeError, ArithmeticError):
        return False
    return True


def _report(
    observer: Any,
    pid: str,
    *,
    table: TableIdentifier,
    artifact: SnapshotArtifact,
    slices: int,
    t0: float,
) -> None:
    if observer is None:
        return
    rows = artifact.rows
    hook = getattr(observer, "on_spark_partition_done", None)
    if callable(hook):
        for done, part in enumerate(artifact.parts, start=1):
            hook(pid, part_partition(part), part.rows, done, slices)
    observer.on_event(BaselineRowLoaded(pid, table, rows))
    observer.on_event(BaselineCompleted(pid, table, rows, timedelta(seconds=time.monotonic() - t0)))
