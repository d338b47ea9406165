"""Registers the ``postgresql`` source with Laredo's plugin manager (entry point ``laredo``)."""

from __future__ import annotations

from typing import Any

from laredo.hookspecs import hookimpl


def _factory(**kwargs: Any) -> Any:
    from .source import PostgresSource

    return PostgresSource(**kwargs)


@hookimpl
def laredo_register_sources(registry: Any) -> None:
    from .options import PostgresSourceOptions

    registry.add(
        "postgresql",
        _factory,
        options=PostgresSourceOptions,
        description="PostgreSQL logical replication (pgoutput) with a consistent baseline",
    )
