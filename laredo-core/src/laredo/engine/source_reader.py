"""One source's reader: its thread, its change handler (demultiplexing by table) and its ACKs.

The reader runs ``init -> validate -> start (resume | restore | baseline) -> stream``. Its
handler enqueues each transaction into the buffer of every pipeline of the table and a heartbeat
into the others (when the source totally orders changes), so ACKs advance on every pipeline.
:meth:`SourceReader.try_ack` acknowledges the minimum position every non-failed pipeline holds
durably, forward only. A transient stream error of a resumable, totally ordered source restarts
the stream in place from the last ACK; each pipeline skips what it already received.
"""

from __future__ import annotations

import gc
import logging
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import Any

from ..batches import ChangeBatch
from ..contracts import (
    DeadLetterBindable,
    PipelineContext,
    StoppableSource,
    SyncSource,
)
from ..errors import ConfigError, ReBaselineRequired, retry_class
from ..events import (
    AckAdvanced,
    RebaselineTriggered,
    SchemaChanged,
    SourceConnected,
    SourceDisconnected,
)
from ..types import (
    ChangeEvent,
    ColumnDefinition,
    OrderingGuarantee,
    Position,
    SchemaChangeEvent,
    SourceConfig,
    TableIdentifier,
)
from .backfill import BackfillProgress
from .backfiller import (
    Backfiller,
    chunked_pipelines,
    observe_backfills,
    resume_chunked,
    start_backfill,
    start_chunked,
)
from .buffer import SchemaItem, Skip
from .context import EngineContext, SourceLink
from .pipeline_worker import PipelineWorker
from .startup import BaselineFailed, StartKind, plan_start, run_baseline

logger = logging.getLogger(__name__)

__all__ = ["SourceReader"]


def settle_heap() -> None:
    """After a baseline: keep the cycle collector off what it loaded. Objects alive now (a
    replica's rows, indexes, caches) go to the permanent generation (``gc.freeze()``), so the
    full collections that streaming allocations trigger no longer traverse them (with dict rows
    that was every stored row, again and again). Garbage cycles are collected first, so nothing
    collectable is frozen. Process-wide and idempotent: a later baseline freezes what it
    added."""
    gc.collect()
    gc.freeze()


def _log_reload_failure(pipeline_id: str) -> Callable[[Future[Any]], None]:
    def done(future: Future[Any]) -> None:
        exc = future.exception()
        if exc is not None:
            logger.error("pipeline %s: re-baseline failed: %s", pipeline_id, exc)

    return done


