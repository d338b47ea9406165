"""Engine observers: ``NullObserver`` (the full event list), composite, logging and recording.

Observers are called synchronously from engine threads and must not block. An observer that
raises is logged and otherwise ignored: observability never breaks the data path.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable
from datetime import timedelta
from typing import Any

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


class NullObserver:
    """Does nothing. Subclass it and override the events you care about."""

    # lifecycle
    def on_source_connected(self, source_id: str, source_type: str) -> None: ...
    def on_source_disconnected(self, source_id: str, reason: str) -> None: ...
    def on_pipeline_state_changed(
        self, pipeline_id: str, old: PipelineState, new: PipelineState
    ) -> None: ...

    # baseline
    def on_baseline_started(self, pipeline_id: str, table: TableIdentifier) -> None: ...
    def on_baseline_row_loaded(
        self, pipeline_id: str, table: TableIdentifier, row_count: int
    ) -> None: ...
    def on_baseline_completed(
        self, pipeline_id: str, table: TableIdentifier, total_rows: int, duration: timedelta
    ) -> None: ...
    def on_rebaseline_triggered(self, source_id: str) -> None: ...

    # streaming
    def on_change_received(
        self, pipeline_id: str, table: TableIdentifier, action: ChangeAction, position: Position
    ) -> None: ...
    def on_change_applied(
        self, pipeline_id: str, table: TableIdentifier, action: ChangeAction, duration: timedelta
    ) -> None: ...
    def on_changes_applied(
        self, pipeline_id: str, table: TableIdentifier, count: int, duration: timedelta
    ) -> None: ...
    def on_change_error(
        self, pipeline_id: str, table: TableIdentifier, action: ChangeAction, error: ErrorInfo
    ) -> None: ...

    # ack
    def on_ack_advanced(self, source_id: str, position: Position) -> None: ...

    # backpressure
    def on_buffer_depth_changed(self, pipeline_id: str, depth: int, capacity: int) -> None: ...
    def on_buffer_policy_triggered(self, pipeline_id: str, policy: str) -> None: ...

    # snapshots
    def on_snapshot_started(self, snapshot_id: str) -> None: ...
    def on_snapshot_completed(
        self, snapshot_id: str, tables: int, rows: int, size_bytes: int, duration: timedelta
    ) -> None: ...
    def on_snapshot_failed(self, snapshot_id: str, error: ErrorInfo) -> None: ...
    def on_snapshot_restore_started(self, snapshot_id: str) -> None: ...
    def on_snapshot_restore_completed(self, snapshot_id: str, duration: timedelta) -> None: ...

    # schema
    def on_schema_change(
        self, source_id: str, table: TableIdentifier, event: SchemaChangeEvent
    ) -> None: ...

    # lag
    def on_lag_updated(
        self, source_id: str, lag_bytes: int, lag_time: timedelta | None
    ) -> None: ...

    # dead letters, ttl, validation
    def on_dead_letter_written(
        self, pipeline_id: str, change: ChangeEvent, error: ErrorInfo
    ) -> None: ...
    def on_row_expired(self, pipeline_id: str, table: TableIdentifier, key: str) -> None: ...
    def on_validation_result(
        self,
        pipeline_id: str,
        table: TableIdentifier,
        source_count: int,
        target_count: int,
        match: bool,
    ) -> None: ...

    # fan-out
    def on_fanout_client_connected(
        self, pipeline_id: str, client_id: str, mode: SyncMode
    ) -> None: ...
    def on_fanout_client_disconnected(
        self, pipeline_id: str, client_id: str, reason: str
    ) -> None: ...
    def on_fanout_client_caught_up(self, pipeline_id: str, client_id: str, seq: int) -> None: ...
    def on_fanout_client_backpressure(
        self, pipeline_id: str, client_id: str, depth: int
    ) -> None: ...
    def on_fanout_snapshot_created(
        self, pipeline_id: str, snapshot_id: str, seq: int, rows: int
    ) -> None: ...
    def on_fanout_journal_pruned(self, pipeline_id: str, pruned: int, oldest_seq: int) -> None: ...


EVENT_NAMES: tuple[str, ...] = tuple(
    n for n in vars(NullObserver) if n.startswith("on_") and callable(getattr(NullObserver, n))
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


def _make_fanout(name: str) -> Any:
    def fanout(self: CompositeObserver, *args: Any) -> None:
        for o in self.observers:
            fn = getattr(o, name, None)
            if fn is None:
                continue
            try:
                fn(*args)
            except Exception:
                logger.exception("observer %r failed in %s", o, name)

    fanout.__name__ = name
    return fanout


for _n in EVENT_NAMES:
    setattr(CompositeObserver, _n, _make_fanout(_n))


class LoggingObserver(NullObserver):
    """Logs lifecycle events at INFO and per-change events at DEBUG."""

    _info = frozenset(
        {
            "on_source_connected",
            "on_source_disconnected",
            "on_pipeline_state_changed",
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


def _make_log(name: str) -> Any:
    def log_event(self: LoggingObserver, *args: Any) -> None:
        level = logging.INFO if name in LoggingObserver._info else logging.DEBUG
        if self.log.isEnabledFor(level):
            self.log.log(level, "%s %s", name[3:], " ".join(str(a) for a in args))

    log_event.__name__ = name
    return log_event


for _n in EVENT_NAMES:
    setattr(LoggingObserver, _n, _make_log(_n))


class RecordingObserver(NullObserver):
    """Records every event as ``(name, args)``; thread-safe. For tests and debugging."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._events: list[tuple[str, tuple[Any, ...]]] = []
        self._cond = threading.Condition(self._lock)

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


def _make_record(name: str) -> Any:
    def record(self: RecordingObserver, *args: Any) -> None:
        with self._cond:
            self._events.append((name, args))
            self._cond.notify_all()

    record.__name__ = name
    return record


for _n in EVENT_NAMES:
    setattr(RecordingObserver, _n, _make_record(_n))


def composite(observers: Iterable[Any]) -> NullObserver:
    obs = [o for o in observers if o is not None]
    if not obs:
        return NullObserver()
    if len(obs) == 1 and isinstance(obs[0], NullObserver):
        return obs[0]
    return CompositeObserver(*obs)
