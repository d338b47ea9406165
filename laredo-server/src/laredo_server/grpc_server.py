"""The gRPC front end: the OAM and Query services, gRPC health, reflection, TLS, and the
services plugins add through the ``laredo_register_services`` hook."""

from __future__ import annotations

import logging
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection
from laredo.plugins import get_plugin_manager

from ._proto.laredo_proto.v1 import oam_pb2_grpc, query_pb2_grpc
from .config import TlsConfig
from .runtime import ServerRuntime
from .services import OAM_SERVICE, QUERY_SERVICE
from .services._rpc import refuse

logger = logging.getLogger(__name__)

__all__ = ["GrpcFrontend", "PluginTokenInterceptor", "server_credentials"]

_OWN_SERVICES = (OAM_SERVICE, QUERY_SERVICE, health.SERVICE_NAME, reflection.SERVICE_NAME)


def server_credentials(tls: TlsConfig) -> grpc.ServerCredentials:
    """Credentials from PEM files; with ``client_ca_file``, clients must present a
    certificate signed by that CA (mutual TLS)."""
    key = Path(tls.key_file).read_bytes()
    cert = Path(tls.cert_file).read_bytes()
    ca = Path(tls.client_ca_file).read_bytes() if tls.client_ca_file else None
    return grpc.ssl_server_credentials(
        [(key, cert)], root_certificates=ca, require_client_auth=ca is not None
    )


class PluginTokenInterceptor(grpc.ServerInterceptor):  # type: ignore[misc]
    """The admin token check for services plugins add (``laredo_register_services``): any
    method outside the OAM, Query, health and reflection services needs the admin token
    whenever one is configured (the read token is refused there; the built-in services check
    tokens themselves, per method)."""

    def __init__(self, rt: ServerRuntime) -> None:
        self.rt = rt

    def intercept_service(self, continuation: Any, details: Any) -> Any:
        handler = continuation(details)
        service = str(details.method).lstrip("/").split("/", 1)[0]
        if handler is None or service in _OWN_SERVICES:
            return handler
        refusal = self.rt.access.check(details.invocation_metadata, admin=True)
        if refusal is None:
            return handler

        def deny(_request: Any, context: grpc.ServicerContext) -> Any:
            refuse(context, refusal)

        kind = (handler.request_streaming, handler.response_streaming)
        make = {
            (False, False): grpc.unary_unary_rpc_method_handler,
            (False, True): grpc.unary_stream_rpc_method_handler,
            (True, False): grpc.stream_unary_rpc_method_handler,
            (True, True): grpc.stream_stream_rpc_method_handler,
        }[kind]
        return make(
            deny,
            request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer,
        )


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
            interceptors=[PluginTokenInterceptor(self.rt)],
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
            port = server.add_secure_port(addr, server_credentials(self.tls))
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
