"""laredo-target-delta's plugin registration: the ``delta`` target, the ``delta`` archive source
and the ``laredo archive`` CLI commands. pyarrow and deltalake are imported only when one of
them is built or run."""

from __future__ import annotations

from typing import Any

import laredo
from laredo.registry import Registry

from .cli import register as register_cli
from .options import DeltaSourceOptions, DeltaTargetOptions


def build_target(options: DeltaTargetOptions) -> Any:
    from .target import DeltaTarget  # noqa: PLC0415 - lazy: pyarrow/deltalake, only when built

    return DeltaTarget(options)


def build_source(options: DeltaSourceOptions) -> Any:
    from .source import DeltaSource  # noqa: PLC0415 - lazy: pyarrow/deltalake, only when built

    return DeltaSource(options)


@laredo.hookimpl
def laredo_register_targets(registry: Registry) -> None:
    registry.add(
        "delta",
        build_target,
        options=DeltaTargetOptions,
        takes_options=True,
        description="a Delta Lake table equal to the source table, one version per flush",
    )


@laredo.hookimpl
def laredo_register_sources(registry: Registry) -> None:
    registry.add(
        "delta",
        build_source,
        options=DeltaSourceOptions,
        takes_options=True,
        description="a Delta table written by a delta target: its latest version, then its "
        "later versions",
    )


@laredo.hookimpl
def laredo_register_cli_commands(app: Any) -> None:
    register_cli(app)
