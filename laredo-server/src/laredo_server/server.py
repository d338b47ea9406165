"""Compatibility module: the names ``laredo_server.server`` exported in 0.1.

The server is now split by what each part owns: :mod:`laredo_server.runtime`
(``ServerRuntime``), :mod:`laredo_server.watch`, :mod:`laredo_server.grpc_server`,
:mod:`laredo_server.http_server`, :mod:`laredo_server.logs` and the composition root
:mod:`laredo_server.serve`. Nothing in the package imports this module.
"""

from __future__ import annotations

from typing import Any

from .config import TlsConfig
from .logs import setup_logging
from .runtime import EngineFactory, PinnedSnapshotStore, ServerRuntime
from .serve import attach_frontends, runtime_from_config, serve
from .watch import WatchHub

__all__ = [
    "PinnedSnapshotStore",
    "Runtime",
    "ServerRuntime",
    "WatchHub",
    "runtime_from_config",
    "serve",
    "setup_logging",
]


class Runtime(ServerRuntime):
    """The 0.1 constructor: a :class:`ServerRuntime` that starts its gRPC and HTTP front ends
    (``grpc_port``/``health_port`` None: without that front end)."""

    def __init__(
        self,
        factory: EngineFactory,
        *,
        grpc_port: int | None = 0,
        grpc_host: str = "127.0.0.1",
        health_port: int | None = 0,
        health_host: str = "127.0.0.1",
        reflection: bool = True,
        tls: TlsConfig | None = None,
        max_workers: int = 16,
        **settings: Any,
    ) -> None:
        super().__init__(factory, **settings)
        attach_frontends(
            self,
            grpc_port=grpc_port,
            grpc_host=grpc_host,
            health_port=health_port,
            health_host=health_host,
            reflection=reflection,
            tls=tls,
            max_workers=max_workers,
        )
