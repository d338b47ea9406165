"""``SlotManager``: the replication slot; ``Lease``: one consumer per stateful slot.

The slot is created on the replication connection, with an exported snapshot when a baseline
reads under it (its consistent point is where the stream starts: no gap, no duplicate). An
ephemeral source's slot is ``TEMPORARY`` and goes with its connection. A stateful slot that
PostgreSQL invalidated (``wal_status = lost``) is dropped and re-created (with a re-baseline)
or reported, per ``on_slot_invalidated``.

Every statement that creates, drops or imports a slot's snapshot is spelled here once, for the
source, its reload helper and runners such as Spark: :func:`create_slot` (waits for a temporary
slot of the same name to go), :func:`import_snapshot`, :func:`drop_if_inactive` and
:class:`ExportedSnapshot` (:func:`export_snapshot`).

The lease is a session-level advisory lock keyed by the slot name, held on its own connection
for the life of the source: a second process waits in ``init`` and takes over when the holder
goes away. The holder probes its lease before every (re)start of the stream and takes it again
when its session died (a failover, a restart, a killed backend), never streaming without it.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import psycopg
from laredo.errors import ConfigError, LaredoError, SourceError
from psycopg import sql

from .catalog import Connections, SlotRow, connect, quote_ident, quote_literal, slot_row
from .dsn import mask_text
from .failover import standby
from .lsn import format_lsn, parse_lsn
from .options import PostgresSourceOptions

logger = logging.getLogger(__name__)

__all__ = [
    "ExportedSnapshot",
    "Lease",
    "SlotManager",
    "create_slot",
    "drop_if_inactive",
    "export_snapshot",
    "import_snapshot",
    "log_standby_wait",
]

_PG17 = 170000
_TEMP_SLOT_WAIT = 10.0
"""Seconds a new temporary slot waits for an old one of its name to go (see create_slot)."""


def create_slot(
    repl: Callable[[], psycopg.Connection[Any]],
    name: str,
    *,
    temporary: bool,
    export: bool,
    failover: bool = False,
) -> tuple[int, str | None]:
    """``CREATE_REPLICATION_SLOT name [TEMPORARY] LOGICAL pgoutput`` on the replication
    connection ``repl()`` returns; returns (consistent point, exported snapshot or None).

    ``failover`` uses PostgreSQL 17's option list. A temporary slot lives until its old
    session has fully exited on the server, which can trail the client's close: a temporary
    slot whose name is still taken is retried for up to 10 s. psycopg errors propagate."""
    snap = " EXPORT_SNAPSHOT" if export else " NOEXPORT_SNAPSHOT"
    if failover:
        snap = f" (SNAPSHOT '{'export' if export else 'nothing'}', FAILOVER true)"
    query = sql.SQL("CREATE_REPLICATION_SLOT {}{} LOGICAL pgoutput{}").format(
        sql.Identifier(name), sql.SQL(" TEMPORARY" if temporary else ""), sql.SQL(snap)
    )
    deadline = time.monotonic() + _TEMP_SLOT_WAIT
    while True:
        try:
            row = repl().execute(query).fetchone()
            break
        except psycopg.errors.DuplicateObject:
            if not temporary or time.monotonic() > deadline:
                raise
            time.sleep(0.05)
    assert row is not None
    return parse_lsn(str(row[1])), (str(row[2]) if export else None)


def import_snapshot(conn: psycopg.Connection[Any], snapshot: str) -> None:
    """Begin a ``REPEATABLE READ READ ONLY`` transaction on ``conn`` (autocommit) that sees
    the exported ``snapshot``; the caller commits or rolls back."""
    conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
    conn.execute(sql.SQL("SET TRANSACTION SNAPSHOT {}").format(sql.Literal(snapshot)))


def drop_if_inactive(conn: psycopg.Connection[Any], name: str) -> bool | None:
    """Drop slot ``name`` unless a session holds it: True (dropped), False (active: left
    alone), None (no such slot)."""
    row = conn.execute(
        "SELECT active_pid FROM pg_replication_slots WHERE slot_name = %s", (name,)
    ).fetchone()
    if row is None:
        return None
    if row[0] is not None:
        return False
    conn.execute(
        "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
        "WHERE slot_name = %s AND active_pid IS NULL",
        (name,),
    )
    return True


class SlotManager:
    """Looks up, creates, copies and drops the slot ``options.slot_name``; tracks its state.

    ``exists``: the slot is there (as far as this process knows). ``fresh``: created by this
    process (nothing to resume from). ``confirmed``: its confirmed position. ``need_new``: an
    ephemeral slot was lost, the next stream needs a baseline first.
    """

    def __init__(self, conns: Connections, options: PostgresSourceOptions) -> None:
        self._conns = conns
        self.name = options.slot_name
        self.stateful = options.stateful
        self.rebaseline_invalidated = options.on_slot_invalidated == "rebaseline"
        self.exists = False
        self.fresh = False
        self.confirmed: int | None = None
        self.consistent_point: int | None = None
        self.need_new = False
        self.want_failover = options.stateful and options.slot_failover
        self.failover: bool | None = None
        """Whether the slot is failover-enabled (None: not known yet)."""

    def row(self, conn: psycopg.Connection[Any] | None = None) -> SlotRow | None:
        return slot_row(conn or self._conns.query(), self.name)

    def invalidated(self) -> bool:
        """Whether PostgreSQL invalidated the slot (asked on the side connection; False when
        that fails)."""
        try:
            row = self._conns.side(self.row)
        except Exception:
            return False
        return row is not None and row.wal_status == "lost"

    def lookup(self) -> None:
        """Stateful mode: find the slot and its confirmed position; ``ConfigError`` when the
        name is taken by a slot of another kind, database or plugin."""
        if not self.stateful:
            return
        row = self.row()
        if row is None:
            self.exists = False
            self.confirmed = None
            return
        dbname = self._conns.query().info.dbname
        if row.slot_type != "logical" or row.database != dbname or row.plugin != "pgoutput":
            raise ConfigError(
                f"postgresql source: replication slot {self.name!r} exists but is "
                + (
                    "a physical slot"
                    if row.slot_type != "logical"
                    else f"for database {row.database!r}"
                    if row.database != dbname
                    else f"using output plugin {row.plugin!r}, not pgoutput"
                )
                + f"; choose another slot_name or drop it (SELECT pg_drop_replication_slot("
                f"{quote_literal(self.name)}))"
            )
        if row.wal_status == "lost":
            if self.rebaseline_invalidated:
                logger.warning(
                    "replication slot %s was invalidated (WAL it needed was removed); dropping "
                    "it, a new slot and a full baseline follow",
                    self.name,
                )
                self.drop()
                return
            self.exists = True
            self.confirmed = None
            return
        self.exists = True
        self.fresh = False
        self.confirmed = parse_lsn(row.confirmed) if row.confirmed else None
        self.failover = self._is_failover()
        if self.want_failover and self.failover is False:
            self._enable_failover()

    def _is_failover(self) -> bool | None:
        """The slot's ``failover`` flag (False before PostgreSQL 17, None when absent)."""
        conn = self._conns.query()
        if conn.info.server_version < _PG17:
            return False
        row = conn.execute(
            "SELECT failover FROM pg_replication_slots WHERE slot_name = %s", (self.name,)
        ).fetchone()
        return None if row is None else bool(row[0])

    def _failover_possible(self) -> bool:
        """Whether a failover slot can be made here: wanted, PostgreSQL 17+, not a standby."""
        if not self.want_failover:
            return False
        conn = self._conns.query()
        if conn.info.server_version < _PG17:
            return False
        if standby(conn):
            logger.info(
                "slot %s is on a standby: it cannot be failover-enabled (a standby's slot is "
                "lost when the standby is promoted or rebuilt; a re-baseline follows then)",
                self.name,
            )
            return False
        return True

    def _enable_failover(self) -> None:
        """``ALTER_REPLICATION_SLOT ... (FAILOVER true)`` on a new replication connection
        (after a copy, which PostgreSQL makes without failover, or on an older slot)."""
        self.failover = False
        if not self._failover_possible():
            return
        try:
            self._conns.repl().execute(
                f"ALTER_REPLICATION_SLOT {quote_ident(self.name)} (FAILOVER true)"
            )
        except psycopg.Error as exc:
            logger.warning(
                "could not make slot %s failover-enabled: %s; a failover will need a re-baseline",
                self.name,
                mask_text(str(exc)).strip(),
            )
            return
        self.failover = True
        logger.info("slot %s is failover-enabled", self.name)

    def drop(self) -> None:
        """Drop the slot (waiting for our own walsender to let go of it)."""
        conn = self._conns.query()
        for _ in range(100):
            if drop_if_inactive(conn, self.name) is not False:
                break
            if self._conns.repl_open:
                # Our own walsender: closing our replication connection frees the slot.
                self._conns.close_repl()
            time.sleep(0.05)
        else:
            raise SourceError(
                f"replication slot {self.name!r} stays active in another session; stop "
                "the other consumer first"
            )
        self.exists = False
        self.confirmed = None

    def create(self, export: bool) -> tuple[int, str | None]:
        """``CREATE_REPLICATION_SLOT`` on the replication connection.

        Returns (consistent point, exported snapshot name or None)."""
        failover = self.stateful and self._failover_possible()
        if standby(self._conns.query()):
            log_standby_wait(self.name)
        try:
            lsn, snapshot = create_slot(
                self._conns.repl,
                self.name,
                temporary=not self.stateful,
                export=export,
                failover=failover,
            )
        except psycopg.Error as exc:
            raise SourceError(
                f"postgresql source: could not create replication slot {self.name!r}: "
                f"{mask_text(str(exc)).strip()}"
            ) from None
        self._adopt(lsn)
        self.failover = failover
        logger.info(
            "created %s replication slot %s at %s",
            "stateful" if self.stateful else "temporary",
            self.name,
            format_lsn(lsn),
        )
        return lsn, snapshot

    def copy_from(self, conn: psycopg.Connection[Any], source_slot: str, position: int) -> None:
        """Create the slot as a copy of ``source_slot`` (a temporary slot whose consistent point
        is ``position``), on ``conn``."""
        conn.execute(
            "SELECT pg_copy_logical_replication_slot(%s, %s, false)", (source_slot, self.name)
        )
        self._adopt(position)
        logger.info("created replication slot %s at %s", self.name, format_lsn(position))
        self._enable_failover()

    def _adopt(self, position: int) -> None:
        self.exists = self.fresh = True
        self.confirmed = self.consistent_point = position
        self.need_new = False

    def abandon_connection(self) -> None:
        """Close the replication connection; an ephemeral (temporary) slot goes with it."""
        self._conns.close_repl()
        if not self.stateful:
            self.need_new = True
            self.exists = False


