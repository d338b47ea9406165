"""Channels and calls to a fan-out server: ``open_channel`` (TLS, client certificate, token),
the ``Sync`` stub and request, and the one-shot RPCs (status, snapshot list and fetch).

``Credentials`` is what a caller presents: the CA to verify the server with
(``root_certificates``), a client certificate and key for a server that requires one
(``grpc.tls.client_ca_file``) and the port's token (``grpc.auth``), sent as
``authorization: Bearer <token>`` metadata on every call. A token on a channel without TLS
travels in clear.
"""

from __future__ import annotations

import collections
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import grpc
from laredo.errors import ConfigError
from laredo.grpc_auth import channel_credentials
from laredo.types import Row, TableIdentifier

from . import _wire
from ._filters import Predicate
from ._proto import replication_pb2 as pb

__all__ = [
    "FETCH_SNAPSHOT",
    "LIST_SNAPSHOTS",
    "STATUS",
    "SYNC",
    "Credentials",
    "build_request",
    "fetch_snapshot",
    "list_snapshots",
    "open_channel",
    "replication_status",
    "sync_stub",
]

SYNC = "/laredo.replication.v1.LaredoReplicationService/Sync"
LIST_SNAPSHOTS = "/laredo.replication.v1.LaredoReplicationService/ListSnapshots"
FETCH_SNAPSHOT = "/laredo.replication.v1.LaredoReplicationService/FetchSnapshot"
STATUS = "/laredo.replication.v1.LaredoReplicationService/GetReplicationStatus"


@dataclass(frozen=True, slots=True)
class Credentials:
    """What a client presents to a fan-out server (every field optional)."""

    root_certificates: bytes | None = None
    client_cert: bytes | None = None
    client_key: bytes | None = None
    token: str | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if (self.client_cert is None) != (self.client_key is None):
            raise ConfigError("fan-out client: client_cert and client_key go together; give both")
        if self.token is not None and not self.token.strip():
            raise ConfigError("fan-out client: token is empty; give the server's grpc.auth token")

    @property
    def tls(self) -> bool:
        return self.root_certificates is not None or self.client_cert is not None


_DetailsTuple = collections.namedtuple(
    "_DetailsTuple",
    ("method", "timeout", "metadata", "credentials", "wait_for_ready", "compression"),
)


class _Details(_DetailsTuple, grpc.ClientCallDetails):  # type: ignore[misc]
    """The call details of an intercepted call (grpc has no public constructor for them)."""


class _BearerToken(grpc.UnaryUnaryClientInterceptor, grpc.UnaryStreamClientInterceptor):  # type: ignore[misc]
    """Adds ``authorization: Bearer <token>`` to every call of a channel."""

    def __init__(self, token: str) -> None:
        self._header = ("authorization", f"Bearer {token.strip()}")

    def _details(self, d: Any) -> _Details:
        return _Details(
            d.method,
            d.timeout,
            [*(d.metadata or ()), self._header],
            d.credentials,
            d.wait_for_ready,
            d.compression,
        )

    def intercept_unary_unary(self, continuation: Any, details: Any, request: Any) -> Any:
        return continuation(self._details(details), request)

    def intercept_unary_stream(self, continuation: Any, details: Any, request: Any) -> Any:
        return continuation(self._details(details), request)


def open_channel(address: str, credentials: Credentials | None = None) -> grpc.Channel:
    """A channel with its own connection (a local subchannel pool: a new channel never reuses
    the connection of another one, e.g. to a server that is draining), presenting
    ``credentials``: TLS when a CA or a client certificate is given, the token on every call."""
    creds = credentials or Credentials()
    opts = [
        ("grpc.max_receive_message_length", 64 * 1024 * 1024),
        ("grpc.use_local_subchannel_pool", 1),
    ]
    if creds.tls:
        channel = grpc.secure_channel(
            address,
            channel_credentials(creds.root_certificates, creds.client_key, creds.client_cert),
            options=opts,
        )
    else:
        channel = grpc.insecure_channel(address, options=opts)
    if creds.token is not None:
        return grpc.intercept_channel(channel, _BearerToken(creds.token))
    return channel


def sync_stub(channel: grpc.Channel) -> Any:
    return channel.unary_stream(
        SYNC,
        request_serializer=pb.SyncRequest.SerializeToString,
        response_deserializer=pb.SyncResponse.FromString,
    )


def build_request(
    table: TableIdentifier,
    client_id: str = "",
    *,
    last_sequence: int = 0,
    journal_id: str = "",
    position: str = "",
    snapshot_id: str = "",
    filters: Sequence[Predicate] = (),
    max_batch: int = 0,
    applied_at_position: int = 0,
) -> Any:
    return pb.SyncRequest(
        schema=table.schema,
        table=table.table,
        last_known_sequence=last_sequence,
        journal_id=journal_id,
        last_known_source_position=position,
        last_snapshot_id=snapshot_id,
        client_id=client_id,
        filters=_wire.predicates_to_pb(filters),
        max_batch=max_batch,
        applied_at_position=applied_at_position,
    )


def _table(table: TableIdentifier | str) -> TableIdentifier:
    return table if isinstance(table, TableIdentifier) else TableIdentifier.parse(table)


def list_snapshots(
    address: str,
    table: TableIdentifier | str,
    limit: int = 0,
    credentials: Credentials | None = None,
) -> list[Any]:
    t = _table(table)
    with open_channel(address, credentials) as ch:
        fn = ch.unary_unary(
            LIST_SNAPSHOTS,
            request_serializer=pb.ListSnapshotsRequest.SerializeToString,
            response_deserializer=pb.ListSnapshotsResponse.FromString,
        )
        return list(
            fn(
                pb.ListSnapshotsRequest(schema=t.schema, table=t.table, limit=limit), timeout=10
            ).snapshots
        )


def replication_status(
    address: str, table: TableIdentifier | str, credentials: Credentials | None = None
) -> Any:
    t = _table(table)
    with open_channel(address, credentials) as ch:
        fn = ch.unary_unary(
            STATUS,
            request_serializer=pb.GetReplicationStatusRequest.SerializeToString,
            response_deserializer=pb.GetReplicationStatusResponse.FromString,
        )
        return fn(pb.GetReplicationStatusRequest(schema=t.schema, table=t.table), timeout=10)


def fetch_snapshot(
    address: str,
    table: TableIdentifier | str,
    snapshot_id: str,
    credentials: Credentials | None = None,
) -> tuple[Any, list[Row]]:
    """``(SnapshotBegin, rows)`` of a retained snapshot."""
    t = _table(table)
    with open_channel(address, credentials) as ch:
        fn = ch.unary_stream(
            FETCH_SNAPSHOT,
            request_serializer=pb.FetchSnapshotRequest.SerializeToString,
            response_deserializer=pb.SyncResponse.FromString,
        )
        begin = None
        rows: list[Row] = []
        for msg in fn(
            pb.FetchSnapshotRequest(schema=t.schema, table=t.table, snapshot_id=snapshot_id),
            timeout=60,
        ):
            kind = msg.WhichOneof("msg")
            if kind == "snapshot_begin":
                begin = msg.snapshot_begin
            elif kind == "snapshot_rows":
                rows.extend(_wire.decode_row(r) for r in msg.snapshot_rows.rows)
        return begin, rows
