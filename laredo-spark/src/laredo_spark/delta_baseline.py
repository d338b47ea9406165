"""Parallel baseline of PostgreSQL tables into ``delta`` targets: executors write the Parquet
files of the table's first version, the driver commits them to the Delta log.

1. As :func:`laredo_spark.spark_baseline` (the same driver,
   :func:`laredo_spark.pg.driver.run_pg_baseline`; :class:`DeltaVersionSink` only writes): the
   driver initialises the source, creates the replication slot with an exported snapshot and
   cuts each table into ctid slices.
2. One Spark job per pipeline: each task reads its slice under the exported snapshot, runs
   the pipeline's filters and transforms, encodes the rows exactly as the ``delta`` target does
   (:mod:`laredo_target_delta.columns`) and writes one Parquet file into the table's directory.
   Only the file's name, size and row count reach the driver.
3. The driver commits the files as one Delta version (a new table, or an overwrite) whose
   commit info carries the slot's consistent point, like the target's baseline version.
   Files of failed or retried tasks are never committed (``vacuum`` removes them).
4. ``laredo serve`` with the same configuration resumes from the slot: the ``delta`` target
   finds the version at the slot's position and streams on from it, no gap and no duplicate.

With ``baseline { mode = chunked }`` the baseline is resumable instead: key-range chunks in
waves, each wave one commit carrying its progress (:class:`DeltaChunkSink`).

Every pipeline of the source must have a ``delta`` target. Its ``uri`` is a local directory
the executors share, or an object store (``s3://``, ``gs://``, ``az://``...): then each task
writes its Parquet file to a local temporary file and uploads it through delta-rs's object
store with the target's ``storage_options`` (the same client and settings the target uses), and
the driver commits the uploaded files. The options reach the executors inside the task function
(never in a log line or a repr: they are masked). Needs ``pip install laredo-spark[delta]``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from laredo.errors import ConfigError, SnapshotError, TargetError
from laredo.pipeline import Pipeline
from laredo.types import ColumnDefinition, TableIdentifier

from .errors import task_failure
from .parts import frame_for_serializer
from .pg.chunked import run_baseline
from .pg.chunks import TableChunks
from .pg.driver import PipelineFrame, source_from
from .pg.progress import ChunkRun, decode_run, encode_run

logger = logging.getLogger(__name__)

__all__ = [
    "SPARK_PLAN",
    "SPARK_RUN",
    "DeltaBaselineResult",
    "DeltaChunkSink",
    "DeltaVersionSink",
    "is_delta_pipeline",
    "plan_digest",
    "recorded_run",
    "spark_delta_baseline",
]

_RESULT_SCHEMA = "path string, size long, rows long, mtime long, task int"
SPARK_RUN = "laredo.spark_run"
"""Commit info key of a chunked Spark baseline's commits: its :class:`ChunkRun` (the slot's
position, the configuration's fingerprint and the chunks the commit finished; on the table's
first commit of the run, the plan and every chunk finished so far)."""
SPARK_PLAN = "laredo.spark_plan"
"""Commit info key of every commit of a chunked Spark baseline: its plan's digest
(:func:`plan_digest`), which ties a wave's commit to the run's first (:func:`recorded_run`)."""
_INTEGER_KEYS = frozenset({"smallint", "integer", "bigint"})


@dataclasses.dataclass(frozen=True)
class DeltaBaselineResult:
    """What :func:`spark_delta_baseline` committed (``snapshot_id`` names the versions, for
    the CLI's report)."""

    snapshot_id: str
    position: str
    row_counts: dict[str, int]
    seconds: float
    chunks: tuple[int, int] | None = None
    """A chunked baseline: the chunks this run read and the run's total (fewer when it
    resumed); ``None``: one pass."""


def is_delta_pipeline(p: Pipeline) -> bool:
    """The pipeline's target declares ``writes_delta_baseline = True`` (the ``delta`` target):
    its baseline is a Delta version the executors write, not snapshot parts."""
    return getattr(p.target, "writes_delta_baseline", False) is True


@dataclasses.dataclass(frozen=True)
class _Location:
    """Where a pipeline's Delta table lives: a local directory (``local``) or an object store
    URI with the target's ``storage_options`` (secret: never in a repr)."""

    uri: str
    storage_options: dict[str, str] = dataclasses.field(default_factory=dict, repr=False)

    @property
    def local(self) -> bool:
        return "://" not in self.uri

    def __str__(self) -> str:
        return self.uri


def _location(p: Pipeline) -> _Location:
    options = getattr(p.target, "options", None)
    uri = getattr(options, "uri", None)
    if not isinstance(uri, str):
        raise ConfigError(f"spark delta baseline: pipeline {p.pipeline_id()} has no delta uri")
    storage = dict(getattr(options, "storage_options", None) or {})
    return _Location(uri.removeprefix("file://"), storage)


def _upload(local_path: str, where: _Location, name: str) -> None:
    """Copy a finished Parquet file into the table's directory in the object store, through
    delta-rs's object store (the ``storage_options`` the target uses)."""
    # deltalake's public pyarrow wrapper (deltalake.fs.DeltaStorageHandler) cannot write with
    # pyarrow >= 20 (it hands the Rust stream pyarrow Buffers, the stream takes bytes), so the
    # handler it wraps is used directly; its stubs document it (deltalake/_internal.pyi).
    from deltalake._internal import (  # noqa: PLC0415 - lazy: optional extra
        DeltaFileSystemHandler,
    )

    fs = DeltaFileSystemHandler(where.uri, dict(where.storage_options))
    out = fs.open_output_stream(name)
    with open(local_path, "rb") as src:
        while chunk := src.read(8 << 20):
            out.write(chunk)
    out.close()  # type: ignore[attr-defined]  # completes the upload; missing from the stubs


@dataclasses.dataclass(frozen=True)
class _WriteFiles:
    """The task function (``mapInArrow``): one Parquet file of Delta-encoded rows per task,
    written into a local table directory, or uploaded into an object store's."""

    where: _Location
    columns: tuple[ColumnDefinition, ...]
    encoded: dict[str, str]

    def __call__(self, batches: Iterator[Any]) -> Iterator[Any]:
        import tempfile  # noqa: PLC0415 - lazy: runs in executors

        import pyarrow as pa  # noqa: PLC0415 - lazy: runs in executors
        import pyarrow.parquet as pq  # noqa: PLC0415 - lazy: runs in executors
        from laredo.snapshots.arrow import batch_rows  # noqa: PLC0415 - lazy: runs in executors
        from laredo_target_delta.columns import (  # noqa: PLC0415 - lazy: optional extra
            arrow_schema,
            codecs_for,
            to_arrow,
        )
        from pyspark import TaskContext  # noqa: PLC0415 - lazy: runs in executors

        codecs = codecs_for(self.columns)
        schema = arrow_schema(codecs)
        name = f"part-{uuid.uuid4().hex}.zstd.parquet"
        with tempfile.TemporaryDirectory(prefix="laredo-delta-") as tmp:
            path = os.path.join(self.where.uri if self.where.local else tmp, name)
            rows = 0
            with pq.ParquetWriter(path, schema, compression="zstd") as writer:
                for batch in batches:
                    table = to_arrow(codecs, list(batch_rows(batch, self.encoded)))
                    writer.write_table(table.cast(schema))
                    rows += table.num_rows
            size = os.path.getsize(path)
            if not self.where.local:
                _upload(path, self.where, name)
        mtime = int(time.time() * 1000)
        ctx = TaskContext.get()
        task = ctx.partitionId() if ctx is not None else 0
        yield pa.RecordBatch.from_pylist(
            [{"path": name, "size": size, "rows": rows, "mtime": mtime, "task": task}],
            schema=pa.schema(
                [
                    ("path", pa.string()),
                    ("size", pa.int64()),
                    ("rows", pa.int64()),
                    ("mtime", pa.int64()),
                    ("task", pa.int32()),
                ]
            ),
        )


def _commit(
    where: _Location,
    table: TableIdentifier,
    columns: tuple[ColumnDefinition, ...],
    files: list[Any],
    meta: dict[str, Any],
    *,
    append: bool = False,
) -> int:
    """Commit ``files`` as a new version of the table: replacing it (or creating it), or
    ``append``-ed to its current version; the new version's number."""
    from deltalake import CommitProperties, DeltaTable, Schema  # noqa: PLC0415 - lazy: optional
    from deltalake.transaction import (  # noqa: PLC0415 - lazy: optional extra
        AddAction,
        RemoveAction,
        create_table_with_add_actions,
    )
    from laredo_target_delta.columns import (  # noqa: PLC0415 - lazy: optional extra
        TableDescription,
        arrow_schema,
        codecs_for,
        encode_description,
    )

    actions = [
        AddAction(f.path, int(f.size), {}, int(f.mtime), True, json.dumps({"numRecords": f.rows}))
        for f in files
    ]
    storage = dict(where.storage_options) or None
    schema = Schema.from_arrow(arrow_schema(codecs_for(columns)))
    if append:
        dt = DeltaTable(where.uri, storage_options=storage)
        dt.create_write_transaction(
            list[AddAction | RemoveAction](actions),
            "append",
            schema,
            commit_properties=CommitProperties(custom_metadata=meta),
        )
        return int(DeltaTable(where.uri, storage_options=storage).version())
    exists = DeltaTable.is_deltatable(where.uri, storage)
    create_table_with_add_actions(
        where.uri,
        schema,
        actions,
        mode="overwrite" if exists else "error",
        name=str(table),
        description=encode_description(TableDescription(table, columns)),
        configuration={"delta.enableChangeDataFeed": "true"},
        storage_options=storage,
        commit_properties=CommitProperties(custom_metadata=meta),
    )
    return int(DeltaTable(where.uri, storage_options=storage).version())


def _check_targets(pipes: Sequence[Pipeline], source_id: str) -> None:
    """Before the slot is created: each table's ``uri`` is reachable and writable (local) and
    holds no other table, checked by the ``delta`` target's own code (errors name the ``uri``;
    ``storage_options`` masked)."""
    from laredo_target_delta.writer import DeltaWriter  # noqa: PLC0415 - lazy: optional extra

    for p in pipes:
        assert isinstance(p.table, TableIdentifier)
        options = getattr(p.target, "options", None)
        DeltaWriter(options, p.table, source_id).open_existing()  # type: ignore[arg-type]


@dataclasses.dataclass
class DeltaVersionSink:
    """Writes each pipeline's rows as the Parquet files of one Delta version of its table and
    commits that version (commit info: the slot's consistent point) once its files are
    written. The sink of :func:`spark_delta_baseline` (driver:
    :func:`~laredo_spark.pg.driver.run_pg_baseline`)."""

    places: dict[str, _Location]
    label: str = "spark delta baseline"
    data_sources: tuple[Any, ...] = ()
    source_id: str = ""
    counts: dict[str, int] = dataclasses.field(default_factory=dict)
    versions: list[str] = dataclasses.field(default_factory=list)

    def check(self, pipelines: Sequence[Pipeline], source_id: str) -> None:
        self.source_id = source_id
        _check_targets(pipelines, source_id)

    def write(self, spark: Any, job: PipelineFrame) -> None:
        from laredo_target_delta.archive import (  # noqa: PLC0415 - lazy: optional extra
            commit_metadata,
        )

        table, pid = job.table, job.pipeline.pipeline_id()
        where = self.places[pid]
        files = self.write_files(job)
        try:
            meta = commit_metadata(
                job.position, job.consistent_point, self.source_id, str(table), "baseline"
            )
            version = _commit(where, table, job.columns, files, meta)
        except Exception as exc:
            raise task_failure(exc, f"{self.label} of {table} ({pid})", TargetError) from None
        self.counts[pid] = sum(int(f.rows) for f in files)
        self.versions.append(f"{where}@v{version}")
        logger.info(
            "spark delta baseline of %s: %d rows in %d files, version %d at %s",
            table,
            self.counts[pid],
            len(files),
            version,
            job.position,
        )

    def write_files(self, job: PipelineFrame) -> list[Any]:
        """One Spark job writes ``job.frame`` as Parquet files (one per task) into the
        pipeline's table directory; one small row per file (name, size, rows, task)."""
        table, pid = job.table, job.pipeline.pipeline_id()
        where = self.places[pid]
        if where.local:
            os.makedirs(where.uri, exist_ok=True)
        out, encoded = frame_for_serializer(job.frame, "parquet")
        try:
            return list(
                out.mapInArrow(
                    _WriteFiles(where, job.columns, dict(encoded)), _RESULT_SCHEMA
                ).collect()
            )
        except Exception as exc:
            raise task_failure(exc, f"{self.label} of {table} ({pid})", TargetError) from None

    def commit(self, source_id: str, position: str) -> None:
        """Nothing left: each version was committed when its files were written."""

    def abort(self) -> None:
        """Nothing to remove: files of an uncommitted version are never read (vacuum)."""


def _engine_record(plan: TableChunks, done: Sequence[int]) -> str:
    """The engine's progress record (:func:`laredo.engine.backfiller.encode_progress`) of a
    table whose chunks ``done`` (a prefix ``0..k``: waves finish in key order) are committed:
    the last key done (integer keys as JSON numbers, others as the text PostgreSQL casts back),
    or ``""`` once every chunk is (the baseline finished)."""
    from laredo.engine.backfiller import encode_progress  # noqa: PLC0415 - the engine's format

    if len(done) >= plan.count:
        return ""
    if not done:
        return encode_progress(None)  # begun, no chunk yet
    last = plan.bounds[max(done)]
    return encode_progress(
        [int(v) if t in _INTEGER_KEYS else v for v, t in zip(last, plan.types, strict=True)]
    )


def plan_digest(run: ChunkRun) -> str:
    """The digest of ``run``'s plan (its tables' chunk bounds), recorded on each commit."""
    doc = {k: v.to_json() for k, v in sorted(run.tables.items())}
    text = json.dumps(doc, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def recorded_run(uri: str, storage_options: Mapping[str, str] | None = None) -> ChunkRun | None:
    """The run the Delta table's newest commit records (None: no table, or no run), whole:
    the plan and every finished chunk of the table, gathered from the run's commits back to
    its first on the table (:func:`_whole_run`). ``SnapshotError`` naming the version when a
    record is damaged (:func:`~laredo_spark.pg.progress.decode_run`) or the plan is missing."""
    from deltalake import DeltaTable  # noqa: PLC0415 - lazy: optional extra

    storage = dict(storage_options or {}) or None
    if not DeltaTable.is_deltatable(uri, storage):
        return None
    table = DeltaTable(uri, storage_options=storage)
    last = table.history(1)
    info = dict(last[0]) if last else {}
    if not info.get(SPARK_RUN):
        return None
    run = _decode_recorded(info[SPARK_RUN], _commit_name(uri, info))
    return run if run.tables else _whole_run(table, uri, run, info)


def _version(info: Mapping[str, Any]) -> int:
    version = info.get("version")
    return version if isinstance(version, int) else -1


def _commit_name(uri: str, info: Mapping[str, Any]) -> str:
    return f"{uri} version {_version(info)} ({SPARK_RUN})"


def _whole_run(table: Any, uri: str, newest: ChunkRun, info: Mapping[str, Any]) -> ChunkRun:
    """``newest`` (a wave's record: its own chunks, the plan's digest) with the chunks of the
    earlier commits of its run (same output id and digest) and the plan, from the run's first
    commit on the table (the one whose record holds a plan of that digest)."""
    digest, newest_version = info.get(SPARK_PLAN), _version(info)
    done = {r: dict(d) for r, d in newest.done.items()}
    for older in sorted(table.history(), key=_version, reverse=True):
        if _version(older) >= newest_version or older.get(SPARK_PLAN) != digest:
            continue  # the newest itself, or a commit of no run (a user's OPTIMIZE)
        if not older.get(SPARK_RUN):
            continue
        found = _decode_recorded(older[SPARK_RUN], _commit_name(uri, older))
        if found.output_id != newest.output_id:
            break
        for record, chunks in found.done.items():
            done[record] = {**chunks, **done.get(record, {})}
        if found.tables:
            if plan_digest(found) != digest:
                break
            return dataclasses.replace(newest, tables=found.tables, done=done)
    raise SnapshotError(
        f"{_commit_name(uri, info)}: the run's first commit (its plan) is in no earlier "
        "version of the table's log"
    )


def _decode_recorded(text: Any, where: str) -> ChunkRun:
    """The run a wave commit's ``laredo.spark_run`` holds; ``SnapshotError`` naming ``where``
    when it is damaged (:func:`~laredo_spark.pg.progress.decode_run`; a finished chunk's
    payload is its row count)."""
    if not isinstance(text, str):
        raise SnapshotError(f"{where}: the run record is not a string: it is damaged")
    run = decode_run(text, where)
    for chunks in run.done.values():
        if not all(type(n) is int and n >= 0 for n in chunks.values()):
            raise SnapshotError(f"{where}: a finished chunk's row count is not a count")
    return run


@dataclasses.dataclass
class DeltaChunkSink(DeltaVersionSink):
    """The resumable (``baseline.mode = chunked``) Spark baseline into ``delta`` targets
    (:class:`~laredo_spark.pg.chunked.ChunkedSink`; driver:
    :func:`~laredo_spark.pg.chunked.run_chunked_baseline`).

    Each wave of chunks is one Delta commit of its files: the first replaces the table (a new
    version), the others append. Every commit carries the slot's position ``P0`` and, as the
    engine's own chunked baseline does (:mod:`laredo_target_delta.archive`), the progress
    record ``laredo.progress`` its rows complete: the last key done, ``""`` on the last wave.
    So the table is baselined for ``laredo serve`` only when the record says finished; before,
    the engine continues the chunked baseline after that key itself. The commit also carries
    the run (``laredo.spark_run``: position, fingerprint, the wave's finished chunks) that the
    next ``laredo spark baseline`` resumes from, and its plan's digest (``laredo.spark_plan``;
    the plan is on the table's first commit of the run only, :func:`recorded_run` gathers the
    rest: the log grows by each chunk once, not by the plan or all chunks per wave). Chunk rows
    and their record are one commit: a killed driver leaves only uncommitted files (``vacuum``
    removes them)."""

    output_id: str = ""
    order: list[str] = dataclasses.field(default_factory=list)
    tables: dict[str, TableIdentifier] = dataclasses.field(default_factory=dict)
    begun: set[str] = dataclasses.field(default_factory=set)

    def __post_init__(self) -> None:
        if not self.output_id:
            self.output_id = "spark-delta-" + uuid.uuid4().hex[:12]

    @property
    def output_kind(self) -> str:
        """Part of the run's fingerprint: the tables' places."""
        return "delta:" + ",".join(str(self.places[pid]) for pid in sorted(self.places))

    def check(self, pipelines: Sequence[Pipeline], source_id: str) -> None:
        super().check(pipelines, source_id)
        self.order = [p.pipeline_id() for p in pipelines]
        for p in pipelines:
            assert isinstance(p.table, TableIdentifier)
            self.tables[p.pipeline_id()] = p.table

    def _recorded(self, pid: str, slot: str) -> ChunkRun | None:
        """The run the table's newest commit records; a damaged record is none (a WARNING
        names the version: that table starts over, as with a changed configuration)."""
        where = self.places[pid]
        try:
            run = recorded_run(where.uri, where.storage_options)
        except SnapshotError as exc:
            logger.warning("%s: %s; that table starts over", self.label, exc)
            return None
        return run if run is not None and run.slot == slot else None

    def load_run(self, source_id: str, slot: str) -> ChunkRun | None:
        """The interrupted run the tables' last commits record (each table's own finished
        chunks); None when there is none or every table finished it."""
        found = {i: r for i, pid in enumerate(self.order) if (r := self._recorded(pid, slot))}
        if not found:
            return None
        first = next(iter(found.values()))
        done: dict[str, Any] = {}
        self.begun.clear()
        for i, run in found.items():
            record = f"pipeline-{i:04d}"
            if run.output_id == first.output_id:
                self.begun.add(self.order[i])
                done[record] = run.done.get(record, {})
        run = dataclasses.replace(first, done=done)
        finished = all(
            len(done.get(f"pipeline-{i:04d}", {})) >= run.tables[str(self.tables[pid])].count
            for i, pid in enumerate(self.order)
            if str(self.tables[pid]) in run.tables
        )
        if finished and len(self.begun) == len(self.order):
            logger.info("%s: run %s finished; starting anew", self.label, run.output_id)
            self.begun.clear()
            return None
        return run

    def save_run(self, run: ChunkRun) -> None:
        """Nothing: each wave's commit records the run with its rows."""

    def begin_run(
        self, run: ChunkRun, columns: Mapping[TableIdentifier, Sequence[ColumnDefinition]]
    ) -> None:
        """Replace each table with an empty version at ``P0`` recording the run and the
        engine's "begun, no chunk yet" record: from now on each table reflects this run's slot
        (``laredo serve`` would run the whole chunked baseline from it, never take an older
        version with this newer slot)."""
        for i, pid in enumerate(self.order):
            self.begun.discard(pid)  # replaced, not appended to
            self.commit_run(i, run, [], tuple(columns.get(self.tables[pid], ())), ())

    def commit_run(
        self,
        i: int,
        run: ChunkRun,
        files: list[Any],
        columns: tuple[ColumnDefinition, ...],
        chunks: Sequence[int],
    ) -> int:
        """Commit pipeline ``i``'s ``files`` (appended once the run began on its table, else
        replacing it) with ``run``'s record: on the table's first commit of the run the plan
        and every finished chunk, on the others ``chunks`` (this wave's) and the plan's digest
        (:func:`recorded_run` gathers them); the new version."""
        from laredo_target_delta.archive import (  # noqa: PLC0415 - lazy: optional extra
            PROGRESS,
            commit_metadata,
        )

        pid, record = self.order[i], f"pipeline-{i:04d}"
        table, where = self.tables[pid], self.places[pid]
        mine, append = run.done.get(record, {}), pid in self.begun
        if append:  # a wave's own chunks; the plan is named by its digest
            record_run = dataclasses.replace(
                run, done={record: {c: mine[c] for c in chunks}}, tables={}
            )
        else:
            record_run = dataclasses.replace(run, done={record: mine})
        meta = commit_metadata(
            run.position,
            run.consistent_point,
            self.source_id,
            str(table),
            "baseline",
            **{
                PROGRESS: _engine_record(run.tables[str(table)], sorted(mine)),
                SPARK_RUN: encode_run(record_run, f"{self.label} of {table}").decode(),
                SPARK_PLAN: plan_digest(run),
            },
        )
        if where.local:
            os.makedirs(where.uri, exist_ok=True)
        try:
            version = _commit(where, table, columns, files, meta, append=append)
        except Exception as exc:
            raise task_failure(exc, f"{self.label} of {table} ({pid})", TargetError) from None
        self.begun.add(pid)
        return version

    def write_chunks(
        self, spark: Any, job: PipelineFrame, chunks: Sequence[int], run: ChunkRun
    ) -> ChunkRun:
        """One Spark job writes the chunks' files (task ``i`` reads ``chunks[i]``); one commit
        adds them with the progress they complete."""
        table, pid = job.table, job.pipeline.pipeline_id()
        record = f"pipeline-{job.index:04d}"
        files = self.write_files(job)
        rows: dict[int, int] = {}
        for f in files:
            rows[int(f.task)] = rows.get(int(f.task), 0) + int(f.rows)
        for task, chunk in enumerate(chunks):
            run = run.finished(record, chunk, rows.get(task, 0))
        version = self.commit_run(job.index, run, files, job.columns, chunks)
        logger.info(
            "%s of %s (%s): chunks %d..%d (%d rows) are version %d at %s",
            self.label,
            table,
            pid,
            chunks[0],
            chunks[-1],
            sum(rows.values()),
            version,
            job.position,
        )
        return run

    def table_done(self, job: PipelineFrame, run: ChunkRun) -> None:
        pid = job.pipeline.pipeline_id()
        done = run.done.get(f"pipeline-{job.index:04d}", {})
        self.counts[pid] = sum(int(n) for n in done.values())
        self.versions.append(str(self.places[pid]))

    def discard(self, run: ChunkRun) -> None:
        """Nothing to remove: the fresh run's first wave replaces each table."""
        self.begun.clear()

    def forget(self, run: ChunkRun) -> None:
        """Nothing: the last wave's commit recorded the baseline finished."""


def spark_delta_baseline(
    spark: Any,
    source: Any,
    pipelines: Sequence[Pipeline],
    *,
    source_id: str | None = None,
    partitions: int | None = None,
    fetch_size: int = 10_000,
    max_slice_pages: int = 2048,
    chunk_rows: int | None = None,
) -> DeltaBaselineResult:
    """Baseline ``pipelines`` (each with a ``delta`` target) on Spark: see the module
    docstring. The slot is (re-)created; on failure the slot this call created is dropped and
    nothing is committed.

    With ``baseline { mode = chunked, chunk_rows = N }`` on the source (or ``chunk_rows``
    given; ``0`` forces one pass) the baseline is resumable: :class:`DeltaChunkSink`."""
    started = time.monotonic()
    pipes = list(pipelines)
    bad = [p.pipeline_id() for p in pipes if not is_delta_pipeline(p)]
    if not pipes or bad:
        raise ConfigError(
            f"spark delta baseline: pipelines {bad} of this source have no delta target: one "
            "Spark baseline creates the slot once, so a source's pipelines must all be delta "
            "targets (or none); baseline the others with laredo serve or another source"
        )
    places = {p.pipeline_id(): _location(p) for p in pipes}
    src = source_from(source, DeltaVersionSink.label)
    rows = src.baseline_chunk_rows() if chunk_rows is None else chunk_rows
    sink = DeltaChunkSink(places) if rows else DeltaVersionSink(places)
    done, chunks = run_baseline(
        spark,
        src,
        pipes,
        sink,
        chunk_rows=rows,
        source_id=source_id,
        partitions=partitions,
        fetch_size=fetch_size,
        max_slice_pages=max_slice_pages,
    )
    return DeltaBaselineResult(
        snapshot_id="delta " + ", ".join(sink.versions),
        position=done.position,
        row_counts=sink.counts,
        seconds=time.monotonic() - started,
        chunks=chunks,
    )