def log_standby_wait(slot: str) -> None:
    """Say why creating a slot on a hot standby may take a while."""
    logger.info(
        "creating replication slot %s on a standby: it waits for the primary's next "
        "running-xacts record (up to 15 s while the primary is busy, longer when idle; SELECT "
        "pg_log_standby_snapshot() on the primary makes one at once)",
        slot,
    )


class Lease:
    """The advisory-lock lease of a stateful slot (see the module docstring).

    The lock lives with its session: a killed backend, a restarted server or a failover to a
    new primary ends it. :meth:`ensure` runs before every (re)start of the replication stream
    and takes the lease again when its session is gone; while another process holds it, the
    stream does not start (it waits, like ``init``, or fails after ``lease_timeout``)."""

    def __init__(
        self, conns: Connections, options: PostgresSourceOptions, closed: threading.Event
    ) -> None:
        self._conns = conns
        self._slot_name = options.slot_name
        self._timeout = options.lease_timeout
        self._closed = closed
        self._conn: psycopg.Connection[Any] | None = None
        self.lost_total = 0
        """Times the lease's session was found gone and the lease was taken again."""

    @property
    def key(self) -> int:
        """The advisory-lock key: a stable 64-bit hash of the slot name."""
        digest = hashlib.blake2b(f"laredo-slot:{self._slot_name}".encode(), digest_size=8).digest()
        return int.from_bytes(digest, "big", signed=True)

    @property
    def held(self) -> bool:
        return self._conn is not None and not self._conn.closed

    def alive(self) -> bool:
        """One round trip on the lease's session: False when it is gone (the lock with it)."""
        conn = self._conn
        if conn is None or conn.closed:
            return False
        try:
            conn.execute("SELECT 1").fetchone()
        except psycopg.Error:
            return False
        return True

    def ensure(self, stop: threading.Event) -> bool:
        """Before the stream (re)starts: True once this process holds the lease (its session
        probed; a lost one taken again, waiting while another process holds it); False when
        ``stop`` or ``close()`` came first. ``SourceError`` after ``lease_timeout``."""
        if self.alive():
            return True
        if self._conn is not None:
            self.lost_total += 1
            logger.warning(
                "the lease of slot %s was lost with its connection (killed backend, restart or "
                "failover); taking it again before streaming",
                self._slot_name,
            )
        self.release()
        return self.acquire(stop)

    def acquire(self, stop: threading.Event | None = None) -> bool:
        """Block until this process holds the lease: True; False when ``stop`` (given) or
        ``close()`` comes first. ``SourceError`` after ``lease_timeout``, or on ``close()``
        without ``stop``."""
        if self.held:
            return True
        conn = self._conns.connect()
        key = self.key
        deadline = None if self._timeout is None else time.monotonic() + self._timeout
        logged = False
        while True:
            try:
                row = conn.execute("SELECT pg_try_advisory_lock(%s)", (key,)).fetchone()
            except BaseException:
                conn.close()
                raise
            if row and row[0]:
                self._conn = conn
                if logged:
                    logger.info("acquired the lease of slot %s; taking over", self._slot_name)
                return True
            if stop is not None and (stop.is_set() or self._closed.is_set()):
                conn.close()  # before the log: a caller trying once is not waiting
                return False
            if not logged:
                logger.info(
                    "slot %s is leased by another process; waiting to take over", self._slot_name
                )
                logged = True
            if self._closed.is_set() or (deadline is not None and time.monotonic() > deadline):
                conn.close()
                raise SourceError(
                    f"postgresql source: slot {self._slot_name!r} is held by another Laredo "
                    "process (advisory-lock lease); it was not released in time"
                )
            (stop or self._closed).wait(0.2)

    def release(self) -> None:
        """Close the lease's connection (PostgreSQL releases the lock with the session)."""
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(Exception):
                conn.close()


