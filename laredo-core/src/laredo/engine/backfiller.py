"""Running a chunked backfill of one table beside the stream (issue 32).

A :class:`Backfiller` reads the table's key-range chunks on a thread of its own (the source's
:class:`~laredo.engine.backfill.ChunkedSource` ``read_chunk``) and offers them to its
:class:`~laredo.engine.backfill.ChunkMerger`; the source reader feeds the merger every change of
the table and, under its merge lock, hands each due chunk to the table's pipelines as INSERTs at
the stream's current position (so they pass the pipeline's filters and transforms, and a
durable target's ACK covers them like any change). Every other table keeps streaming.

* ``initial`` (a chunked start-up baseline): the pipelines stay BASELINING and not ready — so
  the source acknowledges nothing and a crash re-baselines — until the last chunk is applied;
  then the target hears ``on_baseline_complete`` and the pipeline streams.
* on demand (``Engine.backfill``): a streaming pipeline re-syncs rows (upserts) of the whole
  table or of ``where``; it stays ready. A whole-table backfill then removes the rows the
  target holds that the source lacks, in stream order at its end, where that is provably safe
  (:mod:`laredo.engine.backfill_sweep`: a target listing its keys, transforms that keep the
  key); with ``where``, or where it is not safe, the sweep is skipped (the reason is logged and
  shown as the progress's ``sweep``) and such rows stay (a reload removes them). A pipeline
  with filters or a TTL gets the chunk rows as UPDATEs: a stored row that no longer passes
  (a filter changed by a reload) is deleted like a row an UPDATE takes out of the filter.

A chunk waits for the stream to pass its high mark; on an idle stream (no position to pass it)
it is applied after ``force_after`` seconds at the current position (safe: the merge drops the
rows newer changes touched; a change the chunk already holds that arrives later is re-applied
over it, the target still ends equal).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Collection, Sequence
from typing import Any, Protocol

from ..batches import ChangeBatch
from ..errors import ConfigError, EngineStateError
from ..types import ChangeAction, ChangeEvent, Position, TableIdentifier
from .backfill import (
    BackfillProgress,
    ChunkedSource,
    ChunkMerger,
    ChunkRead,
    KeptKeys,
    estimate_rows,
)
from .backfill_sweep import plan_table, sweep
from .buffer import Call
from .pipeline_worker import PipelineWorker

logger = logging.getLogger(__name__)

__all__ = [
    "Backfiller",
    "attach_chunked",
    "begin_progress",
    "chunked_pipelines",
    "decode_progress",
    "encode_progress",
    "exports_mid_baseline",
    "joins_chunked",
    "observe_backfills",
    "resume_chunked",
    "start_backfill",
    "start_chunked",
]


class Backfiller:
    """One table's chunked backfill (see the module docstring)."""

    max_pending = 4
    force_after = 1.0

    def __init__(
        self,
        source: ChunkedSource,
        table: TableIdentifier,
        key: Sequence[str],
        pipes: Sequence[PipelineWorker],
        *,
        chunk_rows: int,
        compare: Callable[[Position, Position], int],
        force_merge: Callable[[bool], None],
        where: str | None = None,
        initial: bool = False,
        on_end: Callable[[Backfiller], None] | None = None,
        after: tuple[Any, ...] | None = None,
    ) -> None:
        self.source = source
        self.table = table
        self.key = list(key)
        self.pipes = list(pipes)
        self.chunk_rows = chunk_rows
        self.where = where
        self.initial = initial
        self.after = after
        self.sweeps, sweep_state = plan_table(self.pipes, self.key, where, initial)
        self.merger = ChunkMerger(table, self.key, compare, sweep=bool(self.sweeps))
        self.merger.progress.sweep = sweep_state
        if sweep_state.startswith("skipped"):
            logger.info(
                "backfill of %s: rows the source lacks are not removed: %s",
                table,
                sweep_state.removeprefix("skipped: "),
            )
        self._unswept: list[str] = []  # why a planned pipeline was not swept at the end
        self._sweep_lock = threading.Lock()
        self._force_merge = force_merge
        self._on_end = on_end
        self._read_done = False
        self._ended = False
        self._stop = threading.Event()
        self.finished = threading.Event()
        self._done_pipes: set[str] = set()
        self.started = time.monotonic()
        self.thread: threading.Thread | None = None

    @property
    def progress(self) -> BackfillProgress:
        return self.merger.progress

    def start(self) -> None:
        self.thread = threading.Thread(
            target=self._run, name=f"laredo-backfill-{self.table}", daemon=True
        )
        self.thread.start()

    def stop(self) -> None:
        self._stop.set()

    # -- the backfill thread ------------------------------------------------------------------
    def _run(self) -> None:
        try:
            self.progress.rows_estimated = estimate_rows(self.source, self.table, self.where)
            self._read_all()
        finally:
            if self._stop.is_set() and not self.finished.is_set():
                self.progress.error = self.progress.error or "stopped"
                self._end()

    def _read_all(self) -> None:
        after = self.after
        try:
            while not self._stop.is_set():
                chunk = self.source.read_chunk(self.table, after, self.chunk_rows, self.where)
                while not self.merger.offer(chunk, self.max_pending, self.force_after):
                    if self._stop.is_set():
                        return
                    self._force_merge(True)  # an idle stream: nothing passes the high mark
                self._force_merge(False)  # the stream may have passed its high mark already
                if chunk.last_key is None or len(chunk.rows) < self.chunk_rows:
                    break
                after = chunk.last_key
            self._read_done = True
            self._force_merge(False)
            while not self._stop.is_set() and not self.finished.wait(self.force_after):
                self._force_merge(True)
        except Exception as exc:
            if self._stop.is_set():
                return  # the engine stopped (the source closed its connections)
            logger.error("backfill of %s failed: %s", self.table, exc)
            self.progress.error = str(exc)
            for p in self.pipes:
                if self.initial and not p.failed:
                    p.fail(f"chunked baseline of {self.table} failed: {exc}")
            self._end()

    # -- the stream's thread (under the reader's merge lock) ----------------------------------
    def merge(self, position: Position, force: bool = False) -> None:
        """Hand the chunks due at ``position`` (all pending ones when ``force``) to the
        pipelines; after the last one, the backfill's end (in stream order)."""
        for chunk, rows in self.merger.due(position, force):
            if rows:
                self._deliver(chunk, rows, position)
            if self.initial and chunk.last_key is not None:
                self._save_progress(encode_progress(chunk.last_key))
        if self._read_done and not self._ended and self.merger.pending() == 0:
            self._ended = True
            kept = self.merger.take_kept()  # what the stream delivers next comes after the sweep
            for p in self.pipes:
                p.enqueue_item(Call(self._completer(p, kept, position)))

    def _deliver(self, chunk: ChunkRead, rows: list[Any], position: Position) -> None:
        table = self.table
        events: Sequence[ChangeEvent]
        raw = chunk.batch(rows)
        if raw is not None:  # one batch of rows, stored like a baseline chunk where it can
            events = ChangeBatch.of_rows(table, raw, position)
        elif chunk.names is not None:  # value tuples: one batch, no dicts
            insert = ChangeAction.INSERT
            ops = [(insert, r, None, None) for r in rows]
            events = ChangeBatch(
                table, chunk.names, ops, position, unrepresentable=chunk.unrepresentable
            )
        else:
            events = [ChangeEvent(table, ChangeAction.INSERT, position, new_values=r) for r in rows]
        updates: Sequence[ChangeEvent] | None = None
        for p in self.pipes:
            if p.failed:
                continue
            if not self.initial and (p.chain.filters or p.chain.ttl is not None):
                # a re-sync: a stored row that no longer passes the filter (or expired) goes,
                # as an UPDATE leaving the filter does (a DELETE of its identity)
                updates = updates or _as_updates(events)
                p.enqueue(updates, self._stop, True)
            else:
                p.enqueue(events, self._stop, True)

    def _save_progress(self, record: str | None) -> None:
        """Queue the progress record behind the chunk's rows on every pipeline whose target
        keeps it (:class:`~laredo.contracts.ProgressTarget`): it is saved after them."""
        for p in self.pipes:
            if not p.failed and p.keeps_progress:
                p.enqueue_item(Call(_saver(p, record)))

    def _completer(
        self, p: PipelineWorker, kept: KeptKeys | None, position: Position
    ) -> Callable[[], None]:
        def complete() -> None:  # on the pipeline's thread, after every chunk row
            if p.id in self.sweeps and kept is not None and not p.failed:
                self._sweep(p, kept, position)
            # chunk rows count as inserts, also where they replaced a row: recount
            counted = p.count_rows()
            count = p.expected_rows if counted is None else counted
            streams = self.initial and not p.failed
            if streams:
                p.complete_baseline(None, count, self.started)
                p.save_progress(None)  # done: nothing to resume
            else:
                p.expected_rows = count
            self._done_pipes.add(p.id)
            if all(q.failed or q.id in self._done_pipes for q in self.pipes):
                self._end()  # before the last pipeline is ready: ready means it ended
            if streams:
                p.mark_streaming()

        return complete

    def _sweep(self, p: PipelineWorker, kept: KeptKeys, position: Position) -> None:
        """Remove the keys ``p``'s target holds that the source lacks (on ``p``'s thread)."""
        out = sweep(p, kept, self.key, position)
        if isinstance(out, int):
            with self._sweep_lock:  # pipelines sweep on threads of their own
                self.progress.rows_removed += out
        else:
            logger.warning("backfill of %s: rows the source lacks not removed: %s", self.table, out)
            self._unswept.append(out)

    def _end(self) -> None:
        if self.finished.is_set():
            return
        progress = self.progress
        progress.done = progress.error is None
        if progress.sweep.startswith("pending"):
            unswept = "; ".join(self._unswept)
            if not progress.done:
                progress.sweep = "not run: the backfill did not finish"
            elif len(self._unswept) >= len(self.sweeps):
                progress.sweep = f"skipped: {unswept}"
            else:
                progress.sweep = progress.sweep.replace("pending", "done", 1)
                progress.sweep += f" (not run: {unswept})" if unswept else ""
        progress.end()
        logger.info(
            "backfill of %s: %d chunk(s), %d row(s) read, %d applied, %d left to newer changes, "
            "%d removed (not in the source) in %.2fs",
            self.table,
            progress.chunks,
            progress.rows_read,
            progress.rows_applied,
            progress.rows_dropped,
            progress.rows_removed,
            time.monotonic() - self.started,
        )
        self.finished.set()
        if self._on_end is not None:
            self._on_end(self)


