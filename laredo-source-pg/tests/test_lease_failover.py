"""The slot's lease across a lost session: a killed lease backend (as after a failover or a
restart, where every session goes) is taken again before the stream restarts, and a process
that lost it to another one does not stream."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

import pytest
from laredo.errors import SourceError
from laredo.types import SourceConfig, TableIdentifier
from laredo_source_pg.lsn import parse_lsn
from laredo_source_pg.pytest_plugin import PgTestDb
from laredo_source_pg.source import PostgresSource
from laredo_source_pg.testing import RecordingHandler, StreamThread, wait_until

pytestmark = pytest.mark.integration

USERS = TableIdentifier("public", "users")
WAITING = "leased by another process; waiting to take over"


def _lease_pids(db: PgTestDb) -> list[int]:
    """Backends of this database holding an advisory lock (the lease is the only one)."""
    rows = db.execute(
        "SELECT l.pid FROM pg_locks l JOIN pg_database d ON d.oid = l.database "
        "WHERE l.locktype = 'advisory' AND l.granted AND d.datname = current_database()"
    )
    return [int(r[0]) for r in rows]


def _walsender(db: PgTestDb) -> int | None:
    pid = db.scalar(
        "SELECT active_pid FROM pg_replication_slots WHERE slot_name = %s", (db.slot_name,)
    )
    return None if pid is None else int(pid)


def _confirmed(db: PgTestDb) -> int:
    lsn = db.scalar(
        "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = %s",
        (db.slot_name,),
    )
    return parse_lsn(lsn)


def _kill(db: PgTestDb, pid: int) -> None:
    db.execute("SELECT pg_terminate_backend(%s)", (pid,))
    wait_until(
        lambda: not db.scalar("SELECT count(*) FROM pg_stat_activity WHERE pid = %s", (pid,)),
        what=f"backend {pid} gone",
    )


def _ids(h: RecordingHandler) -> list[int]:
    return [e.new_values["id"] for e in h.snapshot() if e.new_values]


def _start(src: PostgresSource, pos: Any) -> tuple[RecordingHandler, StreamThread]:
    h = RecordingHandler()
    th = StreamThread(src, pos, h)
    th.start()
    return h, th


def _users_streaming(
    db: PgTestDb, make_source: Callable[..., PostgresSource], **options: Any
) -> tuple[PostgresSource, RecordingHandler, StreamThread]:
    """A stateful source of ``users`` (created here), baselined and streaming."""
    db.execute("CREATE TABLE users (id int PRIMARY KEY)")
    src = make_source(slot_mode="stateful", **options)
    src.init(SourceConfig([USERS]))
    h, th = _start(src, src.baseline([USERS], lambda t, r: None))
    return src, h, th


def test_lease_is_taken_again_before_the_stream_restarts(
    pg_database: PgTestDb, make_source: Callable[..., PostgresSource]
) -> None:
    db = pg_database
    src, h, th = _users_streaming(db, make_source)
    db.execute("INSERT INTO users VALUES (1)")
    h.wait_for_events(1)
    [old_lease] = _lease_pids(db)
    old_walsender = wait_until(lambda: _walsender(db), what="walsender")
    _kill(db, old_lease)  # every session of the server goes in a failover or restart
    _kill(db, old_walsender)
    db.execute("INSERT INTO users VALUES (2)")  # committed while the source is away
    new_walsender = wait_until(
        lambda: (pid := _walsender(db)) not in (None, old_walsender) and pid,
        what="the stream restarted",
    )
    # The stream restarted only once the lease was held again, by the source's new session.
    lease = _lease_pids(db)
    assert lease and lease[0] != old_lease, "the source streams without the lease"
    assert src._lease._conn is not None and lease == [src._lease._conn.info.backend_pid]
    assert src.details()["lease_lost_total"] == 1 and src.holds_lease
    assert _walsender(db) == new_walsender
    db.execute("INSERT INTO users VALUES (3)")
    h.wait_for_events(3)
    th.stop()
    assert th.error is None
    assert _ids(h) == [1, 2, 3]  # gap-free, nothing twice


def test_a_source_that_lost_its_lease_to_another_does_not_stream(
    pg_database: PgTestDb,
    make_source: Callable[..., PostgresSource],
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="laredo_source_pg.slot")
    db = pg_database
    first, h1, th1 = _users_streaming(db, make_source)
    db.execute("INSERT INTO users VALUES (1)")
    first.ack(h1.wait_for_events(1)[0].position)
    [first_lease] = _lease_pids(db)

    second = make_source(slot_mode="stateful")
    ready = threading.Event()
    waiter = threading.Thread(target=lambda: (second.init(SourceConfig([USERS])), ready.set()))
    waiter.daemon = True
    waiter.start()
    wait_until(lambda: any(WAITING in r.getMessage() for r in caplog.records), what="2nd waits")
    caplog.clear()
    _kill(db, first_lease)  # the holder's session goes: the second process takes the lease
    assert ready.wait(10), "the second source did not take the free lease"
    assert second.holds_lease and _lease_pids(db) != [first_lease]
    walsender = wait_until(lambda: _walsender(db), what="first's walsender")
    _kill(db, walsender)  # the first reconnects: it must wait for the lease, not stream
    wait_until(
        lambda: (
            any(WAITING in r.getMessage() for r in caplog.records) or _walsender(db) is not None
        ),
        what="the first source waits for the lease or streams",
    )
    assert _walsender(db) is None, "the first source streams without the lease"
    assert not first.holds_lease

    db.execute("INSERT INTO users VALUES (2), (3)")
    h2, th2 = _start(second, None)  # the new holder streams from the slot's confirmed position
    evs = h2.wait_for_events(2)
    second.ack(evs[-1].position)
    wait_until(lambda: _confirmed(db) >= evs[-1].position, what="the slot confirmed 3")
    assert _ids(h1) == [1]  # nothing reached the first meanwhile
    th2.stop()
    assert th2.error is None
    second.close()  # the first takes the lease over and resumes after what the second acked

    db.execute("INSERT INTO users VALUES (4)")
    wait_until(lambda: _ids(h1) == [1, 4], what="the first resumed")
    assert first.holds_lease
    assert _ids(h2) == [2, 3]
    th1.stop()
    assert th1.error is None


def test_a_lost_lease_not_freed_in_time_fails_the_stream_clearly(
    pg_database: PgTestDb, make_source: Callable[..., PostgresSource]
) -> None:
    db = pg_database
    first, _, th = _users_streaming(db, make_source, lease_timeout="300ms")
    wait_until(lambda: _walsender(db), what="walsender")
    [lease] = _lease_pids(db)
    _kill(db, lease)
    thief = db.connect(autocommit=True)  # another process takes the free lease
    try:
        assert thief.execute("SELECT pg_try_advisory_lock(%s)", (first._lease.key,)).fetchone()
        walsender = _walsender(db)
        assert walsender is not None
        _kill(db, walsender)
        th.join(10)
        assert not th.is_alive()
        assert isinstance(th.error, SourceError)
        assert "held by another Laredo process" in str(th.error)
        assert _walsender(db) is None
    finally:
        thief.close()
