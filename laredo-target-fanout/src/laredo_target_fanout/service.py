"""The ``laredo.replication.v1.LaredoReplicationService`` gRPC service (grpcio, sync server).

One ``ReplicationServer`` per bound address serves every fan-out target (table) registered on
it; targets that ask for the same ``host:port`` share one server. Stream responses are written
as pre-serialised bytes (see ``_wire``), so a journal batch costs one join, not a protobuf
message build per client.

A target is served through ``ReplicationServer.serving(grpc_options)``, which the
``replication-fanout`` plugin factory passes to the target as its ``server``: the target attaches
at ``on_init`` and detaches at ``on_close`` (the server stops with its last target). The
service reads the target's sessions (``target.sessions``) and maps errors to gRPC statuses in
one place (``status_code``). Only the plugin factory and the package import this module.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Generator, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import grpc
from laredo.auth import Refusal, is_loopback, open_listener_warning, refusal
from laredo.errors import ConfigError, grpc_status_name
from laredo.grpc_auth import Check, TokenInterceptor, server_credentials
from laredo.types import SyncMode, TableIdentifier

from . import _wire
from ._filters import compile_filters, normalize_filters
from ._proto import replication_pb2 as pb
from .options import FANOUT_PORT, GrpcOptions
from .sessions import ClientSession, Exhausted, Replaced, Unavailable
from .target import FanOutTarget

logger = logging.getLogger(__name__)

__all__ = [
    "SERVICE_NAME",
    "ReplicationServer",
    "Serving",
    "make_handler",
    "status_code",
    "token_check",
]

SERVICE_NAME = "laredo.replication.v1.LaredoReplicationService"


def status_code(exc: BaseException) -> grpc.StatusCode:
    """The gRPC status of an error: ``laredo.errors.grpc_status_name``, except the two codes
    it has no error class for (RESOURCE_EXHAUSTED: ``Exhausted``; ABORTED: ``Replaced``)."""
    if isinstance(exc, Exhausted):
        return grpc.StatusCode.RESOURCE_EXHAUSTED
    if isinstance(exc, Replaced):
        return grpc.StatusCode.ABORTED
    code: grpc.StatusCode = grpc.StatusCode[grpc_status_name(exc)]
    return code


def _serialize(msg: Any) -> bytes:
    if isinstance(msg, bytes):
        return msg
    out: bytes = msg.SerializeToString()
    return out


FANOUT_TOKEN_HINT = (
    "this fan-out port needs a token: send metadata 'authorization: Bearer <token>' "
    "(FanOutClient(token=...), the fanout source's token/token_file)"
)


def token_check(token: str | None) -> Check:
    """The rule of a fan-out port: with a ``token``, every RPC must carry it (checked before
    any request field is looked at; the reply never says which tables the server holds)."""

    def check(_method: str, metadata: Sequence[tuple[str, Any]]) -> Refusal | None:
        return refusal(metadata, token, hint=FANOUT_TOKEN_HINT, invalid="invalid replication token")

    return check


class _Registry:
    """Tables served by one gRPC server. ``authenticated``: every caller proved the token, so
    error replies may name the tables served."""

    def __init__(self, authenticated: bool = False) -> None:
        self.targets: dict[TableIdentifier, FanOutTarget] = {}
        self.lock = threading.Lock()
        self.authenticated = authenticated

    def find(self, schema: str, table: str, context: Any) -> FanOutTarget:
        if not table:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "table is required")
        t = TableIdentifier(schema or "public", table)
        with self.lock:
            target = self.targets.get(t)
            known = ", ".join(sorted(map(str, self.targets))) or "none"
        if target is None:
            listed = f" (tables: {known})" if self.authenticated else ""
            context.abort(
                grpc.StatusCode.NOT_FOUND,
                f"no replication-fanout target for table {t} on this server{listed}",
            )
        assert target is not None
        return target


class _Servicer:
    def __init__(self, registry: _Registry) -> None:
        self.registry = registry

    # -- Sync -------------------------------------------------------------------------------
    def sync(self, request: Any, context: Any) -> Iterator[Any]:
        target = self.registry.find(request.schema, request.table, context)
        try:
            preds = normalize_filters(_wire.predicates_from_pb(request.filters))
        except ValueError as exc:  # a ConfigError
            context.abort(status_code(exc), f"bad filter: {exc}")
        matcher = compile_filters(preds)
        client_id = request.client_id or f"anon-{uuid.uuid4().hex[:12]}"
        try:
            session, handshake, snapshot = target.open_session(
                client_id,
                peer=context.peer(),
                last_sequence=request.last_known_sequence,
                journal_id=request.journal_id,
                last_position=request.last_known_source_position,
                last_snapshot_id=request.last_snapshot_id,
                matcher=matcher,
                applied_at_position=request.applied_at_position,
            )
        except (Unavailable, Exhausted) as exc:
            context.abort(status_code(exc), str(exc))

        def on_done() -> None:
            target.sessions.close(session, "client disconnected")

        context.add_callback(on_done)
        session.extra["cancel"] = context.cancel
        max_batch = min(request.max_batch or target.grpc_options.max_batch, 100_000)
        reason = "stream ended"
        try:
            yield _wire.handshake_message(handshake)
            if snapshot is not None:
                yield from _wire.snapshot_messages(snapshot, matcher, max_batch)
            if session.cursor >= session.catch_up_to:
                target.sessions.mark_caught_up(session)
            reason = yield from self._tail(target, session, max_batch)
            error = session.close_error(reason)
            if error is not None:
                context.abort(status_code(error), str(error))
        finally:
            target.sessions.close(session, reason)

    def _tail(
        self, target: FanOutTarget, session: ClientSession, max_batch: int
    ) -> Generator[Any, None, str]:
        """Catch-up then live: batches from the session cursor; heartbeats when idle; GoAway
        once when draining; ends at the drain deadline. Returns the close code."""
        hb = target.heartbeat_interval
        codec = target.codec
        sessions = target.sessions
        last_sent = time.monotonic()
        matcher = session.matcher
        reported = session.cursor  # the client holds everything up to here
        last_data = 0.0
        backlog = False
        while True:
            drain = sessions.drain_state
            if drain is not None:
                reason, deadline, deadline_ms = drain
                if not session.go_away_sent:
                    session.go_away_sent = True
                    session.state = "draining" if session.state == "live" else session.state
                    yield pb.SyncResponse(
                        go_away=pb.GoAway(reason=reason, drain_deadline_unix_ms=deadline_ms)
                    )
                    last_sent = time.monotonic()
                if time.monotonic() >= deadline:
                    return "drained"
            wait = max(0.0, hb - (time.monotonic() - last_sent))
            if drain is not None:
                wait = min(wait, max(0.0, drain[1] - time.monotonic()), 0.05)
            else:
                # linger: with many clients, let changes accumulate a moment so each stream
                # sends fewer, larger messages (per-message cost dominates in grpcio). It is
                # counted from the previous read, so the time spent sending (GIL and gRPC
                # queueing with many streams) is part of it, not added to every change's
                # latency; an idle stream (nothing read for ``linger``) sends at once, and so
                # does one with a backlog (its previous read was a full batch).
                since = time.monotonic() - last_data
                linger = sessions.linger()
                if since < linger and not backlog:
                    time.sleep(linger - since)
            got = sessions.read_batch(session, max_batch, wait)
            if got is None:
                if time.monotonic() - last_sent >= hb:
                    reported = session.cursor
                    yield pb.SyncResponse(
                        heartbeat=pb.Heartbeat(
                            current_sequence=reported,
                            server_time_unix_ms=int(time.time() * 1000),
                        )
                    )
                    last_sent = time.monotonic()
                continue
            if isinstance(got, str):
                if got == "resync":
                    yield pb.SyncResponse(
                        resync=pb.Resync(
                            reason=session.close_reason,
                            journal_oldest_sequence=target.oldest_sequence,
                        )
                    )
                return got
            _after, through, entries = got
            last_data = time.monotonic()
            backlog = len(entries) >= max_batch
            for msg, msg_through in _wire.journal_messages(
                reported, through, entries, matcher, codec
            ):
                yield msg
                reported = msg_through
                last_sent = time.monotonic()
            if reported < through and time.monotonic() - last_sent >= hb:
                yield _wire.journal_message(reported, through, [])
                reported = through
                last_sent = time.monotonic()

    # -- other RPCs -------------------------------------------------------------------------
    def list_snapshots(self, request: Any, context: Any) -> Any:
        target = self.registry.find(request.schema, request.table, context)
        snaps = target.snapshots()
        if request.limit > 0:
            snaps = snaps[: request.limit]
        return pb.ListSnapshotsResponse(snapshots=[_wire.snapshot_info(s) for s in snaps])

    def fetch_snapshot(self, request: Any, context: Any) -> Iterator[Any]:
        target = self.registry.find(request.schema, request.table, context)
        snap = target.get_snapshot(request.snapshot_id)
        if snap is None:
            known = ", ".join(s.snapshot_id for s in target.snapshots()) or "none"
            listed = f" (retained: {known})" if self.registry.authenticated else ""
            context.abort(
                grpc.StatusCode.NOT_FOUND,
                f"snapshot {request.snapshot_id[:100]!r} is not retained for "
                f"{target.table}{listed}",
            )
        assert snap is not None
        yield from _wire.snapshot_messages(snap, None, target.grpc_options.max_batch)

    def get_status(self, request: Any, context: Any) -> Any:
        target = self.registry.find(request.schema, request.table, context)
        st = target.status()
        latest = st["latest_snapshot"]
        resp = pb.GetReplicationStatusResponse(
            current_sequence=st["current_sequence"],
            journal_oldest_sequence=st["journal_oldest_sequence"],
            journal_entry_count=st["journal_entry_count"],
            row_count=st["row_count"],
            connected_clients=st["connected_clients"],
            journal_id=st["journal_id"],
            draining=st["draining"],
            schema=target.table.schema if target.table else "",
            table=target.table.table if target.table else "",
        )
        for c in st["clients"]:
            resp.clients.append(
                pb.ConnectedClient(
                    client_id=c["client_id"],
                    current_sequence=c["current_sequence"],
                    behind_count=c["behind_count"],
                    buffer_depth=c["buffer_depth"],
                    connected_at_unix_ms=int(c["connected_at"].timestamp() * 1000),
                    state=c["state"],
                    mode=_wire.MODE_TO_PB[SyncMode(c["mode"])],
                    peer=c["peer"],
                )
            )
        if latest is not None:
            resp.latest_snapshot.CopyFrom(_wire.snapshot_info(latest))
        return resp


def make_handler(registry: _Registry) -> Any:
    """The generic RPC handler of the replication service over ``registry``'s targets (the
    token is checked before it, by the server's :func:`token_check` interceptor)."""
    s = _Servicer(registry)
    return grpc.method_handlers_generic_handler(
        SERVICE_NAME,
        {
            "Sync": grpc.unary_stream_rpc_method_handler(
                s.sync,
                request_deserializer=pb.SyncRequest.FromString,
                response_serializer=_serialize,
            ),
            "ListSnapshots": grpc.unary_unary_rpc_method_handler(
                s.list_snapshots,
                request_deserializer=pb.ListSnapshotsRequest.FromString,
                response_serializer=_serialize,
            ),
            "FetchSnapshot": grpc.unary_stream_rpc_method_handler(
                s.fetch_snapshot,
                request_deserializer=pb.FetchSnapshotRequest.FromString,
                response_serializer=_serialize,
            ),
            "GetReplicationStatus": grpc.unary_unary_rpc_method_handler(
                s.get_status,
                request_deserializer=pb.GetReplicationStatusRequest.FromString,
                response_serializer=_serialize,
            ),
        },
    )


