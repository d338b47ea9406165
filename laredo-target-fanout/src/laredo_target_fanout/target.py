"""``FanOutTarget``: one table's state, a bounded change journal and snapshots, served to many
client replicas over gRPC (see ``service.py``).

Guarantees
----------
* Every applied change gets the next journal sequence (1, 2, 3, ...; never reused while the
  journal lives). A journal has an id (``journal_id``); a new id (restart, snapshot restore)
  starts a new sequence space, and clients resume across it only by source position.
* The journal keeps at most ``journal.max_entries`` entries no older than ``journal.max_age``,
  except entries a connected client still needs (its *pin*). A client that would need a pruned
  entry is told to re-sync; it never misses an entry silently.
* A client session reads the journal through a cursor; the cursor is registered under the same
  lock as the handshake's choice of mode and snapshot copy, so nothing falls between the
  snapshot (or catch-up) and the live tail.
* ``client_buffer``: a live client more than ``size`` entries behind is disconnected
  (``drop_disconnect``; it reconnects and catches up from the journal) or makes the writer wait
  (``slow_down``, at most ``max_wait`` before it is disconnected).
* Snapshots (in memory, optionally persisted through a ``SnapshotStore``) are taken every
  ``snapshot.interval``, right after a truncate and after a schema change, and pruned by
  ``keep_count`` and ``max_age``.
"""

from __future__ import annotations

import contextlib
import logging
import re
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from laredo.errors import ConfigError, TargetError
from laredo.observers import CompositeObserver, NullObserver
from laredo.types import (
    ChangeAction,
    ChangeEvent,
    ColumnDefinition,
    Position,
    Row,
    SchemaChangeAction,
    SchemaChangeResponse,
    SnapshotMetadata,
    SyncMode,
    TableIdentifier,
    TableSnapshotInfo,
    primary_key_columns,
)

from . import _wire
from ._filters import RowMatcher
from ._proto import replication_pb2 as pb

logger = logging.getLogger(__name__)

__all__ = ["ClientSession", "FanOutSnapshot", "FanOutTarget", "JournalEntry", "PositionCodec"]

_INSERT = ChangeAction.INSERT
_UPDATE = ChangeAction.UPDATE
_DELETE = ChangeAction.DELETE
_TRUNCATE = ChangeAction.TRUNCATE
_SCHEMA = ChangeAction.SCHEMA_CHANGE


# -- positions ---------------------------------------------------------------------------------

_LSN = re.compile(r"^([0-9A-Fa-f]{1,8})/([0-9A-Fa-f]{1,8})$")


class PositionCodec:
    """Serialises and compares source positions. The default understands integer positions
    (the test source, PostgreSQL LSNs as ints) and ``X/Y`` LSN text; ``bind_source`` replaces it
    with the source's own ``position_to_string`` / ``position_from_string`` /
    ``compare_positions``."""

    def __init__(self, source: Any = None) -> None:
        self.source = source

    def to_string(self, position: Position) -> str:
        if position is None:
            return ""
        if self.source is not None:
            with contextlib.suppress(Exception):
                return str(self.source.position_to_string(position))
        return str(position)

    def from_string(self, text: str) -> Position | None:
        if not text:
            return None
        if self.source is not None:
            try:
                return self.source.position_from_string(text)
            except Exception:
                return None
        m = _LSN.match(text)
        if m:
            return (int(m.group(1), 16) << 32) | int(m.group(2), 16)
        try:
            return int(text)
        except ValueError:
            return None

    def compare(self, a: Position, b: Position) -> int | None:
        """-1/0/1, or None when the positions cannot be compared."""
        if self.source is not None:
            try:
                return int(self.source.compare_positions(a, b))
            except Exception:
                return None
        if isinstance(a, str):
            a = self.from_string(a)
        if isinstance(b, str):
            b = self.from_string(b)
        if isinstance(a, int) and isinstance(b, int):
            return (a > b) - (a < b)
        return None


# -- journal -----------------------------------------------------------------------------------


class JournalEntry:
    """One journaled change. ``sequence`` is gap-free within a journal."""

    __slots__ = (
        "_chunk",
        "action",
        "new_columns",
        "new_values",
        "old_columns",
        "old_values",
        "position",
        "sequence",
        "timestamp",
    )

    def __init__(  # noqa: PLR0917 - hot path: positional on purpose
        self,
        sequence: int,
        action: ChangeAction,
        position: Position,
        old_values: Row | None,
        new_values: Row | None,
        timestamp: float,
        old_columns: tuple[ColumnDefinition, ...] = (),
        new_columns: tuple[ColumnDefinition, ...] = (),
    ) -> None:
        self.sequence = sequence
        self.action = action
        self.position = position
        self.old_values = old_values
        self.new_values = new_values
        self.timestamp = timestamp
        self.old_columns = old_columns
        self.new_columns = new_columns
        self._chunk: bytes | None = None

    def __repr__(self) -> str:
        return f"JournalEntry({self.sequence}, {self.action.name}, position={self.position!r})"

    def to_pb(self, codec: PositionCodec, action: ChangeAction | None = None) -> Any:
        act = action or self.action
        e = pb.JournalEntry(
            sequence=self.sequence,
            source_position=codec.to_string(self.position),
            timestamp_unix_us=int(self.timestamp * 1_000_000),
            action=_wire.ACTION_TO_PB[act],
        )
        if act is _DELETE:
            if self.old_values is not None:
                e.old_values = _wire.encode_row(self.old_values)
        else:
            if self.old_values is not None:
                e.old_values = _wire.encode_row(self.old_values)
            if self.new_values is not None:
                e.new_values = _wire.encode_row(self.new_values)
        if act is _SCHEMA:
            e.old_columns.extend(_wire.columns_to_pb(self.old_columns))
            e.new_columns.extend(_wire.columns_to_pb(self.new_columns))
        return e

    def chunk(self, codec: PositionCodec) -> bytes:
        """The entry as a ``JournalBatch.entries`` field (computed once, shared by clients)."""
        c = self._chunk
        if c is None:
            action = self.action
            if action is _SCHEMA:
                body = self.to_pb(codec).SerializeToString()
            else:  # hand-built: the same bytes protobuf would write, without a message object
                body = _wire.entry_bytes(
                    self.sequence,
                    codec.to_string(self.position),
                    int(self.timestamp * 1_000_000),
                    _wire.ACTION_TO_PB[action],
                    None if self.old_values is None else _wire.encode_row(self.old_values),
                    None
                    if self.new_values is None or action is _DELETE
                    else _wire.encode_row(self.new_values),
                )
            c = _wire.entry_chunk(body)
            self._chunk = c
        return c

    def chunk_as_delete(self, codec: PositionCodec) -> bytes:
        return _wire.field_bytes(
            _wire.BATCH_ENTRIES, self.to_pb(codec, _DELETE).SerializeToString()
        )


