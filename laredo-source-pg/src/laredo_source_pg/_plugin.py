"""Registers the ``postgresql`` source with Laredo's plugin manager (entry point ``laredo``)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from laredo.hookspecs import hookimpl
from laredo.preflight import CheckRegistry, CheckRequest, Finding
from laredo.registry import Registry

from .credentials import EnvProviderOptions, FileProviderOptions, env_provider, file_provider
from .options import PostgresSourceOptions


def _factory(options: PostgresSourceOptions | None = None, /, **fields: Any) -> Any:
    """The registry passes the validated model (``takes_options``). A caller that still passes
    the model's fields as keywords (``Entry.factory(**validated)``) is served too."""
    from .source import PostgresSource  # noqa: PLC0415 - lazy: psycopg loads only when a source is built

    return PostgresSource(options, **fields)


@hookimpl
def laredo_register_sources(registry: Registry) -> None:
    registry.add(
        "postgresql",
        _factory,
        options=PostgresSourceOptions,
        description="PostgreSQL logical replication (pgoutput) with a consistent baseline",
        takes_options=True,
    )


def _check(request: CheckRequest) -> Iterable[Finding]:
    """The source's preflight check (:mod:`.checks`)."""
    from .checks import check_source  # noqa: PLC0415 - lazy: psycopg loads only when a check runs

    return check_source(request)


@hookimpl
def laredo_register_checks(registry: CheckRegistry) -> None:
    registry.add(
        "source",
        "postgresql",
        _check,
        description="wal_level, slots and senders, privileges, publication, tables and "
        "columns, replica identity, the slot (read-only)",
    )


@hookimpl
def laredo_register_connection_providers(registry: Registry) -> None:
    registry.add(
        "env",
        env_provider,
        options=EnvProviderOptions,
        description="re-reads an environment variable (password or connection) at every connect",
        takes_options=True,
    )
    registry.add(
        "file",
        file_provider,
        options=FileProviderOptions,
        description="re-reads a file (password or connection) at every connect",
        takes_options=True,
    )
