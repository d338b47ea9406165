"""The resumable Spark baseline (``baseline { mode = chunked, chunk_rows = N }`` on the source).

A first run creates the slot with an exported snapshot (as :func:`.driver.run_pg_baseline`),
cuts each table into key ranges under it (:mod:`.chunks`; the source's ``chunk_key``: primary
key, else the replica identity index) and records that plan with the slot's consistent point
``P0`` through the sink (:class:`ChunkedSink`) before reading anything. Then, per pipeline,
waves of at most ``partitions`` chunks run as one Spark job each (one task per chunk); after
each job the sink records its chunks as finished *with* their output (snapshot parts: the
progress record lists each chunk's parts, replaced atomically; Delta: one commit holds the
wave's files and the record).

A driver that dies (kill -9, lost host, any failure once the plan is recorded) leaves the
slot, the plan and the finished chunks in place. The next run with the same configuration
finds them and resumes: it reads only the unfinished chunks, under a *new* snapshot (the old
one died with the driver's connection), and commits the output at ``P0``. Consistent because:
the chunks partition the key space, so every key comes from exactly one chunk; a finished
chunk holds its keys as of ``P0`` and a resumed one as of a later snapshot ``T1``; the slot,
untouched since (checked: it exists, nothing holds it and its confirmed position is still
``P0``), streams every change after ``P0``, so a consumer that restores the output and then
applies the stream from ``P0`` as upserts (what ``laredo serve`` does; an UPDATE of a missing
key inserts it, a DELETE of a missing key does nothing) ends with, for every key, its last
change, or its ``P0`` row when it has none, which is then also its ``T1`` row. The resume
refuses to mix and starts over (a WARNING says why) when the slot moved or is gone, the
configuration (pipelines, columns, ``chunk_rows``, output format) changed, or the record is
damaged (:func:`.progress.decode_run`: over its size bound, not JSON, malformed, or finished
chunks outside the plan): the record is an optimisation, a fresh run is always correct.

A run (fresh or resumed) holds the slot's advisory-lock lease from before its checks until it
ends (:func:`.slot.slot_lease`): a second driver resuming the same run, or a ``laredo serve``
streaming from the slot, is refused at once, before it reads a chunk or writes or discards
any record; a killed driver's lease ends with its session.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import logging
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Protocol, cast

from laredo.errors import SourceError
from laredo.pipeline import Pipeline
from laredo.secrets import mask_text
from laredo.types import ColumnDefinition, TableIdentifier

from ..kinds import kind_of_column
from .chunks import TableChunks, check_keys, plan_chunks
from .driver import (
    BaselineSink,
    Phases,
    PipelineFrame,
    PlannedBaseline,
    baseline_tables,
    check_sizes,
    init_source,
    pipeline_frame,
    run_pg_baseline,
    source_from,
)
from .progress import ChunkRun
from .slices import slices_data_source
from .slot import ExportedSnapshot, require_psycopg, slot_lease

try:  # noqa: SIM105 - the laredo-spark[postgresql] extra, as in chunks.py (the layout test reads try)
    from laredo_source_pg import connect
except ImportError:  # pragma: no cover - depends on the installed extras
    pass

logger = logging.getLogger(__name__)

__all__ = ["ChunkedSink", "run_baseline", "run_chunked_baseline"]


class ChunkedSink(BaselineSink, Protocol):
    """A :class:`~.driver.BaselineSink` that can keep a :class:`ChunkRun` with its output."""

    output_id: str
    """What the output is named (a snapshot id); a resumed run adopts the run's."""

    def load_run(self, source_id: str, slot: str) -> ChunkRun | None:
        """The interrupted run of this source's slot, if any."""
        ...

    def save_run(self, run: ChunkRun) -> None:
        """Record ``run`` durably (replacing the previous record atomically)."""
        ...

    def begin_run(
        self, run: ChunkRun, columns: Mapping[TableIdentifier, Sequence[ColumnDefinition]]
    ) -> None:
        """A fresh run's plan, before any chunk is read: record it durably."""
        ...

    def write_chunks(
        self, spark: Any, job: PipelineFrame, chunks: Sequence[int], run: ChunkRun
    ) -> ChunkRun:
        """Write ``job.frame`` (the rows of ``chunks``, one task each, in that order) and
        return ``run`` with them finished, recorded durably with the output."""
        ...

    def table_done(self, job: PipelineFrame, run: ChunkRun) -> None:
        """Every chunk of ``job``'s pipeline is finished: stage it for :meth:`commit`."""
        ...

    def discard(self, run: ChunkRun) -> None:
        """Remove an abandoned run's output and record (a fresh run starts)."""
        ...

    def forget(self, run: ChunkRun) -> None:
        """The output is committed: remove the run's record."""
        ...


