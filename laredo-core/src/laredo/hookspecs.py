"""Laredo's pluggy hook specifications (project name ``laredo``, entry-point group ``laredo``).

Hooks only wire things up: each receives a registry and calls ``registry.add(name, factory,
options=Model)``. None of them is ever called per row. Every hook is optional for a plugin.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pluggy

if TYPE_CHECKING:
    from .preflight import CheckRegistry
    from .registry import Registry

hookspec = pluggy.HookspecMarker("laredo")
hookimpl = pluggy.HookimplMarker("laredo")


# -- data path components -------------------------------------------------------------------


@hookspec
def laredo_register_sources(registry: Registry) -> None:
    """Called once when the plugin manager loads. Add ``SyncSource`` factories by type name."""


@hookspec
def laredo_register_targets(registry: Registry) -> None:
    """Called once when the plugin manager loads. Add ``SyncTarget`` factories by type name."""


@hookspec
def laredo_register_filters(registry: Registry) -> None:
    """Add ``PipelineFilter`` factories (built-ins also provide a declarative spec)."""


@hookspec
def laredo_register_transforms(registry: Registry) -> None:
    """Add ``PipelineTransform`` factories (built-ins also provide a declarative spec)."""


@hookspec
def laredo_register_compilers(registry: Registry) -> None:
    """Add row compilers for ``CompiledTarget`` by name: ``factory(**options) -> fn(row)``."""


@hookspec
def laredo_register_connection_providers(registry: Registry) -> None:
    """Add connection providers by type name (``registry.add("vault", factory,
    options=Model)``). ``factory(**options)`` returns a provider: a callable
    ``provider(conninfo: str) -> str | Mapping[str, str]`` that a source calls before every
    connection it opens (the first and each reconnect) with its configured connection string,
    and that returns the one to use, whole, or as parameters merged into it (e.g.
    ``{"password": token}``). Rotating passwords and short-lived tokens (RDS IAM) work this
    way. A source refers to one with ``connection_provider = { type = <name>, ... }``. The
    returned secrets are never logged."""


# -- persistence ----------------------------------------------------------------------------


@hookspec
def laredo_register_snapshot_stores(registry: Registry) -> None:
    """Add ``SnapshotStore`` factories (``local``, ``s3``, ...)."""


@hookspec
def laredo_register_serializers(registry: Registry) -> None:
    """Add ``SnapshotSerializer`` factories (``jsonl``, ``parquet``, ...)."""


@hookspec
def laredo_register_dead_letter_stores(registry: Registry) -> None:
    """Add ``DeadLetterStore`` factories (``memory``, ``local``, ...)."""


# -- operations -----------------------------------------------------------------------------


@hookspec
def laredo_register_observers(registry: Registry) -> None:
    """Add ``EngineObserver`` factories (``logging``, ``prometheus``, ...)."""


@hookspec
def laredo_register_config_sections(registry: Registry) -> None:
    """Called once, the first time configuration sections are needed (``laredo serve`` and
    every runner validating a file). Add a top-level section a plugin owns, with its model:
    ``registry.add("spark", SparkSection, options=SparkSection)``. Runners that do not use the
    section validate it with that model and leave it alone, so one file serves every runner."""


@hookspec
def laredo_register_checks(registry: CheckRegistry) -> None:
    """Called once, the first time checks are needed (``laredo check``, ``laredo serve`` at
    startup). Add preflight checks per plugin kind and type name:
    ``registry.add("source", "postgresql", check)``; a check receives a
    :class:`~laredo.preflight.CheckRequest` and returns :class:`~laredo.preflight.Finding` s,
    read-only (see :mod:`laredo.preflight`)."""


@hookspec
def laredo_register_cli_commands(app: Any) -> None:
    """Called by the ``laredo`` CLI at start-up with its command group; add sub-commands."""


@hookspec
def laredo_register_services(server: Any) -> None:
    """Called by ``laredo serve`` before the gRPC server starts; add gRPC services to it."""
