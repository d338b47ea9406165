"""The gRPC side of :mod:`laredo.auth`: one token interceptor and the TLS credentials, shared
by every gRPC listener (the server's OAM/Query and plugin services, a fan-out port) and client
(``laredo`` CLI, fan-out client).

* :class:`TokenInterceptor` asks one ``check(method, metadata)`` per call, before the handler
  runs (no request field is read for a refused call), and answers a refusal with its status
  code and message (never the token).
* :func:`server_credentials` reads the PEM files of a listener's ``tls`` block (with
  ``client_ca_file``: clients must present a certificate signed by that CA, mutual TLS);
  :func:`channel_credentials` is the client side.

grpcio is imported when these are used (core does not depend on it; the packages that serve or
call gRPC do).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from .auth import Refusal

__all__ = ["Check", "TokenInterceptor", "channel_credentials", "server_credentials"]

Check = Callable[[str, Sequence[tuple[str, Any]]], Refusal | None]
"""``(full method name "/pkg.Service/Method", invocation metadata) -> refusal or None``."""


class TokenInterceptor:
    """A ``grpc.ServerInterceptor`` (grpcio calls ``intercept_service`` only): a call
    ``check`` refuses is answered with the refusal's status, whatever the method's shape."""

    def __init__(self, check: Check) -> None:
        self.check = check

    def intercept_service(self, continuation: Any, details: Any) -> Any:
        handler = continuation(details)
        if handler is None:
            return None
        refused = self.check(str(details.method), tuple(details.invocation_metadata or ()))
        if refused is None:
            return handler
        return _denying(handler, refused)


def _denying(handler: Any, refused: Refusal) -> Any:
    import grpc  # noqa: PLC0415 - lazy: grpcio, a dependency of the gRPC packages only

    code = getattr(grpc.StatusCode, refused.code)

    def deny(_request: Any, context: Any) -> Any:
        context.abort(code, refused.message)

    make = {
        (False, False): grpc.unary_unary_rpc_method_handler,
        (False, True): grpc.unary_stream_rpc_method_handler,
        (True, False): grpc.stream_unary_rpc_method_handler,
        (True, True): grpc.stream_stream_rpc_method_handler,
    }[(handler.request_streaming, handler.response_streaming)]
    return make(
        deny,
        request_deserializer=handler.request_deserializer,
        response_serializer=handler.response_serializer,
    )


def server_credentials(cert_file: str, key_file: str, client_ca_file: str | None = None) -> Any:
    """``grpc.ServerCredentials`` from PEM files; with ``client_ca_file``, clients must present
    a certificate signed by that CA (mutual TLS). ``OSError`` when a file cannot be read."""
    import grpc  # noqa: PLC0415 - lazy: grpcio, a dependency of the gRPC packages only

    key = Path(key_file).read_bytes()
    cert = Path(cert_file).read_bytes()
    ca = Path(client_ca_file).read_bytes() if client_ca_file else None
    return grpc.ssl_server_credentials(
        [(key, cert)], root_certificates=ca, require_client_auth=ca is not None
    )


def channel_credentials(
    root_certificates: bytes | None = None,
    private_key: bytes | None = None,
    certificate_chain: bytes | None = None,
) -> Any:
    """``grpc.ChannelCredentials`` for a TLS channel: the CA to trust (None: the system's) and,
    for mutual TLS, the client's key and certificate (PEM bytes)."""
    import grpc  # noqa: PLC0415 - lazy: grpcio, a dependency of the gRPC packages only

    return grpc.ssl_channel_credentials(
        root_certificates=root_certificates,
        private_key=private_key,
        certificate_chain=certificate_chain,
    )