class ReplicationServer:
    """A grpcio server for fan-out targets; shared by targets bound to the same address."""

    _servers: dict[tuple[str, int], ReplicationServer] = {}
    _lock = threading.Lock()

    def __init__(self, options: GrpcOptions) -> None:
        self.options = options
        problems = options.problems()
        if problems:  # options built without validation (model_construct)
            raise ConfigError([f"replication-fanout: {p}" for p in problems])
        token = options.auth.resolve("grpc.auth")
        self.registry = _Registry(authenticated=token is not None)
        workers = max(64, (options.max_clients or 200) + 16)
        self._server = grpc.server(
            ThreadPoolExecutor(max_workers=workers, thread_name_prefix="fanout-grpc"),
            handlers=(make_handler(self.registry),),
            interceptors=[TokenInterceptor(token_check(token))],
            options=[
                ("grpc.so_reuseport", 0),
                ("grpc.keepalive_time_ms", 30_000),
                ("grpc.max_send_message_length", 64 * 1024 * 1024),
            ],
        )
        addr = f"{options.host}:{options.port}"
        tls = options.tls
        try:
            if tls is not None:
                creds = server_credentials(tls.cert_file, tls.key_file, tls.client_ca_file)
                self.port = self._server.add_secure_port(addr, creds)
            else:
                self.port = self._server.add_insecure_port(addr)
        except (OSError, RuntimeError) as exc:
            raise ConfigError(
                f"replication-fanout grpc: cannot listen on {addr}: {exc}; pick another "
                "grpc.port (0 picks a free one)"
            ) from exc
        if not self.port:
            raise ConfigError(
                f"replication-fanout grpc: cannot listen on {addr} (port in use?); pick another "
                "grpc.port (0 picks a free one)"
            )
        self._server.start()
        self.refs = 0
        logger.info("replication fan-out gRPC service listening on %s:%d", options.host, self.port)
        if not is_loopback(options.host):
            if token is None:
                logger.warning(
                    "%s",
                    open_listener_warning(
                        key="grpc.auth", host=options.host, port=self.port, serves=FANOUT_PORT
                    ),
                )
            elif tls is None:
                logger.warning(
                    "replication fan-out port %s:%d checks a token but has no TLS: the token "
                    "and the rows travel in clear; set grpc.tls",
                    options.host,
                    self.port,
                )

    @classmethod
    def serving(cls, options: GrpcOptions | None = None) -> Serving:
        """A target's place on the server for ``options`` (``host:port``), taken when the
        target attaches (its ``on_init``) and given back when it detaches (``on_close``):
        ``FanOutTarget(opts, server=ReplicationServer.serving(opts.grpc))``."""
        return Serving(options if options is not None else GrpcOptions())

    @classmethod
    def acquire(cls, options: GrpcOptions) -> ReplicationServer:
        """The server for ``options.host:options.port`` (port 0: always a new one)."""
        with cls._lock:
            key = (options.host, options.port)
            server = cls._servers.get(key) if options.port else None
            if server is not None and server.options != options:
                differ = [
                    k
                    for k in type(options).model_fields
                    if getattr(options, k) != getattr(server.options, k)
                ]
                raise ConfigError(
                    f"replication-fanout: targets on {options.host}:{options.port} have "
                    f"different grpc options ({', '.join(f'grpc.{k}' for k in differ)}); "
                    "targets that share a port must use the same grpc section (tls, auth, "
                    "...), or give each its own grpc.port"
                )
            if server is None:
                server = cls(options)
                if options.port:
                    cls._servers[key] = server
            server.refs += 1
            return server

    def add_target(self, target: FanOutTarget) -> None:
        if target.table is None:
            raise ConfigError("replication-fanout: add a target after its on_init")
        with self.registry.lock:
            other = self.registry.targets.get(target.table)
            if other is not None and other is not target:
                raise ConfigError(
                    f"replication-fanout: table {target.table} is already served on port "
                    f"{self.port}; give each fan-out target of that table its own grpc.port"
                )
            self.registry.targets[target.table] = target

    def remove_target(self, target: FanOutTarget) -> None:
        with self.registry.lock:
            if target.table is not None and self.registry.targets.get(target.table) is target:
                del self.registry.targets[target.table]
        self.release()

    def release(self) -> None:
        """Give back one ``acquire``; the server stops with the last one."""
        with ReplicationServer._lock:
            self.refs -= 1
            if self.refs > 0:
                return
            key = (self.options.host, self.options.port)
            if ReplicationServer._servers.get(key) is self:
                del ReplicationServer._servers[key]
        self.stop()

    def stop(self, grace: float = 0.5) -> None:
        self._server.stop(grace).wait(grace + 1)


class Serving:
    """Serves one target on the shared ``ReplicationServer`` of an address (see
    ``ReplicationServer.serving``); the target's ``server``."""

    def __init__(self, options: GrpcOptions) -> None:
        self.options = options
        self.server: ReplicationServer | None = None

    @property
    def port(self) -> int:
        """The bound port while attached, else 0."""
        return self.server.port if self.server is not None else 0

    def attach(self, target: FanOutTarget) -> None:
        """Start serving ``target``'s table (starting the server if needed)."""
        if self.server is None:
            self.server = ReplicationServer.acquire(self.options)
            self.server.add_target(target)

    def detach(self, target: FanOutTarget) -> None:
        """Stop serving ``target``; the server stops with its last target."""
        server, self.server = self.server, None
        if server is not None:
            server.remove_target(target)
