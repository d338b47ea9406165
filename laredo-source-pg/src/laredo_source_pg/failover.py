"""Which server the replication connection reached: failovers seen, and slots that are gone.

``IDENTIFY_SYSTEM`` on every new replication connection gives the system identifier and the
timeline. A standby shares its primary's system identifier and a promotion starts a new
timeline, so a higher timeline of the same system is a failover (a promotion); another system
identifier is another cluster (a restore, a re-pointed DNS name). Both are counted in
:class:`~.state.RunState` (``failovers_total``) and logged with the hosts involved.
"""

from __future__ import annotations

import logging
from typing import Any

import psycopg

from .state import RunState

logger = logging.getLogger(__name__)

__all__ = ["SLOT_GONE_CAUSES", "observe_server", "standby"]

SLOT_GONE_CAUSES = (
    "dropped by hand, a failover to a standby that did not have it (PostgreSQL 16 or older, "
    "or a slot without failover), or a restore from a backup"
)
"""What makes a stateful slot disappear (for messages)."""


def standby(conn: psycopg.Connection[Any]) -> bool:
    """Whether ``conn``'s server is a hot standby (in recovery)."""
    row = conn.execute("SELECT pg_is_in_recovery()").fetchone()
    return bool(row and row[0])


def observe_server(repl: psycopg.Connection[Any], run: RunState) -> bool:
    """Record the server ``repl`` (a replication connection) reached; True when it is a
    failover (another timeline or system than the previous connection's), counted in
    ``run.failovers_total``. A failing ``IDENTIFY_SYSTEM`` records nothing."""
    try:
        row = repl.execute("IDENTIFY_SYSTEM").fetchone()
    except psycopg.Error as exc:
        logger.debug("IDENTIFY_SYSTEM failed: %s", exc)
        return False
    if row is None:
        return False
    info = repl.info
    now = (str(row[0]), int(row[1]), f"{info.host}:{info.port}")
    before, run.server = run.server, now
    if before is None or before[:2] == now[:2]:
        return False
    run.failovers_total += 1
    what = (
        f"promoted server (timeline {before[1]} -> {now[1]})"
        if before[0] == now[0]
        else f"another cluster (system identifier {before[0]} -> {now[0]})"
    )
    logger.warning(
        "postgresql source %s: failover: the replication connection reached a %s, %s -> %s",
        run.slot_name,
        what,
        before[2],
        now[2],
    )
    return True