def _fingerprint(
    pipes: Sequence[Pipeline],
    columns: Mapping[TableIdentifier, Sequence[ColumnDefinition]],
    chunk_rows: int,
    output: str,
    keys: Mapping[TableIdentifier, Sequence[str] | None],
) -> str:
    doc = {
        "pipelines": [p.pipeline_id() for p in pipes],
        "keys": {str(t): list(k or ()) for t, k in sorted(keys.items(), key=lambda i: str(i[0]))},
        "columns": {
            str(t): [(c.name, c.type) for c in cols] for t, cols in sorted(columns.items(), key=str)
        },
        "chunk_rows": chunk_rows,
        "output": output,
    }
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:16]


def _keys(src: Any, tables: Sequence[TableIdentifier]) -> dict[TableIdentifier, list[str] | None]:
    """Each table's chunk key as the PostgreSQL source's own chunked reads find it
    (``chunk_key``: the primary key, else the ``REPLICA IDENTITY USING INDEX`` columns;
    ``None``: neither); closes the source's connection after."""
    try:
        return {t: src.chunk_key(t) for t in tables}
    finally:
        src.close()


def _stale(run: ChunkRun, fingerprint: str, options: Any, slot: str) -> str | None:
    """Why ``run`` cannot be resumed, or ``None``."""
    if run.fingerprint != fingerprint or run.slot != slot:
        return "the configuration (pipelines, columns, chunk_rows or output) changed"
    pg = require_psycopg()
    try:
        with connect(options) as conn:
            row = conn.execute(
                "SELECT active_pid, confirmed_flush_lsn::text FROM pg_replication_slots "
                "WHERE slot_name = %s",
                (slot,),
            ).fetchone()
    except pg.Error as exc:
        raise SourceError(
            f"spark baseline: cannot check slot {slot!r}: {mask_text(str(exc)).strip()}"
        ) from None
    if row is None:
        return f"replication slot {slot!r} is gone"
    if row[0] is not None:
        raise SourceError(
            f"spark baseline: replication slot {slot!r} is in use (pid {row[0]}); stop its "
            "consumer: the interrupted baseline resumes from this slot's position"
        )
    if str(row[1]) != run.position:
        return f"replication slot {slot!r} moved from {run.position} to {row[1]}"
    return None


@contextlib.contextmanager
def _new_snapshot(options: Any) -> Iterator[str]:
    """A snapshot exported by a read-only transaction held open for the block."""
    pg = require_psycopg()
    try:
        conn = connect(options)
        conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
        row = conn.execute("SELECT pg_export_snapshot()").fetchone()
    except pg.Error as exc:
        raise SourceError(
            f"spark baseline: cannot export a snapshot to resume: {mask_text(str(exc)).strip()}"
        ) from None
    assert row is not None
    try:
        yield str(row[0])
    finally:
        with contextlib.suppress(Exception):
            conn.close()


@dataclasses.dataclass
class _Reading:
    """What the waves of one run share."""

    spark: Any
    sink: ChunkedSink
    source_name: str
    columns: Mapping[TableIdentifier, Sequence[ColumnDefinition]]
    row_filters: Mapping[TableIdentifier, str]
    fetch_size: int
    per_job: int


