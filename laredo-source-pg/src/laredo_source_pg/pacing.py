""":class:`SessionPacer`: the timing of one replication session outside its per-message path.

It owns the standby status updates (``flush = apply = acked``: PostgreSQL may discard WAL only
up to what the handler acknowledged), the keepalive requests that fetch the server's position
for heartbeats (right after a burst of changes, and every ``heartbeat_interval`` while idle),
the heartbeats themselves (outside a transaction only), the catalog check, the stop check and
the wait on the socket when it is drained. The session loop calls it when the socket is drained,
for a keepalive message and every 512 messages; per message it only sets :attr:`fresh` (a
transaction arrived) and, for a transaction with nothing to deliver, :attr:`hb_candidate`.
"""

from __future__ import annotations

import contextlib
import select
import struct
import time
from collections.abc import Callable
from typing import Any

from laredo.batches import STAMP_EPOCH_US

from .catalog_watch import CatalogWatch
from .options import PostgresSourceOptions
from .pgoutput import PgOutputDecoder
from .state import RunState

__all__ = ["HEARTBEAT_GAP", "Lost", "SessionPacer", "StopStream"]

_KEEPALIVE = struct.Struct(">Qqb")
_STATUS = struct.Struct(">cQQQqb")
HEARTBEAT_GAP = 0.02
"""Least time between two keepalive requests made because changes arrived."""


class StopStream(Exception):
    """Internal: ``stop_stream()`` was called."""


class Lost(Exception):
    """Internal: the replication stream ended or the connection failed (never escapes
    :meth:`~.replication.ReplicationStream.run`: it becomes a reconnect or
    ``ReBaselineRequired``)."""


_monotonic = time.monotonic
_select = select.select


def _now_pg_us() -> int:
    return int(time.time() * 1_000_000) - STAMP_EPOCH_US


class SessionPacer:
    """Status, keepalive, heartbeat, catalog-check and wait timing of one session on
    ``pgconn`` (see the module docstring)."""

    __slots__ = (
        "ack_interval",
        "decoder",
        "fresh",
        "hb_candidate",
        "hb_gap",
        "hb_interval",
        "interval",
        "last_request",
        "last_status",
        "on_columns",
        "on_heartbeat",
        "on_resync",
        "pgconn",
        "run",
        "wake",
        "wake_fd",
        "watch",
        "watching",
    )

    def __init__(
        self,
        pgconn: Any,
        run: RunState,
        *,
        decoder: PgOutputDecoder,
        options: PostgresSourceOptions,
        watch: CatalogWatch,
        reporters: tuple[Callable[..., None], Callable[..., None]],
        on_heartbeat: Callable[[int], None] | None,
    ) -> None:
        self.pgconn = pgconn
        self.run = run
        self.decoder = decoder
        self.watch = watch
        self.watching = watch.interval > 0
        self.on_columns, self.on_resync = reporters
        self.on_heartbeat = on_heartbeat
        self.wake = run.wake_r
        self.wake_fd = self.wake.fileno()
        self.interval = options.status_interval
        self.hb_interval = options.heartbeat_interval
        self.hb_gap = min(HEARTBEAT_GAP, self.hb_interval)
        self.ack_interval = min(0.2, self.interval)
        self.last_status = 0.0
        self.last_request = time.monotonic()
        self.fresh = False
        """Changes arrived since the last keepalive request."""
        self.hb_candidate = 0
        """The latest server position known to be outside a transaction."""

    def send_status(self, *, reply: bool) -> None:
        """A standby status update (``reply``: ask for a keepalive at once)."""
        run = self.run
        acked = run.acked
        write = max(run.received, acked)
        msg = _STATUS.pack(b"r", write, acked, acked, _now_pg_us(), 1 if reply else 0)
        if self.pgconn.put_copy_data(msg) != 1:
            raise Lost("could not send standby status")
        self.pgconn.flush()
        run.ack_sent = acked
        self.last_status = time.monotonic()

    def keepalive(self, data: Any) -> None:
        """A primary keepalive message: the server's WAL end, and a reply when it asks."""
        wal_end, _ts, reply = _KEEPALIVE.unpack_from(data, 1)
        run = self.run
        run.server_wal_end = max(run.server_wal_end, wal_end)
        if not self.decoder.in_transaction and wal_end > self.hb_candidate:
            self.hb_candidate = wal_end
        if reply:
            self.send_status(reply=False)

    def busy(self) -> None:
        """Every 512 messages of a busy stream: the stop check, the catalog check outside a
        transaction, and a status update when one is due."""
        run = self.run
        if run.stop.is_set():
            raise StopStream
        now = time.monotonic()
        if self.watching and not self.decoder.in_transaction and self.watch.due(now):
            self.watch.tick(self.decoder.known, run.received, self.on_columns, self.on_resync)
        due = now - self.last_status
        if (run.acked != run.ack_sent and due > self.ack_interval) or due > self.interval:
            self.send_status(reply=False)

    def drained(self, sock: int) -> None:
        """The socket is drained: heartbeat, catalog check and status when due, then wait for
        the socket (or a wake-up) as long as nothing else is due. Inside a transaction (more
        of it is on the way) only a due status update is sent: that path is the busy one."""
        run = self.run
        if run.stop.is_set():
            raise StopStream
        now = _monotonic()
        if self.decoder.in_transaction:
            since = now - self.last_status
            if run.acked != run.ack_sent and since > self.ack_interval / 4:
                self.send_status(reply=False)
            elif since > self.interval:
                self.send_status(reply=True)
            timeout = max(0.005, min(self.interval - (now - self.last_status), 1.0))
        else:
            timeout = self._between_transactions(now)
        wake_fd = self.wake_fd
        run.waiting = True
        try:
            readable, _, _ = _select([sock, wake_fd], [], [], timeout)
        finally:
            run.waiting = False
        if wake_fd in readable:
            with contextlib.suppress(BlockingIOError):
                self.wake.recv(4096)
        if sock in readable:
            self.pgconn.consume_input()

    def _between_transactions(self, now: float) -> float:
        """Outside a transaction: the heartbeat, the catalog check, a keepalive request or a
        status update when due; returns how long to wait."""
        run = self.run
        hb = self.hb_candidate
        beat = self.on_heartbeat
        if beat is not None and hb > run.last_heartbeat and hb > run.delivered:
            # After everything received: nothing at or before it is still to come (the engine
            # orders it after the changes it queued).
            run.last_heartbeat = hb
            beat(hb)
        if self.watching and self.watch.due(now):
            passed = max(run.received, hb)
            self.watch.tick(self.decoder.known, passed, self.on_columns, self.on_resync)
        since_request = now - self.last_request
        if since_request >= self.hb_interval or (self.fresh and since_request >= self.hb_gap):
            # Ask for the server's position: a keepalive answers at once.
            self.send_status(reply=True)
            self.last_request = self.last_status
            self.fresh = False
        elif run.acked != run.ack_sent and now - self.last_status > self.ack_interval / 4:
            self.send_status(reply=False)
        elif now - self.last_status > self.interval:
            self.send_status(reply=True)
        wait = (self.hb_gap if self.fresh else self.hb_interval) - (now - self.last_request)
        return max(0.005, min(wait, self.interval - (now - self.last_status), 1.0))
