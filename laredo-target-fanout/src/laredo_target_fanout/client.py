"""``FanOutClient``: a local, indexed replica of one table served by a fan-out target.

``FanOutClient("host:4002", "public.users", lookup_fields=["email"], indexes=[...],
local_snapshot_path="users.replica", client_id="svc-a-1", filters=[...])``

* Credentials: ``token`` (the server's ``grpc.auth`` token, sent on every call),
  ``root_certificates`` (PEM CA: TLS, the server is verified) and ``client_cert`` /
  ``client_key`` (PEM, for a server that requires client certificates).

* ``start()`` returns at once; a background thread connects, receives a full snapshot or only
  the delta after its local state, then follows the live tail. ``await_ready(timeout)`` waits
  until the replica has caught up with the server once.
* Reads (``get``, ``lookup``, ``lookup_all``, ``lookup_by``, ``all``, ``count``) and
  ``listen`` behave exactly as ``IndexedTarget``'s (the replica *is* an ``IndexedTarget``): copies
  out, consistent per received batch.
* The replica applies an entry once: entries at or below its last sequence are skipped, and a
  batch that starts after its last sequence (a gap) makes it reconnect. Reconnects back off
  from 0.5 s to 30 s (reset after a successful handshake); a silence longer than three heartbeat
  intervals counts as a broken connection.
* ``stop()`` saves the replica to ``local_snapshot_path`` (when set) so the next start asks only
  for the changes after it.
* Hand-off: when the server drains, it sends GoAway with a deadline. The replica keeps applying
  that stream while it looks, on new connections, for a server at the address that is not
  draining (another instance behind a load balancer); it switches as soon as one answers, else
  when the old stream ends at the deadline. Until the deadline plus ``reconnect_max`` it
  reconnects every ~0.2 s (a restarted server is picked up at once), and it resumes where it
  was: by sequence in the same journal, by source position in another one. No change is
  skipped or applied twice.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import random
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import grpc
from laredo.errors import ConfigError, TransientError
from laredo.serialization import decode_columns, encode_columns
from laredo.types import (
    ChangeAction,
    ChangeEvent,
    ColumnDefinition,
    Row,
    SyncMode,
    TableIdentifier,
    TableSnapshotInfo,
)
from laredo_target_memory import IndexedTarget

from . import _wire
from ._filters import normalize_filters
from ._proto import replication_pb2 as pb
from .calls import (
    STATUS,
    Credentials,
    build_request,
    fetch_snapshot,
    list_snapshots,
    open_channel,
    replication_status,
    sync_stub,
)

logger = logging.getLogger(__name__)

__all__ = [
    "Credentials",
    "FanOutClient",
    "GapError",
    "ResyncRequired",
    "build_request",
    "fetch_snapshot",
    "list_snapshots",
    "replication_status",
    "sync_stub",
]

_A = _wire.ACTION_FROM_PB
_LOCAL_VERSION = 1

HANDOFF_RETRY = 0.2
"""Seconds (jittered) between attempts to reach a server while handing off after a GoAway."""


class GapError(TransientError):
    """The stream skipped entries this replica has not seen: reconnect."""


class ResyncRequired(TransientError):
    """The server cannot continue this replica without a snapshot: reconnect for one."""


class FanOutClient:
    """A replica of one table from a fan-out server; see the module docstring."""

    def __init__(
        self,
        address: str,
        table: TableIdentifier | str,
        *,
        indexes: Iterable[Any] = (),
        local_snapshot_path: str | os.PathLike[str] | None = None,
        client_id: str = "",
        filters: Any = None,
        lookup_fields: Sequence[str] | str = (),
        root_certificates: bytes | None = None,
        client_cert: bytes | None = None,
        client_key: bytes | None = None,
        token: str | None = None,
        max_batch: int = 0,
        reconnect_initial: float = 0.5,
        reconnect_max: float = 30.0,
    ) -> None:
        if not address or ":" not in address:
            raise ConfigError(f"fan-out client: address {address!r} must be host:port")
        if local_snapshot_path is not None and Path(local_snapshot_path).is_dir():
            raise ConfigError(
                f"fan-out client: local_snapshot_path {str(local_snapshot_path)!r} is a "
                "directory; give the path of a file in it (e.g. "
                f"{str(Path(local_snapshot_path) / 'replica.jsonl')!r})"
            )
        self.address = address
        self.table = table if isinstance(table, TableIdentifier) else TableIdentifier.parse(table)
        self.client_id = client_id
        self.filters = normalize_filters(filters)
        self.local_snapshot_path = Path(local_snapshot_path) if local_snapshot_path else None
        self._indexes = list(indexes or ())
        self._lookup_fields = lookup_fields
        self.replica = IndexedTarget(lookup_fields=lookup_fields, indexes=self._indexes)
        self._credentials = Credentials(root_certificates, client_cert, client_key, token)
        self._max_batch = max_batch
        self._backoff0 = reconnect_initial
        self._backoff_max = reconnect_max
        # replica state (touched by the stream thread; read by status properties)
        self.last_sequence = 0
        self.journal_id = ""
        self.snapshot_id = ""
        """Id of the snapshot the replica equals exactly (cleared once a change is applied)."""
        self.source_position = ""
        """Source position of the last entry applied (for a resume in another journal)."""
        self.applied_at_position = 0
        """How many entries at ``source_position`` were applied (a transaction may span
        several entries, and a batch may end inside one)."""
        self.columns: tuple[ColumnDefinition, ...] = ()
        self.mode: SyncMode | None = None
        self.handshakes = 0
        self.snapshots_received = 0
        self.entries_applied = 0
        self.reconnects = 0
        self.last_error: str = ""
        self.go_away: str = ""
        self.drain_deadline_unix_ms = 0
        """The deadline of the last GoAway received (0: none yet)."""
        self.handoffs = 0
        """Streams ended to move to a server that is not draining (after a GoAway)."""
        self._handoff_until = 0.0
        """While ``time.monotonic()`` is below it, a GoAway hand-off is in progress."""
        self._initialised = False
        self._ready = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._call: Any = None
        self._channel: grpc.Channel | None = None
        self._last_received = time.monotonic()
        self._hb_interval = 5.0
        self._catch_up_to = 0
        self._lock = threading.Lock()
        self._awaiting_snapshot = False
        if self.local_snapshot_path is not None:
            self._load_local()

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> FanOutClient:
        if self._thread is not None:
            return self
        self._stop.clear()
        self._thread = threading.Thread(
            target=self._run, name=f"fanout-client-{self.table}", daemon=True
        )
        self._thread.start()
        return self

    def await_ready(self, timeout: float | None = None) -> bool:
        """True once the replica caught up with the server (after a snapshot or a delta)."""
        return self._ready.wait(timeout)

    @property
    def ready(self) -> bool:
        return self._ready.is_set()

    def stop(self, save: bool = True) -> None:
        """Disconnect, wait for the stream thread, and save the local snapshot (if a path was
        given and ``save``)."""
        self._stop.set()
        call = self._call
        if call is not None:
            with contextlib.suppress(Exception):
                call.cancel()
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None
        if self._channel is not None:
            self._channel.close()
            self._channel = None
        if save and self.local_snapshot_path is not None and self._initialised:
            self.save_local_snapshot()

    def __enter__(self) -> FanOutClient:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    # ------------------------------------------------------------------ reads
    def get(self, *key: Any) -> Row | None:
        return self.replica.get(*key)

    def lookup(self, *values: Any) -> Row | None:
        return self.replica.lookup(*values)

    def lookup_all(self, index_name: str, *values: Any) -> list[Row]:
        return self.replica.lookup_all(index_name, *values)

    def lookup_by(self, index_name: str, *values: Any) -> Row | None:
        return self.replica.lookup_by(index_name, *values)

    def all(self) -> list[Row]:
        return self.replica.all()

    def count(self) -> int:
        return self.replica.count()

    def listen(
        self, fn: Callable[[Any, Any], None], replay_existing: bool = False
    ) -> Callable[[], None]:
        """``fn(old, new)`` after every applied change (see ``IndexedTarget.listen``)."""
        return self.replica.listen(fn, replay_existing=replay_existing)

    # ------------------------------------------------------------------ local snapshot
    def save_local_snapshot(self) -> None:
        """Write the replica atomically (header line, then one typed-JSON row per line)."""
        path = self.local_snapshot_path
        if path is None:
            raise ConfigError("fan-out client: no local_snapshot_path configured")
        with self._lock:
            header = {
                "version": _LOCAL_VERSION,
                "table": str(self.table),
                "journal_id": self.journal_id,
                "last_seq": self.last_sequence,
                "snapshot_id": self.snapshot_id,
                "last_source_position": self.source_position,
                "applied_at_position": self.applied_at_position,
                "columns": encode_columns(self.columns),
                "filters": [[p.field, p.op, repr(p.value)] for p in self.filters],
            }
            rows = self.replica.all()
        tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(json.dumps(header).encode() + b"\n")
            enc = _wire.encode_row
            for r in rows:
                f.write(enc(r) + b"\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        logger.info("fan-out client saved %d rows of %s to %s", len(rows), self.table, path)

    def _load_local(self) -> None:
        path = self.local_snapshot_path
        assert path is not None
        if not path.exists():
            return
        try:
            with open(path, "rb") as f:
                header = json.loads(f.readline())
                if header.get("version") != _LOCAL_VERSION or header.get("table") != str(
                    self.table
                ):
                    raise ValueError("written for another table or by another version")
                if header.get("filters") != [[p.field, p.op, repr(p.value)] for p in self.filters]:
                    raise ValueError("written with other filters")
                columns = decode_columns(header.get("columns", []))
                rows = [_wire.decode_row(line) for line in f if line.strip()]
        except (OSError, ValueError, KeyError) as exc:
            logger.warning("ignoring local fan-out snapshot %s: %s", path, exc)
            return
        self._init_columns(columns)
        self.replica.restore_snapshot(TableSnapshotInfo(self.table, len(rows), columns), rows)
        self.last_sequence = int(header.get("last_seq", 0))
        self.journal_id = str(header.get("journal_id", ""))
        self.snapshot_id = str(header.get("snapshot_id", ""))
        self.source_position = str(header.get("last_source_position", ""))
        self.applied_at_position = int(header.get("applied_at_position", 0))
        logger.info(
            "fan-out client restored %d rows of %s at sequence %d from %s",
            len(rows),
            self.table,
            self.last_sequence,
            path,
        )

    # ------------------------------------------------------------------ stream loop
    def _run(self) -> None:
        backoff = self._backoff0
        while not self._stop.is_set():
            progressed = False
            try:
                progressed = self._stream_once()
                self.last_error = ""
            except grpc.RpcError as exc:
                code = exc.code() if hasattr(exc, "code") else None
                if self._stop.is_set():
                    break
                self.last_error = f"{code}: {exc.details() if hasattr(exc, 'details') else exc}"
                progressed = self.handshakes > 0 and code not in (
                    grpc.StatusCode.UNAVAILABLE,
                    grpc.StatusCode.RESOURCE_EXHAUSTED,
                )
                logger.info("fan-out client %s: stream ended: %s", self.table, self.last_error)
            except (GapError, ResyncRequired) as exc:
                self.last_error = str(exc)
                progressed = True
                logger.info("fan-out client %s: %s; reconnecting", self.table, exc)
            except Exception as exc:
                self.last_error = repr(exc)
                logger.exception("fan-out client %s: stream failed", self.table)
            finally:
                self._call = None
            if self._stop.is_set():
                break
            self.reconnects += 1
            if progressed:
                backoff = self._backoff0
            if time.monotonic() < self._handoff_until:
                self._close_channel()  # a new connection: not the draining server's
                delay = 0.05 if self.go_away else HANDOFF_RETRY
            else:
                delay = backoff
            self.go_away = ""
            self._stop.wait(delay * (0.8 + 0.4 * random.random()))
            if not progressed:
                backoff = min(self._backoff_max, backoff * 2)

    def _close_channel(self) -> None:
        channel, self._channel = self._channel, None
        if channel is not None:
            channel.close()

    def _stream_once(self) -> bool:
        """One Sync call until it ends; True when it got past the handshake."""
        if self._channel is None:
            self._channel = open_channel(self.address, self._credentials)
        stub = sync_stub(self._channel)
        req = build_request(
            self.table,
            self.client_id,
            last_sequence=self.last_sequence if self._initialised else 0,
            journal_id=self.journal_id,
            position=self.source_position,
            snapshot_id=self.snapshot_id,
            filters=self.filters,
            max_batch=self._max_batch,
            applied_at_position=self.applied_at_position,
        )
        call = stub(req)
        self._call = call
        self._last_received = time.monotonic()
        watchdog = threading.Thread(target=self._watch, args=(call,), daemon=True)
        watchdog.start()
        got_handshake = False
        snapshot_rows: list[Row] | None = None
        snapshot_begin: Any = None
        try:
            for msg in call:
                self._last_received = time.monotonic()
                kind = msg.WhichOneof("msg")
                if kind == "journal":
                    self._apply_batch(msg.journal)
                elif kind == "snapshot_rows":
                    if snapshot_rows is None:
                        raise GapError("snapshot rows without snapshot_begin")
                    dec = _wire.decode_row
                    snapshot_rows.extend(dec(r) for r in msg.snapshot_rows.rows)
                elif kind == "heartbeat":
                    self._on_heartbeat(msg.heartbeat)
                elif kind == "handshake":
                    got_handshake = True
                    self._on_handshake(msg.handshake)
                elif kind == "snapshot_begin":
                    snapshot_begin = msg.snapshot_begin
                    snapshot_rows = []
                elif kind == "snapshot_end":
                    if snapshot_rows is None or snapshot_begin is None:
                        raise GapError("snapshot_end without snapshot_begin")
                    self._install_snapshot(snapshot_begin, snapshot_rows, msg.snapshot_end)
                    snapshot_rows = None
                    snapshot_begin = None
                elif kind == "go_away":
                    self._on_go_away(msg.go_away, call)
                elif kind == "resync":
                    raise ResyncRequired(f"server asks for a re-sync: {msg.resync.reason}")
            return got_handshake
        finally:
            if call.is_active():
                call.cancel()  # a raised GapError/ResyncRequired must not leave it open

    def _on_go_away(self, go_away: Any, call: Any) -> None:
        """Start the hand-off: keep this stream, and look for a server that is not draining."""
        self.go_away = go_away.reason or "go away"
        self.drain_deadline_unix_ms = go_away.drain_deadline_unix_ms
        left = 0.0
        if go_away.drain_deadline_unix_ms:
            left = max(0.0, go_away.drain_deadline_unix_ms / 1000 - time.time())
        self._handoff_until = time.monotonic() + left + self._backoff_max
        logger.info(
            "fan-out client %s: server is draining (%s); handing off within %.1f s",
            self.table,
            self.go_away,
            left,
        )
        threading.Thread(
            target=self._probe, args=(call,), name=f"fanout-handoff-{self.table}", daemon=True
        ).start()

    def _probe(self, call: Any) -> None:
        """While the draining stream still delivers, ask the address on new connections for
        a server that is not draining; when one answers, end the old stream (between two
        messages: a batch is applied whole) so that the client reconnects there."""
        while not self._stop.is_set() and call.is_active():
            if self._other_server_ready():
                logger.info(
                    "fan-out client %s: a server that is not draining answers at %s; "
                    "switching to it",
                    self.table,
                    self.address,
                )
                self.handoffs += 1
                call.cancel()
                return
            self._stop.wait(HANDOFF_RETRY * (0.5 + random.random()))

    def _other_server_ready(self) -> bool:
        request = pb.GetReplicationStatusRequest(schema=self.table.schema, table=self.table.table)
        try:
            with open_channel(self.address, self._credentials) as ch:
                status = ch.unary_unary(
                    STATUS,
                    request_serializer=pb.GetReplicationStatusRequest.SerializeToString,
                    response_deserializer=pb.GetReplicationStatusResponse.FromString,
                )(request, timeout=2)
        except grpc.RpcError:
            return False
        return not status.draining

    def _watch(self, call: Any) -> None:
        """Cancel the call when the server stays silent for three heartbeat intervals."""
        while not self._stop.is_set() and call.is_active():
            gap = 3 * self._hb_interval
            silent = time.monotonic() - self._last_received
            if silent > gap:
                logger.warning(
                    "fan-out client %s: no message for %.1f s (heartbeat %.1f s); reconnecting",
                    self.table,
                    silent,
                    self._hb_interval,
                )
                call.cancel()
                return
            self._stop.wait(min(0.5, gap / 4))

    # ------------------------------------------------------------------ applying
    def _init_columns(self, columns: tuple[ColumnDefinition, ...]) -> None:
        if columns != self.columns or not self._initialised:
            self.replica.on_init(self.table, columns)
            self.columns = columns
            self._initialised = True

    def _on_handshake(self, h: Any) -> None:
        self.handshakes += 1
        self._handoff_until = 0.0  # a server took this client: any hand-off is over
        mode = _wire.MODE_FROM_PB.get(h.mode)
        self.mode = mode
        if h.heartbeat_interval_ms:
            self._hb_interval = h.heartbeat_interval_ms / 1000
        self._init_columns(_wire.columns_from_pb(h.columns))
        self._catch_up_to = h.server_current_sequence
        if mode is SyncMode.DELTA:
            if h.journal_id != self.journal_id:
                # resumed by source position in a new sequence space
                self.journal_id = h.journal_id
                self.last_sequence = h.resume_from_sequence
            elif h.resume_from_sequence > self.last_sequence:
                raise GapError(
                    f"server resumes after {h.resume_from_sequence} but this replica is at "
                    f"{self.last_sequence}"
                )
        elif mode is SyncMode.DELTA_FROM_SNAPSHOT:
            if h.snapshot_id != self.snapshot_id:
                self.snapshot_id = ""
                raise ResyncRequired(f"server offered snapshot {h.snapshot_id} this replica lacks")
            self.journal_id = h.journal_id
            self.last_sequence = h.resume_from_sequence
        elif mode is SyncMode.FULL_SNAPSHOT:
            self.journal_id = h.journal_id
            self.last_sequence = 0  # until snapshot_end: a broken stream asks for a snapshot again
            self._awaiting_snapshot = True
        self._check_ready()

    def _install_snapshot(self, begin: Any, rows: list[Row], end: Any) -> None:
        info = TableSnapshotInfo(
            self.table, len(rows), self.columns, position=begin.source_position
        )
        with self._lock:
            self.replica.restore_snapshot(info, rows)
            self.last_sequence = end.sequence
            self.snapshot_id = begin.snapshot_id
            self.source_position = begin.source_position
            self.applied_at_position = begin.applied_at_position
        self.snapshots_received += 1
        self._awaiting_snapshot = False
        self._check_ready()

    def _apply_batch(self, batch: Any) -> None:
        last = self.last_sequence
        if batch.after_sequence > last:
            raise GapError(
                f"journal batch starts after {batch.after_sequence} but this replica is at {last}"
            )
        events: list[ChangeEvent] = []
        table = self.table
        dec = _wire.decode_row
        cur_pos = self.source_position
        at_pos = self.applied_at_position
        applied = 0
        for e in batch.entries:
            seq = e.sequence
            if seq <= last:
                continue  # already applied (idempotent by sequence)
            pos = e.source_position
            if pos:
                if pos == cur_pos:
                    at_pos += 1
                else:
                    cur_pos, at_pos = pos, 1
            action = _A[e.action]
            if action is ChangeAction.SCHEMA_CHANGE:
                if events:
                    self._apply(events)
                    events = []
                self._init_columns(_wire.columns_from_pb(e.new_columns))
            else:
                events.append(
                    ChangeEvent(
                        table,
                        action,
                        pos,
                        new_values=dec(e.new_values) if e.new_values else None,
                        old_values=dec(e.old_values) if e.old_values else None,
                    )
                )
            applied += 1
            last = seq
        with self._lock:
            if events:
                self._apply(events)
            self.last_sequence = max(last, batch.through_sequence)
            self.source_position = cur_pos
            self.applied_at_position = at_pos
            if applied:
                self.snapshot_id = ""
        self.entries_applied += applied
        self._check_ready()

    def _apply(self, events: list[ChangeEvent]) -> None:
        self.replica.apply_changes(self.table, events)

    def _on_heartbeat(self, hb: Any) -> None:
        if hb.current_sequence < self.last_sequence:
            return
        with self._lock:
            self.last_sequence = hb.current_sequence
        self._check_ready()

    def _check_ready(self) -> None:
        if (
            not self._ready.is_set()
            and self.handshakes
            and not self._awaiting_snapshot
            and self.last_sequence >= self._catch_up_to
        ):
            self._ready.set()

    # ------------------------------------------------------------------ status helpers
    def status(self) -> dict[str, Any]:
        return {
            "address": self.address,
            "table": str(self.table),
            "client_id": self.client_id,
            "journal_id": self.journal_id,
            "last_sequence": self.last_sequence,
            "source_position": self.source_position,
            "mode": self.mode.value if self.mode else None,
            "ready": self.ready,
            "rows": self.count(),
            "reconnects": self.reconnects,
            "last_error": self.last_error,
        }
