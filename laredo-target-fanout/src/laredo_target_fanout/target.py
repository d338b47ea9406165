"""``FanOutTarget``: one table's state, a bounded change journal and snapshots, served to many
client replicas (over gRPC by ``service.ReplicationServer``).

The target composes its parts under one lock: ``KeyedRows`` (the state), ``Journal`` (every
change under a sequence number), ``SnapshotKeeper`` (snapshots, their retention and
persistence) and ``Sessions`` (clients, their cursors and backpressure). It imports no gRPC
and starts no server: it is served when built with a ``server`` (the ``replication-fanout``
plugin gives it ``ReplicationServer.serving(grpc)``), which it attaches at ``on_init`` and
detaches at ``on_close``.

Guarantees
----------
* Every applied change is journaled under the next sequence in the same lock acquisition that
  applies it (see ``journal``); clients never miss an entry silently (see ``sessions``).
* Snapshots (in memory, optionally persisted through a ``SnapshotStore``) are taken when the
  baseline completes, every ``snapshot.interval``, right after a truncate and after a schema
  change, and pruned by ``keep_count`` and ``max_age`` (see ``snapshots``).
* ``on_close`` drains: clients get GoAway and are served until ``grpc.drain_timeout`` or until
  they left, then the server is detached and the background threads stop.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Protocol

from laredo.contracts import Observer, PipelineContext
from laredo.errors import ConfigError
from laredo.events import Event
from laredo.observers import CompositeObserver, NullObserver, as_observer
from laredo.types import (
    ChangeAction,
    ChangeEvent,
    ColumnDefinition,
    Position,
    Row,
    SchemaChangeAction,
    SchemaChangeResponse,
    TableIdentifier,
    TableSnapshotInfo,
)

from ._filters import RowMatcher
from .events import FanoutClientConnected, FanoutJournalPruned, FanoutSnapshotCreated
from .journal import Journal, JournalEntry
from .options import GrpcOptions, ReplicationFanoutOptions, coerce_options
from .positions import PositionCodec, PositionFunctions
from .rows import KeyedRows
from .sessions import ClientSession, Exhausted, Handshake, ResumeRequest, Sessions, Unavailable
from .snapshots import FanOutSnapshot, SnapshotKeeper

logger = logging.getLogger(__name__)

__all__ = [
    "ClientSession",
    "Exhausted",
    "FanOutSnapshot",
    "FanOutTarget",
    "JournalEntry",
    "PositionCodec",
    "TargetServer",
    "Unavailable",
]

_INSERT = ChangeAction.INSERT
_UPDATE = ChangeAction.UPDATE
_DELETE = ChangeAction.DELETE
_TRUNCATE = ChangeAction.TRUNCATE
_SCHEMA = ChangeAction.SCHEMA_CHANGE


class TargetServer(Protocol):
    """What serves a target's table to clients (``service.ReplicationServer.serving``)."""

    @property
    def port(self) -> int: ...

    def attach(self, target: FanOutTarget) -> None: ...

    def detach(self, target: FanOutTarget) -> None: ...