def _as_updates(events: Sequence[ChangeEvent]) -> Sequence[ChangeEvent]:
    """Chunk rows (INSERTs) as UPDATEs of the same rows, at the same position."""
    update = ChangeAction.UPDATE
    if type(events) is ChangeBatch:
        ops = [(update, op[1], None, None) for op in events.ops]
        return ChangeBatch(
            events.table,
            events.names,
            ops,
            events.position,
            unrepresentable=events.unrepresentable,
        )
    return [ChangeEvent(ev.table, update, ev.position, new_values=ev.new_values) for ev in events]


def _saver(p: PipelineWorker, record: str | None) -> Callable[[], None]:
    return lambda: p.save_progress(record)


class _Reader(Protocol):
    """What the backfill helpers use of a :class:`~laredo.engine.source_reader.SourceReader`."""

    id: str
    source: Any
    pipelines: list[PipelineWorker]
    by_table: dict[TableIdentifier, list[PipelineWorker]]
    backfills: dict[TableIdentifier, Backfiller]
    backfills_done: dict[TableIdentifier, BackfillProgress]

    def force_merge(self, force: bool = True) -> None: ...


def observe_backfills(
    backfills: dict[TableIdentifier, Backfiller], events: Sequence[ChangeEvent]
) -> None:
    """Tell each running backfill the changes of its table the stream delivers."""
    if type(events) is ChangeBatch:
        bf = backfills.get(events.table)
        if bf is not None:
            bf.merger.observe(events)
        return
    for ev in events:
        bf = backfills.get(ev.table)
        if bf is not None:
            bf.merger.observe((ev,))


