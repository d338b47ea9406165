"""Where the server listens by default, and the ``--address`` the CLI needs to reach it.

Dependency-free on purpose: the CLI imports it at start-up."""

from __future__ import annotations

__all__ = ["DEFAULT_ADDRESS", "DEFAULT_GRPC_PORT", "cli_address", "is_any_host"]

DEFAULT_GRPC_PORT = 4001
"""The OAM and Query services listen here unless configured (``grpc.port``)."""

DEFAULT_ADDRESS = f"localhost:{DEFAULT_GRPC_PORT}"
"""The CLI's default ``--address`` (``LAREDO_ADDRESS``)."""

_ANY_HOST = ("", "0.0.0.0", "::", "[::]")
_LOCAL = ("127.0.0.1", "localhost", "::1", "[::1]", *_ANY_HOST)


def is_any_host(host: str) -> bool:
    """``host`` binds every interface (``0.0.0.0``, ``::``)."""
    return host in _ANY_HOST


def cli_address(host: str, port: int) -> str | None:
    """The ``--address`` the CLI needs for a gRPC listener on ``host:port``; None when the
    default (:data:`DEFAULT_ADDRESS`) reaches it."""
    if port == DEFAULT_GRPC_PORT and host in _LOCAL:
        return None
    if is_any_host(host):
        host = "localhost"
    elif ":" in host and not host.startswith("["):
        host = f"[{host}]"
    return f"{host}:{port}"