@dataclass(frozen=True, slots=True)
class FanOutSnapshot:
    """A consistent copy of the state at journal ``sequence`` (rows are never mutated)."""

    snapshot_id: str
    sequence: int
    journal_id: str
    position: str
    rows: tuple[Row, ...]
    columns: tuple[ColumnDefinition, ...]
    created_at: datetime
    persisted: bool = False
    size_bytes: int = 0
    applied_at_position: int = 0
    """Journal entries at ``position`` contained in the snapshot (a transaction may span
    several entries and a snapshot may fall inside it)."""
    _cache: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    def encoded_rows(self) -> list[bytes]:
        """Every row in the wire encoding, computed once and shared by all clients."""
        rows = self._cache.get("rows")
        if rows is None:
            with _ENCODE_LOCK:
                rows = self._cache.get("rows")
                if rows is None:
                    enc = _wire.encode_row
                    rows = [enc(r) for r in self.rows]
                    self._cache["rows"] = rows
        return rows


_ENCODE_LOCK = threading.Lock()


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


def _seconds(value: Any, default: float | None) -> float | None:
    if value is None:
        return default
    if isinstance(value, timedelta):
        return value.total_seconds()
    return float(value)


_SAFE = re.compile(r"[^A-Za-z0-9_.-]+")


class FanOutTarget:
    """Replication fan-out target: see the module docstring.

    ``FanOutTarget(journal={"max_entries": 100_000, "max_age": 86400}, snapshot={...},
    grpc={"port": 4002, "host": "127.0.0.1", "max_clients": 0}, client_buffer={"size": 10_000,
    "policy": "drop_disconnect"}, heartbeat_interval=5.0, observer=None)``.

    The gRPC server starts at ``on_init`` (``grpc=None`` serves nothing: the target can then be
    added to another server with ``service.ReplicationServer.add_target``) and stops at
    ``on_close`` after draining connected clients.
    """

    target_type = "replication-fanout"
    plugin_name = "replication-fanout"

    def __init__(
        self,
        *,
        journal: Any = None,
        snapshot: Any = None,
        grpc: Any = None,
        client_buffer: Any = None,
        heartbeat_interval: float | timedelta = 5.0,
        observer: Any = None,
        pipeline_id: str = "",
        serve: bool = True,
    ) -> None:
        from ._plugin import (
            ClientBufferOptions,
            GrpcOptions,
            JournalOptions,
            SnapshotOptions,
            coerce_options,
        )

        self.journal_options = coerce_options(JournalOptions, journal, "journal")
        self.snapshot_options = coerce_options(SnapshotOptions, snapshot, "snapshot")
        self.grpc_options = coerce_options(GrpcOptions, grpc, "grpc")
        self.client_buffer = coerce_options(ClientBufferOptions, client_buffer, "client_buffer")
        hb = _seconds(heartbeat_interval, 5.0)
        if hb is None or hb <= 0:
            raise ConfigError(f"heartbeat_interval: must be positive (got {heartbeat_interval!r})")
        self.heartbeat_interval: float = hb
        self.max_entries: int = self.journal_options.max_entries
        self.max_age: float | None = _seconds(self.journal_options.max_age, None)
        self._serve = serve
        self.observer: Any = observer if observer is not None else NullObserver()
        self.pipeline_id = pipeline_id
        self.codec = PositionCodec()

        self._cond = threading.Condition(threading.Lock())
        self._table: TableIdentifier | None = None
        self._columns: tuple[ColumnDefinition, ...] = ()
        self._key_fields: tuple[str, ...] = ()
        self._key_of: Callable[[Mapping[str, Any]], Any] = _no_key
        self._rows: dict[Any, Row] = {}
        self._ready = False
        self._closed = False
        self._position: Position = None
        # journal: entries[head:] are live; entries[i].sequence == base_seq + i
        self.journal_id = uuid.uuid4().hex[:16]
        self._entries: list[JournalEntry] = []
        self._head = 0
        self._base_seq = 1
        self._seq = 0
        self._base_position: Position = None
        """Position of the state the journal started from (baseline end / restored snapshot)."""
        self._pruned_position: Position = None
        """Position of the newest pruned entry (None: nothing pruned yet)."""
        self._unpositioned_from: int | None = None
        # snapshots, newest first
        self._snapshots: list[FanOutSnapshot] = []
        self._store: Any = None
        self._serializer: Any = None
        self._persist_queue: list[FanOutSnapshot] = []
        self._persist_cond = threading.Condition()
        self._threads: list[threading.Thread] = []
        self._stop = threading.Event()
        # clients
        self._clients: dict[str, ClientSession] = {}
        self._drain: tuple[str, float, int] | None = None
        self._server: Any = None
        self.stats = {"pruned": 0, "dropped_clients": 0, "resyncs": 0, "snapshots": 0}

    # ------------------------------------------------------------------ wiring
    def bind_observer(self, observer: Any, pipeline_id: str) -> None:
        """Engine hook: the observer that receives the ``on_fanout_*`` events."""
        self.observer = observer if observer is not None else NullObserver()
        if pipeline_id:
            self.pipeline_id = pipeline_id

    def bind_pipeline(self, context: Any) -> None:
        """Engine hook (``laredo.PipelineAware``): the engine's observer, the pipeline id and
        the source's position functions (the context has the source's three methods)."""
        own = getattr(self, "observer", None)
        observer = context.observer
        if own is not None and type(own) is not NullObserver and own is not observer:
            observer = CompositeObserver(own, observer)  # keep an observer given in options
        self.bind_observer(observer, context.pipeline_id)
        self.bind_source(context)

    def bind_source(self, source: Any) -> None:
        """Engine hook: use the source's position serialisation and comparison."""
        self.codec = PositionCodec(source)

    @property
    def table(self) -> TableIdentifier | None:
        return self._table

    @property
    def columns(self) -> tuple[ColumnDefinition, ...]:
        return self._columns

    @property
    def key_fields(self) -> tuple[str, ...]:
        return self._key_fields

    @property
    def port(self) -> int:
        """The bound gRPC port (after ``on_init``; 0 when not serving)."""
        return int(self._server.port) if self._server is not None else 0

    @property
    def address(self) -> str:
        return f"{self.grpc_options.host}:{self.port}"

    @property
    def ready(self) -> bool:
        return self._ready

    @property
    def position(self) -> Position:
        return self._position

    # ------------------------------------------------------------------ lifecycle
    def on_init(self, table: TableIdentifier, columns: Sequence[ColumnDefinition]) -> None:
        cols = tuple(columns)
        with self._cond:
            self._set_columns(table, cols)
        if self._store is None and self.snapshot_options.store is not None:
            self._store, self._serializer = self._build_store()
        self._start_threads()
        if self._serve and self._server is None:
            from .service import ReplicationServer

            self._server = ReplicationServer.acquire(self.grpc_options)
            self._server.add_target(self)

    def _set_columns(self, table: TableIdentifier, cols: tuple[ColumnDefinition, ...]) -> None:
        key = tuple(primary_key_columns(cols))
        if not key:
            names = [c.name for c in cols]
            key = ("id",) if "id" in names else tuple(names)
        if not key:
            raise ConfigError(
                f"table {table}: replication-fanout target needs column definitions with a "
                "primary key (or an 'id' column)"
            )
        changed = key != self._key_fields
        self._table = table
        self._columns = cols
        self._key_fields = key
        from operator import itemgetter

        getter = itemgetter(*key)
        self._key_of = getter
        if changed and self._rows:
            self._rows = {getter(r): r for r in self._rows.values()}

    def _build_store(self) -> tuple[Any, Any]:
        import laredo

        spec = self.snapshot_options.store
        if isinstance(spec, Mapping):
            cfg = dict(spec)
            kind = cfg.pop("type", "local")
            store = laredo.snapshot_store(kind, **cfg)
        else:
            store = spec
        ser = self.snapshot_options.serializer
        serializer = laredo.serializer(ser) if isinstance(ser, str) else ser
        return store, serializer

    def _start_threads(self) -> None:
        if self._threads:
            return
        t = threading.Thread(target=self._housekeeping, name=f"fanout-{self._table}", daemon=True)
        t.start()
        self._threads.append(t)
        if self._store is not None:
            p = threading.Thread(
                target=self._persist_loop, name=f"fanout-persist-{self._table}", daemon=True
            )
            p.start()
            self._threads.append(p)

    def on_close(self, table: TableIdentifier) -> None:
        """Drain clients (GoAway, then serve until ``grpc.drain_timeout`` or until every
        client left), stop the gRPC server and the background threads."""
        if self._closed:
            return
        timeout = _seconds(self.grpc_options.drain_timeout, 5.0) or 0.0
        self.drain("server shutting down", timeout)
        deadline = time.monotonic() + timeout
        with self._cond:
            while self._clients and time.monotonic() < deadline:
                self._cond.wait(min(0.05, max(0.0, deadline - time.monotonic())))
        with self._cond:
            self._closed = True
            for s in list(self._clients.values()):
                self._close_session(s, "closed", "server closed")
            self._cond.notify_all()
        if self._server is not None:
            self._server.remove_target(self)
            self._server = None
        self._stop.set()
        with self._persist_cond:
            self._persist_cond.notify_all()
        for t in self._threads:
            t.join(timeout=5)
        self._threads = []

    def drain(self, reason: str = "draining", timeout: float = 5.0) -> None:
        """Send GoAway to every client; serve until the deadline, then end their streams.
        New ``Sync`` calls are refused (UNAVAILABLE) from now on. Idempotent."""
        with self._cond:
            if self._drain is None:
                deadline = time.monotonic() + timeout
                self._drain = (reason, deadline, int((time.time() + timeout) * 1000))
            self._cond.notify_all()

    @property
    def draining(self) -> bool:
        return self._drain is not None

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
            key_of = self._key_of
            store = self._rows
            journal = self._ready
            for row in rows:
                r = dict(row)
                try:
                    k = key_of(r)
                except KeyError as exc:
                    raise TargetError(
                        f"table {self._table}: baseline row misses key column {exc.args[0]!r}"
                    ) from None
                store[k] = r
                if journal:
                    if self._unpositioned_from is None:
                        self._unpositioned_from = self._seq + 1
                    self._append(_INSERT, None, None, r, now)
            if journal:
                self._after_append(now)

    def on_baseline_complete(self, table: TableIdentifier) -> None:
        with self._cond:
            pos = self._position
            if not self._ready:
                self._base_position = pos
                self._ready = True
            if self._unpositioned_from is not None:
                for e in self._entries_from(self._unpositioned_from):
                    if e.position is None:
                        e.position = pos
                        e._chunk = None
                self._unpositioned_from = None
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

    def apply_changes(self, table: TableIdentifier, events: Sequence[ChangeEvent]) -> None:
        """Apply and journal ``events`` under one lock acquisition, wake the client streams,
        then apply the ``client_buffer`` policy (``slow_down`` may wait here)."""
        if not events:
            return
        now = time.time()
        truncated = False
        with self._cond:
            store = self._rows
            key_of = self._key_of
            append = self._append
            for ev in events:
                action = ev.action
                pos = ev.position
                if action is _INSERT:
                    new = dict(ev.new_values or {})
                    store[self._key(key_of, new, "INSERT")] = new
                    append(_INSERT, pos, None, new, now)
                elif action is _UPDATE:
                    new_in = ev.new_values or {}
                    k = self._key(key_of, new_in, "UPDATE")
                    ident = ev.old_values
                    ok = k
                    if ident:
                        with contextlib.suppress(KeyError):
                            ok = key_of(ident)
                    old = store.get(ok)
                    if old is not None and (ev.unchanged_toast or not old.keys() <= new_in.keys()):
                        new = {**old, **new_in}
                        for col in ev.unchanged_toast:
                            if col in old:
                                new[col] = old[col]
                    else:
                        new = dict(new_in)
                    if ok != k:
                        store.pop(ok, None)
                    store[k] = new
                    append(_UPDATE, pos, old if old is not None else ident, new, now)
                elif action is _DELETE:
                    ident = ev.old_values or ev.new_values or {}
                    k = self._key(key_of, ident, "DELETE")
                    old = store.pop(k, None)
                    append(_DELETE, pos, old if old is not None else dict(ident), None, now)
                elif action is _TRUNCATE:
                    self._rows = store = {}
                    append(_TRUNCATE, pos, None, None, now)
                    truncated = True
                if pos is not None:
                    self._position = pos
            self._after_append(now)
        if truncated:
            self.create_snapshot()
        if self.client_buffer.policy == "slow_down":
            self._slow_down()

    def _key(
        self, key_of: Callable[[Mapping[str, Any]], Any], row: Mapping[str, Any], what: str
    ) -> Any:
        try:
            return key_of(row)
        except KeyError as exc:
            raise TargetError(
                f"table {self._table}: {what} values miss key column {exc.args[0]!r} (key: "
                f"{', '.join(self._key_fields)})"
            ) from None
        except TypeError:
            raise TargetError(
                f"replication-fanout target for {self._table}: on_init was not called"
            ) from None

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
            old = self._columns or tuple(old_columns)
            self._set_columns(table, new_cols)
            self._append(_SCHEMA, self._position, None, None, now, old, new_cols)
            self._after_append(now)
        self.create_snapshot()
        return SchemaChangeResponse(SchemaChangeAction.CONTINUE)

    def export_snapshot(self) -> list[Row]:
        with self._cond:
            rows = list(self._rows.values())
        return [dict(r) for r in rows]

    def restore_snapshot(self, info: TableSnapshotInfo, rows: Iterable[Row]) -> None:
        """Replace the state; a new journal (new ``journal_id``) starts at the snapshot's
        position. Connected clients are told to re-sync."""
        if self._table is None:
            self.on_init(info.table, info.columns)
        with self._cond:
            key_of = self._key_of
            new: dict[Any, Row] = {}
            for r in rows:
                d = dict(r)
                new[self._key(key_of, d, "snapshot row")] = d
            self._rows = new
            self.journal_id = uuid.uuid4().hex[:16]
            self._entries = []
            self._head = 0
            self._base_seq = 1
            self._seq = 0
            pos = self.codec.from_string(info.position) if info.position else None
            self._base_position = pos
            self._position = pos
            self._pruned_position = None
            self._snapshots = []
            self._ready = True
            for s in list(self._clients.values()):
                self._close_session(s, "resync", "the server restored a snapshot")
            self._cond.notify_all()
        self.create_snapshot()

    # ------------------------------------------------------------------ journal internals
    def _append(  # noqa: PLR0917 - hot path: positional on purpose
        self,
        action: ChangeAction,
        position: Position,
        old: Row | None,
        new: Row | None,
        now: float,
        old_columns: tuple[ColumnDefinition, ...] = (),
        new_columns: tuple[ColumnDefinition, ...] = (),
    ) -> None:
        self._seq += 1
        self._entries.append(
            JournalEntry(self._seq, action, position, old, new, now, old_columns, new_columns)
        )

    @property
    def current_sequence(self) -> int:
        return self._seq

    @property
    def oldest_sequence(self) -> int:
        """Sequence of the oldest retained entry, 0 when the journal is empty."""
        return self._base_seq + self._head if len(self._entries) > self._head else 0

    def journal_length(self) -> int:
        return len(self._entries) - self._head

    def _entries_from(self, seq: int, limit: int | None = None) -> list[JournalEntry]:
        """Entries with sequence >= seq (lock held); seq must not be pruned."""
        start = seq - self._base_seq
        if start < self._head:
            raise LookupError(seq)
        end = len(self._entries) if limit is None else min(len(self._entries), start + limit)
        return self._entries[start:end]

    def _after_append(self, now: float) -> None:
        self._prune(now)
        self._check_buffers()
        self._cond.notify_all()

    def _prune(self, now: float) -> None:
        """Drop entries beyond max_entries / max_age, never past a client's pin (the entry
        after its cursor) unless the journal holds more than twice max_entries; clients whose
        pin is broken that way are told to re-sync."""
        live = len(self._entries) - self._head
        if live <= 0:
            return
        over = live - self.max_entries
        cut_seq = self._base_seq + self._head  # first kept sequence
        if over > 0:
            cut_seq += over
        if self.max_age is not None:
            limit = now - self.max_age
            i = max(self._head, cut_seq - self._base_seq)
            entries = self._entries
            while i < len(entries) and entries[i].timestamp < limit:
                i += 1
            cut_seq = max(cut_seq, self._base_seq + i)
        first = self._base_seq + self._head
        if cut_seq <= first:
            return
        pins = [c.cursor + 1 for c in self._clients.values() if not c.closed]
        if pins:
            cut_seq = min(cut_seq, *pins)
            excess = live - (cut_seq - first) - 2 * self.max_entries
            if excess > 0:  # a stuck client may not hold the journal forever
                cut_seq += excess
                for c in list(self._clients.values()):
                    if not c.closed and c.cursor + 1 < cut_seq:
                        self._close_session(
                            c, "resync", "fell more than twice journal.max_entries behind"
                        )
        if cut_seq <= first:
            return
        n = cut_seq - first
        last = self._entries[self._head + n - 1]
        if last.position is not None:
            self._pruned_position = last.position
        self._head += n
        if self._head > 4096 and self._head * 2 > len(self._entries):
            del self._entries[: self._head]
            self._base_seq += self._head
            self._head = 0
        self.stats["pruned"] += n
        try:
            self.observer.on_fanout_journal_pruned(self.pipeline_id, n, self.oldest_sequence)
        except Exception:
            logger.exception("observer failed in on_fanout_journal_pruned")

    # ------------------------------------------------------------------ client buffers
    def _check_buffers(self) -> None:
        size = self.client_buffer.size
        cur = self._seq
        drop = self.client_buffer.policy == "drop_disconnect"
        for s in list(self._clients.values()):
            if s.closed or s.state == "catching_up":
                continue
            depth = cur - s.cursor
            if depth > size:
                if not s.backpressured:
                    s.backpressured = True
                    s.waiting_since = time.monotonic()
                    self._emit("on_fanout_client_backpressure", s.client_id, depth)
                if drop:
                    self.stats["dropped_clients"] += 1
                    self._close_session(
                        s,
                        "overflow",
                        f"client buffer overflow: {depth} entries behind (client_buffer.size "
                        f"= {size}, policy drop_disconnect); reconnect to catch up",
                    )
            elif s.backpressured and depth <= size // 2:
                s.backpressured = False

    def _slow_down(self) -> None:
        size = self.client_buffer.size
        max_wait = _seconds(self.client_buffer.max_wait, 30.0) or 30.0
        with self._cond:
            while not self._closed:
                cur = self._seq
                slow = [
                    s
                    for s in self._clients.values()
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
                        self._close_session(
                            s,
                            "overflow",
                            f"client made the writer wait more than {max_wait:g} s "
                            "(client_buffer.max_wait, policy slow_down)",
                        )
                self._cond.wait(0.05)

    def _emit(self, name: str, *args: Any) -> None:
        try:
            getattr(self.observer, name)(self.pipeline_id, *args)
        except Exception:
            logger.exception("observer failed in %s", name)

    def _close_session(self, s: ClientSession, code: str, reason: str) -> None:
        """Server-side close (lock held): unregister and unpin now; the stream sends the
        reason when it next runs, and is cancelled if it stays blocked in a send."""
        if s.closed:
            return
        s.closed = True
        s.close_code = code
        s.close_reason = reason
        if self._clients.get(s.client_id) is s:
            del self._clients[s.client_id]
        if code == "resync":
            self.stats["resyncs"] += 1
        cancel = s.extra.get("cancel")
        if cancel is not None:
            timer = threading.Timer(1.0, cancel)
            timer.daemon = True
            timer.start()
            s.extra["timer"] = timer
        self._cond.notify_all()

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
    ) -> tuple[ClientSession, Any, FanOutSnapshot | None]:
        """Register a client and choose its mode, atomically with the journal.

        Returns the session, the handshake message and, for FULL_SNAPSHOT, the snapshot to
        send. Raises ``LookupError`` subclasses the service maps to gRPC codes."""
        with self._cond:
            if self._closed or self._drain is not None:
                raise Unavailable("server is draining; reconnect to another instance")
            if not self._ready:
                raise Unavailable(f"table {self._table}: baseline not complete yet")
            existing = self._clients.get(client_id)
            max_clients = self.grpc_options.max_clients
            if existing is None and max_clients and len(self._clients) >= max_clients:
                raise Exhausted(
                    f"max clients reached ({max_clients}) for table {self._table}; "
                    "raise grpc.max_clients or add a fan-out instance"
                )
            if existing is not None:
                self._close_session(
                    existing,
                    "replaced",
                    f"replaced by a new connection with client id {client_id!r}",
                )
            cur = self._seq
            oldest = self.oldest_sequence
            new_snapshot = False
            mode = SyncMode.FULL_SNAPSHOT
            resume = cur
            snap_id = ""
            snapshot: FanOutSnapshot | None = None
            # a) same journal: the client's sequence is exact
            if (
                journal_id == self.journal_id
                and 0 < last_sequence <= cur
                and (last_sequence >= (oldest - 1 if oldest else cur))
            ):
                mode, resume = SyncMode.DELTA, last_sequence
            # b) another journal (restart, failover): resume by source position if covered
            elif (
                last_position
                and (r := self._resume_by_position(last_position, applied_at_position)) is not None
            ):
                mode, resume = SyncMode.DELTA, r
            # c) a retained snapshot the client holds, with the journal after it
            elif (
                last_snapshot_id
                and (snap := self._find_snapshot(last_snapshot_id)) is not None
                and snap.journal_id == self.journal_id
                and (snap.sequence >= (oldest - 1 if oldest else cur))
            ):
                mode, resume, snap_id = (
                    SyncMode.DELTA_FROM_SNAPSHOT,
                    snap.sequence,
                    snap.snapshot_id,
                )
            else:
                # share a recent retained snapshot (then catch up from the journal, pinned)
                # rather than copying the state for every connecting client
                latest = self._snapshots[0] if self._snapshots else None
                if (
                    latest is not None
                    and latest.journal_id == self.journal_id
                    and cur - latest.sequence <= self.client_buffer.size
                    and (latest.sequence == cur or (oldest and latest.sequence >= oldest - 1))
                ):
                    snapshot = latest
                else:
                    snapshot, new_snapshot = self._snapshot_locked(persist=False)
                snap_id = snapshot.snapshot_id
                resume = snapshot.sequence
            session = ClientSession(
                client_id=client_id,
                peer=peer,
                mode=mode,
                cursor=resume,
                catch_up_to=cur,
                connected_at=datetime.now(UTC),
                matcher=matcher,
            )
            self._clients[client_id] = session
            handshake = pb.SyncResponse(
                handshake=pb.Handshake(
                    mode=_MODE_TO_PB[mode],
                    server_current_sequence=cur,
                    journal_oldest_sequence=oldest,
                    resume_from_sequence=resume,
                    columns=_wire.columns_to_pb(self._columns),
                    snapshot_id=snap_id,
                    journal_id=self.journal_id,
                    heartbeat_interval_ms=int(self.heartbeat_interval * 1000),
                    client_id=client_id,
                )
            )
        if new_snapshot and snapshot is not None:
            self._announce(snapshot, persist=False)
        self._emit("on_fanout_client_connected", client_id, mode)
        return session, handshake, snapshot

    def _resume_by_position(self, text: str, applied_at: int = 0) -> int | None:
        """The sequence to resume after for a client whose last applied entry is the
        ``applied_at``-th at source position ``text`` (lock held), or None when the journal
        does not cover it (the client then needs a snapshot)."""
        codec = self.codec
        p = codec.from_string(text)
        if p is None or self._unpositioned_from is not None:
            return None
        if self._pruned_position is not None:
            # entries at or before the newest pruned position may be gone
            c = codec.compare(p, self._pruned_position)
            if c is None or c <= 0:
                return None
        else:
            if self._base_position is None:
                return None
            c = codec.compare(p, self._base_position)
            if c is None or c < 0:
                return None
            if c == 0:
                applied_at = 0  # the journal holds nothing at its base position
        # positions are non-decreasing along the journal: the first entry at or after p
        entries = self._entries
        lo, hi = self._head, len(entries)
        while lo < hi:
            mid = (lo + hi) // 2
            ep = entries[mid].position
            cm = codec.compare(ep, p) if ep is not None else -1
            if cm is None:
                return None
            if cm < 0:
                lo = mid + 1
            else:
                hi = mid
        # skip the entries of p's transaction the client already applied
        skip = 0
        while skip < applied_at and lo + skip < len(entries):
            ep = entries[lo + skip].position
            if ep is None or codec.compare(ep, p) != 0:
                break
            skip += 1
        return self._base_seq + lo + skip - 1

    def _count_at_tail(self, position: Position) -> int:
        """Entries at the end of the journal with source position ``position`` (lock held)."""
        if position is None:
            return 0
        n = 0
        entries = self._entries
        i = len(entries) - 1
        while i >= self._head and entries[i].position == position:
            n += 1
            i -= 1
        return n

    def read_batch(
        self, session: ClientSession, max_batch: int, timeout: float
    ) -> tuple[int, int, list[JournalEntry]] | str | None:
        """Wait up to ``timeout`` for entries after the session's cursor and take up to
        ``max_batch`` of them: returns ``(after, through, entries)``; ``"resync"`` when the
        next entry was pruned; a close code when the session was closed; None on timeout.

        Entries are taken under the lock and the cursor advances at once, so the live tail
        continues exactly where catch-up stopped."""
        with self._cond:
            if not session.closed and session.cursor >= self._seq and timeout > 0:
                self._cond.wait(timeout)
            if session.closed:
                return session.close_code or "closed"
            if session.cursor >= self._seq:
                return None
            nxt = session.cursor + 1
            if nxt < self._base_seq + self._head:
                self._close_session(
                    session,
                    "resync",
                    f"entry {nxt} was pruned from the journal (oldest is {self.oldest_sequence})",
                )
                return "resync"
            entries = self._entries_from(nxt, max_batch)
            after = session.cursor
            through = entries[-1].sequence
            session.cursor = through
            if session.state == "catching_up" and through >= session.catch_up_to:
                session.state = "live"
                caught = True
            else:
                caught = False
            depth = self._seq - through
            if depth <= self.client_buffer.size:
                session.waiting_since = 0.0
                if session.backpressured and depth <= self.client_buffer.size // 2:
                    session.backpressured = False  # one event per episode, not per batch
            if self.client_buffer.policy == "slow_down":
                self._cond.notify_all()
        if caught:
            self._emit("on_fanout_client_caught_up", session.client_id, through)
        return after, through, entries

    def mark_caught_up(self, session: ClientSession) -> None:
        """A session with nothing to catch up on (its cursor is already current)."""
        with self._cond:
            if session.state != "catching_up" or session.cursor < session.catch_up_to:
                return
            session.state = "live"
        self._emit("on_fanout_client_caught_up", session.client_id, session.cursor)

    def close_session(self, session: ClientSession, reason: str) -> None:
        """The stream ended (client gone, error, drain): unregister and unpin."""
        with self._cond:
            if session.extra.get("ended"):
                return
            session.extra["ended"] = True
            timer = session.extra.pop("timer", None)
            if timer is not None:
                timer.cancel()
            if self._clients.get(session.client_id) is session:
                del self._clients[session.client_id]
            if not session.closed:
                session.closed = True
                session.close_reason = reason
            self._cond.notify_all()
        self._emit(
            "on_fanout_client_disconnected", session.client_id, session.close_reason or reason
        )

    def linger(self) -> float:
        """How long a stream lets changes accumulate between two messages: ``grpc.linger``,
        or by default 0.2 ms per connected client, between 1 ms and 20 ms."""
        configured = self.grpc_options.linger
        if configured is not None:
            return float(configured)
        return min(0.02, max(0.001, 0.0002 * len(self._clients)))

    def drain_info(self) -> tuple[str, float, int] | None:
        return self._drain

    def wait_idle(self, session: ClientSession, timeout: float) -> None:
        with self._cond:
            if not session.closed:
                self._cond.wait(timeout)

    # ------------------------------------------------------------------ snapshots
    def _snapshot_id(self, seq: int, kind: str = "fanout") -> str:
        t = self._table
        name = _SAFE.sub("_", f"{t.schema}.{t.table}") if t is not None else "table"
        return f"{kind}-{name}-{self.journal_id[:8]}-{seq}-{int(time.time() * 1000)}"

    def _find_snapshot(self, snapshot_id: str) -> FanOutSnapshot | None:
        for s in self._snapshots:
            if s.snapshot_id == snapshot_id:
                return s
        return None

    def create_snapshot(self) -> FanOutSnapshot | None:
        """Take a snapshot of the current state (in memory; queued for the store when one is
        configured) and apply retention. None before the baseline completes."""
        with self._cond:
            if not self._ready or self._table is None:
                return None
            snap, new = self._snapshot_locked(persist=True)
        if new:
            self._announce(snap, persist=True)
        return snap

    def _snapshot_locked(self, persist: bool) -> tuple[FanOutSnapshot, bool]:
        """The retained snapshot at the current sequence, made if needed (lock held)."""
        seq = self._seq
        latest = self._snapshots[0] if self._snapshots else None
        if latest is not None and latest.sequence == seq and latest.journal_id == self.journal_id:
            return latest, False
        snap = FanOutSnapshot(
            snapshot_id=self._snapshot_id(seq, "fanout" if persist else "live"),
            sequence=seq,
            journal_id=self.journal_id,
            position=self.codec.to_string(self._position),
            rows=tuple(self._rows.values()),
            columns=self._columns,
            created_at=datetime.now(UTC),
            applied_at_position=self._count_at_tail(self._position),
        )
        self._snapshots.insert(0, snap)
        self._retain()
        self.stats["snapshots"] += 1
        return snap, True

    def _announce(self, snap: FanOutSnapshot, persist: bool) -> None:
        self._emit("on_fanout_snapshot_created", snap.snapshot_id, snap.sequence, len(snap.rows))
        if persist and self._store is not None:
            with self._persist_cond:
                self._persist_queue.append(snap)
                self._persist_cond.notify_all()

    def _retain(self) -> None:
        keep = self.snapshot_options.keep_count
        max_age = _seconds(self.snapshot_options.max_age, None)
        snaps = self._snapshots
        if max_age is not None:
            limit = datetime.now(UTC) - timedelta(seconds=max_age)
            snaps = [snaps[0], *[s for s in snaps[1:] if s.created_at >= limit]] if snaps else []
        if keep and len(snaps) > keep:
            snaps = snaps[:keep]
        self._snapshots = snaps

    def snapshots(self) -> list[FanOutSnapshot]:
        """Retained snapshots, newest first."""
        with self._cond:
            return list(self._snapshots)

    def get_snapshot(self, snapshot_id: str) -> FanOutSnapshot | None:
        """A retained snapshot by id, from memory or else from the snapshot store."""
        with self._cond:
            snap = self._find_snapshot(snapshot_id)
        if snap is not None or self._store is None:
            return snap
        try:
            meta, tables = self._store.load(snapshot_id, self._serializer)
        except Exception:
            return None
        rows: tuple[Row, ...] = ()
        info = meta.tables[0] if meta.tables else None
        for t, it in tables.items():
            if t == self._table:
                rows = tuple(it)
        um = meta.user_meta
        return FanOutSnapshot(
            snapshot_id=meta.snapshot_id,
            sequence=int(um.get("fanout_sequence", 0)),
            journal_id=str(um.get("fanout_journal_id", "")),
            position=(info.position or "") if info else "",
            rows=rows,
            columns=info.columns if info else (),
            created_at=meta.created_at,
            persisted=True,
            applied_at_position=int(um.get("fanout_applied_at_position", 0)),
        )

    def _persist_loop(self) -> None:
        while True:
            with self._persist_cond:
                while not self._persist_queue and not self._stop.is_set():
                    self._persist_cond.wait(0.5)
                if not self._persist_queue:
                    return
                snap = self._persist_queue.pop(0)
            try:
                self._persist(snap)
            except Exception:
                logger.exception("fan-out snapshot %s could not be saved", snap.snapshot_id)

    def _persist(self, snap: FanOutSnapshot) -> None:
        assert self._table is not None
        info = TableSnapshotInfo(
            table=self._table,
            row_count=len(snap.rows),
            columns=snap.columns,
            target_type=self.target_type,
            position=snap.position or None,
            pipeline_id=self.pipeline_id,
        )
        meta = SnapshotMetadata(
            snapshot_id=snap.snapshot_id,
            created_at=snap.created_at,
            source_positions={"fanout": snap.position} if snap.position else {},
            tables=(info,),
            user_meta={
                "fanout_sequence": snap.sequence,
                "fanout_journal_id": snap.journal_id,
                "fanout_applied_at_position": snap.applied_at_position,
            },
        )
        desc = self._store.save(snap.snapshot_id, meta, {self._table: snap.rows}, self._serializer)
        with self._cond:
            for i, s in enumerate(self._snapshots):
                if s.snapshot_id == snap.snapshot_id:
                    self._snapshots[i] = FanOutSnapshot(
                        **{
                            **{f: getattr(s, f) for f in s.__dataclass_fields__},
                            "persisted": True,
                            "size_bytes": int(getattr(desc, "size_bytes", 0) or 0),
                        }
                    )
        self._prune_store()

    def _prune_store(self) -> None:
        keep = self.snapshot_options.keep_count
        if not keep:
            return
        mine = [
            d
            for d in self._store.list(self._table)
            if "fanout_journal_id" in (getattr(d, "user_meta", None) or {})
        ]
        for d in mine[keep:]:
            with contextlib.suppress(Exception):
                self._store.delete(d.snapshot_id)

    def _housekeeping(self) -> None:
        interval = _seconds(self.snapshot_options.interval, None)
        next_snap = time.monotonic() + interval if interval else None
        while not self._stop.wait(0.5 if next_snap is None else min(0.5, interval or 0.5)):
            now = time.time()
            with self._cond:
                self._prune(now)
                self._retain()
                if self._drain is not None:
                    self._cond.notify_all()
            if next_snap is not None and time.monotonic() >= next_snap:
                next_snap = time.monotonic() + (interval or 0)
                try:
                    self.create_snapshot()
                except Exception:
                    logger.exception("periodic fan-out snapshot failed")

    # ------------------------------------------------------------------ status / reads
    def status(self) -> dict[str, Any]:
        with self._cond:
            cur = self._seq
            clients = [
                {
                    "client_id": s.client_id,
                    "peer": s.peer,
                    "mode": s.mode.value,
                    "state": "draining"
                    if (self._drain is not None and s.state == "live")
                    else ("backpressured" if s.backpressured else s.state),
                    "current_sequence": s.cursor,
                    "behind_count": cur - s.cursor,
                    "buffer_depth": min(cur - s.cursor, self.client_buffer.size),
                    "connected_at": s.connected_at,
                }
                for s in self._clients.values()
            ]
            latest = self._snapshots[0] if self._snapshots else None
            return {
                "table": str(self._table),
                "journal_id": self.journal_id,
                "current_sequence": cur,
                "journal_oldest_sequence": self.oldest_sequence,
                "journal_entry_count": self.journal_length(),
                "row_count": len(self._rows),
                "connected_clients": len(clients),
                "clients": clients,
                "latest_snapshot": latest,
                "draining": self._drain is not None,
            }

    def get(self, *key: Any) -> Row | None:
        k = key[0] if len(key) == 1 else key
        with self._cond:
            row = self._rows.get(k)
        return None if row is None else dict(row)

    def all(self) -> list[Row]:
        return self.export_snapshot()


_MODE_TO_PB = {
    SyncMode.FULL_SNAPSHOT: pb.SYNC_MODE_FULL_SNAPSHOT,
    SyncMode.DELTA: pb.SYNC_MODE_DELTA,
    SyncMode.DELTA_FROM_SNAPSHOT: pb.SYNC_MODE_DELTA_FROM_SNAPSHOT,
}


class Unavailable(LookupError):
    """Maps to gRPC UNAVAILABLE."""


class Exhausted(LookupError):
    """Maps to gRPC RESOURCE_EXHAUSTED."""


def _no_key(row: Mapping[str, Any]) -> Any:
    raise TypeError("not initialised")