def chunk_rows_of(source: Any) -> int | None:
    """The source's configured chunk size when it baselines in chunks (else ``None``)."""
    if not isinstance(source, ChunkedSource):
        return None
    rows = getattr(source, "baseline_chunk_rows", None)
    return rows() if callable(rows) else None


def chunked_rows(source: Any, worker: PipelineWorker) -> int | None:
    """The chunk size of ``worker``'s chunked baseline, ``None`` when its table is baselined
    in one snapshot: the table's ``baseline`` (``Pipeline.baseline_mode`` /
    ``baseline_chunk_rows``) overrides its source's (a source that cannot read chunks keeps the
    snapshot baseline)."""
    cfg = worker.cfg
    source_rows = chunk_rows_of(source)
    mode = cfg.baseline_mode or ("snapshot" if source_rows is None else "chunked")
    if mode != "chunked" or not isinstance(source, ChunkedSource):
        return None
    return cfg.baseline_chunk_rows or source_rows or DEFAULT_CHUNK_ROWS


def resumable(worker: PipelineWorker) -> bool:
    """May ``worker`` be baselined in chunks? A durable target must keep the chunks' progress
    with its own state (:class:`~laredo.contracts.ProgressTarget`): the stream runs beside the
    chunks from the start, so nothing else would tell a restart after a crash that the baseline
    had not finished (it would resume streaming over a partial table). A target that is not
    durable is baselined again (or restored from a snapshot) at every start anyway."""
    return worker.keeps_progress or not worker.keeps_state()


