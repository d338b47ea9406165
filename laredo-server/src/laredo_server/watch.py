"""The watch hub: an engine observer that turns engine events into status events for
``WatchStatus`` streams, and keeps the last-change and snapshot facts ``GetStatus`` reports.

Events are Python values (:mod:`laredo_server.state`); each watcher has a bounded queue, and
an event that does not fit is counted (``take_dropped``) instead of blocking the engine.
"""

from __future__ import annotations

import contextlib
import queue
import threading
import time
from collections.abc import Callable
from datetime import timedelta

from laredo import Engine
from laredo.observers import NullObserver
from laredo.secrets import mask_text
from laredo.types import ErrorInfo, PipelineState, Position, TableIdentifier

from .state import (
    ChangesApplied,
    PipelineStateChanged,
    ServiceState,
    ServiceStateChanged,
    SnapshotActivity,
    SnapshotEventKind,
    SourceEventKind,
    SourceStateChanged,
    StatusEvent,
)

__all__ = ["WatchHub", "Watcher"]


class Watcher:
    """One stream's subscription: the tables and pipeline ids it wants (empty: every one) and
    a queue of at most ``size`` events."""

    def __init__(self, tables: set[str], pids: set[str], size: int) -> None:
        self.tables = tables
        self.pids = pids
        self.queue: queue.Queue[StatusEvent] = queue.Queue(maxsize=size)
        self._dropped = 0
        self._lock = threading.Lock()

    def matches(self, pid: str | None, table: str | None) -> bool:
        if self.pids and pid not in self.pids:
            return False
        return not (self.tables and table not in self.tables)

    def offer(self, ev: StatusEvent) -> None:
        """Queue ``ev``, or count it as dropped when the queue is full (never blocks)."""
        try:
            self.queue.put_nowait(ev)
        except queue.Full:
            with self._lock:
                self._dropped += 1

    def next(self, timeout: float) -> StatusEvent | None:
        """The next event, or None after ``timeout`` seconds without one."""
        try:
            return self.queue.get(timeout=timeout)
        except queue.Empty:
            return None

    def take_dropped(self) -> int:
        """Events dropped since the last call."""
        with self._lock:
            n, self._dropped = self._dropped, 0
        return n


class WatchHub(NullObserver):
    """Observer that feeds WatchStatus streams and keeps the status the OAM service reports.

    ``service_state`` computes the current service state (the runtime's); the hub emits a
    ``ServiceStateChanged`` whenever ``check_service_state`` finds it changed. Call
    ``attach_engine`` with each engine the hub observes.
    """

    def __init__(self, service_state: Callable[[], ServiceState], buffer: int = 16_384) -> None:
        self._compute_state = service_state
        self.buffer = buffer
        self._engine: Engine | None = None
        self._watchers: tuple[Watcher, ...] = ()
        self._lock = threading.Lock()
        self.last_change_at: float | None = None
        self.last_snapshot_id: str | None = None
        self.last_snapshot_at: float | None = None
        self.last_snapshot_error: str | None = None
        self.snapshots_created = 0
        self._service_state: ServiceState | None = None
        self._pipe_table: dict[str, str] = {}
        self.restored: dict[str, int] = {}

    def attach_engine(self, engine: Engine) -> None:
        """Observe ``engine`` from now on (a restore replaces the engine)."""
        self._engine = engine
        self._pipe_table.clear()

    def watch(self, tables: set[str], pids: set[str]) -> Watcher:
        w = Watcher(tables, pids, self.buffer)
        with self._lock:
            self._watchers = (*self._watchers, w)
        return w

    def unwatch(self, w: Watcher) -> None:
        with self._lock:
            self._watchers = tuple(x for x in self._watchers if x is not w)

    def _emit(self, pid: str | None, table: str | None, ev: StatusEvent) -> None:
        for w in self._watchers:
            if w.matches(pid, table) if (pid or table) else not (w.pids or w.tables):
                w.offer(ev)

    def _table_of(self, pid: str) -> str | None:
        t = self._pipe_table.get(pid)
        if t is None and self._engine is not None:
            for cfg in self._engine.pipeline_configs:
                if cfg.pipeline_id() == pid:
                    t = self._pipe_table[pid] = str(cfg.table)
        return t

    def check_service_state(self) -> None:
        """Emit a ``ServiceStateChanged`` if the service state differs from the last one seen."""
        try:
            new = self._compute_state()
        except Exception:
            return
        old = self._service_state
        if new != old:
            self._service_state = new
            if self._watchers:
                self._emit(None, None, ServiceStateChanged(time.time(), old, new))

    # events -------------------------------------------------------------------------------
    def on_pipeline_state_changed(
        self, pipeline_id: str, old: PipelineState, new: PipelineState
    ) -> None:
        if self._watchers:
            err = ""
            if new is PipelineState.ERROR and self._engine is not None:
                for p in self._engine.pipelines():
                    if p.id == pipeline_id:
                        err = p.error or ""
            self._emit(
                pipeline_id,
                self._table_of(pipeline_id),
                PipelineStateChanged(time.time(), pipeline_id, old, new, err),
            )
        self.check_service_state()

    def on_changes_applied(
        self, pipeline_id: str, table: TableIdentifier, count: int, duration: timedelta
    ) -> None:
        self.last_change_at = time.time()
        if self._watchers:
            self._emit(
                pipeline_id, str(table), ChangesApplied(time.time(), pipeline_id, table, count)
            )

    def on_source_connected(self, source_id: str, source_type: str) -> None:
        self._source_event(source_id, "CONNECTED", source_type)

    def on_source_disconnected(self, source_id: str, reason: str) -> None:
        self._source_event(source_id, "DISCONNECTED", mask_text(reason))

    def on_ack_advanced(self, source_id: str, position: Position) -> None:
        if not self._watchers:
            return
        text = str(position)
        if self._engine is not None:
            with contextlib.suppress(Exception):
                text = str(self._engine.source(source_id).position_to_string(position))
        self._source_event(source_id, "ACK", "", position=text)

    def _source_event(
        self, source_id: str, state: SourceEventKind, reason: str, position: str = ""
    ) -> None:
        if self._watchers:
            self._emit(
                None, None, SourceStateChanged(time.time(), source_id, state, reason, position)
            )

    def on_snapshot_started(self, snapshot_id: str) -> None:
        self._snap(snapshot_id, "started")

    def on_snapshot_completed(
        self, snapshot_id: str, tables: int, rows: int, size_bytes: int, duration: timedelta
    ) -> None:
        self.last_snapshot_id = snapshot_id
        self.last_snapshot_at = time.time()
        self.last_snapshot_error = None
        self.snapshots_created += 1
        self._snap(snapshot_id, "completed", rows=rows)

    def on_snapshot_failed(self, snapshot_id: str, error: ErrorInfo) -> None:
        self.last_snapshot_error = f"{snapshot_id}: {error.message}"
        self._snap(snapshot_id, "failed", message=error.message)

    def on_snapshot_restore_started(self, snapshot_id: str) -> None:
        self._snap(snapshot_id, "restore_started")

    def on_snapshot_restore_completed(self, snapshot_id: str, duration: timedelta) -> None:
        self.restored[snapshot_id] = self.restored.get(snapshot_id, 0) + 1
        self._snap(snapshot_id, "restore_completed")

    def _snap(
        self, snapshot_id: str, event: SnapshotEventKind, message: str = "", rows: int = 0
    ) -> None:
        if self._watchers:
            self._emit(None, None, SnapshotActivity(time.time(), snapshot_id, event, message, rows))
