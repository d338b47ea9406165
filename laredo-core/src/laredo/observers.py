"""Engine observers: ``NullObserver`` (the base every observer subclasses), the composite,
logging and recording observers, and :func:`implements`.

The contract is :class:`laredo.contracts.EngineObserver`. Observers are called synchronously
from engine threads and must not block. An observer that raises is logged and otherwise ignored:
observability never breaks the data path. Per-change events (``on_change_received``,
``on_change_applied``, ``on_buffer_depth_changed``) cost a call per change, so the engine emits
them only to observers that :func:`implements` them.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable
from datetime import timedelta
from typing import Any

from .contracts import EngineObserver
from .types import (
    ChangeAction,
    ChangeEvent,
    ErrorInfo,
    PipelineState,
    Position,
    SchemaChangeEvent,
    SyncMode,
    TableIdentifier,
)

logger = logging.getLogger(__name__)

__all__ = [
    "EVENT_NAMES",
    "CompositeObserver",
    "LoggingObserver",
    "NullObserver",
    "RecordingObserver",
    "composite",
    "implements",
]


class NullObserver(EngineObserver):
    """Does nothing. Subclass it and override the events you care about.

    Every event method forwards to :meth:`handle_event` (a no-op here), so an observer that
    treats all events alike (composite, logging, recording) overrides that one method.
    """

    def handle_event(self, name: str, *args: Any) -> None:
        """Called by every event method with the event's name (``on_...``) and arguments;
        override it to treat all events alike."""

    # lifecycle
    def on_source_connected(self, source_id: str, source_type: str) -> None:
        self.handle_event("on_source_connected", source_id, source_type)

    def on_source_disconnected(self, source_id: str, reason: str) -> None:
        self.handle_event("on_source_disconnected", source_id, reason)

    def on_pipeline_state_changed(
        self,
        pipeline_id: str,
        old: PipelineState,
        new: PipelineState,
    ) -> None:
        self.handle_event("on_pipeline_state_changed", pipeline_id, old, new)

    def on_pipeline_added(self, pipeline_id: str, source_id: str, table: TableIdentifier) -> None:
        self.handle_event("on_pipeline_added", pipeline_id, source_id, table)

    def on_pipeline_removed(self, pipeline_id: str, source_id: str, reason: str) -> None:
        self.handle_event("on_pipeline_removed", pipeline_id, source_id, reason)

    # baseline
    def on_baseline_started(self, pipeline_id: str, table: TableIdentifier) -> None:
        self.handle_event("on_baseline_started", pipeline_id, table)

    def on_baseline_row_loaded(
        self,
        pipeline_id: str,
        table: TableIdentifier,
        row_count: int,
    ) -> None:
        self.handle_event("on_baseline_row_loaded", pipeline_id, table, row_count)

    def on_baseline_completed(
        self,
        pipeline_id: str,
        table: TableIdentifier,
        total_rows: int,
        duration: timedelta,
    ) -> None:
        self.handle_event("on_baseline_completed", pipeline_id, table, total_rows, duration)

    def on_rebaseline_triggered(self, source_id: str) -> None:
        self.handle_event("on_rebaseline_triggered", source_id)

    # streaming
    def on_change_received(
        self,
        pipeline_id: str,
        table: TableIdentifier,
        action: ChangeAction,
        position: Position,
    ) -> None:
        self.handle_event("on_change_received", pipeline_id, table, action, position)

    def on_change_applied(
        self,
        pipeline_id: str,
        table: TableIdentifier,
        action: ChangeAction,
        duration: timedelta,
    ) -> None:
        self.handle_event("on_change_applied", pipeline_id, table, action, duration)

    def on_changes_applied(
        self,
        pipeline_id: str,
        table: TableIdentifier,
        count: int,
        duration: timedelta,
    ) -> None:
        self.handle_event("on_changes_applied", pipeline_id, table, count, duration)

    def on_change_error(
        self,
        pipeline_id: str,
        table: TableIdentifier,
        action: ChangeAction,
        error: ErrorInfo,
    ) -> None:
        self.handle_event("on_change_error", pipeline_id, table, action, error)

    # acknowledgement
    def on_ack_advanced(self, source_id: str, position: Position) -> None:
        self.handle_event("on_ack_advanced", source_id, position)

    # backpressure
    def on_buffer_depth_changed(self, pipeline_id: str, depth: int, capacity: int) -> None:
        self.handle_event("on_buffer_depth_changed", pipeline_id, depth, capacity)

    def on_buffer_policy_triggered(self, pipeline_id: str, policy: str) -> None:
        self.handle_event("on_buffer_policy_triggered", pipeline_id, policy)

    # snapshots
    def on_snapshot_started(self, snapshot_id: str) -> None:
        self.handle_event("on_snapshot_started", snapshot_id)

    def on_snapshot_completed(
        self,
        snapshot_id: str,
        tables: int,
        rows: int,
        size_bytes: int,
        duration: timedelta,
    ) -> None:
        self.handle_event("on_snapshot_completed", snapshot_id, tables, rows, size_bytes, duration)

    def on_snapshot_failed(self, snapshot_id: str, error: ErrorInfo) -> None:
        self.handle_event("on_snapshot_failed", snapshot_id, error)

    def on_snapshot_restore_started(self, snapshot_id: str) -> None:
        self.handle_event("on_snapshot_restore_started", snapshot_id)

    def on_snapshot_restore_completed(self, snapshot_id: str, duration: timedelta) -> None:
        self.handle_event("on_snapshot_restore_completed", snapshot_id, duration)

    # schema
    def on_schema_change(
        self,
        source_id: str,
        table: TableIdentifier,
        event: SchemaChangeEvent,
    ) -> None:
        self.handle_event("on_schema_change", source_id, table, event)

    # lag
    def on_lag_updated(self, source_id: str, lag_bytes: int, lag_time: timedelta | None) -> None:
        self.handle_event("on_lag_updated", source_id, lag_bytes, lag_time)

    # dead letters, TTL, validation
    def on_dead_letter_written(
        self,
        pipeline_id: str,
        change: ChangeEvent,
        error: ErrorInfo,
    ) -> None:
        self.handle_event("on_dead_letter_written", pipeline_id, change, error)

    def on_row_expired(self, pipeline_id: str, table: TableIdentifier, key: str) -> None:
        self.handle_event("on_row_expired", pipeline_id, table, key)

    def on_validation_result(
        self,
        pipeline_id: str,
        table: TableIdentifier,
        source_count: int,
        target_count: int,
        match: bool,
    ) -> None:
        self.handle_event(
            "on_validation_result", pipeline_id, table, source_count, target_count, match
        )

    # fan-out
    def on_fanout_client_connected(self, pipeline_id: str, client_id: str, mode: SyncMode) -> None:
        self.handle_event("on_fanout_client_connected", pipeline_id, client_id, mode)

    def on_fanout_client_disconnected(self, pipeline_id: str, client_id: str, reason: str) -> None:
        self.handle_event("on_fanout_client_disconnected", pipeline_id, client_id, reason)

    def on_fanout_client_caught_up(self, pipeline_id: str, client_id: str, seq: int) -> None:
        self.handle_event("on_fanout_client_caught_up", pipeline_id, client_id, seq)

    def on_fanout_client_backpressure(self, pipeline_id: str, client_id: str, depth: int) -> None:
        self.handle_event("on_fanout_client_backpressure", pipeline_id, client_id, depth)

    def on_fanout_snapshot_created(
        self,
        pipeline_id: str,
        snapshot_id: str,
        seq: int,
        rows: int,
    ) -> None:
        self.handle_event("on_fanout_snapshot_created", pipeline_id, snapshot_id, seq, rows)

    def on_fanout_journal_pruned(self, pipeline_id: str, pruned: int, oldest_seq: int) -> None:
        self.handle_event("on_fanout_journal_pruned", pipeline_id, pruned, oldest_seq)


EVENT_NAMES: tuple[str, ...] = tuple(
    n for n in vars(NullObserver) if n.startswith("on_") and callable(getattr(NullObserver, n))
)


def implements(observer: object, name: str) -> bool:
    """Does ``observer`` (or any child of a composite) really handle event ``name``? False for
    a ``NullObserver`` subclass that neither overrides the event nor ``handle_event``."""
    if isinstance(observer, CompositeObserver):
        return any(implements(c, name) for c in observer.observers)
    if not isinstance(observer, NullObserver):
        return callable(getattr(observer, name, None))
    cls = type(observer)
    return getattr(cls, name) is not getattr(NullObserver, name) or (
        cls.handle_event is not NullObserver.handle_event
    )


class CompositeObserver(NullObserver):
    """Fans every event out to its observers in order; ``None`` entries are dropped."""

    def __init__(self, *observers: Any) -> None:
        flat: list[Any] = []
        for o in observers:
            if o is None:
                continue
            if isinstance(o, list | tuple):
                flat.extend(x for x in o if x is not None)
            else:
                flat.append(o)
        self.observers = flat

    def add(self, observer: Any) -> None:
        self.observers.append(observer)

    def handle_event(self, name: str, *args: Any) -> None:
        for o in self.observers:
            fn = getattr(o, name, None)
            if fn is None:
                continue
            try:
                fn(*args)
            except Exception:
                logger.exception("observer %r failed in %s", o, name)


class LoggingObserver(NullObserver):
    """Logs lifecycle events at INFO and per-change events at DEBUG."""

    _info = frozenset(
        {
            "on_source_connected",
            "on_source_disconnected",
            "on_pipeline_state_changed",
            "on_pipeline_added",
            "on_pipeline_removed",
            "on_baseline_started",
            "on_baseline_completed",
            "on_rebaseline_triggered",
            "on_snapshot_started",
            "on_snapshot_completed",
            "on_snapshot_failed",
            "on_snapshot_restore_started",
            "on_snapshot_restore_completed",
            "on_schema_change",
            "on_dead_letter_written",
            "on_validation_result",
            "on_change_error",
            "on_buffer_policy_triggered",
            "on_fanout_client_connected",
            "on_fanout_client_disconnected",
        }
    )

    def __init__(self, log: logging.Logger | None = None) -> None:
        self.log = log or logging.getLogger("laredo.events")

    def handle_event(self, name: str, *args: Any) -> None:
        level = logging.INFO if name in self._info else logging.DEBUG
        if self.log.isEnabledFor(level):
            self.log.log(level, "%s %s", name[3:], " ".join(str(a) for a in args))


class RecordingObserver(NullObserver):
    """Records every event as ``(name, args)``; thread-safe. For tests and debugging."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._events: list[tuple[str, tuple[Any, ...]]] = []
        self._cond = threading.Condition(self._lock)

    def handle_event(self, name: str, *args: Any) -> None:
        with self._cond:
            self._events.append((name, args))
            self._cond.notify_all()

    @property
    def events(self) -> list[tuple[str, tuple[Any, ...]]]:
        with self._lock:
            return list(self._events)

    def names(self) -> list[str]:
        return [n for n, _ in self.events]

    def of(self, name: str) -> list[tuple[Any, ...]]:
        if not name.startswith("on_"):
            name = "on_" + name
        return [a for n, a in self.events if n == name]

    def count(self, name: str) -> int:
        return len(self.of(name))

    def wait_for(self, name: str, count: int = 1, timeout: float = 10.0) -> bool:
        if not name.startswith("on_"):
            name = "on_" + name
        with self._cond:
            return self._cond.wait_for(
                lambda: sum(1 for n, _ in self._events if n == name) >= count, timeout
            )

    def clear(self) -> None:
        with self._lock:
            self._events.clear()


def composite(observers: Iterable[Any]) -> NullObserver:
    """One observer for many (``NullObserver`` for none; the observer itself for one)."""
    obs = [o for o in observers if o is not None]
    if not obs:
        return NullObserver()
    if len(obs) == 1 and isinstance(obs[0], NullObserver):
        return obs[0]
    return CompositeObserver(*obs)