def chunked_pipelines(reader: _Reader, rebaseline: bool) -> list[PipelineWorker]:
    """The pipelines a (re-)baseline reads in chunks: those whose table's (or source's)
    ``baseline.mode`` is ``chunked`` (:func:`chunked_rows`), whose table has a key and whose
    target may resume (:func:`resumable`); the others keep the snapshot baseline, logged."""
    out: list[PipelineWorker] = []
    keys: dict[TableIdentifier, list[str] | None] = {}
    for p in reader.pipelines:
        if p.failed:
            continue
        if chunked_rows(reader.source, p) is None:
            if p.cfg.baseline_mode == "chunked":
                logger.warning(
                    "pipeline %s: source %s cannot read %s in chunks: baselined in one snapshot",
                    p.id,
                    reader.id,
                    p.table,
                )
            continue
        if p.table not in keys:
            keys[p.table] = reader.source.chunk_key(p.table)
            if keys[p.table] is None:
                logger.warning(
                    "source %s: %s has no primary key (nor replica identity index): baselined "
                    "in one snapshot, not in chunks",
                    reader.id,
                    p.table,
                )
        if keys[p.table] is None:
            continue
        if not resumable(p):
            logger.warning(
                "pipeline %s: its target is durable but keeps no chunk progress (ProgressTarget): "
                "baselined in one snapshot, not in chunks (a crash mid-chunks could not resume)",
                p.id,
            )
            continue
        out.append(p)
    return out


def start_chunked(
    reader: _Reader, pipes: Sequence[PipelineWorker], position: Position, rebaseline: bool
) -> None:
    """Start the chunked baseline of ``pipes`` (their stream starts after ``position``)."""
    by_table: dict[TableIdentifier, list[PipelineWorker]] = {}
    for p in pipes:
        by_table.setdefault(p.table, []).append(p)
        p.ready = False
        p.begin_baseline(truncate=rebaseline)
        p.applied = position
        begin_progress(p, position)
    for table, group in by_table.items():
        rows = min(chunked_rows(reader.source, p) or DEFAULT_CHUNK_ROWS for p in group)
        _launch(reader, table, group, rows, None, initial=True)


