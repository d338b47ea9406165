"""laredo-target-fanout's plugin registration: the ``replication-fanout`` target, the
``fanout`` cascade source, the port-security preflight check and the ``laredo fanout ...`` CLI
commands.

The factories wire the parts; gRPC is imported only when one of them is called."""

from __future__ import annotations

from typing import Any

import laredo
from laredo.auth import is_loopback
from laredo.preflight import CheckRegistry, CheckRequest, Finding
from laredo.registry import Registry

from .cli import register as register_cli
from .options import FanOutSourceOptions, GrpcOptions, ReplicationFanoutOptions
from .target import FanOutTarget


def build_target(options: ReplicationFanoutOptions) -> FanOutTarget:
    """A ``FanOutTarget`` served on ``options.grpc`` (not served when it is None)."""
    from .service import ReplicationServer  # noqa: PLC0415 - lazy: grpc, only when a target is built

    server = ReplicationServer.serving(options.grpc) if options.grpc is not None else None
    target = FanOutTarget(options, server=server)
    if options.archive is not None:
        from .archive import ColdArchive  # noqa: PLC0415 - lazy: the optional Delta archive

        a = options.archive
        target.sessions.archive = ColdArchive(
            a.uri,
            a.storage_options,
            max_entries=a.max_entries,
            max_concurrent=a.max_concurrent,
        )
    return target


def build_source(options: FanOutSourceOptions) -> Any:
    from .source import FanOutSource  # noqa: PLC0415 - lazy: grpc, only when a source is built

    return FanOutSource(**{k: getattr(options, k) for k in type(options).model_fields})


@laredo.hookimpl
def laredo_register_targets(registry: Registry) -> None:
    registry.add(
        "replication-fanout",
        build_target,
        options=ReplicationFanoutOptions,
        description="in-memory state + change journal + snapshots served to replicas over gRPC",
        takes_options=True,
    )


@laredo.hookimpl
def laredo_register_sources(registry: Registry) -> None:
    registry.add(
        "fanout",
        build_source,
        options=FanOutSourceOptions,
        description="a replication-fanout server's table as a source (cascade)",
        takes_options=True,
    )


def check_port_security(request: CheckRequest) -> list[Finding]:
    """``laredo check`` / startup: a fan-out port reachable from other machines that serves
    without a token (``FANOUT_UNAUTHENTICATED``) or sends its token in clear
    (``FANOUT_TOKEN_WITHOUT_TLS``)."""
    options = request.options
    grpc_opts = getattr(options, "grpc", None)
    if not isinstance(grpc_opts, GrpcOptions) or is_loopback(grpc_opts.host):
        return []
    auth, where = grpc_opts.auth, f"{request.where}.grpc"
    if not auth.configured:
        return [
            Finding.warning(
                "FANOUT_UNAUTHENTICATED",
                f"the fan-out port {grpc_opts.host}:{grpc_opts.port} serves every row without "
                "a token (allow_unauthenticated = true)",
                "set grpc.auth.token or grpc.auth.token_file and give it to the clients",
                where=f"{where}.auth",
            )
        ]
    if grpc_opts.tls is None:
        return [
            Finding.warning(
                "FANOUT_TOKEN_WITHOUT_TLS",
                f"the fan-out port {grpc_opts.host}:{grpc_opts.port} checks a token but has no "
                "TLS: the token and the rows travel in clear",
                "set grpc.tls { cert_file, key_file } (and client_ca_file for mutual TLS)",
                where=f"{where}.tls",
            )
        ]
    return []


@laredo.hookimpl
def laredo_register_checks(registry: CheckRegistry) -> None:
    registry.add(
        "target",
        "replication-fanout",
        check_port_security,
        description="a fan-out port off loopback has a token and TLS",
    )


@laredo.hookimpl
def laredo_register_cli_commands(app: Any) -> None:
    register_cli(app)
