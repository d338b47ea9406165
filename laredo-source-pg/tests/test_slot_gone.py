"""A stateful slot that is gone (dropped by hand, not on a promoted standby, a restore from a
backup) is a known state: detected at the first error, counted, and handled under the
``on_slot_invalidated`` policy (re-baseline, or a clear stop), never a reconnect loop."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import laredo
import pytest
from laredo.errors import ReBaselineRequired, SourceError
from laredo.testing.recording import RecordingTarget
from laredo.types import SourceConfig, SourceState, TableIdentifier
from laredo_source_pg.pytest_plugin import PgTestDb
from laredo_source_pg.source import PostgresSource
from laredo_source_pg.testing import RecordingHandler, StreamThread, wait_until

pytestmark = pytest.mark.integration

USERS = TableIdentifier("public", "users")


def drop_slot_by_hand(db: PgTestDb, slot: str) -> None:
    """Terminate the slot's walsender and drop the slot (again if the source got it back
    first), as an operator would."""

    def dropped() -> bool:
        rows = db.execute(
            "SELECT active_pid FROM pg_replication_slots WHERE slot_name = %s", (slot,)
        )
        if not rows:
            return True
        if rows[0][0] is not None:
            db.execute("SELECT pg_terminate_backend(%s)", (rows[0][0],))
        # active again (our reconnect won the race): once more
        with contextlib.suppress(Exception):
            db.execute("SELECT pg_drop_replication_slot(%s)", (slot,))
        return False

    wait_until(dropped, 20, f"slot {slot} to be dropped", interval=0.01)


def _streaming(src: PostgresSource, pos: Any) -> tuple[RecordingHandler, StreamThread]:
    h = RecordingHandler()
    th = StreamThread(src, pos, h)
    th.start()
    wait_until(lambda: src.state() is SourceState.STREAMING, what="streaming")
    return h, th


def test_slot_dropped_while_streaming_is_a_rebaseline_at_the_first_error(
    pg_database: PgTestDb, make_source: Callable[..., PostgresSource]
) -> None:
    db = pg_database
    db.execute("CREATE TABLE users (id int PRIMARY KEY)")
    src = make_source(slot_mode="stateful", reconnect={"max_attempts": 50})
    src.init(SourceConfig([USERS]))
    h, th = _streaming(src, src.baseline([USERS], lambda t, r: None))
    db.execute("INSERT INTO users VALUES (1)")
    src.ack(h.wait_for_events(1)[0].position)
    drop_slot_by_hand(db, db.slot_name)
    th.join(20)
    assert not th.is_alive()
    assert isinstance(th.error, ReBaselineRequired), repr(th.error)
    assert "does not exist" in str(th.error) and "re-baseline" in str(th.error)
    # the first failed START_REPLICATION decides: at most the one reconnect the kill caused
    assert src.reconnect_attempts_total <= 1
    details = src.details()
    assert details["slot_lost_total"] == 1
    assert "does not exist" in details["slot_lost_reason"]
    assert src.counters()["slot_lost_total"] == 1
    # a re-baseline makes a new slot and the stream goes on
    db.execute("INSERT INTO users VALUES (2)")
    rows: list[dict[str, Any]] = []
    pos = src.baseline([USERS], lambda t, r: rows.append(r))
    assert sorted(r["id"] for r in rows) == [1, 2]
    h2, th2 = _streaming(src, pos)
    db.execute("INSERT INTO users VALUES (3)")
    assert h2.wait_for_events(1)[0].new_values == {"id": 3}
    th2.stop()


def test_slot_gone_under_the_fail_policy_stops_with_a_clear_error(
    pg_database: PgTestDb, make_source: Callable[..., PostgresSource]
) -> None:
    db = pg_database
    db.execute("CREATE TABLE users (id int PRIMARY KEY)")
    src = make_source(slot_mode="stateful", on_slot_invalidated="fail")
    src.init(SourceConfig([USERS]))
    _h, th = _streaming(src, src.baseline([USERS], lambda t, r: None))
    drop_slot_by_hand(db, db.slot_name)
    th.join(20)
    assert isinstance(th.error, SourceError) and not isinstance(th.error, ReBaselineRequired)
    text = str(th.error)
    assert "does not exist" in text
    assert "laredo reset-source" in text and "on_slot_invalidated = rebaseline" in text
    assert src.state() is SourceState.ERROR
    assert src.details()["slot_lost_total"] == 1


def test_resuming_a_position_whose_slot_is_gone_rebaselines(
    pg_database: PgTestDb, make_source: Callable[..., PostgresSource]
) -> None:
    """A restore from a backup (or a slot dropped while the source was down): the targets hold
    a position, the server has no slot."""
    db = pg_database
    db.execute("CREATE TABLE users (id int PRIMARY KEY)")
    first = make_source(slot_mode="stateful")
    first.init(SourceConfig([USERS]))
    pos = first.baseline([USERS], lambda t, r: None)
    first.close()
    db.execute("SELECT pg_drop_replication_slot(%s)", (db.slot_name,))
    src = make_source(slot_mode="stateful")
    src.init(SourceConfig([USERS]))
    with pytest.raises(ReBaselineRequired, match="does not exist"):
        src.stream(pos, RecordingHandler())
    assert src.details()["slot_lost_total"] == 1


def test_engine_rebaselines_when_the_slot_is_dropped(
    pg_database: PgTestDb, make_source: Callable[..., PostgresSource]
) -> None:
    db = pg_database
    db.execute("CREATE TABLE users (id int PRIMARY KEY, v int)")
    db.execute("INSERT INTO users SELECT g, 0 FROM generate_series(1, 100) g")
    target = RecordingTarget(durable=True)
    src = make_source(slot_mode="stateful", reconnect={"max_attempts": 50})
    eng = laredo.Engine(sources={"pg": src}, pipelines=[laredo.Pipeline("pg", USERS, target)])
    try:
        eng.start()
        assert eng.await_ready(30)
        db.execute("UPDATE users SET v = 1 WHERE id <= 10")
        wait_until(lambda: len([v for v in dict(target.items()).values() if v["v"] == 1]) == 10)
        drop_slot_by_hand(db, db.slot_name)
        db.execute("UPDATE users SET v = 2 WHERE id > 90")  # after the slot went: lost...
        # ...but the re-baseline brings it back, and the stream goes on from the new slot
        wait_until(
            lambda: (
                db.scalar(
                    "SELECT count(*) FROM pg_replication_slots WHERE slot_name = %s",
                    (db.slot_name,),
                )
                == 1
            ),
            what="a new slot",
        )
        db.execute("INSERT INTO users VALUES (101, 3)")
        expected = {(r[0],): {"id": r[0], "v": r[1]} for r in db.execute("SELECT * FROM users")}
        wait_until(lambda: dict(target.items()) == expected, 30, what="target == SELECT *")
        assert src.details()["slot_lost_total"] == 1
        assert src.state() is SourceState.STREAMING
    finally:
        eng.stop()
