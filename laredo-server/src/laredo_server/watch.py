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

from laredo import Engine
from laredo import events as E
from laredo.events import handles
from laredo.observers import NullObserver
from laredo.secrets import mask_text
from laredo.types import PipelineState

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
    @handles(E.PipelineStateChanged)
    def _pipeline_state_changed(self, ev: E.PipelineStateChanged) -> None:
        if self._watchers:
            err = ""
            if ev.new is PipelineState.ERROR and self._engine is not None:
                for p in self._engine.pipelines():
                    if p.id == ev.pipeline_id:
                        err = p.error or ""
            self._emit(
                ev.pipeline_id,
                self._table_of(ev.pipeline_id),
                PipelineStateChanged(time.time(), ev.pipeline_id, ev.old, ev.new, err),
            )
        self.check_service_state()

    @handles(E.ChangesApplied)
    def _changes_applied(self, ev: E.ChangesApplied) -> None:
        self.last_change_at = time.time()
        if self._watchers:
            self._emit(
                ev.pipeline_id,
                str(ev.table),
                ChangesApplied(time.time(), ev.pipeline_id, ev.table, ev.count),
            )

    @handles(E.SourceConnected)
    def _source_connected(self, ev: E.SourceConnected) -> None:
        self._source_event(ev.source_id, "CONNECTED", ev.source_type)

    @handles(E.SourceDisconnected)
    def _source_disconnected(self, ev: E.SourceDisconnected) -> None:
        self._source_event(ev.source_id, "DISCONNECTED", mask_text(ev.reason))

    @handles(E.AckAdvanced)
    def _ack_advanced(self, ev: E.AckAdvanced) -> None:
        if not self._watchers:
            return
        text = str(ev.position)
        if self._engine is not None:
            with contextlib.suppress(Exception):
                text = str(self._engine.source(ev.source_id).position_to_string(ev.position))
        self._source_event(ev.source_id, "ACK", "", position=text)

    def _source_event(
        self, source_id: str, state: SourceEventKind, reason: str, position: str = ""
    ) -> None:
        if self._watchers:
            self._emit(
                None, None, SourceStateChanged(time.time(), source_id, state, reason, position)
            )

    @handles(E.SnapshotStarted)
    def _snapshot_started(self, ev: E.SnapshotStarted) -> None:
        self._snap(ev.snapshot_id, "started")

    @handles(E.SnapshotCompleted)
    def _snapshot_completed(self, ev: E.SnapshotCompleted) -> None:
        self.last_snapshot_id = ev.snapshot_id
        self.last_snapshot_at = time.time()
        self.last_snapshot_error = None
        self.snapshots_created += 1
        self._snap(ev.snapshot_id, "completed", rows=ev.rows)

    @handles(E.SnapshotFailed)
    def _snapshot_failed(self, ev: E.SnapshotFailed) -> None:
        self.last_snapshot_error = f"{ev.snapshot_id}: {ev.error.message}"
        self._snap(ev.snapshot_id, "failed", message=ev.error.message)

    @handles(E.SnapshotRestoreStarted)
    def _snapshot_restore_started(self, ev: E.SnapshotRestoreStarted) -> None:
        self._snap(ev.snapshot_id, "restore_started")

    @handles(E.SnapshotRestoreCompleted)
    def _snapshot_restore_completed(self, ev: E.SnapshotRestoreCompleted) -> None:
        self.restored[ev.snapshot_id] = self.restored.get(ev.snapshot_id, 0) + 1
        self._snap(ev.snapshot_id, "restore_completed")

    def _snap(
        self, snapshot_id: str, event: SnapshotEventKind, message: str = "", rows: int = 0
    ) -> None:
        if self._watchers:
            self._emit(None, None, SnapshotActivity(time.time(), snapshot_id, event, message, rows))
