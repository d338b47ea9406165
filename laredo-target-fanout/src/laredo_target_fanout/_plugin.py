"""laredo-target-fanout's plugin registration: the ``replication-fanout`` target, the
``fanout`` cascade source and the ``laredo fanout ...`` CLI commands.

The factories wire the parts; gRPC is imported only when one of them is called."""

from __future__ import annotations

from typing import Any

import laredo
from laredo.registry import Registry

from .cli import register as register_cli
from .options import FanOutSourceOptions, ReplicationFanoutOptions
from .target import FanOutTarget


def build_target(options: ReplicationFanoutOptions) -> FanOutTarget:
    """A ``FanOutTarget`` served on ``options.grpc`` (not served when it is None)."""
    from .service import ReplicationServer  # noqa: PLC0415 - lazy: grpc, only when a target is built

    server = ReplicationServer.serving(options.grpc) if options.grpc is not None else None
    target = FanOutTarget(options, server=server)
    if options.archive is not None:
        from .archive import ColdArchive  # noqa: PLC0415 - lazy: the optional Delta archive

        target.sessions.archive = ColdArchive(options.archive.uri, options.archive.storage_options)
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


@laredo.hookimpl
def laredo_register_cli_commands(app: Any) -> None:
    register_cli(app)