def _job(
    reading: _Reading, run: ChunkRun, i: int, p: Pipeline, snapshot: str, *, chunks: Sequence[int]
) -> PipelineFrame:
    """Pipeline ``i``'s frame reading ``chunks`` (one task each, in order) under ``snapshot``."""
    table = p.table
    assert isinstance(table, TableIdentifier)
    plan: TableChunks = run.tables[str(table)]
    cols = tuple(reading.columns.get(table, ()))
    spec = {
        "snapshot": snapshot,
        "schema": table.schema,
        "table": table.table,
        "kinds": {c.name: kind_of_column(c, run.zone) for c in cols},
        "key": list(plan.key),
        "key_types": list(plan.types),
        "chunks": [list(plan.chunk(c)) for c in chunks],
        "row_filter": reading.row_filters.get(table),
        "fetch_size": reading.fetch_size,
    }
    frame = pipeline_frame(reading.spark, reading.source_name, spec, p)
    return PipelineFrame(i, p, table, cols, frame, len(chunks), run.position, run.consistent_point)


def _read(
    reading: _Reading, run: ChunkRun, pipes: Sequence[Pipeline], snapshot: str
) -> tuple[ChunkRun, int]:
    """Read and write every unfinished chunk of every pipeline under ``snapshot``; the run
    and how many chunks were read."""
    total = sum(run.tables[str(p.table)].count for p in pipes)
    read = 0
    for i, p in enumerate(pipes):
        record = f"pipeline-{i:04d}"
        count = run.tables[str(p.table)].count
        todo = [c for c in range(count) if c not in run.done.get(record, {})]
        for start in range(0, len(todo), reading.per_job):
            wave = todo[start : start + reading.per_job]
            job = _job(reading, run, i, p, snapshot, chunks=wave)
            run = reading.sink.write_chunks(reading.spark, job, wave, run)
            read += len(wave)
            logger.info(
                "spark baseline of %s (%s): chunks %d/%d of the run done",
                p.table,
                p.pipeline_id(),
                run.chunks_done(),
                total,
            )
        reading.sink.table_done(_job(reading, run, i, p, snapshot, chunks=[]), run)
    return run, read


def _fresh(
    reading: _Reading,
    pipes: Sequence[Pipeline],
    keys: Mapping[TableIdentifier, Sequence[str] | None],
    *,
    fingerprint: str,
    chunk_rows: int,
    src: Any,
    phases: Phases,
) -> tuple[ChunkRun, int]:
    """A new run: the slot and its exported snapshot, the plan recorded, then every chunk.
    A failure before the plan is recorded drops the slot and what was staged; after, both
    are kept for the next run to resume."""
    sink, label, opts = reading.sink, reading.sink.label, src.options
    slot = ExportedSnapshot(opts, src.slot_name)
    saved = False
    try:
        with slot as snap:
            plans, zone = plan_chunks(opts, snap.snapshot_name, keys, chunk_rows)
            run = ChunkRun(
                sink.output_id,
                src.slot_name,
                snap.position,
                snap.consistent_point,
                zone,
                fingerprint,
                {str(t): c for t, c in plans.items()},
            )
            sink.begin_run(run, reading.columns)
            saved = True
            phases.end("slot")
            return _read(reading, run, pipes, snap.snapshot_name)
    except BaseException:
        if not saved:
            sink.abort()
            slot.drop()
        else:
            logger.warning(
                "%s: interrupted; run it again with the same configuration to resume "
                "(slot %s and the finished chunks are kept)",
                label,
                src.slot_name,
            )
        raise


def run_chunked_baseline(
    spark: Any,
    source: Any,
    pipelines: Sequence[Pipeline],
    sink: ChunkedSink,
    *,
    chunk_rows: int,
    source_id: str | None = None,
    partitions: int | None = None,
    fetch_size: int = 10_000,
) -> tuple[PlannedBaseline, ChunkRun, int]:
    """Baseline ``pipelines`` in resumable key-range chunks (see the module docstring); the
    plan, the finished run and how many chunks this call read (fewer than the run's when it
    resumed). The slot's lease is held for the whole run (:func:`.slot.slot_lease`): while
    another laredo process holds it (a second driver resuming the same run, a ``laredo
    serve`` on the slot), ``SourceError`` at once, before any chunk is read or any record is
    written or discarded."""
    label = sink.label
    check_sizes(label, partitions, fetch_size, 1)
    src = source_from(source, label)
    opts = src.options
    pipes = list(pipelines)
    with slot_lease(opts, label):  # the whole run: plan, waves, commit
        return _chunked(
            spark,
            src,
            pipes,
            sink,
            chunk_rows=chunk_rows,
            source_id=source_id,
            partitions=partitions,
            fetch_size=fetch_size,
        )


