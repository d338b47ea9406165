"""Per-pipeline runtime: the worker thread that drains a pipeline's buffer into its target.

Guarantees: changes reach the target in source order; a change is retried (with backoff) until
it applies or ``max_retries`` is exhausted, then dead-lettered and the error policy applies;
``applied`` only moves forward; ``confirmed()`` never runs ahead of what the target made durable.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from .buffer import BATCH, HEARTBEAT, PARTIAL, SCHEMA, SKIP, BufferOverflow, ChangeBuffer
from .contracts import (
    BaselineBatchTarget,
    BatchTarget,
    CountableTarget,
    DurablePositionTarget,
    KeyedTarget,
    PositionedTarget,
)
from .errors import BatchApplyError, retry_class
from .pipeline import Pipeline
from .types import (
    BufferPolicy,
    ChangeAction,
    ChangeEvent,
    ColumnDefinition,
    ErrorInfo,
    ErrorPolicy,
    PipelineState,
    Row,
    SchemaChangeAction,
    SchemaChangeEvent,
    TableIdentifier,
    ValidationAction,
)
from .units import to_seconds as _seconds

if TYPE_CHECKING:
    from .engine import Engine
    from .source_runtime import _SourceRuntime

logger = logging.getLogger(__name__)

INSERT = ChangeAction.INSERT
UPDATE = ChangeAction.UPDATE
DELETE = ChangeAction.DELETE
TRUNCATE = ChangeAction.TRUNCATE


@dataclass
class ControlRequest:
    kind: str  # "export" | "reload" | "ttl" | "call"
    future: Future[Any]
    payload: Any = None


def _with(ev: ChangeEvent, action: ChangeAction, new: Row | None, old: Row | None) -> ChangeEvent:
    """``dataclasses.replace`` without its per-call introspection (hot path)."""
    return ChangeEvent(
        ev.table,
        action,
        ev.position,
        ev.timestamp,
        new,
        old,
        ev.xid,
        ev.commit_timestamp,
        ev.unchanged_toast,
    )


def _ttl_from_field(field: str) -> Callable[[Row], datetime | None]:
    def expiry(row: Row) -> datetime | None:
        v = row.get(field)
        if isinstance(v, datetime):
            return v if v.tzinfo else v.replace(tzinfo=UTC)
        if isinstance(v, str):
            try:
                d = datetime.fromisoformat(v)
            except ValueError:
                return None
            return d if d.tzinfo else d.replace(tzinfo=UTC)
        return None

    return expiry


class PipelineRuntime:
    """Runs one pipeline. All target calls after baseline happen on this pipeline's worker."""

    def __init__(self, engine: Engine, source_rt: _SourceRuntime, cfg: Pipeline) -> None:
        from .filters import as_filter
        from .transforms import as_transform

        self.engine = engine
        self.source_rt = source_rt
        self.cfg = cfg
        self.id = cfg.pipeline_id()
        self.table: TableIdentifier = cfg.table_id
        self.target = cfg.target
        self.target_type = cfg.resolved_target_type()
        self.filters = [as_filter(f) for f in cfg.filters]
        self.transforms = [as_transform(t) for t in cfg.transforms]
        ttl = cfg.ttl or (_ttl_from_field(cfg.ttl_field) if cfg.ttl_field else None)
        self.ttl: Callable[[Row], datetime | None] | None = ttl
        self.plain = not self.filters and not self.transforms and self.ttl is None
        self.state = PipelineState.INITIALIZING
        self.error: str | None = None
        self.columns: list[ColumnDefinition] = []
        self.buffer = ChangeBuffer(
            cfg.buffer_size, BufferPolicy(cfg.buffer_policy), self._on_policy
        )
        self.applied: Any = None  # last position applied (or passed by heartbeat)
        self.last_change: Any = None  # last position of a real change
        self.snapshot_position: Any = None  # position of the latest completed snapshot export
        self.skip_until: Any = None  # drop changes at or before this position (restore/reload)
        self.expected_rows = 0
        self.ready = False
        self.is_batch = isinstance(self.target, BatchTarget)
        self.is_positioned = isinstance(self.target, PositionedTarget)
        self.has_durable_position = isinstance(self.target, DurablePositionTarget)
        self.thread: threading.Thread | None = None
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
        self.engine._obs.on_pipeline_state_changed(self.id, old, new)
        if new is PipelineState.ERROR:
            logger.error("pipeline %s entered ERROR: %s", self.id, self.error)
            self.source_rt.try_ack()
            self.engine._readiness_changed()

    def fail(self, message: str) -> None:
        self.set_state(PipelineState.ERROR, message)

    def _on_policy(self, policy: str) -> None:
        self.engine._obs.on_buffer_policy_triggered(self.id, policy)

    # -- positions / durability -------------------------------------------------------------
    def confirmed(self) -> Any:
        """The position up to which this pipeline's target holds every change durably."""
        src = self.source_rt.source
        if self.has_durable_position:
            durable = self.target.durable_position()
            if self.last_change is None:
                return self.applied
            if durable is not None and src.compare_positions(durable, self.last_change) >= 0:
                return self.applied  # everything applied is durable: heartbeats count too
            return durable
        if self.target.is_durable():
            return self.applied
        # Volatile target: its state survives a restart only through a completed snapshot.
        if self.source_rt.volatile_acks_snapshot_bound:
            return self.snapshot_position
        return self.applied

    # -- baseline (runs on the source thread, or the worker for reloads) ------------------
    def expired(self, row: Row, now: datetime) -> bool:
        assert self.ttl is not None
        try:
            at = self.ttl(row)
        except Exception:
            logger.exception("pipeline %s: ttl function failed; row kept", self.id)
            return False
        return at is not None and at <= now

    def process_row(self, row: Row) -> Row | None:
        """Filters, transforms, TTL for a baseline/insert row; ``None`` drops it."""
        out = self.process_row_no_ttl(row)
        if out is not None and self.ttl is not None and self.expired(out, datetime.now(UTC)):
            return None
        return out

    def baseline_rows(self, rows: Sequence[Row]) -> int:
        if not self.plain:
            kept = []
            for r in rows:
                out = self.process_row(r)
                if out is not None:
                    kept.append(out)
            rows = kept
        if isinstance(self.target, BaselineBatchTarget):
            self.target.on_baseline_rows(self.table, rows)
        else:
            fn = self.target.on_baseline_row
            table = self.table
            for r in rows:
                fn(table, r)
        return len(rows)

    def complete_baseline(self, position: Any, loaded: int, started: float) -> None:
        if self.is_positioned:
            self.target.set_change_position(position)
        self.target.on_baseline_complete(self.table)
        self.expected_rows = loaded
        if position is not None:
            self.applied = position
            self.last_change = position
        self.engine._obs.on_baseline_completed(
            self.id, self.table, loaded, timedelta(seconds=time.monotonic() - started)
        )
        self.validate(loaded, after_baseline=True)

    def validate(self, expected: int, after_baseline: bool = False) -> bool:
        if not isinstance(self.target, CountableTarget):
            return True
        if getattr(self.target, "counts_delivered_rows", True) is False:
            return True  # the target filters rows itself: its count is not comparable
        try:
            actual = self.target.count()
        except Exception:
            logger.exception("pipeline %s: count() failed during validation", self.id)
            return True
        match = actual == expected
        self.engine._obs.on_validation_result(self.id, self.table, expected, actual, match)
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
                self._reload_in_worker()
            else:
                logger.warning("pipeline %s: %s", self.id, msg)
        return match

    # -- worker -----------------------------------------------------------------------------
    def start_worker(self) -> None:
        self.thread = threading.Thread(
            target=self._run, name=f"laredo-pipeline-{self.id}", daemon=True
        )
        self.thread.start()

    def _run(self) -> None:
        buf = self.buffer
        while True:
            got = buf.get(timeout=0.5)
            if got is None:
                if buf._closed:
                    return
                self._periodic()
                continue
            what, item = got
            if what == "control":
                self._control(item)
                continue
            kind, payload = item
            if self.state is PipelineState.ERROR or self._stop_now.is_set():
                continue  # isolated: changes for this pipeline are no longer applied
            if kind == BATCH:
                self._apply_batch(payload)
            elif kind == PARTIAL:
                self._apply_batch(payload, complete=False)
            elif kind == HEARTBEAT:
                self._heartbeat(payload)
            elif kind == SCHEMA:
                self._schema_change(*payload)
            elif kind == SKIP:
                self.skip_until = payload
            if self.engine._wants_depth:
                self.engine._obs.on_buffer_depth_changed(self.id, buf.depth, buf.capacity)

    def _periodic(self) -> None:
        now = time.monotonic()
        scan = _seconds(self.cfg.ttl_scan_interval)
        if scan and self.ttl is not None and now - self._last_ttl_scan >= scan:
            self._last_ttl_scan = now
            self.sweep_ttl()
        every = _seconds(self.cfg.validation_interval)
        if (
            every
            and now - self._last_validation >= every
            and self.state is PipelineState.STREAMING
            and self.buffer.depth == 0
        ):
            self._last_validation = now
            self.validate(self.expected_rows)

    def _control(self, req: ControlRequest) -> None:
        try:
            if req.kind == "export":
                rows = self.target.export_snapshot()
                req.future.set_result((rows, self.applied))
            elif req.kind == "reload":
                req.future.set_result(self._reload_in_worker())
            elif req.kind == "ttl":
                req.future.set_result(self.sweep_ttl())
            elif req.kind == "call":
                req.future.set_result(req.payload())
            else:
                raise ValueError(f"unknown control request {req.kind}")
        except BaseException as exc:
            req.future.set_exception(exc)

    def _heartbeat(self, position: Any) -> None:
        if self.skip_until is not None:
            cmp = self.source_rt.source.compare_positions(position, self.skip_until)
            if cmp <= 0:
                return
            self.skip_until = None
        if (
            self.applied is None
            or self.source_rt.source.compare_positions(position, self.applied) > 0
        ):
            self.applied = position
            if self.has_durable_position and self.is_positioned:
                # a buffering target learns that its last transaction is complete
                self.target.set_change_position(position)
        self.source_rt.try_ack()

    # -- applying changes ---------------------------------------------------------------------
    def _apply_batch(self, events: Sequence[ChangeEvent], complete: bool = True) -> None:
        """Apply one batch. Only a complete batch (the end of its transaction) moves the
        applied position: a crash after a partial chunk must redeliver the whole transaction."""
        if self.skip_until is not None:
            compare = self.source_rt.source.compare_positions
            skip = self.skip_until
            idx = 0
            while idx < len(events) and compare(events[idx].position, skip) <= 0:
                idx += 1
            if idx == len(events):
                return
            events = events[idx:]
            self.skip_until = None
        obs = self.engine._obs
        if self.engine._wants_received:
            for ev in events:
                obs.on_change_received(self.id, self.table, ev.action, ev.position)
        started = time.perf_counter()
        work = events if self.plain else self._prepare(events)
        if work:
            self._apply_with_retries(work)
        if self.state is PipelineState.ERROR:
            return
        if complete:
            last = events[-1].position
            self.applied = last
            self.last_change = last
        elapsed = timedelta(seconds=time.perf_counter() - started)
        obs.on_changes_applied(self.id, self.table, len(work), elapsed)
        if self.engine._wants_applied:
            per = elapsed / max(1, len(work))
            for ev in work:
                obs.on_change_applied(self.id, self.table, ev.action, per)
        self.source_rt.try_ack()

    def _prepare(self, events: Sequence[ChangeEvent]) -> list[ChangeEvent]:
        """Apply filters, transforms and TTL; rows that leave the filter become deletes."""
        out: list[ChangeEvent] = []
        now = datetime.now(UTC) if self.ttl is not None else None
        for ev in events:
            action = ev.action
            if action is INSERT or action is UPDATE:
                row = ev.new_values or {}
                new = self.process_row_no_ttl(row)
                if new is not None and now is not None and self.expired(new, now):
                    new = None
                if new is None:
                    if action is UPDATE:
                        ident = self._transform_identity(ev.old_values or row)
                        out.append(_with(ev, DELETE, None, ident))
                        self.expected_rows -= 1
                    continue
                if new is not row or (action is UPDATE and self.transforms):
                    old = ev.old_values
                    if old is not None and self.transforms:
                        old = self._transform_identity(old)
                    ev = _with(ev, action, new, old)
                if action is INSERT:
                    self.expected_rows += 1
                out.append(ev)
            elif action is DELETE:
                if self.transforms and ev.old_values is not None:
                    ev = _with(ev, action, None, self._transform_identity(ev.old_values))
                self.expected_rows -= 1
                out.append(ev)
            else:
                if action is TRUNCATE:
                    self.expected_rows = 0
                out.append(ev)
        return out

    def process_row_no_ttl(self, row: Row) -> Row | None:
        for f in self.filters:
            if not f.include(self.table, row):
                return None
        for t in self.transforms:
            out = t.transform(self.table, row)
            if out is None:
                return None
            row = out
        return row

    def _transform_identity(self, row: Row) -> Row:
        for t in self.transforms:
            out = t.transform(self.table, row)
            if out is None:
                return row
            row = out
        return row

    def _apply_one(self, ev: ChangeEvent) -> None:
        target = self.target
        if self.is_positioned:
            target.set_change_position(ev.position)
        action = ev.action
        if action is INSERT:
            target.on_insert(self.table, ev.new_values)
        elif action is UPDATE:
            target.on_update(self.table, ev.new_values, ev.old_values)
        elif action is DELETE:
            target.on_delete(self.table, ev.old_values or ev.new_values or {})
        elif action is TRUNCATE:
            target.on_truncate(self.table)

    def _apply_with_retries(self, events: Sequence[ChangeEvent]) -> None:
        start = 0
        if self.is_batch:
            try:
                self.target.apply_changes(self.table, events)
                return
            except BatchApplyError as exc:
                start = exc.index
                first_error: BaseException | None = exc.__cause__ or exc
            except Exception as exc:
                first_error = exc
            logger.warning(
                "pipeline %s: batch apply failed (%s); retrying change by change from #%d",
                self.id,
                first_error,
                start,
            )
        apply_one = self._apply_one
        for i in range(start, len(events)):
            ev = events[i]
            try:
                apply_one(ev)
            except Exception as exc:
                if not self._retry(ev, exc):
                    return

    def _retry(self, ev: ChangeEvent, exc: BaseException) -> bool:
        """Retry one change; True when it finally applied (or was dead-lettered and skipped)."""
        obs = self.engine._obs
        cfg = self.cfg
        backoff = _seconds(cfg.retry_backoff) or 0.1
        cap = _seconds(cfg.retry_max_backoff) or 5.0
        obs.on_change_error(self.id, self.table, ev.action, ErrorInfo.of(exc))
        last: BaseException = exc
        terminal = retry_class(exc) == "terminal"
        for attempt in range(1, 0 if terminal else cfg.max_retries + 1):
            if self._stop_now.wait(backoff):
                break
            backoff = min(cap, backoff * 2)
            try:
                self._apply_one(ev)
                return True
            except Exception as again:
                last = again
                obs.on_change_error(
                    self.id,
                    self.table,
                    ev.action,
                    ErrorInfo.of(again, f"retry {attempt}/{cfg.max_retries}: "),
                )
        tried = (
            "not retried (terminal error)"
            if terminal
            else f"failed after {cfg.max_retries} retries"
        )
        info = ErrorInfo.of(
            last, f"{self.id}: {ev.action} at {self.source_rt.pos_str(ev.position)} {tried}: "
        )
        store = self.engine.dead_letter_store
        if store is not None:
            try:
                store.write(self.id, ev, info, position=self.source_rt.pos_str(ev.position))
                obs.on_dead_letter_written(self.id, ev, info)
            except Exception:
                logger.exception("pipeline %s: dead-letter write failed", self.id)
                store = None
        policy = cfg.error_policy
        if policy is ErrorPolicy.DEAD_LETTER and store is not None:
            return True
        msg = info.message
        if policy is ErrorPolicy.STOP_SOURCE:
            self.source_rt.fail_all(msg)
        elif policy is ErrorPolicy.STOP_ALL:
            self.engine._fail_all(msg)
        else:
            self.fail(msg)
        return False

    def _schema_change(
        self,
        table: TableIdentifier,
        old: Sequence[ColumnDefinition],
        new: Sequence[ColumnDefinition],
        position: Any,
    ) -> None:
        try:
            resp = self.target.on_schema_change(table, old, new)
        except Exception as exc:
            self.fail(f"schema change on {table} failed in the target: {exc}")
            return
        self.columns = list(new)
        action = getattr(resp, "action", SchemaChangeAction.CONTINUE)
        if action is SchemaChangeAction.RE_BASELINE:
            logger.info("pipeline %s: target asked for a re-baseline after schema change", self.id)
            self._reload_in_worker()
        elif action is SchemaChangeAction.ERROR:
            self.fail(
                f"schema change on {table} rejected by target: {getattr(resp, 'message', '')}"
            )

    def _reload_in_worker(self) -> Any:
        """Replace the target's state by a fresh baseline of this table.

        Buffered changes at or before the new baseline's position are skipped afterwards; later
        ones apply. No stale row survives (the target is truncated first)."""
        src = self.source_rt.source
        was = self.state
        self.set_state(PipelineState.BASELINING)
        obs = self.engine._obs
        obs.on_baseline_started(self.id, self.table)
        started = time.monotonic()
        try:
            self.target.on_truncate(self.table)
            loaded = 0

            def cb(table: TableIdentifier, row: Row) -> None:
                nonlocal loaded
                if table == self.table:
                    loaded += self.baseline_rows((row,))

            position = src.baseline([self.table], cb)
        except Exception as exc:
            self.fail(f"reload of {self.table} failed: {exc}")
            raise
        self.complete_baseline(position, loaded, started)
        self.skip_until = position
        if self.state is not PipelineState.ERROR:
            self.set_state(
                PipelineState.PAUSED if was is PipelineState.PAUSED else PipelineState.STREAMING
            )
        return position

    def sweep_ttl(self) -> int:
        target: Any = self.target
        delete = target.on_delete
        if self.ttl is None or not isinstance(target, KeyedTarget):
            return 0
        now = datetime.now(UTC)
        expired = [(k, r) for k, r in target.items() if self.expired(r, now)]
        for key, row in expired:
            try:
                delete(self.table, row)
                self.expected_rows -= 1
                self.engine._obs.on_row_expired(self.id, self.table, str(key))
            except Exception:
                logger.exception("pipeline %s: TTL delete failed for key %s", self.id, key)
        return len(expired)

    # -- called from other threads ----------------------------------------------------------
    def submit(self, kind: str, payload: Any = None) -> Future[Any]:
        fut: Future[Any] = Future()
        if self.thread is None or not self.thread.is_alive():
            fut.set_exception(RuntimeError(f"pipeline {self.id} is not running"))
            return fut
        self.buffer.submit_control(ControlRequest(kind, fut, payload))
        return fut

    def enqueue(
        self, events: Sequence[ChangeEvent], stop: threading.Event, complete: bool = True
    ) -> None:
        try:
            self.buffer.put_batch(events, stop, complete)
        except BufferOverflow as exc:
            policy = self.cfg.error_policy
            msg = f"{self.id}: {exc}"
            if policy is ErrorPolicy.STOP_SOURCE:
                self.source_rt.fail_all(msg)
            elif policy is ErrorPolicy.STOP_ALL:
                self.engine._fail_all(msg)
            else:
                self.fail(msg)


__all__ = ["ControlRequest", "PipelineRuntime", "SchemaChangeEvent"]
