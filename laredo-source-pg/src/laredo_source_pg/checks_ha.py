"""``laredo check`` findings for high availability: failover slots (PostgreSQL 17+), a source
that reads from a hot standby (16+), and PostgreSQL 18's ``idle_replication_slot_timeout``.

Read-only like the rest of the check. Codes: ``STANDBY_SOURCE`` (info), ``STANDBY_TOO_OLD``,
``STANDBY_FEEDBACK``, ``STANDBY_PUBLICATION``; ``SLOT_FAILOVER_OFF``, ``FAILOVER_UNPROTECTED``,
``SLOT_SYNCED`` / ``SLOT_NOT_SYNCED``, ``NO_STANDBY_IN_CONNECTION`` (info);
``IDLE_SLOT_TIMEOUT``.
"""

from __future__ import annotations

from typing import Any

import psycopg
from laredo.preflight import Finding
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from .catalog import quote_literal
from .introspect import connect_readonly
from .options import PostgresSourceOptions

__all__ = ["ha_findings"]

_PG16 = 160000
_PG17 = 170000
_PG18 = 180000


def _setting(conn: psycopg.Connection[Any], name: str) -> str:
    row = conn.execute("SELECT current_setting(%s, true)", (name,)).fetchone()
    return str(row[0]) if row and row[0] is not None else ""


def ha_findings(
    conn: psycopg.Connection[Any], opts: PostgresSourceOptions, where: str, dsn: str
) -> list[Finding]:
    """Every high-availability finding for the source ``opts`` on ``conn`` (its server)."""
    version = conn.info.server_version
    row = conn.execute("SELECT pg_is_in_recovery()").fetchone()
    if row is not None and row[0]:
        return standby_findings(conn, opts, where, version)
    out = failover_findings(conn, opts, where, dsn, version)
    out += idle_timeout_findings(conn, opts, version)
    return out


def standby_findings(
    conn: psycopg.Connection[Any], opts: PostgresSourceOptions, where: str, version: int
) -> list[Finding]:
    """What a source on a hot standby needs (PostgreSQL 16+)."""
    out = [
        Finding.info(
            "STANDBY_SOURCE",
            "the source reads from a hot standby: it needs wal_level = logical on the primary, "
            "the publication made on the primary, and hot_standby_feedback here. Its slot "
            "lives on this standby and cannot be failover-enabled: it survives this standby's "
            "promotion, but if the standby is lost or rebuilt the slot is gone and the source "
            f"re-baselines (on_slot_invalidated = {opts.on_slot_invalidated}). Creating the "
            "slot waits for the primary's next running-xacts record (up to 15 s while busy; "
            "SELECT pg_log_standby_snapshot() on the primary makes one at once)",
        )
    ]
    if version < _PG16:
        out.append(
            Finding.error(
                "STANDBY_TOO_OLD",
                f"logical decoding on a standby needs PostgreSQL 16+; this is {version // 10000}",
                f"point {where}.connection at the primary, or upgrade to PostgreSQL 16+",
                where=f"{where}.connection",
            )
        )
    if _setting(conn, "hot_standby_feedback") != "on":
        out.append(
            Finding.error(
                "STANDBY_FEEDBACK",
                "hot_standby_feedback is off on this standby: the primary may remove catalog "
                "rows the slot still needs, and PostgreSQL invalidates the slot",
                "ALTER SYSTEM SET hot_standby_feedback = on; SELECT pg_reload_conf(); (and give "
                "the standby a physical slot on the primary, primary_slot_name, so the "
                "feedback holds across reconnects)",
            )
        )
    if opts.publication.create is not False:
        out.append(
            Finding.error(
                "STANDBY_PUBLICATION",
                "a standby cannot create or change a publication",
                f"create publication {opts.publication_name!r} on the primary (CREATE "
                "PUBLICATION ... FOR TABLE ...) and set publication.create = false",
                where=f"{where}.publication.create",
            )
        )
    return out