def begin_progress(p: PipelineWorker, position: Position) -> None:
    """A chunked baseline of ``p`` begins at ``position``: a target keeping progress voids an
    older record, then records the start (``last_key`` null), so a crash before the first
    chunk is durable restarts the chunks instead of streaming over a partial table."""
    p.begin_progress(position, encode_progress(None))


def start_backfill(
    reader: _Reader,
    table: TableIdentifier,
    *,
    where: str | None = None,
    chunk_rows: int | None = None,
) -> Backfiller:
    """Re-sync one streaming table (or the rows matching ``where``) in chunks."""
    source = reader.source
    if not isinstance(source, ChunkedSource):
        raise ConfigError(f"source {reader.id} cannot read {table} in chunks (no backfill)")
    pipes = [p for p in reader.by_table.get(table, ()) if not p.failed]
    if not pipes:
        raise ConfigError(f"backfill: no running pipeline of {table} in source {reader.id}")
    if table in reader.backfills:
        raise ConfigError(f"backfill: a backfill of {table} is already running")
    if where is not None:
        check = getattr(source, "check_where", None)
        if not callable(check):
            raise ConfigError(f"backfill: source {reader.id} does not take a where condition")
        where = str(check(table, where))
    table_rows = [p.cfg.baseline_chunk_rows for p in pipes if p.cfg.baseline_chunk_rows]
    rows = chunk_rows or min(table_rows, default=0) or chunk_rows_of(source) or DEFAULT_CHUNK_ROWS
    return _launch(reader, table, pipes, rows, where, initial=False)


DEFAULT_CHUNK_ROWS = 10_000


def _launch(
    reader: _Reader,
    table: TableIdentifier,
    pipes: Sequence[PipelineWorker],
    rows: int,
    where: str | None,
    *,
    initial: bool,
    after: tuple[Any, ...] | None = None,
) -> Backfiller:
    source = reader.source
    key = source.chunk_key(table)
    if key is None:
        raise ConfigError(
            f"backfill: {table} has no primary key (nor replica identity index) to read it in "
            "chunks by: add one, or use `laredo reload` (one snapshot)"
        )
    old = reader.backfills.get(table)
    if old is not None:
        old.stop()

    def ended(bf: Backfiller) -> None:
        reader.backfills_done[table] = bf.progress  # the last one per table stays visible
        if reader.backfills.get(table) is bf:
            reader.backfills = {t: b for t, b in reader.backfills.items() if t != table}

    bf = Backfiller(
        source,
        table,
        key,
        pipes,
        chunk_rows=rows,
        compare=source.compare_positions,
        force_merge=reader.force_merge,
        where=where,
        initial=initial,
        on_end=ended,
        after=after,
    )
    reader.backfills = {**reader.backfills, table: bf}
    bf.start()
    return bf


def joins_chunked(reader: _Reader, worker: PipelineWorker) -> bool:
    """Does a pipeline joining a streaming source get a chunked baseline (its table's or
    source's ``baseline.mode`` is ``chunked``, the table has a key and no pipeline yet)?"""
    table = worker.table
    if chunked_rows(reader.source, worker) is None or reader.by_table.get(table):
        return False
    if not resumable(worker):
        return False
    try:
        return reader.source.chunk_key(table) is not None
    except Exception:
        return False


def attach_chunked(reader: _Reader, worker: PipelineWorker, timeout: float | None) -> None:
    """Hot reload: baseline a pipeline joining a streaming chunked source in chunks (see
    :func:`joins_chunked`), already routed. Blocks until it streams; raises when the
    backfill failed or did not finish in ``timeout``."""
    table = worker.table
    worker.begin_baseline()
    worker.ready = False
    worker.applied = getattr(reader, "current", None)
    begin_progress(worker, worker.applied)
    rows = chunked_rows(reader.source, worker)
    assert rows is not None
    bf = _launch(reader, table, [worker], rows, None, initial=True)
    if not bf.finished.wait(timeout):
        bf.stop()
        raise EngineStateError(f"chunked baseline of {table} did not finish in {timeout}s")
    if bf.progress.error is not None or worker.failed:
        raise EngineStateError(
            f"chunked baseline of {table} failed: {bf.progress.error or worker.error}"
        )


