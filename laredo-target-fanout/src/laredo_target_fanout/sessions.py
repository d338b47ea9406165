"""Client sessions of a fan-out target: the handshake's choice of mode, each client's read
cursor into the journal, backpressure, and draining.

Guarantees
----------
* A session's cursor is registered under the same lock as the handshake's choice of mode and
  snapshot, so nothing falls between the snapshot (or catch-up) and the live tail.
* A session's pin (the entry after its cursor) keeps that entry in the journal (see
  ``Journal.prune``); a session whose next entry is pruned anyway is told to re-sync.
* ``client_buffer``: a live client more than ``size`` entries behind is disconnected
  (``drop_disconnect``; it reconnects and catches up from the journal) or makes the writer wait
  (``slow_down``, at most ``max_wait`` before it is disconnected).

Every method with ``_locked`` in its name is called with the target's lock held; the others
take it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from laredo.errors import LaredoError, TransientError
from laredo.types import ColumnDefinition, SyncMode, TableIdentifier

from ._filters import RowMatcher
from .events import FanoutClientBackpressure, FanoutClientCaughtUp, FanoutClientDisconnected
from .journal import Journal, JournalEntry
from .options import ClientBufferOptions, GrpcOptions
from .positions import PositionCodec
from .snapshots import FanOutSnapshot, SnapshotKeeper

__all__ = [
    "ClientSession",
    "Exhausted",
    "Handshake",
    "Replaced",
    "ResumeRequest",
    "Sessions",
    "Unavailable",
]


class Unavailable(TransientError):
    """The table takes no client now (draining, closed, baseline not complete): retry later
    or elsewhere. gRPC UNAVAILABLE."""


class Exhausted(TransientError):
    """Too many clients, or a client fell too far behind: gRPC RESOURCE_EXHAUSTED."""


class Replaced(LaredoError):
    """A new connection with the same client id replaced this one: gRPC ABORTED."""


@dataclass(eq=False)
class ClientSession:
    """A connected client, as the registry and ``GetReplicationStatus`` see it."""

    client_id: str
    peer: str
    mode: SyncMode
    cursor: int
    """Every entry up to here has been taken for sending (or filtered out)."""
    catch_up_to: int
    connected_at: datetime
    matcher: RowMatcher | None = None
    state: str = "catching_up"
    closed: bool = False
    close_reason: str = ""
    close_code: str = ""
    """Why the server ends the stream: "overflow", "replaced", "resync", "closed"."""
    go_away_sent: bool = False
    backpressured: bool = False
    waiting_since: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)

    def close_error(self, code: str) -> LaredoError | None:
        """The error that ends the stream for close ``code`` ("overflow", "replaced",
        "closed"), or None when the stream ends normally (after a Resync message, at the
        drain deadline)."""
        if code == "overflow":
            return Exhausted(self.close_reason)
        if code == "replaced":
            return Replaced(self.close_reason)
        if code == "closed":
            return Unavailable("server closed")
        return None


@dataclass(frozen=True, slots=True)
class ResumeRequest:
    """What a connecting client holds: where it can resume from."""

    last_sequence: int = 0
    journal_id: str = ""
    last_position: str = ""
    last_snapshot_id: str = ""
    applied_at_position: int = 0


@dataclass(frozen=True, slots=True)
class Handshake:
    """The server's first answer to a client (see ``_wire.handshake_message``)."""

    mode: SyncMode
    server_current_sequence: int
    journal_oldest_sequence: int
    resume_from_sequence: int
    columns: tuple[ColumnDefinition, ...]
    snapshot_id: str
    journal_id: str
    heartbeat_interval: float
    client_id: str


SnapshotNow = Callable[[], tuple[FanOutSnapshot, bool]]
"""Returns a snapshot at the current sequence and whether it was made now (lock held)."""