def failover_findings(
    conn: psycopg.Connection[Any],
    opts: PostgresSourceOptions,
    where: str,
    dsn: str,
    version: int,
) -> list[Finding]:
    """A stateful slot on a PostgreSQL 17+ primary: failover-enabled, synced to a standby
    the connection string lists, protected by ``synchronized_standby_slots``."""
    if not opts.stateful or version < _PG17:
        return []
    if not opts.slot_failover:
        return [
            Finding.info(
                "SLOT_FAILOVER_OFF",
                "slot_failover = false: the slot is not kept on standbys; after a failover "
                "the slot is gone and the source re-baselines",
            )
        ]
    out: list[Finding] = []
    physical = [
        r[0]
        for r in conn.execute(
            "SELECT slot_name FROM pg_replication_slots WHERE slot_type = 'physical'"
        ).fetchall()
    ]
    protected = _setting(conn, "synchronized_standby_slots").strip()
    if physical and not protected:
        names = ", ".join(physical)
        out.append(
            Finding.warning(
                "FAILOVER_UNPROTECTED",
                "synchronized_standby_slots is empty: Laredo may receive changes a standby has "
                "not, and lose them at a failover to that standby",
                f"ALTER SYSTEM SET synchronized_standby_slots = {quote_literal(names)}; SELECT "
                "pg_reload_conf(); (the physical slots of the standbys that sync the slot)",
            )
        )
    out += _synced_on_standby(opts, where, dsn)
    return out


def _synced_on_standby(opts: PostgresSourceOptions, where: str, dsn: str) -> list[Finding]:
    """Whether a standby among the connection string's hosts holds a synced, persistent copy
    of the slot (a temporary synced slot is dropped at promotion)."""
    params = conninfo_to_dict(dsn)
    if "," not in str(params.get("host", "") or params.get("hostaddr", "") or ""):
        return [
            Finding.info(
                "NO_STANDBY_IN_CONNECTION",
                "the connection string names one host: the check cannot see whether a standby "
                "holds the slot, and the source cannot follow a failover; list the standby too "
                "(host=primary,standby target_session_attrs=read-write)",
            )
        ]
    try:
        sb = connect_readonly(
            make_conninfo(dsn, target_session_attrs="standby"), opts.connect_timeout
        )
    except Exception:
        return [
            Finding.warning(
                "SLOT_NOT_SYNCED",
                "no standby among the connection string's hosts answers: nothing holds a "
                "copy of the slot for a failover",
                "check the standby is up and listed in the connection string",
                where=f"{where}.connection",
            )
        ]
    with sb:
        row = sb.execute(
            "SELECT synced, temporary FROM pg_replication_slots WHERE slot_name = %s",
            (opts.slot_name,),
        ).fetchone()
        sync_on = _setting(sb, "sync_replication_slots")
        at = f"{sb.info.host}:{sb.info.port}"
    if row is not None and row[0] and not row[1]:
        return [
            Finding.info(
                "SLOT_SYNCED",
                f"slot {opts.slot_name!r} is synced to standby {at}: "
                "after its promotion the source continues from it without a re-baseline",
            )
        ]
    state = (
        "is not on the standby"
        if row is None
        else "is on the standby only as a temporary synced slot (dropped at promotion)"
    )
    return [
        Finding.warning(
            "SLOT_NOT_SYNCED",
            f"slot {opts.slot_name!r} {state} {at}"
            + (" (sync_replication_slots is off there)" if sync_on != "on" else ""),
            "on the standby: sync_replication_slots = on, hot_standby_feedback = on, "
            "primary_slot_name set and dbname in primary_conninfo; a new slot becomes "
            "persistent once the source has confirmed past the primary's next running-xacts "
            "record (SELECT pg_log_standby_snapshot() on the primary). Until then a failover "
            "means a re-baseline",
        )
    ]


def idle_timeout_findings(
    conn: psycopg.Connection[Any], opts: PostgresSourceOptions, version: int
) -> list[Finding]:
    """PostgreSQL 18's ``idle_replication_slot_timeout`` against a stateful slot."""
    if not opts.stateful or version < _PG18:
        return []
    row = conn.execute(
        "SELECT setting::int, unit FROM pg_settings WHERE name = 'idle_replication_slot_timeout'"
    ).fetchone()
    if row is None or not row[0]:
        return []
    shown = _setting(conn, "idle_replication_slot_timeout")
    after = (
        "re-creates it and re-baselines"
        if opts.on_slot_invalidated == "rebaseline"
        else "stops (on_slot_invalidated = fail)"
    )
    return [
        Finding.warning(
            "IDLE_SLOT_TIMEOUT",
            f"idle_replication_slot_timeout is {shown}: PostgreSQL invalidates slot "
            f"{opts.slot_name!r} once no replication connection has used it that long. While "
            "Laredo streams, its connection keeps the slot active (the heartbeat is not "
            "needed for that); stopped or unable to reconnect for longer, the slot is "
            f"invalidated and Laredo {after}",
            "ALTER SYSTEM SET idle_replication_slot_timeout = 0; SELECT pg_reload_conf(); "
            "(or a value longer than any planned downtime of Laredo)",
        )
    ]