class ExportedSnapshot:
    """A logical slot created with an exported snapshot, kept importable while open.

    ``with ExportedSnapshot(options, "slot") as snap:`` (``options``: the source's
    ``PostgresSourceOptions``) creates the slot (dropping an inactive slot of that name first
    when ``replace``) and holds its replication connection open until the block ends (or
    :meth:`close`): ``snap.snapshot_name`` is what :func:`import_snapshot` takes and
    ``snap.consistent_point`` (an LSN int) is where the slot's stream starts, no gap and no
    duplicate. The slot outlives the block unless ``temporary``. ``repl`` opens the replication
    connection (default: :func:`~laredo_source_pg.connect` with ``options``).
    """

    def __init__(
        self,
        options: PostgresSourceOptions,
        slot_name: str,
        *,
        temporary: bool = False,
        replace: bool = True,
        repl: Callable[[], psycopg.Connection[Any]] | None = None,
    ) -> None:
        self.options = options
        self.slot_name = slot_name
        self.temporary = temporary
        self.replace = replace
        self.snapshot_name = ""
        self.consistent_point = 0
        self.created = False
        self._open_repl = repl or (lambda: connect(options, replication=True))
        self._repl: psycopg.Connection[Any] | None = None

    @property
    def position(self) -> str:
        """The consistent point as text (``X/XXXXXXXX``)."""
        return format_lsn(self.consistent_point)

    def _connection(self) -> psycopg.Connection[Any]:
        if self._repl is None:
            self._repl = self._open_repl()
        return self._repl

    def __enter__(self) -> ExportedSnapshot:
        if self.replace:
            self._drop_existing()
        try:
            lsn, snapshot = create_slot(
                self._connection, self.slot_name, temporary=self.temporary, export=True
            )
        except (psycopg.Error, LaredoError) as exc:
            self.close()
            raise SourceError(
                f"cannot create replication slot {self.slot_name!r} with an exported snapshot: "
                f"{mask_text(str(exc)).strip()}"
            ) from None
        self.created = True
        self.consistent_point = lsn
        self.snapshot_name = str(snapshot)
        logger.info(
            "created slot %s at %s, exported snapshot %s",
            self.slot_name,
            self.position,
            self.snapshot_name,
        )
        return self

    def _drop_existing(self) -> None:
        with connect(self.options) as conn:
            dropped = drop_if_inactive(conn, self.slot_name)
        if dropped is False:
            raise SourceError(
                f"replication slot {self.slot_name!r} is in use by another consumer; stop it "
                "before a baseline re-creates the slot"
            )
        if dropped:
            logger.info("dropped existing replication slot %s for a new baseline", self.slot_name)

    def drop(self) -> None:
        """Drop the slot this created, if inactive (best effort, logged): after a failure."""
        if not self.created:
            return
        self.close()
        try:
            with connect(self.options) as conn:
                drop_if_inactive(conn, self.slot_name)
            logger.info("dropped replication slot %s of the failed baseline", self.slot_name)
        except Exception as exc:
            logger.warning(
                "could not drop replication slot %s: %s", self.slot_name, mask_text(str(exc))
            )

    def close(self) -> None:
        """Close the replication connection (the snapshot is no longer importable)."""
        repl, self._repl = self._repl, None
        if repl is not None:
            with contextlib.suppress(Exception):
                repl.close()

    def __exit__(self, *exc: object) -> None:
        self.close()


def export_snapshot(
    options: PostgresSourceOptions, slot_name: str, *, temporary: bool = False
) -> ExportedSnapshot:
    """A slot ``slot_name`` with an exported snapshot (an inactive slot of that name is
    replaced), open: close it (or use it as a context manager) once every reader imported it."""
    return ExportedSnapshot(options, slot_name, temporary=temporary).__enter__()