class SourceReader:
    """One source (see the module docstring). ``workers`` are added before :meth:`start`."""

    max_restarts = 10
    backoff = 0.05
    max_backoff = 5.0

    def __init__(self, ctx: EngineContext, source_id: str, source: SyncSource) -> None:
        self.ctx = ctx
        self.id = source_id
        self.source = source
        self.pipelines: list[PipelineWorker] = []
        self.by_table: dict[TableIdentifier, list[PipelineWorker]] = {}
        self.others: dict[TableIdentifier, list[PipelineWorker]] = {}
        self.schemas: dict[TableIdentifier, list[ColumnDefinition]] = {}
        self.last_ack: Position | None = None
        self.current: Position | None = None
        self.stream_start: Position | None = None
        self.error: str | None = None
        self.thread: threading.Thread | None = None
        self._ack_lock = threading.Lock()
        self._progress = threading.Condition()  # notified whenever a pipeline makes progress
        self._stop = threading.Event()
        self._resetting = threading.Event()  # a reset stopped the stream: re-baseline after it
        self._reset_done = threading.Event()
        self.backfills: dict[TableIdentifier, Backfiller] = {}  # copy-on-write
        self.backfills_done: dict[TableIdentifier, BackfillProgress] = {}
        self._merge_lock = threading.Lock()  # stream delivery vs. a forced chunk merge
        self._merge_after: Position | None = None  # after a stream restart: replayed positions
        try:
            og = source.ordering_guarantee()
        except Exception:
            og = None
        self.total_order = og in (None, OrderingGuarantee.TOTAL_ORDER)
        try:
            resumable = bool(source.supports_resume())
        except Exception:
            resumable = False
        self.link = SourceLink(
            source_id=source_id,
            source=source,
            pos_str=self.pos_str,
            request_ack=self.try_ack,
            volatile_acks_snapshot_bound=ctx.snapshots is not None and resumable,
        )

    # -- wiring -------------------------------------------------------------------------------
    def pos_str(self, position: Position | None) -> str:
        if position is None:
            return "<none>"
        try:
            return str(self.source.position_to_string(position))
        except Exception:
            return repr(position)

    def add(self, worker: PipelineWorker) -> None:
        """Route ``worker``'s table to it from the next batch on (safe while streaming)."""
        self._rewire([*self.pipelines, worker])

    def remove(self, worker: PipelineWorker) -> None:
        """Stop routing changes to ``worker`` (safe while streaming); ACKs stop waiting for it."""
        self._rewire([p for p in self.pipelines if p is not worker])

    def _rewire(self, pipelines: list[PipelineWorker]) -> None:
        # copy-on-write: the demultiplexer reads these while another thread changes them
        by_table: dict[TableIdentifier, list[PipelineWorker]] = {}
        for p in pipelines:
            by_table.setdefault(p.table, []).append(p)
        self.others = {t: [p for p in pipelines if p.table != t] for t in by_table}
        self.by_table = by_table
        self.pipelines = pipelines

    def needs_table(self, table: TableIdentifier) -> bool:
        return table in self.by_table

    def fail_all(self, message: str) -> None:
        """Fail every pipeline of this source and stop its stream."""
        self.error = message
        for p in self.pipelines:
            if not p.failed:
                p.fail(message)
        self.stop_stream()

    def stop_stream(self) -> None:
        self._stop.set()
        for bf in self.backfills.values():
            bf.stop()
        try:
            if isinstance(self.source, StoppableSource):
                self.source.stop_stream()
        except Exception:
            logger.exception("source %s: stop_stream failed", self.id)

    # -- ChangeHandler ------------------------------------------------------------------------
    def on_change(self, event: ChangeEvent) -> None:
        self.on_changes((event,))

    def on_changes(self, events: Sequence[ChangeEvent], complete: bool = True) -> None:
        """Demux one batch. ``complete=False`` marks a chunk whose transaction continues in
        the next call (same position): its position is not acknowledged until the end."""
        if not events:
            return
        if self.backfills:
            with self._merge_lock:
                observe_backfills(self.backfills, events)
                self._demux(events, complete)
                if complete:
                    self.merge_backfills(events[-1].position)
            return
        self._demux(events, complete)

    def _demux(self, events: Sequence[ChangeEvent], complete: bool) -> None:
        stop = self._stop
        first = events[0].table
        single = True
        for ev in events:
            t = ev.table
            if t is not first and t != first:
                single = False
                break
        last = events[-1].position
        if complete:
            # Only whole transactions: after a stream restart the pipelines skip re-delivered
            # changes at or before ``current``, and a transaction cut mid-way must come again.
            self.current = last
        if single:
            for p in self.by_table.get(first, ()):
                if not p.failed:
                    p.enqueue(events, stop, complete)
            others = self.others.get(first, self.pipelines)
        else:
            groups: dict[TableIdentifier, list[ChangeEvent]] = {}
            for ev in events:
                groups.setdefault(ev.table, []).append(ev)
            touched: set[str] = set()
            for t, evs in groups.items():
                for p in self.by_table.get(t, ()):
                    touched.add(p.id)
                    if not p.failed:
                        p.enqueue(evs, stop, complete)
            others = [p for p in self.pipelines if p.id not in touched]
        if self.total_order and complete:
            for p in others:
                if not p.failed:
                    p.enqueue_heartbeat(last)

    def on_change_batch(self, batch: ChangeBatch, complete: bool = True) -> None:
        """One table's changes at one position (``BatchChangeHandler``): routed as a whole,
        without building events (see :meth:`on_changes` for ``complete``)."""
        if not batch.ops:
            return
        if self.backfills:
            with self._merge_lock:
                observe_backfills(self.backfills, batch)
                self._route_batch(batch, complete)
                if complete:
                    self.merge_backfills(batch.position)
            return
        self._route_batch(batch, complete)

    def _route_batch(self, batch: ChangeBatch, complete: bool) -> None:
        stop = self._stop
        table = batch.table
        last = batch.position
        if complete:
            self.current = last
        for p in self.by_table.get(table, ()):
            if not p.failed:
                p.enqueue(batch, stop, complete)
        if self.total_order and complete:
            for p in self.others.get(table, self.pipelines):
                if not p.failed:
                    p.enqueue_heartbeat(last)

    def on_heartbeat(self, position: Position) -> None:
        with self._merge_lock:
            self.current = position
            for p in self.pipelines:
                if not p.failed:
                    p.enqueue_heartbeat(position)
            if self.backfills:
                self.merge_backfills(position)

    # -- chunked backfills (laredo.engine.backfiller) ---------------------------------------
    def merge_backfills(self, position: Position | None = None, force: bool = False) -> None:
        """Hand due backfill chunks to their pipelines at ``position`` (merge lock held)."""
        if position is None or self._merge_after is not None:
            if self._merge_after is None or position is None:
                return
            if self.source.compare_positions(position, self._merge_after) <= 0:
                return  # a replay after a stream restart: the pipelines skip it
            self._merge_after = None
        for bf in list(self.backfills.values()):
            bf.merge(position, force)

    def force_merge(self, force: bool = True) -> None:
        """Merge due chunks at ``current`` now (an idle stream delivers nothing to trigger
        it); ``force``: every pending chunk, its high mark passed or not."""
        with self._merge_lock:
            self.merge_backfills(self.current, force=force)

    def backfill(
        self, table: TableIdentifier, where: str | None = None, chunk_rows: int | None = None
    ) -> Backfiller:
        """Re-sync ``table`` (or the rows matching ``where``) in chunks while streaming."""
        return start_backfill(self, table, where=where, chunk_rows=chunk_rows)

    def on_schema_change(
        self,
        table: TableIdentifier,
        old_columns: Sequence[ColumnDefinition],
        new_columns: Sequence[ColumnDefinition],
        position: Position = None,
    ) -> None:
        self.schemas[table] = list(new_columns)
        self.ctx.emit(
            SchemaChanged(self.id, table, SchemaChangeEvent(tuple(old_columns), tuple(new_columns)))
        )
        item = SchemaItem(table, list(old_columns), list(new_columns), position)
        for p in self.by_table.get(table, ()):
            p.enqueue_item(item)

    def on_resync_required(self, table: TableIdentifier, reason: str) -> None:
        """The source saw ``table`` change in a way its stream cannot carry as row changes (a
        partition attached, detached or truncated): reload every streaming pipeline of it from
        a fresh baseline aligned with the stream (as :meth:`Engine.reload` does; changes that
        arrive meanwhile are buffered, none is lost). A pipeline in the middle of a reload
        reloads again after it (the change may be later than that reload's snapshot). Returns
        at once."""
        pipes = [p for p in self.by_table.get(table, ()) if not p.failed]
        if not pipes:
            return
        logger.warning("source %s: re-baselining %s: %s", self.id, table, reason)
        self.ctx.emit(RebaselineTriggered(self.id))
        for p in pipes:
            p.submit("reload").add_done_callback(_log_reload_failure(p.id))

    # -- ACK ----------------------------------------------------------------------------------
    def applied_through(self) -> Position | None:
        """The lowest position every non-failed pipeline has applied (``None`` while one is not
        ready or has applied nothing yet, or when none is active)."""
        compare = self.source.compare_positions
        low: Position | None = None
        for p in self.pipelines:
            if p.failed:
                continue
            if not p.ready or p.applied is None:
                return None
            if low is None or compare(p.applied, low) < 0:
                low = p.applied
        return low

    def durable_through(self) -> Position | None:
        """The lowest position up to which every non-failed pipeline's target holds every
        change durably (what the source may be acknowledged: ``PipelineWorker.confirmed``);
        ``None`` while one is not ready or holds nothing durably yet."""
        compare = self.source.compare_positions
        low: Position | None = None
        for p in self.pipelines:
            if p.failed:
                continue
            c = p.confirmed() if p.ready else None
            if c is None:
                return None
            if low is None or compare(c, low) < 0:
                low = c
        return low

    def wait_applied(
        self, position: Position, timeout: float | None, durable: bool = False
    ) -> bool:
        """Block until every non-failed pipeline applied (``durable``: made durable) every
        change at or before ``position``; False on timeout or when no pipeline is active."""
        deadline = None if timeout is None else time.monotonic() + timeout
        compare = self.source.compare_positions
        through = self.durable_through if durable else self.applied_through
        with self._progress:
            while True:
                if all(p.failed for p in self.pipelines):
                    return False
                low = through()
                if low is not None and compare(low, position) >= 0:
                    return True
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._progress.wait(0.25 if left is None else min(left, 0.25))

    def try_ack(self) -> None:
        """Acknowledge the lowest position every non-failed, ready pipeline holds durably."""
        with self._progress:
            self._progress.notify_all()
        with self._ack_lock:
            compare = self.source.compare_positions
            best: Position | None = None
            for p in self.pipelines:
                if p.failed:
                    continue
                if not p.ready:
                    return
                c = p.confirmed()
                if c is None:
                    return
                if best is None or compare(c, best) < 0:
                    best = c
            if best is None:
                return
            if self.last_ack is not None and compare(best, self.last_ack) <= 0:
                return
            try:
                self.source.ack(best)
            except Exception:
                logger.warning(
                    "source %s: ack(%s) failed", self.id, self.pos_str(best), exc_info=True
                )
                return
            self.last_ack = best
        self.ctx.emit(AckAdvanced(self.id, best))

    def reset_in_place(self, reset: Callable[[], None]) -> None:
        """Run ``reset`` (the source drops its replication state, which ends its stream) and
        let the reader re-baseline every pipeline in place once it returned, instead of the
        reader ending with the stream: readiness drops to BASELINING until the new baseline
        is applied, never a silent stop. Errors of ``reset`` propagate (the re-baseline still
        runs), except a ``ConfigError``: the source refused before changing anything (a
        publication it does not manage), so nothing is re-baselined."""
        self._reset_done.clear()
        self._resetting.set()
        try:
            reset()
        except ConfigError:
            self._resetting.clear()
            raise
        finally:
            self._reset_done.set()

    # -- the reader thread --------------------------------------------------------------------
    def start(self) -> None:
        self.thread = threading.Thread(
            target=self._run, name=f"laredo-source-{self.id}", daemon=True
        )
        self.thread.start()

    def is_running(self) -> bool:
        """The reader thread runs."""
        return self.thread is not None and self.thread.is_alive()

    def join(self, timeout: float | None) -> bool:
        """Wait up to ``timeout`` seconds for the reader thread to end (after
        :meth:`stop_stream`); False when it still runs."""
        if self.thread is not None:
            self.thread.join(timeout)
        return not self.is_running()

    def _run(self) -> None:
        try:
            self._run_inner()
        except Exception as exc:  # defensive: never leave the engine hanging silently
            logger.exception("source %s: reader crashed", self.id)
            self.fail_all(f"source {self.id} crashed: {exc}")

    def _run_inner(self) -> None:
        if not self._init_and_validate():
            return
        for p in self.pipelines:
            p.start_worker()
        if all(p.failed for p in self.pipelines):
            return
        try:
            position = self._start()
        except BaselineFailed as exc:
            self.fail_all(str(exc))
            return
        self.stream_start = position
        self._stream(position)

    def _init_and_validate(self) -> bool:
        obs = self.ctx.observer
        tables = list(dict.fromkeys(p.table for p in self.pipelines))
        if isinstance(self.source, DeadLetterBindable) and self.ctx.dead_letters is not None:
            self.source.bind_dead_letter_store(self.ctx.dead_letters)
        try:
            schemas = self.source.init(SourceConfig(tables=tables))
        except Exception as exc:
            msg = f"init failed: {exc}"
            obs.on_event(SourceDisconnected(self.id, msg))
            self.fail_all(f"source {self.id}: {msg}")
            return False
        self.schemas = {t: list(c) for t, c in (schemas or {}).items()}
        try:
            problems = list(self.source.validate_tables(tables) or [])
        except Exception as exc:
            problems = []
            logger.warning("source %s: validate_tables failed: %s", self.id, exc)
        for problem in problems:
            table = getattr(problem, "table", None)
            for p in self.pipelines if table is None else self.by_table.get(table, []):
                p.fail(f"validation failed: {problem}")
        obs.on_event(SourceConnected(self.id, type(self.source).__name__))
        for p in self.pipelines:
            if p.failed:
                continue
            cols = self.schemas.get(p.table)
            if cols is None:
                p.fail(f"table {p.table} not found in source {self.id}")
                continue
            try:
                p.init_target(cols, self.pipeline_context(p))
            except Exception as exc:
                p.fail(f"target init failed for {p.table}: {exc}")
        return True

    def pipeline_context(self, p: PipelineWorker) -> PipelineContext:
        """What a ``PipelineAware`` target is told about its pipeline."""
        src = self.source
        return PipelineContext(
            pipeline_id=p.id,
            source_id=self.id,
            table=p.table,
            observer=self.ctx.observer,
            position_to_string=src.position_to_string,
            position_from_string=src.position_from_string,
            compare_positions=src.compare_positions,
        )

    def _start(self) -> Position:
        """Carry out the startup plan (see :mod:`laredo.engine.startup`)."""
        active = [p for p in self.pipelines if not p.failed]
        plan = plan_start(self.id, self.source, active, self.ctx.snapshots)
        if plan.kind is StartKind.BASELINE or plan.kind is StartKind.REBASELINE:
            if plan.kind is StartKind.REBASELINE:
                logger.info(
                    "source %s: not resuming at %s: in-memory targets have no usable snapshot; "
                    "re-baselining",
                    self.id,
                    self.pos_str(self.source.last_acked_position()),
                )
            return self._baseline(rebaseline=plan.kind is StartKind.REBASELINE)
        assert plan.position is not None
        tables = plan.restored.tables if plan.restored is not None else {}
        for p in active:
            restored = tables.get(p.id)
            if restored is not None:
                p.restored(restored)
        resumed = resume_chunked(self, active, plan.position, restored=tables)
        for p in active:
            if p in resumed:
                continue  # an unfinished chunked baseline continues (see resume_chunked)
            if p.id not in tables and plan.kind is StartKind.RESUME:
                p.resume_at(plan.position)
            p.mark_streaming()
        if plan.kind is StartKind.RESUME:
            self.last_ack = plan.position
            logger.info("source %s: resuming after %s", self.id, self.pos_str(plan.position))
        return plan.position

    def _baseline(self, rebaseline: bool = False) -> Position:
        chunked = chunked_pipelines(self, rebaseline)
        pipes = [p for p in self.pipelines if p not in chunked]
        position = run_baseline(self.ctx, self.id, self.source, pipes, rebaseline)
        if chunked:
            self.current = position
            start_chunked(self, chunked, position, rebaseline)
        self.current = position
        self.try_ack()
        settle_heap()
        return position

    def _stream(self, position: Position) -> None:
        obs = self.ctx.observer
        attempt = 0
        while not self._stop.is_set():
            try:
                self.source.stream(position, self)
                if self._stop.is_set() or not self._resetting.is_set():
                    return
                self._reset_done.wait()  # the source finishes dropping its state first
                self._resetting.clear()
                logger.warning("source %s: reset while running; re-baselining in place", self.id)
                obs.on_event(RebaselineTriggered(self.id))
                try:
                    position = self._baseline(rebaseline=True)
                except BaselineFailed as failed:
                    self.fail_all(str(failed))
                    return
                self.stream_start = position
            except ReBaselineRequired as exc:
                if self._stop.is_set():
                    return
                logger.warning("source %s: re-baseline required: %s", self.id, exc)
                obs.on_event(RebaselineTriggered(self.id))
                try:
                    position = self._baseline(rebaseline=True)
                except BaselineFailed as failed:
                    self.fail_all(str(failed))
                    return
                self.stream_start = position
            except Exception as exc:
                if self._stop.is_set():
                    return
                msg = f"stream error: {exc}"
                obs.on_event(SourceDisconnected(self.id, msg))
                restart = self._restart_position(exc, attempt)
                if restart is None:
                    logger.error("source %s: %s", self.id, msg)
                    self.fail_all(f"source {self.id}: {msg}")
                    return
                attempt += 1
                delay = min(self.max_backoff, self.backoff * (2 ** (attempt - 1)))
                logger.warning(
                    "source %s: %s; restarting the stream from %s in %.1fs (attempt %d/%d)",
                    self.id,
                    msg,
                    self.pos_str(restart),
                    delay,
                    attempt,
                    self.max_restarts,
                )
                if self._stop.wait(delay):
                    return
                position = restart
                continue
            attempt = 0

    def _restart_position(self, exc: BaseException, attempt: int) -> Position | None:
        """Where to restart after a transient stream error, or ``None`` (no restart).

        Only transient errors of resumable, totally ordered sources restart in place: the
        stream resumes from the last ack and every pipeline skips what it already received
        (a :class:`~laredo.engine.buffer.Skip` marker travels through its buffer, after what
        is still queued)."""
        if retry_class(exc) != "transient" or attempt >= self.max_restarts:
            return None
        if not self.total_order or not self._resumable():
            return None
        restart = self.last_ack if self.last_ack is not None else self.stream_start
        if restart is None:
            return None
        if self.current is not None:
            self._merge_after = self.current
            for p in self.pipelines:
                p.enqueue_item(Skip(self.current))
        return restart

    def _resumable(self) -> bool:
        try:
            return bool(self.source.supports_resume())
        except Exception:
            return False
