"""``FanOutSource`` (plugin source ``fanout``): a fan-out server's table as a Laredo source.

A cascade: an engine reading a ``replication-fanout`` server as its source, e.g. a regional
fan-out tier fed by a central one. Positions are the upstream journal's sequence numbers
(ints). The baseline is the server's snapshot; the stream continues on the same gRPC call, so
baseline and stream meet exactly at the snapshot's sequence. When the upstream cannot continue
from a position (its journal was pruned past it, or it restarted with a new journal) the stream
raises ``ReBaselineRequired`` and the engine re-baselines.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Sequence
from typing import Any

import grpc
from laredo.auth import TokenConfig
from laredo.contracts import ChangeHandler, RowCallback
from laredo.errors import ConfigError, ReBaselineRequired, SourceError
from laredo.types import (
    ChangeAction,
    ChangeEvent,
    ColumnDefinition,
    LagInfo,
    OrderingGuarantee,
    SourceConfig,
    SourceState,
    TableIdentifier,
    TableProblem,
)

from . import _wire
from ._filters import normalize_filters
from ._proto import replication_pb2 as pb
from .calls import Credentials, build_request, open_channel, sync_stub
from .positions import compare_sequences, sequence_from_string, sequence_to_string

logger = logging.getLogger(__name__)

__all__ = ["FanOutSource"]


def _read(path: str | None) -> bytes | None:
    if not path:
        return None
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as exc:
        raise ConfigError(f"fanout source: cannot read {path!r}: {exc.strerror or exc}") from None


class FanOutSource:
    """Reads one table from a fan-out server (``address`` = ``host:port``), presenting the
    port's ``token`` (or ``token_file``) and, for a server that requires one, a client
    certificate (``client_cert_file``, ``client_key_file``); ``root_certificates_file``
    turns TLS on."""

    def __init__(
        self,
        address: str,
        table: str | TableIdentifier | None = None,
        *,
        client_id: str = "",
        filters: Any = None,
        root_certificates_file: str | None = None,
        token: Any = None,
        token_file: str | None = None,
        client_cert_file: str | None = None,
        client_key_file: str | None = None,
        reconnect_initial: float = 0.2,
        reconnect_max: float = 10.0,
    ) -> None:
        if not address or ":" not in address:
            raise ConfigError(f"fanout source: address {address!r} must be host:port")
        self.address = address
        self.table: TableIdentifier | None = (
            TableIdentifier.parse(table) if isinstance(table, str) else table
        )
        self.client_id = client_id
        self.filters = normalize_filters(filters)
        token = TokenConfig(token=token, token_file=token_file).resolve("fanout source")
        self._credentials = Credentials(
            _read(root_certificates_file), _read(client_cert_file), _read(client_key_file), token
        )
        self._backoff0 = reconnect_initial
        self._backoff_max = reconnect_max
        self._channel: grpc.Channel | None = None
        self._call: Any = None
        self._iter: Any = None
        self._columns: tuple[ColumnDefinition, ...] = ()
        self._journal_id = ""
        self._baseline_seq: int | None = None
        self._state = SourceState.CLOSED
        self._stop = threading.Event()
        self._paused = threading.Event()
        self._last_ack: int | None = None
        self._last_seq = 0

    # -- connection helpers -------------------------------------------------------------------
    def _open(self, last_seq: int = 0, journal_id: str = "") -> Any:
        if self._channel is None:
            self._channel = open_channel(self.address, self._credentials)
        assert self.table is not None
        req = build_request(
            self.table,
            self.client_id,
            last_sequence=last_seq,
            journal_id=journal_id,
            filters=self.filters,
        )
        self._call = sync_stub(self._channel)(req)
        self._iter = iter(self._call)
        msg = next(self._iter)
        if msg.WhichOneof("msg") != "handshake":
            raise SourceError(f"fanout source {self.address}: expected a handshake, got {msg}")
        return msg.handshake

    def _cancel(self) -> None:
        call = self._call
        self._call = None
        self._iter = None
        if call is not None:
            with contextlib.suppress(Exception):
                call.cancel()

    # -- SyncSource ---------------------------------------------------------------------------
    def init(self, config: SourceConfig) -> dict[TableIdentifier, list[ColumnDefinition]]:
        tables = list(config.tables)
        if self.table is None:
            if len(tables) != 1:
                raise ConfigError(
                    f"fanout source {self.address}: serves one table; got {len(tables)} "
                    "(use one fanout source per table)"
                )
            self.table = tables[0]
        self._state = SourceState.CONNECTING
        self._stop.clear()
        try:
            hs = self._open()
        except grpc.RpcError as exc:
            self._state = SourceState.ERROR
            raise SourceError(
                f"fanout source {self.address} ({self.table}): cannot sync: {exc.code()}: "
                f"{exc.details()}"
            ) from None
        self._columns = _wire.columns_from_pb(hs.columns)
        self._journal_id = hs.journal_id
        self._state = SourceState.CONNECTED
        return {self.table: list(self._columns)}

    def validate_tables(self, tables: Sequence[TableIdentifier]) -> list[TableProblem]:
        return [
            TableProblem(
                t, "TABLE_NOT_SERVED", f"fanout source {self.address} serves only {self.table}"
            )
            for t in tables
            if t != self.table
        ]

    def baseline(self, tables: Sequence[TableIdentifier], row_callback: RowCallback) -> int:
        """The upstream's snapshot (opening a new FULL_SNAPSHOT sync unless ``init``'s call is
        still waiting at its snapshot); returns the snapshot's sequence."""
        assert self.table is not None
        if self._iter is None or self._baseline_seq is not None:
            self._cancel()
            hs = self._open()
            self._columns = _wire.columns_from_pb(hs.columns)
            self._journal_id = hs.journal_id
        dec = _wire.decode_row
        table = self.table
        for msg in self._iter:
            kind = msg.WhichOneof("msg")
            if kind == "snapshot_rows":
                for r in msg.snapshot_rows.rows:
                    row_callback(table, dec(r))
            elif kind == "snapshot_end":
                self._baseline_seq = msg.snapshot_end.sequence
                self._last_seq = self._baseline_seq
                return self._baseline_seq
        raise SourceError(f"fanout source {self.address}: stream ended before the snapshot end")

    def stream(self, from_position: Any, handler: ChangeHandler) -> None:
        """Deliver upstream journal batches as ``on_changes`` (position = entry sequence),
        heartbeats as ``on_heartbeat``; reconnects with backoff until ``stop_stream``."""
        pos = 0 if from_position is None else int(from_position)
        backoff = self._backoff0
        self._state = SourceState.STREAMING
        while not self._stop.is_set():
            try:
                if self._iter is None or pos != self._last_seq:
                    self._cancel()
                    hs = self._open(pos, self._journal_id)
                    if hs.mode != pb.SYNC_MODE_DELTA or hs.journal_id != self._journal_id:
                        self._cancel()
                        raise ReBaselineRequired(
                            f"fanout source {self.address}: upstream cannot resume after "
                            f"sequence {pos} (journal {self._journal_id}); re-baseline"
                        )
                    self._last_seq = pos
                pos = self._pump(handler)
                backoff = self._backoff0
            except ReBaselineRequired:
                self._state = SourceState.CONNECTED
                raise
            except grpc.RpcError as exc:
                if self._stop.is_set():
                    break
                logger.info(
                    "fanout source %s: stream broke (%s); reconnecting", self.address, exc.code()
                )
                self._state = SourceState.RECONNECTING
            self._cancel()
            pos = self._last_seq
            if self._stop.wait(backoff):
                break
            backoff = min(self._backoff_max, backoff * 2)
        self._cancel()
        self._state = SourceState.CLOSED

    def _pump(self, handler: ChangeHandler) -> int:
        assert self.table is not None
        table = self.table
        dec = _wire.decode_row
        A = _wire.ACTION_FROM_PB
        for msg in self._iter:
            if self._stop.is_set():
                break
            while self._paused.is_set() and not self._stop.is_set():
                time.sleep(0.05)
            kind = msg.WhichOneof("msg")
            if kind == "journal":
                b = msg.journal
                if b.after_sequence > self._last_seq:
                    raise ReBaselineRequired(
                        f"fanout source {self.address}: gap after {self._last_seq}"
                    )
                events: list[ChangeEvent] = []
                for e in b.entries:
                    if e.sequence <= self._last_seq:
                        continue
                    action = A[e.action]
                    if action is ChangeAction.SCHEMA_CHANGE:
                        if events:
                            handler.on_changes(events)
                            events = []
                        old = _wire.columns_from_pb(e.old_columns)
                        new = _wire.columns_from_pb(e.new_columns)
                        self._columns = new
                        handler.on_schema_change(table, old, new, e.sequence)
                        continue
                    events.append(
                        ChangeEvent(
                            table,
                            action,
                            e.sequence,
                            new_values=dec(e.new_values) if e.new_values else None,
                            old_values=dec(e.old_values) if e.old_values else None,
                        )
                    )
                if events:
                    handler.on_changes(events)
                self._last_seq = max(self._last_seq, b.through_sequence)
                if not events and b.through_sequence:
                    handler.on_heartbeat(self._last_seq)
            elif kind == "heartbeat":
                if msg.heartbeat.current_sequence >= self._last_seq:
                    self._last_seq = msg.heartbeat.current_sequence
                    handler.on_heartbeat(self._last_seq)
            elif kind == "resync":
                raise ReBaselineRequired(
                    f"fanout source {self.address}: upstream asks for a re-sync: "
                    f"{msg.resync.reason}"
                )
            elif kind == "go_away":
                logger.info("fanout source %s: upstream is draining", self.address)
                break
        return self._last_seq

    def stop_stream(self) -> None:
        self._stop.set()
        self._cancel()

    def ack(self, position: Any) -> None:
        self._last_ack = int(position)

    def supports_resume(self) -> bool:
        return False

    def last_acked_position(self) -> int | None:
        return None

    def compare_positions(self, a: Any, b: Any) -> int:
        return compare_sequences(a, b)

    def position_to_string(self, position: Any) -> str:
        return sequence_to_string(position)

    def position_from_string(self, text: str) -> int:
        return sequence_from_string(text, "fanout source position")

    def pause(self) -> None:
        self._paused.set()

    def resume(self) -> None:
        self._paused.clear()

    def get_lag(self) -> LagInfo:
        return LagInfo()

    def ordering_guarantee(self) -> OrderingGuarantee:
        return OrderingGuarantee.TOTAL_ORDER

    def state(self) -> SourceState:
        return self._state

    def close(self) -> None:
        self.stop_stream()
        if self._channel is not None:
            self._channel.close()
            self._channel = None
        self._state = SourceState.CLOSED
