"""The engine's scheduler thread: ACK ticks, scheduled snapshots, lag, source reconnects.

Every 50 ms it asks sources whose pipelines have buffering targets to acknowledge (a buffering
target becomes durable on its own schedule, not when a change is applied), turns a source's own
reconnects into observer events, takes the scheduled snapshot when due and the engine is ready,
and reports each source's lag every ``lag_interval``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping

from ..contracts import EngineObserver
from ..events import LagUpdated, SourceConnected, SourceDisconnected
from ..types import SourceState
from .source_reader import SourceReader

logger = logging.getLogger(__name__)

__all__ = ["Scheduler"]

TICK = 0.05


class Scheduler:
    """Runs in its own daemon thread from :meth:`start` until :meth:`stop`."""

    def __init__(
        self,
        readers: Mapping[str, SourceReader],
        observer: EngineObserver,
        *,
        snapshot_every: float | None,
        snapshot_due_since: Callable[[], float],
        take_snapshot: Callable[[], object],
        is_ready: Callable[[], bool],
        lag_interval: float,
    ) -> None:
        self.readers = readers
        self.observer = observer
        self.snapshot_every = snapshot_every
        self.snapshot_due_since = snapshot_due_since
        self.take_snapshot = take_snapshot
        self.is_ready = is_ready
        self.lag_interval = lag_interval
        self._stop = threading.Event()
        self._seen: dict[str, SourceState] = {}
        self._failed_at = 0.0
        self.thread: threading.Thread | None = None

    def start(self) -> None:
        self.thread = threading.Thread(target=self.run, name="laredo-scheduler", daemon=True)
        self.thread.start()

    def stop(self, timeout: float = 1.0) -> None:
        self._stop.set()
        if self.thread is not None:
            self.thread.join(timeout)

    def run(self) -> None:
        last_lag = time.monotonic()
        while not self._stop.wait(TICK):
            now = time.monotonic()
            self.tick(now)
            if now - last_lag >= self.lag_interval:
                last_lag = now
                self.report_lag()

    def tick(self, now: float) -> None:
        """One scheduler pass (ACKs, reconnect events, a due snapshot)."""
        for reader in list(self.readers.values()):
            if any(p.has_durable_position for p in reader.pipelines):
                reader.try_ack()
        self.watch_source_states()
        every = self.snapshot_every
        since = max(self.snapshot_due_since(), self._failed_at)
        if every and now - since >= every and self.is_ready():
            try:
                self.take_snapshot()
            except Exception as exc:
                logger.warning("scheduled snapshot failed: %s", exc)
                self._failed_at = now  # try again one interval later, not every tick

    def report_lag(self) -> None:
        for reader in list(self.readers.values()):
            try:
                lag = reader.source.get_lag()
                self.observer.on_event(LagUpdated(reader.id, lag.lag_bytes, lag.lag_time))
            except Exception:
                logger.debug("lag of %s unavailable", reader.id, exc_info=True)

    def watch_source_states(self) -> None:
        """Turn a source's own reconnects into observer events (sources have no observer)."""
        for reader in list(self.readers.values()):
            try:
                state = _state(reader.source.state())
            except Exception:
                continue
            before = self._seen.get(reader.id)
            if state is None or state == before:
                continue
            self._seen[reader.id] = state
            if state is SourceState.RECONNECTING:
                self.observer.on_event(
                    SourceDisconnected(reader.id, "connection lost; reconnecting")
                )
            elif state is SourceState.STREAMING and before is SourceState.RECONNECTING:
                self.observer.on_event(SourceConnected(reader.id, type(reader.source).__name__))


def _state(value: object) -> SourceState | None:
    """A source's state as the enum (lenient with sources that return its text)."""
    if isinstance(value, SourceState):
        return value
    try:
        return SourceState(str(getattr(value, "value", value)))
    except ValueError:
        return None
