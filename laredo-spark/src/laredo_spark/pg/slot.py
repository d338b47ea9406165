"""The slot and its exported snapshot on Spark's driver: the PostgreSQL source's own slot API
(:class:`laredo_source_pg.ExportedSnapshot`; tasks use :func:`laredo_source_pg.connect` and
:func:`laredo_source_pg.import_snapshot`), so its ``connection_provider``, password files, TLS
settings and slot handling apply here as they do to the local baseline."""

from __future__ import annotations

from typing import Any

from laredo.errors import MissingDependencyError

try:  # the laredo-spark[postgresql] extra
    import psycopg
    from laredo_source_pg import ExportedSnapshot
except ImportError:  # pragma: no cover - depends on the installed extras
    HAVE_PSYCOPG = False
else:
    HAVE_PSYCOPG = True

__all__ = ["ExportedSnapshot", "require_psycopg"]


def require_psycopg() -> Any:
    """The psycopg module, or ``MissingDependencyError`` naming the extra."""
    if not HAVE_PSYCOPG:
        raise MissingDependencyError("laredo-spark[postgresql]", "PostgreSQL baselines")
    return psycopg
