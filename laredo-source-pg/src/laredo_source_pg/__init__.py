"""Laredo PostgreSQL source: a consistent baseline plus a pgoutput logical-replication stream.

``PostgresSource`` (plugin name ``postgresql``), the pgoutput decoder, LSN helpers, and an
embedded PostgreSQL launcher (:mod:`laredo_source_pg.embedded`) used by tests and benchmarks.
"""

from __future__ import annotations

from .embedded import EmbeddedPostgres, EmbeddedPostgresError, PostgresNotFoundError, find_bindir
from .lsn import format_lsn, parse_lsn

__all__ = [
    "EmbeddedPostgres",
    "EmbeddedPostgresError",
    "PostgresNotFoundError",
    "find_bindir",
    "format_lsn",
    "parse_lsn",
]
