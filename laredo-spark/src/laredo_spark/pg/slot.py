"""The slot and its exported snapshot on Spark's driver: the PostgreSQL source's own slot API
(:class:`laredo_source_pg.ExportedSnapshot`; tasks use :func:`laredo_source_pg.connect` and
:func:`laredo_source_pg.import_snapshot`), so its ``connection_provider``, password files, TLS
settings and slot handling apply here as they do to the local baseline.

:func:`slot_lease` holds the slot's advisory-lock lease (:class:`laredo_source_pg.slot.Lease`,
the one a ``laredo serve`` streaming from the slot holds) for a whole baseline run, so two
drivers, or a driver and a server, never work on one slot at once."""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Iterator
from typing import Any

from laredo.errors import MissingDependencyError, SourceError

try:  # the laredo-spark[postgresql] extra
    import psycopg
    from laredo_source_pg import ExportedSnapshot
    from laredo_source_pg.catalog import Connections
    from laredo_source_pg.slot import Lease
except ImportError:  # pragma: no cover - depends on the installed extras
    HAVE_PSYCOPG = False
else:
    HAVE_PSYCOPG = True

logger = logging.getLogger(__name__)

__all__ = ["ExportedSnapshot", "require_psycopg", "slot_lease"]


def require_psycopg() -> Any:
    """The psycopg module, or ``MissingDependencyError`` naming the extra."""
    if not HAVE_PSYCOPG:
        raise MissingDependencyError("laredo-spark[postgresql]", "PostgreSQL baselines")
    return psycopg


@contextlib.contextmanager
def slot_lease(options: Any, label: str) -> Iterator[None]:
    """Hold the lease of ``options.slot_name``'s slot for the block, taken at once: one try,
    ``SourceError`` naming the slot when another process (a ``laredo serve`` streaming from
    it, another baseline of it) holds it; never a wait. The lease is a session lock on its own
    connection: released when the block ends or fails, and by PostgreSQL when this process
    dies (kill -9 included)."""
    require_psycopg()
    slot = options.slot_name
    lease = Lease(Connections(options), options, threading.Event())
    once = threading.Event()
    once.set()  # a set stop: acquire tries once and returns False instead of waiting
    if not lease.acquire(once):
        raise SourceError(
            f"{label}: another laredo process holds the lease of replication slot {slot!r} "
            "(a laredo serve streaming from it, or another baseline of it): wait for it to "
            "finish, or stop it, then run this again; nothing was read or written"
        )
    logger.debug("%s: holding the lease of slot %s", label, slot)
    try:
        yield
    finally:
        lease.release()
