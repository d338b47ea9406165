"""The gRPC front end: the OAM and Query services, gRPC health, reflection, TLS, and the
services plugins add through the ``laredo_register_services`` hook."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from concurrent import futures
from typing import Any

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection
from laredo.auth import Refusal
from laredo.grpc_auth import Check, TokenInterceptor, server_credentials
from laredo.plugins import get_plugin_manager

from ._proto.laredo_proto.v1 import oam_pb2_grpc, query_pb2_grpc
from .config import TlsConfig
from .httpjson import method_of
from .runtime import ServerRuntime
from .services import OAM_SERVICE, QUERY_SERVICE
from .services._rpc import is_admin

logger = logging.getLogger(__name__)

__all__ = ["GrpcFrontend", "access_check"]

_OPEN_SERVICES = (health.SERVICE_NAME, reflection.SERVICE_NAME)


def access_check(rt: ServerRuntime, servicers: Mapping[str, Any]) -> Check:
    """The token rule of every gRPC method (:class:`~laredo.auth.Access`): the built-in
    services' methods by their declared access (``@rpc(admin=...)``), any other method (a
    service a plugin adds through ``laredo_register_services``; an unknown method) needs the
    admin token; health and reflection are open."""

    def check(method: str, metadata: Sequence[tuple[str, Any]]) -> Refusal | None:
        service = method.lstrip("/").split("/", 1)[0]
        if service in _OPEN_SERVICES:
            return None
        admin = is_admin(method_of(servicers, method)) if service in servicers else True
        return rt.access.check(metadata, admin=admin)

    return check


class GrpcFrontend:
    """Serves ``servicers`` (by full service name) over gRPC on ``host:port`` (0: any free
    port; the bound one goes to ``rt.listeners.grpc_port``)."""

    def __init__(
        self,
        rt: ServerRuntime,
        servicers: dict[str, Any],
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        reflection: bool = True,
        tls: TlsConfig | None = None,
        max_workers: int = 16,
    ) -> None:
        self.rt = rt
        self.servicers = servicers
        self.host = host
        self.port = port
        self.reflection = reflection
        self.tls = tls
        self.max_workers = max_workers
        self._server: grpc.Server | None = None
        self._health: health.HealthServicer | None = None

    def start(self) -> None:
        server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=self.max_workers, thread_name_prefix="grpc"),
            options=[("grpc.so_reuseport", 0)],
            interceptors=[TokenInterceptor(access_check(self.rt, self.servicers))],
        )
        oam_pb2_grpc.add_LaredoOAMServiceServicer_to_server(  # type: ignore[no-untyped-call]
            self.servicers[OAM_SERVICE], server
        )
        query_pb2_grpc.add_LaredoQueryServiceServicer_to_server(  # type: ignore[no-untyped-call]
            self.servicers[QUERY_SERVICE], server
        )
        hs = health.HealthServicer(experimental_non_blocking=True)
        for name in ("", OAM_SERVICE, QUERY_SERVICE):
            hs.set(name, health_pb2.HealthCheckResponse.SERVING)
        health_pb2_grpc.add_HealthServicer_to_server(hs, server)
        self._health = hs
        names = [OAM_SERVICE, QUERY_SERVICE, health.SERVICE_NAME]
        try:
            get_plugin_manager().call_services_hook(server)
        except Exception:
            logger.warning("a plugin failed to register gRPC services", exc_info=True)
        if self.reflection:
            reflection.enable_server_reflection([*names, reflection.SERVICE_NAME], server)
        addr = f"{self.host}:{self.port or 0}"
        if self.tls is not None:
            tls = self.tls
            creds = server_credentials(tls.cert_file, tls.key_file, tls.client_ca_file)
            port = server.add_secure_port(addr, creds)
        else:
            port = server.add_insecure_port(addr)
        if not port:
            raise OSError(
                f"cannot listen for gRPC on {addr} (is another process using the port?); "
                "set grpc.port to a free port, or grpc.port = 0 to turn gRPC off"
            )
        server.start()
        self._server = server
        self.rt.listeners.grpc_port = port
        logger.info("gRPC listening on %s:%s", self.host, port)

    def stop(self, grace: float) -> None:
        """Health turns NOT_SERVING, then in-flight calls get up to 5 s (at most ``grace``)."""
        if self._server is None:
            return
        if self._health is not None:
            self._health.enter_graceful_shutdown()
        self._server.stop(min(5.0, grace)).wait(min(5.0, grace) + 1)

    def close(self) -> None:
        """Nothing left to release: ``stop`` ended the server."""