def _chunked(
    spark: Any,
    src: Any,
    pipes: list[Pipeline],
    sink: ChunkedSink,
    *,
    chunk_rows: int,
    source_id: str | None,
    partitions: int | None,
    fetch_size: int,
) -> tuple[PlannedBaseline, ChunkRun, int]:
    """:func:`run_chunked_baseline` once the slot's lease is held."""
    label, opts = sink.label, src.options
    sid = source_id or pipes[0].source_id
    tables = baseline_tables(pipes)
    phases = Phases()
    columns = init_source(src, pipes, tables, sink, sid)
    keys = _keys(src, tables)
    check_keys(keys)  # before Spark or the slot is touched
    slices_source = slices_data_source(opts)
    for ds in (slices_source, *sink.data_sources):
        spark.dataSource.register(ds)
    reading = _Reading(
        spark,
        sink,
        slices_source.name(),
        columns,
        {
            TableIdentifier.parse(k): v.row_filter
            for k, v in opts.publication.tables.items()
            if v.row_filter
        },
        fetch_size,
        int(partitions or spark.sparkContext.defaultParallelism or 1),
    )
    fingerprint = _fingerprint(pipes, columns, chunk_rows, getattr(sink, "output_kind", ""), keys)
    run = _resumable(sink, sid, src, pipes, fingerprint)
    phases.end("init")
    if run is not None:
        logger.info(
            "%s: resuming %s: %d chunks were finished at %s; reading the others at a new "
            "snapshot (the slot's stream from %s covers the difference)",
            label,
            run.output_id,
            run.chunks_done(),
            run.position,
            run.position,
        )
        sink.output_id = run.output_id
        with _new_snapshot(opts) as name:
            phases.end("slot")
            run, read = _read(reading, run, pipes, name)
    else:
        run, read = _fresh(
            reading,
            pipes,
            keys,
            fingerprint=fingerprint,
            chunk_rows=chunk_rows,
            src=src,
            phases=phases,
        )
    phases.end("write")
    sink.commit(sid, run.position)
    sink.forget(run)
    phases.end("commit")
    return PlannedBaseline(run.position, phases.seconds), run, read


def _resumable(
    sink: ChunkedSink, sid: str, src: Any, pipes: Sequence[Pipeline], fingerprint: str
) -> ChunkRun | None:
    """The interrupted run to resume, if any fits this one (else discarded, with a WARNING)."""
    run = sink.load_run(sid, src.slot_name)
    if run is None:
        return None
    why = run.misfit([str(p.table) for p in pipes]) or _stale(
        run, fingerprint, src.options, src.slot_name
    )
    if why is None:
        return run
    logger.warning("%s: cannot resume the interrupted run (%s): starting over", sink.label, why)
    sink.discard(run)
    return None


def run_baseline(
    spark: Any,
    src: Any,
    pipelines: Sequence[Pipeline],
    sink: BaselineSink,
    *,
    chunk_rows: int,
    source_id: str | None,
    partitions: int | None,
    fetch_size: int,
    max_slice_pages: int,
) -> tuple[PlannedBaseline, tuple[int, int] | None]:
    """The resumable baseline (``chunk_rows`` > 0; ``sink`` is then a :class:`ChunkedSink`)
    or the one-pass one (:func:`.driver.run_pg_baseline`) into ``sink``: the plan, and for a
    chunked one the chunks this call read and the run's total (fewer read when it resumed)."""
    opts: dict[str, Any] = {
        "source_id": source_id,
        "partitions": partitions,
        "fetch_size": fetch_size,
    }
    if not chunk_rows:
        done = run_pg_baseline(spark, src, pipelines, sink, max_slice_pages=max_slice_pages, **opts)
        return done, None
    chunked = cast(ChunkedSink, sink)
    done, run, read = run_chunked_baseline(
        spark, src, pipelines, chunked, chunk_rows=chunk_rows, **opts
    )
    return done, (read, sum(run.tables[str(p.table)].count for p in pipelines))