class FanOutTarget:
    """Replication fan-out target: see the module docstring.

    ``FanOutTarget(options, server=None)`` with a ``ReplicationFanoutOptions`` (or a mapping),
    or with the options as keywords: ``FanOutTarget(journal={"max_entries": 100_000,
    "max_age": "24h"}, snapshot={...}, grpc={"port": 4002, "max_clients": 0},
    client_buffer={"size": 10_000, "policy": "drop_disconnect"}, heartbeat_interval=5.0,
    observer=None)``. Without ``server`` the target is not served (``laredo.target(
    "replication-fanout", ...)`` serves it on ``grpc``); ``serve=False`` is accepted for
    compatibility and changes nothing.
    """

    target_type = "replication-fanout"
    plugin_name = "replication-fanout"

    def __init__(
        self,
        options: ReplicationFanoutOptions | Mapping[str, Any] | None = None,
        /,
        *,
        server: TargetServer | None = None,
        pipeline_id: str = "",
        serve: bool | None = None,
        **kwargs: Any,
    ) -> None:
        if options is not None and kwargs:
            raise ConfigError("replication-fanout target: pass options or keywords, not both")
        if serve and server is None:
            raise ConfigError(
                "replication-fanout target: serve=True needs server=ReplicationServer.serving("
                'grpc) (or build it with laredo.target("replication-fanout", ...))'
            )
        opts = coerce_options(ReplicationFanoutOptions, options if options is not None else kwargs)
        if server is None and serve is None and "grpc" in opts.model_fields_set and opts.grpc:
            raise ConfigError(
                "replication-fanout target: grpc options were given but nothing serves them; "
                'build it with laredo.target("replication-fanout", ...), or pass '
                "server=ReplicationServer.serving(grpc), or serve=False to keep it unserved"
            )
        self.options = opts
        self.journal_options = opts.journal
        self.snapshot_options = opts.snapshot
        self.grpc_options: GrpcOptions = opts.grpc if opts.grpc is not None else GrpcOptions()
        self.client_buffer = opts.client_buffer
        self.heartbeat_interval: float = opts.heartbeat_interval
        self.max_entries: int = opts.journal.max_entries
        self.max_age: float | None = opts.journal.max_age
        self.observer: Observer = as_observer(opts.observer or NullObserver())
        self.pipeline_id = pipeline_id
        self.codec = PositionCodec()
        self.stats = {"pruned": 0, "dropped_clients": 0, "resyncs": 0, "snapshots": 0}

        self._cond = threading.Condition(threading.Lock())
        self._rows = KeyedRows()
        self._journal = Journal(self.max_entries, self.max_age)
        self._snapshots = SnapshotKeeper(opts.snapshot, self._cond)
        self.sessions = Sessions(
            lock=self._cond,
            journal=self._journal,
            snapshots=self._snapshots,
            grpc=self.grpc_options,
            client_buffer=opts.client_buffer,
            emit=self._emit,
            stats=self.stats,
        )
        self._server = server
        self._served = False
        self._ready = False
        self._closed = False
        self._position: Position = None
        self._housekeeper: threading.Thread | None = None
        self._stop = threading.Event()

    # ------------------------------------------------------------------ wiring
    def bind_observer(self, observer: Any, pipeline_id: str) -> None:
        """Engine hook: the observer that receives the ``Fanout*`` events (:mod:`.events`)."""
        self.observer = as_observer(observer or NullObserver())
        if pipeline_id:
            self.pipeline_id = pipeline_id

    def bind_pipeline(self, context: PipelineContext) -> None:
        """Engine hook (``laredo.PipelineAware``): the engine's observer, the pipeline id and
        the source's position functions."""
        own = getattr(self, "observer", None)
        observer = context.observer
        if own is not None and type(own) is not NullObserver and own is not observer:
            observer = CompositeObserver(own, observer)  # keep an observer given in options
        self.bind_observer(observer, context.pipeline_id)
        self.bind_source(context)

    def bind_source(self, source: PositionFunctions) -> None:
        """Serialise and compare positions with ``source``'s ``position_to_string`` /
        ``position_from_string`` / ``compare_positions``."""
        self.codec = PositionCodec(source)

    @property
    def table(self) -> TableIdentifier | None:
        return self._rows.table

    @property
    def columns(self) -> tuple[ColumnDefinition, ...]:
        return self._rows.columns

    @property
    def key_fields(self) -> tuple[str, ...]:
        return self._rows.key_fields

    @property
    def port(self) -> int:
        """The bound gRPC port (after ``on_init``; 0 when not served)."""
        return int(self._server.port) if self._server is not None and self._served else 0

    @property
    def address(self) -> str:
        return f"{self.grpc_options.host}:{self.port}"

    @property
    def ready(self) -> bool:
        return self._ready

    @property
    def position(self) -> Position:
        return self._position

    @property
    def journal_id(self) -> str:
        return self._journal.journal_id

    @property
    def current_sequence(self) -> int:
        return self._journal.current_sequence

    @property
    def oldest_sequence(self) -> int:
        """Sequence of the oldest retained entry, 0 when the journal is empty."""
        return self._journal.oldest_sequence

    def journal_length(self) -> int:
        return len(self._journal)

    def journal_entries(self, seq: int, limit: int | None = None) -> list[JournalEntry]:
        """Retained entries from sequence ``seq`` on (``LookupError`` if it was pruned)."""
        with self._cond:
            return self._journal.entries_from(seq, limit)

    # ------------------------------------------------------------------ lifecycle
    def on_init(self, table: TableIdentifier, columns: Sequence[ColumnDefinition]) -> None:
        with self._cond:
            self._rows.set_columns(table, tuple(columns))
        self._snapshots.start(str(table))
        if self._housekeeper is None:
            self._housekeeper = threading.Thread(
                target=self._housekeeping, name=f"fanout-{table}", daemon=True
            )
            self._housekeeper.start()
        if self._server is not None and not self._served:
            self._served = True  # detached at on_close even if attaching fails half-way
            self._server.attach(self)

    def on_close(self, table: TableIdentifier) -> None:
        """Drain clients (GoAway, then serve until ``grpc.drain_timeout`` or until every
        client left), detach from the server and stop the background threads."""
        if self._closed:
            return
        timeout = self.grpc_options.drain_timeout
        self.sessions.drain("server shutting down", timeout)
        self.sessions.wait_empty(timeout)
        with self._cond:
            self._closed = True
            self.sessions.shut_locked()
        if self._server is not None and self._served:
            self._server.detach(self)
            self._served = False
        self._stop.set()
        self._snapshots.close()
        if self._housekeeper is not None:
            self._housekeeper.join(timeout=5)
            self._housekeeper = None

    def drain(self, reason: str = "draining", timeout: float = 5.0) -> None:
        """Send GoAway to every client; serve until the deadline, then end their streams.
        New ``Sync`` calls are refused (UNAVAILABLE) from now on. Idempotent."""
        self.sessions.drain(reason, timeout)

    @property
    def draining(self) -> bool:
        return self.sessions.drain_state is not None

    def _housekeeping(self) -> None:
        interval = self.snapshot_options.interval
        next_snap = time.monotonic() + interval if interval else None
        while not self._stop.wait(0.5 if next_snap is None else min(0.5, interval or 0.5)):
            now = time.time()
            with self._cond:
                self._prune(now)
                self._snapshots.retain()
                if self.sessions.drain_state is not None:
                    self._cond.notify_all()
            if next_snap is not None and time.monotonic() >= next_snap:
                next_snap = time.monotonic() + (interval or 0)
                try:
                    self.create_snapshot()
                except Exception:
                    logger.exception("periodic fan-out snapshot failed")

    # ------------------------------------------------------------------ SyncTarget
    def is_durable(self) -> bool:
        """Not durable by itself: state survives a restart only through a snapshot."""
        return False

    def supports_consistent_snapshot(self) -> bool:
        return True

    def set_change_position(self, position: Position) -> None:
        self._position = position

    def count(self) -> int:
        return len(self._rows)

    def on_baseline_row(self, table: TableIdentifier, row: Row) -> None:
        self.on_baseline_rows(table, (row,))

    def on_baseline_rows(self, table: TableIdentifier, rows: Sequence[Row]) -> None:
        """Store baseline rows. Before the first baseline completes they are not journaled
        (no client is served yet); a re-baseline journals them as INSERTs whose position is
        filled in when it completes."""
        now = time.time()
        with self._cond:
            put = self._rows.put_baseline
            if not self._ready:
                for row in rows:
                    put(row)
                return
            for row in rows:
                self._journal.append_unpositioned(_INSERT, put(row), now)
            self._after_append(now)

    def on_baseline_complete(self, table: TableIdentifier) -> None:
        with self._cond:
            pos = self._position
            if not self._ready:
                self._journal.base_position = pos
                self._ready = True
            self._journal.fill_positions(pos)
            self._cond.notify_all()
        self.create_snapshot()

    def on_insert(self, table: TableIdentifier, row: Row) -> None:
        self.apply_changes(table, (ChangeEvent(table, _INSERT, self._position, new_values=row),))

    def on_update(self, table: TableIdentifier, row: Row, identity: Row | None) -> None:
        self.apply_changes(
            table,
            (ChangeEvent(table, _UPDATE, self._position, new_values=row, old_values=identity),),
        )

    def on_delete(self, table: TableIdentifier, identity: Row) -> None:
        self.apply_changes(
            table, (ChangeEvent(table, _DELETE, self._position, old_values=identity),)
        )

    def on_truncate(self, table: TableIdentifier) -> None:
        self.apply_changes(table, (ChangeEvent(table, _TRUNCATE, self._position),))

    def load(self, table: TableIdentifier, rows: Sequence[Row]) -> None:
        """The engine's door for baseline rows: :meth:`on_baseline_rows`."""
        self.on_baseline_rows(table, rows)

    def apply(
        self, table: TableIdentifier, changes: Sequence[ChangeEvent], complete: bool = True
    ) -> None:
        """The engine's door for changes: :meth:`apply_changes`."""
        self.apply_changes(table, changes)

    def apply_changes(self, table: TableIdentifier, events: Sequence[ChangeEvent]) -> None:
        """Apply and journal ``events`` under one lock acquisition, wake the client streams,
        then apply the ``client_buffer`` policy (``slow_down`` may wait here)."""
        if not events:
            return
        now = time.time()
        truncated = False
        with self._cond:
            rows = self._rows
            append = self._journal.append
            for ev in events:
                action = ev.action
                pos = ev.position
                if action is _INSERT:
                    append(_INSERT, pos, None, rows.insert(ev.new_values), now)
                elif action is _UPDATE:
                    old, new = rows.update(ev.new_values, ev.old_values, ev.unchanged_toast)
                    append(_UPDATE, pos, old, new, now)
                elif action is _DELETE:
                    old = rows.delete(ev.old_values or ev.new_values or {})
                    append(_DELETE, pos, old, None, now)
                elif action is _TRUNCATE:
                    rows.clear()
                    append(_TRUNCATE, pos, None, None, now)
                    truncated = True
                if pos is not None:
                    self._position = pos
            self._after_append(now)
        if truncated:
            self.create_snapshot()
        if self.client_buffer.policy == "slow_down":
            self.sessions.slow_down()

    def on_schema_change(
        self,
        table: TableIdentifier,
        old_columns: Sequence[ColumnDefinition],
        new_columns: Sequence[ColumnDefinition],
    ) -> SchemaChangeResponse:
        """Journal a SCHEMA_CHANGE entry (clients update their columns), adopt the new columns
        and take a snapshot. A changed primary key re-keys the stored rows."""
        now = time.time()
        new_cols = tuple(new_columns)
        with self._cond:
            old = self._rows.columns or tuple(old_columns)
            self._rows.set_columns(table, new_cols)
            self._journal.append(_SCHEMA, self._position, None, None, now, old, new_cols)
            self._after_append(now)
        self.create_snapshot()
        return SchemaChangeResponse(SchemaChangeAction.CONTINUE)

    def export_snapshot(self) -> list[Row]:
        with self._cond:
            rows = self._rows.values()
        return [dict(r) for r in rows]

    def restore_snapshot(self, info: TableSnapshotInfo, rows: Iterable[Row]) -> None:
        """Replace the state; a new journal (new ``journal_id``) starts at the snapshot's
        position. Connected clients are told to re-sync."""
        if self._rows.table is None:
            self.on_init(info.table, info.columns)
        with self._cond:
            self._rows.replace(rows)
            pos = self.codec.from_string(info.position) if info.position else None
            self._journal.reset(pos)
            self._position = pos
            self._snapshots.clear()
            self._ready = True
            self.sessions.close_all_locked("resync", "the server restored a snapshot")
            self._cond.notify_all()
        self.create_snapshot()

    # ------------------------------------------------------------------ journal upkeep
    def _after_append(self, now: float) -> None:
        self._prune(now)
        self.sessions.check_buffers_locked()
        self._cond.notify_all()

    def _prune(self, now: float) -> None:
        """Prune the journal around the sessions' pins (lock held)."""
        n = self._journal.prune(now, self.sessions.pins_locked())
        if not n:
            return
        self.sessions.resync_unpinned_locked()
        self.stats["pruned"] += n
        self._emit(FanoutJournalPruned, n, self.oldest_sequence)

    def _emit(self, kind: Callable[..., Event], *args: Any) -> None:
        """Hand the observer ``kind(pipeline_id, *args)``; an observer failure is logged."""
        try:
            self.observer.on_event(kind(self.pipeline_id, *args))
        except Exception:
            logger.exception("observer failed in %s", getattr(kind, "__name__", kind))

    # ------------------------------------------------------------------ sessions (service)
    def open_session(
        self,
        client_id: str,
        *,
        peer: str,
        last_sequence: int,
        journal_id: str,
        last_position: str,
        last_snapshot_id: str,
        matcher: RowMatcher | None,
        applied_at_position: int = 0,
    ) -> tuple[ClientSession, Handshake, FanOutSnapshot | None]:
        """Register a client and choose its mode, atomically with the journal.

        Returns the session, the handshake and, for FULL_SNAPSHOT, the snapshot to send.
        Raises ``Unavailable`` (draining, closed, baseline not complete) or ``Exhausted``
        (``grpc.max_clients`` reached)."""
        resume = ResumeRequest(
            last_sequence, journal_id, last_position, last_snapshot_id, applied_at_position
        )
        prepared = None
        archive = self.sessions.archive
        if archive is not None:
            with self._cond:
                needed = self.sessions.needs_archive_locked(resume, self.codec)
            if needed:  # read the archive without the lock; placed (re-checked) under it
                prepared = archive.prepare(last_position, self.codec, self.columns)
        with self._cond:
            self.sessions.check_open_locked()
            if not self._ready:
                raise Unavailable(f"table {self.table}: baseline not complete yet")
            session, handshake, snapshot, new = self.sessions.open_locked(
                client_id,
                peer,
                matcher,
                resume,
                codec=self.codec,
                table=self.table,
                columns=self.columns,
                heartbeat_interval=self.heartbeat_interval,
                snapshot_now=lambda: self._snapshot_locked(persist=False),
                prepared=prepared,
            )
        if new and snapshot is not None:
            self._announce(snapshot, persist=False)
        self._emit(FanoutClientConnected, client_id, session.mode)
        return session, handshake, snapshot

    def clients(self) -> list[ClientSession]:
        """The connected clients' sessions."""
        with self._cond:
            return list(self.sessions.clients.values())

    # ------------------------------------------------------------------ snapshots
    def create_snapshot(self) -> FanOutSnapshot | None:
        """Take a snapshot of the current state (in memory; queued for the store when one is
        configured) and apply retention. None before the baseline completes."""
        with self._cond:
            if not self._ready or self._rows.table is None:
                return None
            snap, new = self._snapshot_locked(persist=True)
        if new:
            self._announce(snap, persist=True)
        return snap

    def _snapshot_locked(self, persist: bool) -> tuple[FanOutSnapshot, bool]:
        """The retained snapshot at the current sequence, made if needed (lock held)."""
        snap, new = self._snapshots.take_locked(
            self._journal,
            self._rows.table,
            self._rows.columns,
            self._rows.values,
            self.codec.to_string(self._position),
            self._position,
            kind="fanout" if persist else "live",
        )
        if new:
            self.stats["snapshots"] += 1
        return snap, new

    def _announce(self, snap: FanOutSnapshot, persist: bool) -> None:
        self._emit(FanoutSnapshotCreated, snap.snapshot_id, snap.sequence, len(snap.rows))
        if persist and self._rows.table is not None:
            self._snapshots.persist(snap, self._rows.table, self.pipeline_id)

    def snapshots(self) -> list[FanOutSnapshot]:
        """Retained snapshots, newest first."""
        with self._cond:
            return self._snapshots.retained()

    def get_snapshot(self, snapshot_id: str) -> FanOutSnapshot | None:
        """A retained snapshot by id, from memory or else from the snapshot store."""
        with self._cond:
            snap = self._snapshots.find(snapshot_id)
        if snap is not None:
            return snap
        return self._snapshots.load(snapshot_id, self._rows.table)

    # ------------------------------------------------------------------ status / reads
    def status(self) -> dict[str, Any]:
        with self._cond:
            clients = self.sessions.describe_locked()
            return {
                "table": str(self.table),
                "journal_id": self.journal_id,
                "current_sequence": self.current_sequence,
                "journal_oldest_sequence": self.oldest_sequence,
                "journal_entry_count": len(self._journal),
                "row_count": len(self._rows),
                "connected_clients": len(clients),
                "clients": clients,
                "latest_snapshot": self._snapshots.latest,
                "draining": self.sessions.drain_state is not None,
            }

    def get(self, *key: Any) -> Row | None:
        k = key[0] if len(key) == 1 else key
        with self._cond:
            row = self._rows.get(k)
        return None if row is None else dict(row)

    def all(self) -> list[Row]:
        return self.export_snapshot()
