"""One pipeline's worker: the thread that drains the pipeline's buffer into its target.

Guarantees: changes reach the target in source order; a change is retried with backoff until it
applies or ``max_retries`` is exhausted (a :class:`~laredo.Terminal` error is not retried), then
dead-lettered and the pipeline's error policy applies; ``applied`` only moves forward and only at
the end of a transaction (a partial chunk never moves it); :meth:`PipelineWorker.confirmed`
never runs ahead of what the target made durable. Every target call after the baseline happens
on this worker's thread (control requests included), so targets need no locking of their own
against the engine.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future
from datetime import UTC, datetime, timedelta
from typing import Any, cast

from .. import events as evt
from ..base import LegacyDoor, door_of
from ..batches import ChangeBatch
from ..contracts import (
    CountableTarget,
    DurablePositionTarget,
    FlushableTarget,
    KeyedTarget,
    ListsKeys,
    PipelineAware,
    PipelineContext,
    PositionedTarget,
    ProgressTarget,
    RowCounter,
    SecondaryIndexed,
    SelfFilteringTarget,
    SyncTarget,
)
from ..errors import BatchApplyError, BufferOverflow, LaredoError, retry_class
from ..filters import as_filter
from ..pipeline import Pipeline
from ..pipeline_ops import Chain, row_count_change, ttl_from_field
from ..pipeline_settings import RETRY_BACKOFF, RETRY_MAX_BACKOFF
from ..transforms import as_transform
from ..types import (
    BufferPolicy,
    ChangeEvent,
    ColumnDefinition,
    ErrorInfo,
    ErrorPolicy,
    PipelineState,
    Position,
    Row,
    SchemaChangeAction,
    TableIdentifier,
    TableSnapshotInfo,
    ValidationAction,
)
from ..units import to_seconds
from .at_position import AtPosition
from .baseline import baseline_into
from .buffer import (
    Batch,
    Call,
    ChangeBuffer,
    ControlKind,
    ControlRequest,
    Heartbeat,
    SchemaItem,
    Skip,
)
from .context import EngineContext, FailureScope, SourceLink
from .snapshots import Export, TableRestore
from .unrepresentable import problem, split

logger = logging.getLogger(__name__)

__all__ = ["PipelineWorker"]

_SCOPE = {
    ErrorPolicy.STOP_SOURCE: FailureScope.SOURCE,
    ErrorPolicy.STOP_ALL: FailureScope.ALL,
}


class PipelineWorker:
    """Runs one pipeline (see the module docstring)."""

    def __init__(self, ctx: EngineContext, link: SourceLink, cfg: Pipeline) -> None:
        self.ctx = ctx
        self.link = link
        self.cfg = cfg
        self.id = cfg.pipeline_id()
        self.table: TableIdentifier = cfg.table_id
        self.target: SyncTarget = cfg.target
        self.target_type = cfg.resolved_target_type()
        ttl = cfg.ttl or (ttl_from_field(cfg.ttl_field) if cfg.ttl_field else None)
        self.chain = Chain(
            self.table,
            tuple(as_filter(f) for f in cfg.filters),
            tuple(as_transform(t) for t in cfg.transforms),
            ttl,
            label=f"pipeline {self.id}",
        )
        self.state = PipelineState.INITIALIZING
        self.error: str | None = None
        self.columns: list[ColumnDefinition] = []
        self.buffer = ChangeBuffer(
            cfg.buffer_size, BufferPolicy(cfg.buffer_policy), self._on_policy
        )
        self.applied: Position | None = None  # last position applied (or passed by heartbeat)
        self.last_change: Position | None = None  # last change handed to the target
        # (chunk position, last complete position before it) of chunked transactions handed
        # to a buffering target: a chunk's position lies inside its transaction
        self._chunks: list[tuple[Position, Position | None]] = []
        self.snapshot_position: Position | None = None  # latest completed snapshot export
        self.skip_until: Position | None = None  # drop changes at or before (restore/reload)
        self.expected_rows = 0
        self._at = AtPosition(link.compare)
        self.ready = False
        target = self.target
        # the one door into the target: apply(table, changes, complete) and load(table, rows)
        self.door = door_of(target)
        self._legacy = self.door if isinstance(self.door, LegacyDoor) else None
        self._positioned = target if isinstance(target, PositionedTarget) else None
        self._durable = target if isinstance(target, DurablePositionTarget) else None
        self.has_durable_position = self._durable is not None
        self.ttl_scan_interval = to_seconds(cfg.ttl_scan_interval)
        self.validation_interval = to_seconds(cfg.validation_interval)
        self.retry_backoff = to_seconds(cfg.retry_backoff) or RETRY_BACKOFF.default
        self.retry_max_backoff = to_seconds(cfg.retry_max_backoff) or RETRY_MAX_BACKOFF.default
        self.thread: threading.Thread | None = None
        # the reader's hot path: heartbeats and markers (schema change, skip, call) go straight
        # into the buffer, in stream order
        self.enqueue_heartbeat = self.buffer.put_heartbeat
        self.enqueue_item = self.buffer.put
        self._stop_now = threading.Event()
        self._last_ttl_scan = time.monotonic()
        self._last_validation = time.monotonic()

    # -- state ----------------------------------------------------------------------------
    def set_state(self, new: PipelineState, error: str | None = None) -> None:
        old = self.state
        if error is not None:
            self.error = error
        if old == new:
            return
        self.state = new
        self.ctx.emit(evt.PipelineStateChanged(self.id, old, new))
        if new is PipelineState.ERROR:
            logger.error(
                "pipeline %s entered ERROR: %s", self.id, self.error, extra={"pipeline": self.id}
            )
            self.link.request_ack()
            self.ctx.readiness_changed()

    def fail(self, message: str) -> None:
        self.set_state(PipelineState.ERROR, message)

    @property
    def failed(self) -> bool:
        return self.state is PipelineState.ERROR

    def mark_streaming(self) -> None:
        """Baseline or restore done: the pipeline is ready and streams."""
        if self.failed:
            return
        self.set_state(PipelineState.STREAMING)
        self.ready = True
        self.ctx.readiness_changed()

    def restored(self, result: TableRestore) -> None:
        """The target now holds the table as of ``result.position`` (a snapshot restore)."""
        pos = result.position
        self.applied = pos
        self.last_change = pos
        self.snapshot_position = pos
        self.skip_until = pos
        self.expected_rows = result.row_count

    def resume_at(self, position: Position) -> None:
        """A durable target already holds everything up to ``position`` (a resume)."""
        self.applied = position

    def stop_now(self) -> None:
        """Abandon retries and pending items (shutdown deadline passed)."""
        self._stop_now.set()

    # -- lifecycle (called from other threads) -------------------------------------------------
    def is_running(self) -> bool:
        """The worker thread runs."""
        return self.thread is not None and self.thread.is_alive()

    def buffer_fill(self) -> tuple[int, int]:
        """(changes buffered, the buffer's capacity)."""
        return self.buffer.depth, self.buffer.capacity

    def hold(self, held: bool) -> None:
        """Hold buffered changes back or let them apply (control requests run; none is lost)."""
        self.buffer.set_paused(held)

    def end_input(self) -> None:
        """No more changes: the worker applies what its buffer holds (held or not), then ends."""
        self.buffer.set_paused(False)
        self.buffer.close()

    def drain(self, timeout: float | None) -> bool:
        """:meth:`end_input` and wait up to ``timeout`` for the worker to apply what is buffered;
        False when it did not finish: the rest is abandoned (:meth:`stop_now`), never acked."""
        self.end_input()
        if self.thread is None:
            return True
        self.thread.join(timeout)
        if not self.thread.is_alive():
            return True
        logger.warning("pipeline %s did not drain in time; abandoning", self.id)
        self.stop_now()
        return False

    def flush(self) -> None:
        """After :meth:`drain`: make what a ``FlushableTarget`` buffers durable (logged)."""
        if isinstance(self.target, FlushableTarget) and not self.failed:
            try:
                self.target.flush()
            except Exception:
                logger.warning("pipeline %s: final flush failed", self.id, exc_info=True)

    def close(self) -> None:
        """After :meth:`flush`: close the target (logged) and, unless failed, STOPPED."""
        try:
            self.target.on_close(self.table)
        except Exception:
            logger.warning("pipeline %s: on_close failed", self.id, exc_info=True)
        if not self.failed:
            self.set_state(PipelineState.STOPPED)

    # -- the target's set-up and stored state (reader, snapshots, backfills, verify) ------------
    def init_target(self, columns: Sequence[ColumnDefinition], context: PipelineContext) -> None:
        """Tell the target its columns (a ``PipelineAware`` one its pipeline first); raises."""
        self.columns = list(columns)
        if isinstance(self.target, PipelineAware):
            self.target.bind_pipeline(context)
        self.target.on_init(self.table, columns)

    def keeps_state(self) -> bool:
        """Does the target keep what it applied across a restart of this process?"""
        if self._durable is not None:
            return True
        try:
            return bool(self.target.is_durable())
        except Exception:
            return False

    @property
    def keeps_progress(self) -> bool:
        return isinstance(self.target, ProgressTarget)

    def save_progress(self, record: str | None) -> None:
        """Save a chunked baseline's progress record with the target (``None``: done)."""
        if isinstance(self.target, ProgressTarget):
            self.target.save_progress(self.table, record)

    def begin_progress(self, position: Position, start: str) -> None:
        """A chunked baseline begins at ``position``: a target keeping progress voids an older
        record, then records ``start``."""
        t = self.target
        if self.keeps_progress and position is not None and isinstance(t, PositionedTarget):
            t.set_change_position(position)
        self.save_progress(None)
        self.save_progress(start)

    def load_progress(self) -> str | None:
        """The progress record of an unfinished chunked baseline the target holds, if any."""
        target = self.target
        return target.load_progress(self.table) if isinstance(target, ProgressTarget) else None

    def count_rows(self) -> int | None:
        """The target's row count; ``None`` when it cannot count (or counting failed)."""
        counter = getattr(self.target, "count", None)
        if not callable(counter):
            return None
        try:
            return int(counter())
        except Exception:
            logger.debug("count() of %s failed", self.id, exc_info=True)
            return None

    def stored_rows(self) -> Iterable[Row] | None:
        """Every row the target holds (``None`` when it cannot list them)."""
        target = self.target
        if isinstance(target, KeyedTarget):
            return (row for _key, row in target.items())
        export = getattr(target, "export_snapshot", None)
        return None if export is None else cast("Iterable[Row]", export())

    def key_lister(self) -> ListsKeys | None:
        """The target as :class:`~laredo.contracts.ListsKeys` (``None``: it lists no keys)."""
        return self.target if isinstance(self.target, ListsKeys) else None

    def restore_snapshot(self, info: TableSnapshotInfo, rows: Iterable[Row]) -> None:
        """Load a snapshot's rows of this table into the target (start-up restore)."""
        self.target.restore_snapshot(info, rows)

    def truncate(self) -> None:
        """Empty the target (a failed restore is undone); raises what the target raises."""
        self.target.on_truncate(self.table)

    def _on_policy(self, policy: str) -> None:
        self.ctx.emit(evt.BufferPolicyTriggered(self.id, policy))

    def _escalate(self, policy: ErrorPolicy, message: str) -> None:
        scope = _SCOPE.get(policy)
        if scope is None:
            self.fail(message)
        else:
            self.ctx.escalate(scope, self.link.source_id, message)

    # -- positions / durability -------------------------------------------------------------
    def confirmed(self) -> Position | None:
        """The position up to which this pipeline's target holds every change durably.

        A buffering target (``durable_position``) holds back no further than the last change
        handed to it: once that one is durable (or none was handed over since the baseline or
        the resume), everything applied is, so heartbeats carry the ACK on an idle table."""
        if self._durable is not None:
            durable = self._durable.durable_position()
            if self.last_change is None:
                return self.applied  # nothing handed over since the baseline or resume
            if durable is None:
                return None
            if self.link.compare(durable, self.last_change) >= 0:
                return self.applied  # everything applied is durable: heartbeats count too
            for position, before in self._chunks:
                if self.link.compare(durable, position) == 0:
                    return before  # durable inside a transaction: only up to before it
            return durable
        if self.target.is_durable():
            return self.applied
        # Volatile target: its state survives a restart only through a completed snapshot.
        if self.link.volatile_acks_snapshot_bound:
            return self.snapshot_position
        return self.applied

    # -- baseline (runs on the source thread, or on this worker for reloads) ---------------
    def begin_baseline(self, truncate: bool = False, *, keep_ready: bool = False) -> None:
        """The pipeline's table is about to be baselined (start-up, re-baseline or reload): it
        is not ready (``keep_ready``: a reload keeps readiness) until :meth:`mark_streaming`.
        ``truncate`` (a re-baseline): buffered changes are dropped and the target emptied first
        (a failure to empty it fails the pipeline)."""
        if not keep_ready:
            self.ready = False
        self.set_state(PipelineState.BASELINING)
        self.ctx.emit(evt.BaselineStarted(self.id, self.table))
        if truncate:
            self.buffer.clear()
            self.skip_until = None
            try:
                self.target.on_truncate(self.table)
            except Exception as exc:
                self.fail(f"truncate before re-baseline failed: {exc}")

    def baseline_rows(self, rows: Sequence[Row]) -> int:
        """Load baseline rows through the chain (TTL included); returns how many were kept."""
        if not self.chain.plain:
            rows = self.chain.baseline_rows(rows)
        self.door.load(self.table, rows)
        return len(rows)

    def complete_baseline(self, position: Position | None, loaded: int, started: float) -> None:
        if self._positioned is not None and position is not None:
            self._positioned.set_change_position(position)
        self.target.on_baseline_complete(self.table)
        self.expected_rows = loaded
        self.buffer.take_dropped_delta()  # a baseline replaces what was dropped before it
        if position is not None:
            self.applied = position
            # the baseline is durable once on_baseline_complete returned: nothing pending
            self.last_change = None
            self._chunks = []
        took = timedelta(seconds=time.monotonic() - started)
        self.ctx.emit(evt.BaselineCompleted(self.id, self.table, loaded, took))
        self.validate(loaded, after_baseline=True)

    def validate(self, expected: int, after_baseline: bool = False) -> bool:
        """Compare the target's row count with the engine's; the pipeline's validation action
        applies on a mismatch (warn, fail, or re-baseline — never right after a baseline)."""
        if not isinstance(self.target, CountableTarget):
            return True
        if isinstance(self.target, SelfFilteringTarget) and not self.target.counts_delivered_rows:
            return True  # the target filters rows itself: its count is not comparable
        try:
            actual = self.target.count()
        except Exception:
            logger.exception("pipeline %s: count() failed during validation", self.id)
            return True
        match = actual == expected
        self.ctx.emit(evt.ValidationResult(self.id, self.table, expected, actual, match))
        if not match:
            action = self.cfg.validation_action
            msg = (
                f"row-count validation mismatch on {self.table}: expected {expected}, "
                f"target holds {actual}"
            )
            if action is ValidationAction.FAIL:
                self.fail(msg)
            elif action is ValidationAction.RE_BASELINE and not after_baseline:
                logger.warning("pipeline %s: %s; re-baselining", self.id, msg)
                self.reload()
            else:
                logger.warning("pipeline %s: %s", self.id, msg)
        return match

    # -- the worker thread ------------------------------------------------------------------
    def start_worker(self) -> None:
        self.thread = threading.Thread(
            target=self.run, name=f"laredo-pipeline-{self.id}", daemon=True
        )
        self.thread.start()

    def run(self) -> None:
        """Drain the buffer until it is closed and empty."""
        buf = self.buffer
        wants_depth = self.ctx.wants.depth
        while True:
            item = buf.get(timeout=0.5)
            if item is None:
                if buf.closed:
                    return
                self.periodic()
                continue
            if isinstance(item, ControlRequest):
                self.control(item)
                continue
            if self.failed or self._stop_now.is_set():
                continue  # isolated: changes for this pipeline are no longer applied
            self.handle(item)
            if wants_depth:
                self.ctx.emit(evt.BufferDepthChanged(self.id, buf.depth, buf.capacity))

    def handle(self, item: Batch | Heartbeat | SchemaItem | Skip | Call) -> None:
        """Apply one data item (the worker loop's body; callable directly in tests)."""
        if self._at.armed is not None:
            self._at.reached(item)
        if isinstance(item, Batch):
            self.apply_batch(item.events, item.complete)
        elif isinstance(item, Heartbeat):
            self.heartbeat(item.position)
        elif isinstance(item, SchemaItem):
            self.schema_change(item)
        elif isinstance(item, Call):
            item.work()
        else:
            self.skip_until = item.position

    def periodic(self) -> None:
        """Idle-time duties: TTL sweep and periodic validation, when due."""
        now = time.monotonic()
        scan = self.ttl_scan_interval
        if scan and self.chain.ttl is not None and now - self._last_ttl_scan >= scan:
            self._last_ttl_scan = now
            self.sweep_ttl()
        every = self.validation_interval
        if (
            every
            and now - self._last_validation >= every
            and self.state is PipelineState.STREAMING
            and self.buffer.depth == 0
        ):
            self._last_validation = now
            self.expected_rows += self.buffer.take_dropped_delta()  # rows the target misses
            if not self._validate_with_source():
                self.validate(self.expected_rows)

    def at_position(
        self,
        position: Position,
        work: Callable[[], None],
        missed: Callable[[], None] | None = None,
    ) -> bool:
        """Run ``work`` on this thread once the target holds exactly the changes up to
        ``position`` (see :mod:`.at_position`; ``missed`` when there is no exact moment). False
        when another is waiting."""
        return self._at.arm(self.applied, position, work, missed)

    def cancel_at_position(self) -> None:
        self._at.cancel()

    def _validate_with_source(self) -> bool:
        """Periodic validation against a ``RowCounter`` source (:meth:`AtPosition.count_at_source`)
        without filters, transforms or TTL; False: the caller compares with the engine's count."""
        source = self.link.source
        if not (self.chain.plain and isinstance(source, RowCounter)):
            return False
        if not (self._at.counting or self._at.armed is not None):  # else: still on its way
            self._at.count_at_source(self, source)
        return True

    def control(self, req: ControlRequest) -> None:
        try:
            if req.kind == "export":
                req.future.set_result(self.export())
            elif req.kind == "reload":
                req.future.set_result(self.reload())
            elif req.kind == "ttl":
                req.future.set_result(self.sweep_ttl())
            elif req.payload is not None:
                req.future.set_result(req.payload())
            else:
                raise ValueError(f"control request {req.kind!r} without work")
        except BaseException as exc:
            req.future.set_exception(exc)

    def export(self) -> Export:
        """This pipeline's share of a snapshot, consistent with ``applied``."""
        return Export(
            pipeline_id=self.id,
            source_id=self.link.source_id,
            table=self.table,
            columns=tuple(self.columns),
            target_type=self.target_type,
            indexes=tuple(self.target.indexes) if isinstance(self.target, SecondaryIndexed) else (),
            rows=self.target.export_snapshot(),
            position=self.applied,
            progress=None if self.keeps_state() else self.load_progress(),  # a durable one keeps it
        )

    def heartbeat(self, position: Position) -> None:
        if self.skip_until is not None:
            if self.link.compare(position, self.skip_until) <= 0:
                return
            self.skip_until = None
        if self.applied is None or self.link.compare(position, self.applied) > 0:
            self.applied = position
            if self._legacy is not None:  # a legacy buffering target learns it from a position
                self._legacy.heartbeat(position)
        self.link.request_ack()

    # -- applying changes ---------------------------------------------------------------------
    def apply_batch(self, events: Sequence[ChangeEvent], complete: bool = True) -> None:
        """Apply one batch. Only a complete batch (the end of its transaction) moves the
        applied position: a crash after a partial chunk must redeliver the whole transaction."""
        batch = events if type(events) is ChangeBatch else None
        if self.skip_until is not None:
            compare = self.link.compare
            skip = self.skip_until
            if batch is not None:  # one position for the whole batch
                if compare(batch.position, skip) <= 0:
                    return
            else:
                idx = 0
                while idx < len(events) and compare(events[idx].position, skip) <= 0:
                    idx += 1
                if idx == len(events):
                    return
                events = events[idx:]
            self.skip_until = None
        if batch is not None and batch.unrepresentable:
            batch, bad = split(batch)
            events = batch
            if not all(map(self.reject, bad)):
                return
        obs = self.ctx.observer
        wants = self.ctx.wants
        if wants.received:
            for ev in events:
                obs.on_event(evt.ChangeReceived(self.id, self.table, ev.action, ev.position))
        started = time.perf_counter()
        if self.chain.plain:
            work = events
            if self.validation_interval:  # the count validation compares
                self.expected_rows = row_count_change(events, self.expected_rows)
        else:
            prepared = self.chain.prepare(events)
            self.expected_rows = prepared.count_after(self.expected_rows)
            work = prepared.events
        last = batch.position if batch is not None else events[-1].position
        if work:
            self._apply_with_retries(work, complete)
            # what the target must make durable before ``confirmed`` passes it (a chunk too)
            self.last_change = last
            if not complete and self._durable is not None:
                self._note_chunk(self.last_change)
        elif complete and self._durable is not None and self._legacy is None:
            # everything left of the transaction was filtered out: its buffered start is whole
            self._apply_with_retries(work, complete)
        if self.failed:
            return
        if complete:
            self.applied = last
        elapsed = timedelta(seconds=time.perf_counter() - started)
        obs.on_event(evt.ChangesApplied(self.id, self.table, len(work), elapsed))
        if wants.applied:
            per = elapsed / max(1, len(work))
            for ev in work:
                obs.on_event(evt.ChangeApplied(self.id, self.table, ev.action, per))
        self.link.request_ack()

    def _note_chunk(self, position: Position) -> None:
        """Remember a chunk handed to a buffering target (until its target is durable past it)
        with the last complete position before its transaction: ``confirmed`` never returns a
        position inside a transaction (a source resuming there would skip the transaction)."""
        compare = self.link.compare
        durable = self._durable.durable_position() if self._durable is not None else None
        kept = [c for c in self._chunks if durable is None or compare(c[0], durable) >= 0]
        if not kept or compare(kept[-1][0], position) != 0:
            kept.append((position, self.applied))
        self._chunks = kept  # replaced, never mutated: confirmed() reads it from other threads

    def _apply_with_retries(self, events: Sequence[ChangeEvent], complete: bool) -> None:
        """Through the door in one call; on a failure, change by change from the failed one
        (``BatchApplyError.index``; its failure counts as its first attempt), each retried
        with backoff (:meth:`_retry`). The last call
        carries ``complete``; when the last change was dead-lettered, an empty call does."""
        door, table = self.door, self.table
        start = 0
        try:
            door.apply(table, events, complete)
            return
        except BatchApplyError as exc:
            start = exc.index
            first_error: BaseException = exc.__cause__ or exc
        except Exception as exc:
            first_error = exc
        if not events:  # the end-of-transaction signal alone failed: the next call repeats it
            logger.warning(
                "pipeline %s: end of transaction not delivered: %s", self.id, first_error
            )
            return
        logger.warning(
            "pipeline %s: batch apply failed (%s); retrying change by change from #%d",
            self.id,
            first_error,
            start,
        )
        last = len(events) - 1
        error: BaseException | None = first_error  # the first failed change's first attempt
        for i in range(start, last + 1):
            one = events[i : i + 1]
            ends = complete and i == last
            try:
                if error is None:
                    door.apply(table, one, ends)
                    continue
            except Exception as exc:
                error = exc
            if not self._retry(one, ends, error):
                return
            error = None
            if ends and self._durable is not None and not self.failed:
                self._end_transaction(events)

    def _end_transaction(self, events: Sequence[ChangeEvent]) -> None:
        """Tell the target the transaction ended after its last change was dead-lettered."""
        try:
            self.door.apply(self.table, events[:0], True)
        except Exception as exc:
            logger.warning("pipeline %s: end of transaction not delivered: %s", self.id, exc)

    def _retry(self, one: Sequence[ChangeEvent], complete: bool, exc: BaseException) -> bool:
        """Retry one change (``one``, a one-change sequence); True when it finally applied (or
        was dead-lettered and skipped)."""
        ev = one[0]
        obs = self.ctx.observer
        cfg = self.cfg
        backoff = self.retry_backoff
        cap = self.retry_max_backoff
        obs.on_event(evt.ChangeError(self.id, self.table, ev.action, ErrorInfo.of(exc)))
        last: BaseException = exc
        terminal = retry_class(exc) == "terminal"
        for attempt in range(1, 0 if terminal else cfg.max_retries + 1):
            if self._stop_now.wait(backoff):
                break
            backoff = min(cap, backoff * 2)
            try:
                self.door.apply(self.table, one, complete)
                return True
            except Exception as again:
                last = again
                info = ErrorInfo.of(again, f"retry {attempt}/{cfg.max_retries}: ")
                obs.on_event(evt.ChangeError(self.id, self.table, ev.action, info))
        tried = (
            "not retried (terminal error)"
            if terminal
            else f"failed after {cfg.max_retries} retries"
        )
        pos = self.link.pos_str(ev.position)
        info = ErrorInfo.of(last, f"{self.id}: {ev.action} at {pos} {tried}: ")
        store = self.ctx.dead_letters
        if store is not None:
            try:
                store.write(self.id, ev, info, position=pos)
                obs.on_event(evt.DeadLetterWritten(self.id, ev, info))
            except Exception:
                logger.exception("pipeline %s: dead-letter write failed", self.id)
                store = None
        policy = ErrorPolicy(cfg.error_policy)
        if policy is ErrorPolicy.DEAD_LETTER and store is not None:
            return True
        self._escalate(policy, info.message)
        return False

    def reject(self, ev: ChangeEvent) -> bool:
        """Dead-letter a change (or baseline row, as an INSERT) holding an
        :class:`~laredo.types.Unrepresentable` value (see :mod:`.unrepresentable`); True when
        the pipeline goes on (it was written to the dead-letter store)."""
        message = f"{self.id}: {problem(self.table, ev, self.columns)}"
        logger.error("pipeline %s: %s", self.id, message)
        info = ErrorInfo(message, "Unrepresentable")
        obs = self.ctx.observer
        obs.on_event(evt.ChangeError(self.id, self.table, ev.action, info))
        store = self.ctx.dead_letters
        if store is not None:
            try:
                pos = None if ev.position is None else self.link.pos_str(ev.position)
                store.write(self.id, ev, info, position=pos)
                obs.on_event(evt.DeadLetterWritten(self.id, ev, info))
                return True
            except Exception:
                logger.exception("pipeline %s: dead-letter write failed", self.id)
        self._escalate(ErrorPolicy(self.cfg.error_policy), message)
        return False

    def schema_change(self, item: SchemaItem) -> None:
        table = item.table
        try:
            resp = self.target.on_schema_change(table, item.old_columns, item.new_columns)
        except Exception as exc:
            self.fail(f"schema change on {table} failed in the target: {exc}")
            return
        self.columns = list(item.new_columns)
        action = getattr(resp, "action", SchemaChangeAction.CONTINUE)
        if action is SchemaChangeAction.RE_BASELINE:
            logger.info("pipeline %s: target asked for a re-baseline after schema change", self.id)
            self.reload()
        elif action is SchemaChangeAction.ERROR:
            self.fail(
                f"schema change on {table} rejected by target: {getattr(resp, 'message', '')}"
            )

    def reload(self) -> Position:
        """Replace the target's state by a fresh baseline of this table (the start-up path,
        :func:`~laredo.engine.baseline.baseline_into`: batches, progress events).

        Buffered changes at or before the new baseline's position are skipped afterwards; later
        ones apply. No stale row survives (the target is truncated first). On failure the
        pipeline is failed and the error raised."""
        was = self.state
        self.begin_baseline(keep_ready=True)
        started = time.monotonic()
        try:
            self.target.on_truncate(self.table)
            position, loaded = baseline_into(self.ctx, self.link.source, [self])
        except Exception as exc:
            self.fail(f"reload of {self.table} failed: {exc}")
            raise
        if self.failed:  # the target refused the rows (the reason is in ``error``)
            raise LaredoError(f"reload of {self.table} failed: {self.error}")
        self.complete_baseline(position, loaded[self.id], started)
        self.skip_until = position
        if not self.failed:
            self.set_state(
                PipelineState.PAUSED if was is PipelineState.PAUSED else PipelineState.STREAMING
            )
        return position

    def sweep_ttl(self) -> int:
        """Delete stored rows whose TTL expired; returns how many."""
        target = self.target
        if self.chain.ttl is None or not isinstance(target, KeyedTarget):
            return 0
        now = datetime.now(UTC)
        expired = [(k, r) for k, r in target.items() if self.chain.expired(r, now)]
        for key, row in expired:
            try:
                self.target.on_delete(self.table, row)
                self.expected_rows -= 1
                self.ctx.emit(evt.RowExpired(self.id, self.table, str(key)))
            except Exception:
                logger.exception("pipeline %s: TTL delete failed for key %s", self.id, key)
        return len(expired)

    # -- called from other threads ----------------------------------------------------------
    def submit(self, kind: ControlKind, payload: Callable[[], Any] | None = None) -> Future[Any]:
        """Run work on this pipeline's thread; the future answers it."""
        req = ControlRequest(kind, Future(), payload)
        if not self.is_running():
            req.future.set_exception(RuntimeError(f"pipeline {self.id} is not running"))
            return req.future
        self.buffer.submit(req)
        return req.future

    def enqueue(
        self, events: Sequence[ChangeEvent], stop: threading.Event, complete: bool = True
    ) -> None:
        """Hand a batch to this pipeline's buffer (the source reader's thread)."""
        try:
            self.buffer.put_batch(events, stop, complete)
        except BufferOverflow as exc:
            self._escalate(ErrorPolicy(self.cfg.error_policy), f"{self.id}: {exc}")