def encode_progress(last_key: Sequence[Any] | None) -> str:
    """A chunked baseline's progress record: the last key applied (JSON; a value JSON lacks
    is kept as its text, which PostgreSQL casts back to the key column's type; null: begun,
    no chunk yet)."""
    key = None if last_key is None else list(last_key)
    return json.dumps({"last_key": key}, default=str, separators=(",", ":"))


MAX_PROGRESS_RECORD = 1 << 20
"""The longest progress record read back (characters): a last key, JSON-encoded."""


def decode_progress(record: str) -> tuple[Any, ...] | None:
    """The last key of a record :func:`encode_progress` wrote (None: no chunk done yet;
    ``ConfigError`` if unreadable)."""
    if len(record) > MAX_PROGRESS_RECORD:  # it comes from a target's store: trust no size
        raise ConfigError(
            f"chunked-baseline progress record of {len(record)} characters is over the "
            f"{MAX_PROGRESS_RECORD} a key can take ({record[:80]!r}...): the target's stored "
            "progress is damaged; reset the target to re-baseline"
        )
    try:
        key = json.loads(record)["last_key"]
        if key is not None and not isinstance(key, list):  # never a string's letters
            raise TypeError(f"last_key is a {type(key).__name__}, not a list of key values")
        return None if key is None else tuple(key)
    except (ValueError, KeyError, TypeError, RecursionError) as exc:
        raise ConfigError(
            f"unreadable chunked-baseline progress record {record[:200]!r}: {exc}; reset the "
            "target to re-baseline"
        ) from None


def exports_mid_baseline(reader: _Reader, p: PipelineWorker) -> bool:
    """May a snapshot hold ``p`` although it is not ready? Yes while its initial chunked
    baseline runs into a target that keeps the progress (an in-memory one puts the record in
    the snapshot): restored, it continues after the record's key (:func:`resume_chunked`)."""
    bf = reader.backfills.get(p.table)
    return bf is not None and bf.initial and p in bf.pipes and p.keeps_progress


def resume_chunked(
    reader: _Reader,
    pipes: Sequence[PipelineWorker],
    position: Position,
    restored: Collection[str] = (),
) -> list[PipelineWorker]:
    """Start-up resume: the pipelines whose target holds the progress of an unfinished chunked
    baseline (a durable target's own, or an in-memory one's restored from a snapshot: their
    ids in ``restored``, already at the snapshot's position) continue it after the smallest
    last key of their table's group (they stay BASELINING and not ready, so nothing is
    acknowledged until it is done); the stream resumes at ``position`` and its changes are
    applied over the target again, never skipped (a chunk may come at a position before the
    target's). Returns them."""
    groups: dict[TableIdentifier, list[tuple[PipelineWorker, tuple[Any, ...] | None]]] = {}
    for p in pipes:
        record = None if p.failed else p.load_progress()
        if record is not None:
            groups.setdefault(p.table, []).append((p, decode_progress(record)))
    if groups and not isinstance(reader.source, ChunkedSource):
        raise ConfigError(
            f"source {reader.id}: a chunked baseline of {', '.join(map(str, groups))} is "
            "unfinished but the source cannot read chunks: reset the targets to re-baseline"
        )
    resumed: list[PipelineWorker] = []
    for table, group in groups.items():
        keys = [k for _, k in group]
        after = None if None in keys else min(k for k in keys if k is not None)
        workers = [p for p, _ in group]
        rows = min(chunked_rows(reader.source, p) or DEFAULT_CHUNK_ROWS for p in workers)
        for p in workers:
            p.ready = False
            p.begin_baseline()
            if p.id not in restored:
                p.resume_at(position)
            p.skip_until = None
        logger.info(
            "source %s: resuming the chunked baseline of %s after key %s", reader.id, table, after
        )
        _launch(reader, table, workers, rows, None, initial=True, after=after)
        resumed.extend(workers)
    return resumed
