"""Laredo PostgreSQL source: a consistent baseline plus a pgoutput logical-replication stream.

``PostgresSource`` (plugin name ``postgresql``) with its options models, LSN helpers, and an
embedded PostgreSQL launcher (:mod:`laredo_source_pg.embedded`) used by tests and benchmarks.
``connect(options, replication=...)`` opens a connection the way the source does (for runners
such as Spark); the slot API (``ExportedSnapshot``/``export_snapshot``, ``create_slot``,
``import_snapshot``, ``drop_if_inactive``: :mod:`laredo_source_pg.slot`) is the one place slots and
their snapshots are made, imported and dropped. These import psycopg lazily (on first attribute
access).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .embedded import EmbeddedPostgres, EmbeddedPostgresError, PostgresNotFoundError, find_bindir
from .lsn import format_lsn, parse_lsn

if TYPE_CHECKING:
    from .catalog import connect
    from .options import (
        PostgresSourceOptions,
        PublicationOptions,
        PublicationTableOptions,
        ReconnectOptions,
    )
    from .slot import (
        ExportedSnapshot,
        create_slot,
        drop_if_inactive,
        export_snapshot,
        import_snapshot,
    )
    from .source import PostgresSource

__version__ = "0.1.0"

__all__ = [
    "EmbeddedPostgres",
    "EmbeddedPostgresError",
    "ExportedSnapshot",
    "PostgresNotFoundError",
    "PostgresSource",
    "PostgresSourceOptions",
    "PublicationOptions",
    "PublicationTableOptions",
    "ReconnectOptions",
    "__version__",
    "connect",
    "create_slot",
    "drop_if_inactive",
    "export_snapshot",
    "find_bindir",
    "format_lsn",
    "import_snapshot",
    "parse_lsn",
]

_LAZY = {
    "connect": "catalog",
    "PostgresSource": "source",
    "PostgresSourceOptions": "options",
    "PublicationOptions": "options",
    "PublicationTableOptions": "options",
    "ReconnectOptions": "options",
    "ExportedSnapshot": "slot",
    "create_slot": "slot",
    "drop_if_inactive": "slot",
    "export_snapshot": "slot",
    "import_snapshot": "slot",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'laredo_source_pg' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value