class Sessions:
    """The connected clients of one target; see the module docstring."""

    def __init__(
        self,
        *,
        lock: threading.Condition,
        journal: Journal,
        snapshots: SnapshotKeeper,
        grpc: GrpcOptions,
        client_buffer: ClientBufferOptions,
        emit: Callable[..., None],
        stats: dict[str, int],
    ) -> None:
        self._cond = lock
        self.journal = journal
        self.snapshots = snapshots
        self.grpc = grpc
        self.client_buffer = client_buffer
        self._emit = emit
        self.stats = stats
        self.clients: dict[str, ClientSession] = {}
        self.archive: Any = None
        """A ``ColdArchive`` (``archive { uri }``): replays for clients behind the journal."""
        self.drain_state: tuple[str, float, int] | None = None
        """``(reason, monotonic deadline, deadline in unix ms)`` once draining."""
        self.closed = False

    # ------------------------------------------------------------------ handshake
    def check_open_locked(self) -> None:
        if self.closed or self.drain_state is not None:
            raise Unavailable("server is draining; reconnect to another instance")

    def open_locked(
        self,
        client_id: str,
        peer: str,
        matcher: RowMatcher | None,
        resume: ResumeRequest,
        *,
        codec: PositionCodec,
        table: TableIdentifier | None,
        columns: tuple[ColumnDefinition, ...],
        heartbeat_interval: float,
        snapshot_now: SnapshotNow,
        prepared: Any = None,
    ) -> tuple[ClientSession, Handshake, FanOutSnapshot | None, bool]:
        """Register a client and choose its mode, atomically with the journal. Returns the
        session, the handshake, the snapshot to send first (FULL_SNAPSHOT) and whether that
        snapshot was made for it. ``prepared``: the cold archive's replay, read beforehand
        without the lock (:meth:`needs_archive_locked`, ``ColdArchive.prepare``)."""
        existing = self.clients.get(client_id)
        max_clients = self.grpc.max_clients
        if existing is None and max_clients and len(self.clients) >= max_clients:
            raise Exhausted(
                f"max clients reached ({max_clients}) for table {table}; "
                "raise grpc.max_clients or add a fan-out instance"
            )
        if existing is not None:
            self.close_locked(
                existing, "replaced", f"replaced by a new connection with client id {client_id!r}"
            )
        j = self.journal
        cur = j.current_sequence
        oldest = j.oldest_sequence
        new_snapshot = False
        snapshot: FanOutSnapshot | None = None
        mode, resume_at = self._mode_locked(resume, codec)
        snap_id = resume.last_snapshot_id if mode is SyncMode.DELTA_FROM_SNAPSHOT else ""
        replay = None
        if mode is SyncMode.FULL_SNAPSHOT and self.archive is not None and prepared is not None:
            mine = resume.last_sequence if resume.journal_id == j.journal_id else None
            replay = self.archive.place(prepared, j, codec, mine)
            if replay is not None:
                mode, resume_at = SyncMode.DELTA, replay.start
        if mode is SyncMode.FULL_SNAPSHOT:
            # share a recent retained snapshot (then catch up from the journal, pinned)
            # rather than copying the state for every connecting client
            latest = self.snapshots.latest
            if (
                latest is not None
                and latest.journal_id == j.journal_id
                and cur - latest.sequence <= self.client_buffer.size
                and (latest.sequence == cur or (oldest and latest.sequence >= oldest - 1))
            ):
                snapshot = latest
            else:
                snapshot, new_snapshot = snapshot_now()
            snap_id = snapshot.snapshot_id
            resume_at = snapshot.sequence
        session = ClientSession(
            client_id=client_id,
            peer=peer,
            mode=mode,
            cursor=resume_at,
            catch_up_to=cur,
            connected_at=datetime.now(UTC),
            matcher=matcher,
        )
        if replay is not None:
            session.extra["archive"] = replay  # served first by read_batch (see .archive)
        self.clients[client_id] = session
        handshake = Handshake(
            mode=mode,
            server_current_sequence=cur,
            journal_oldest_sequence=oldest,
            resume_from_sequence=resume_at,
            columns=columns,
            snapshot_id=snap_id,
            journal_id=j.journal_id,
            heartbeat_interval=heartbeat_interval,
            client_id=client_id,
        )
        return session, handshake, snapshot, new_snapshot

    def needs_archive_locked(self, resume: ResumeRequest, codec: PositionCodec) -> bool:
        """A client resuming at ``resume`` would get a full snapshot, and the cold archive
        might spare it (read the archive then, without the lock, and open with it)."""
        return (
            self.archive is not None
            and bool(resume.last_position)
            and self._mode_locked(resume, codec)[0] is SyncMode.FULL_SNAPSHOT
        )

    def _mode_locked(self, resume: ResumeRequest, codec: PositionCodec) -> tuple[SyncMode, int]:
        """The mode and the sequence to resume after, from the journal and retained
        snapshots alone (no archive)."""
        j = self.journal
        cur = j.current_sequence
        oldest = j.oldest_sequence
        floor = oldest - 1 if oldest else cur  # the oldest sequence a reader may resume after
        # a) same journal: the client's sequence is exact
        last = resume.last_sequence
        if resume.journal_id == j.journal_id and 0 < last <= cur and last >= floor:
            return SyncMode.DELTA, last
        return self._choose_locked(resume, codec, floor)

    def _choose_locked(
        self, resume: ResumeRequest, codec: PositionCodec, floor: int
    ) -> tuple[SyncMode, int]:
        """b) another journal (restart, failover): resume by source position if covered;
        c) a retained snapshot the client holds, with the journal after it; else FULL."""
        j = self.journal
        if resume.last_position:
            at = j.resume_after(
                codec.from_string(resume.last_position), resume.applied_at_position, codec
            )
            if at is not None:
                return SyncMode.DELTA, at
        if resume.last_snapshot_id:
            snap = self.snapshots.find(resume.last_snapshot_id)
            if snap is not None and snap.journal_id == j.journal_id and snap.sequence >= floor:
                return SyncMode.DELTA_FROM_SNAPSHOT, snap.sequence
        return SyncMode.FULL_SNAPSHOT, j.current_sequence

    # ------------------------------------------------------------------ reading
    def read_batch(
        self, session: ClientSession, max_batch: int, timeout: float
    ) -> tuple[int, int, list[JournalEntry]] | str | None:
        """Wait up to ``timeout`` for entries after the session's cursor and take up to
        ``max_batch`` of them: returns ``(after, through, entries)``; ``"resync"`` when the
        next entry was pruned; a close code when the session was closed; None on timeout.

        Entries are taken under the lock and the cursor advances at once, so the live tail
        continues exactly where catch-up stopped."""
        j = self.journal
        with self._cond:
            replay = session.extra.pop("archive", None)
            if replay is not None and not session.closed:  # cold replay first (see .archive)
                session.cursor = replay.resume_at
                return replay.start, replay.resume_at, replay.entries
            if not session.closed and session.cursor >= j.current_sequence and timeout > 0:
                self._cond.wait(timeout)
            if session.closed:
                return session.close_code or "closed"
            entries = j.read(session.cursor, max_batch)
            if entries is None:
                self.close_locked(
                    session,
                    "resync",
                    f"entry {session.cursor + 1} was pruned from the journal (oldest is "
                    f"{j.oldest_sequence})",
                )
                return "resync"
            if not entries:
                return None
            after = session.cursor
            through = entries[-1].sequence
            session.cursor = through
            caught = session.state == "catching_up" and through >= session.catch_up_to
            if caught:
                session.state = "live"
            depth = j.current_sequence - through
            size = self.client_buffer.size
            if depth <= size:
                session.waiting_since = 0.0
                if session.backpressured and depth <= size // 2:
                    session.backpressured = False  # one event per episode, not per batch
            if self.client_buffer.policy == "slow_down":
                self._cond.notify_all()
        if caught:
            self._emit(FanoutClientCaughtUp, session.client_id, through)
        return after, through, entries

    def mark_caught_up(self, session: ClientSession) -> None:
        """A session with nothing to catch up on (its cursor is already current)."""
        with self._cond:
            if session.state != "catching_up" or session.cursor < session.catch_up_to:
                return
            session.state = "live"
        self._emit(FanoutClientCaughtUp, session.client_id, session.cursor)

    def linger(self) -> float:
        """How long a stream lets changes accumulate between two messages: ``grpc.linger``,
        or by default 0.2 ms per connected client, between 1 ms and 20 ms."""
        configured = self.grpc.linger
        if configured is not None:
            return float(configured)
        return min(0.02, max(0.001, 0.0002 * len(self.clients)))

    # ------------------------------------------------------------------ closing
    def close(self, session: ClientSession, reason: str) -> None:
        """The stream ended (client gone, error, drain): unregister and unpin."""
        with self._cond:
            if session.extra.get("ended"):
                return
            session.extra["ended"] = True
            timer = session.extra.pop("timer", None)
            if timer is not None:
                timer.cancel()
            if self.clients.get(session.client_id) is session:
                del self.clients[session.client_id]
            if not session.closed:
                session.closed = True
                session.close_reason = reason
            self._cond.notify_all()
        self._emit(FanoutClientDisconnected, session.client_id, session.close_reason or reason)

    def close_locked(self, s: ClientSession, code: str, reason: str) -> None:
        """Server-side close: unregister and unpin now; the stream sends the reason when it
        next runs, and is cancelled if it stays blocked in a send."""
        if s.closed:
            return
        s.closed = True
        s.close_code = code
        s.close_reason = reason
        if self.clients.get(s.client_id) is s:
            del self.clients[s.client_id]
        if code == "resync":
            self.stats["resyncs"] += 1
        cancel = s.extra.get("cancel")
        if cancel is not None:
            timer = threading.Timer(1.0, cancel)
            timer.daemon = True
            timer.start()
            s.extra["timer"] = timer
        self._cond.notify_all()

    def close_all_locked(self, code: str, reason: str) -> None:
        for s in list(self.clients.values()):
            self.close_locked(s, code, reason)

    def shut_locked(self) -> None:
        """Refuse new sessions and close every open one ("closed")."""
        self.closed = True
        self.close_all_locked("closed", "server closed")
        self._cond.notify_all()

    def drain(self, reason: str, timeout: float) -> None:
        """Send GoAway to every client (streams read ``drain_state``); new sessions are
        refused from now on. Idempotent: the first deadline stays."""
        with self._cond:
            if self.drain_state is None:
                deadline = time.monotonic() + timeout
                self.drain_state = (reason, deadline, int((time.time() + timeout) * 1000))
            self._cond.notify_all()

    def wait_empty(self, timeout: float) -> None:
        """Wait until every client left, at most ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while self.clients and time.monotonic() < deadline:
                self._cond.wait(min(0.05, max(0.0, deadline - time.monotonic())))

    # ------------------------------------------------------------------ the journal's pins
    def pins_locked(self) -> list[int]:
        """The next sequence each open session needs."""
        return [c.cursor + 1 for c in self.clients.values() if not c.closed]

    def resync_unpinned_locked(self) -> None:
        """Sessions whose next entry was pruned (the journal's hard cap) re-sync."""
        first = self.journal.first_sequence
        for c in list(self.clients.values()):
            if not c.closed and c.cursor + 1 < first and "archive" not in c.extra:
                self.close_locked(c, "resync", "fell more than twice journal.max_entries behind")

    # ------------------------------------------------------------------ backpressure
    def check_buffers_locked(self) -> None:
        size = self.client_buffer.size
        cur = self.journal.current_sequence
        drop = self.client_buffer.policy == "drop_disconnect"
        for s in list(self.clients.values()):
            if s.closed or s.state == "catching_up":
                continue
            depth = cur - s.cursor
            if depth > size:
                if not s.backpressured:
                    s.backpressured = True
                    s.waiting_since = time.monotonic()
                    self._emit(FanoutClientBackpressure, s.client_id, depth)
                if drop:
                    self.stats["dropped_clients"] += 1
                    self.close_locked(
                        s,
                        "overflow",
                        f"client buffer overflow: {depth} entries behind (client_buffer.size "
                        f"= {size}, policy drop_disconnect); reconnect to catch up",
                    )
            elif s.backpressured and depth <= size // 2:
                s.backpressured = False

    def slow_down(self) -> None:
        """``slow_down`` policy: wait while a live client is more than ``size`` behind,
        disconnecting one that made the writer wait more than ``max_wait``."""
        size = self.client_buffer.size
        max_wait = self.client_buffer.max_wait or 30.0
        with self._cond:
            while not self.closed:
                cur = self.journal.current_sequence
                slow = [
                    s
                    for s in self.clients.values()
                    if not s.closed and s.state != "catching_up" and cur - s.cursor > size
                ]
                if not slow:
                    return
                now = time.monotonic()
                for s in slow:
                    if not s.waiting_since:
                        s.waiting_since = now
                    if now - s.waiting_since > max_wait:
                        self.stats["dropped_clients"] += 1
                        self.close_locked(
                            s,
                            "overflow",
                            f"client made the writer wait more than {max_wait:g} s "
                            "(client_buffer.max_wait, policy slow_down)",
                        )
                self._cond.wait(0.05)

    # ------------------------------------------------------------------ status
    def describe_locked(self) -> list[dict[str, Any]]:
        cur = self.journal.current_sequence
        draining = self.drain_state is not None
        return [
            {
                "client_id": s.client_id,
                "peer": s.peer,
                "mode": s.mode.value,
                "state": "draining"
                if (draining and s.state == "live")
                else ("backpressured" if s.backpressured else s.state),
                "current_sequence": s.cursor,
                "behind_count": cur - s.cursor,
                "buffer_depth": min(cur - s.cursor, self.client_buffer.size),
                "connected_at": s.connected_at,
            }
            for s in self.clients.values()
        ]
