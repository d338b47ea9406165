"""``RunState``: what the parts of one ``PostgresSource`` share while it runs.

The lifecycle state, the stop/close/streaming flags, the stream positions and the reader's
wake-up socket. The facade (:mod:`.source`), the stream (:mod:`.replication`), the baseline and
the lease read and write it; nothing else is shared between them.

Threads: the reader thread writes ``received``, ``delivered``, ``partial``, ``server_wal_end``,
``ack_sent`` and ``last_heartbeat``; ``ack()`` (any thread) writes ``acked`` and pops
``unacked_times``. Single int assignments are atomic under the GIL, which is all the
readers need.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
from collections import deque
from datetime import datetime

from laredo.types import SourceState

logger = logging.getLogger(__name__)

__all__ = ["RunState"]


class RunState:
    """Shared run state of one source (see the module docstring)."""

    def __init__(self, slot_name: str) -> None:
        self.slot_name = slot_name
        self._state = SourceState.CLOSED
        self._lock = threading.RLock()
        self.streaming = threading.Event()
        """Set while ``stream()`` runs."""
        self.stop = threading.Event()
        """Set by ``stop_stream()``: a running ``stream()`` returns."""
        self.closed = threading.Event()
        """Set by ``close()``: waits (lease, baseline) give up."""
        self.paused = False
        self.waiting = False
        """True while the reader waits for its socket (an ack then wakes it)."""
        self.reconnect_attempts_total = 0
        self.slot_lost_total = 0
        """Times the stateful slot was found gone (dropped, not on a promoted standby, a
        restore from a backup) or invalidated."""
        self.slot_lost_reason: str | None = None
        """Why the slot was last lost (None: never in this process)."""
        self.failovers_total = 0
        """Times the replication connection reached a promoted server (a new timeline of the
        same system) or another system than before."""
        self.server: tuple[str, int, str] | None = None
        """``(system identifier, timeline, host:port)`` of the last replication connection."""

        # stream positions (LSNs)
        self.acked = 0
        self.ack_sent = -1
        self.delivered = 0
        self.received = 0
        self.server_wal_end = 0
        self.last_heartbeat = 0
        self.unacked_times: deque[tuple[int, datetime | None]] = deque()
        """(commit end LSN, commit time) of delivered transactions not yet acknowledged."""
        self.partial: tuple[int, int] | None = None
        """``(final_lsn, n)`` while a transaction is passed on before its commit: its first
        ``n`` changes were delivered (a new session skips them when the server resends it)."""

        self.wake_r, self.wake_w = socket.socketpair()
        self.wake_r.setblocking(False)
        self.wake_w.setblocking(False)

    @property
    def state(self) -> SourceState:
        return self._state

    def set_state(self, state: SourceState) -> None:
        with self._lock:
            if self._state != state:
                logger.debug("source %s: %s -> %s", self.slot_name, self._state, state)
            self._state = state

    def restart_at(self, position: int) -> None:
        """A new slot: the stream continues from its consistent point ``position``."""
        self.acked = self.delivered = self.received = position
        self.unacked_times.clear()
        self.partial = None

    def wake(self, reason: bytes) -> None:
        """Wake the reader thread from its ``select`` (no-op if the socket is full)."""
        with contextlib.suppress(OSError):
            self.wake_w.send(reason)
