"""End to end on real PostgreSQL: the slot's ``confirmed_flush_lsn`` follows the stream while an
HTTP sync pipeline has nothing pending, and a change committed while the engine starts reaches
the receiver (in the baseline or as a change: the hand-over has no gap).

An HTTP target reports a durable position only for changes it delivered. A pipeline whose table
never changes after its baseline (or whose filter drops every change) hands it nothing, yet it
must not hold the source's acknowledgement back: PostgreSQL would keep every WAL segment.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import laredo
import pytest

pytest.importorskip("laredo_source_pg")
from laredo_source_pg.lsn import parse_lsn
from laredo_source_pg.source import PostgresSource
from laredo_target_http import HttpSyncTarget, Replica

pytestmark = pytest.mark.integration

EVENTS = laredo.Table("public", "events")
ACCOUNTS = laredo.Table("public", "accounts")


def _slot_confirmed(db: Any) -> int:
    text = db.scalar(
        "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = %s",
        (db.slot_name,),
    )
    return parse_lsn(text) if text else 0


def _source(db: Any) -> PostgresSource:
    return PostgresSource(
        db.dsn,
        slot_mode="stateful",
        slot_name=db.slot_name,
        publication={"create": True},
        status_interval=0.2,
        heartbeat_interval=0.2,
    )


def _target(receiver: Any, path: str) -> HttpSyncTarget:
    return HttpSyncTarget(receiver.url + path, batch_size=1, flush_interval=0, retry_count=0)


def _prepare(db: Any) -> None:
    db.execute("CREATE TABLE events (id bigint PRIMARY KEY, what text)")
    db.execute("CREATE TABLE accounts (id bigint PRIMARY KEY, n int)")
    db.execute("INSERT INTO events VALUES (1, 'first')")
    db.execute("INSERT INTO accounts SELECT g, g FROM generate_series(1, 10) g")


def _write_accounts(db: Any) -> int:
    db.execute("UPDATE accounts SET n = n + 1 WHERE id = 1")
    return parse_lsn(db.scalar("SELECT pg_current_wal_lsn()::text"))


@pytest.mark.parametrize("filtered", [False, True], ids=["never-written", "all-filtered"])
def test_an_http_pipeline_with_nothing_pending_does_not_hold_the_slot_back(
    pg_database: Any, receiver: Any, wait_for: Any, filtered: bool
) -> None:
    """Writes on ``accounts`` only (or inserts on ``events`` too, which its filter drops): the
    slot is acknowledged past them although the ``events`` target was handed no change."""
    db = pg_database
    _prepare(db)
    filters = [laredo.FieldEquals(field="what", value="never")] if filtered else []
    eng = laredo.Engine(
        sources={"pg": _source(db)},
        pipelines=[
            laredo.Pipeline("pg", EVENTS, _target(receiver, "/events"), filters=filters),
            laredo.Pipeline("pg", ACCOUNTS, _target(receiver, "/accounts")),
        ],
    )
    eng.start()
    try:
        assert eng.await_ready(60)
        start = _slot_confirmed(db)
        written = []
        for i in range(3):
            if filtered:  # rows the filter never lets through (an UPDATE would be a DELETE)
                db.execute("INSERT INTO events VALUES (%s, 'dropped')", (100 + i,))
            written.append(_write_accounts(db))
        wait_for(lambda: len(receiver.ok_requests("/accounts/changes")) == 3, what="3 changes")
        # The accounts target knows its last transaction complete only once a later position
        # is seen; the one before is durable at once.
        wait_for(lambda: _slot_confirmed(db) >= written[1], what="the slot to advance")
        assert _slot_confirmed(db) > start
        assert not receiver.all_requests("/events/changes")  # nothing went to that target
    finally:
        eng.stop()


def test_a_change_committed_while_the_engine_starts_reaches_the_receiver(
    pg_database: Any, receiver: Any, wait_for: Any
) -> None:
    """Updates committed before, during and after the baseline and slot creation: the replica
    the receiver rebuilds ends with the last one, and every update committed after the
    baseline's snapshot arrives as a change (before it, it is in the baseline)."""
    db = pg_database
    _prepare(db)
    stop = threading.Event()
    done: list[int] = []

    def writer() -> None:
        with db.connect() as conn:
            i = 0
            while not stop.is_set():
                i += 1
                conn.execute("UPDATE events SET what = %s WHERE id = 1", (str(i),))
                done.append(i)
                time.sleep(0.005)

    replica = Replica()
    eng = laredo.Engine(
        sources={"pg": _source(db)},
        pipelines=[laredo.Pipeline("pg", EVENTS, _target(receiver, ""))],
    )
    thread = threading.Thread(target=writer, daemon=True)
    thread.start()
    try:
        eng.start()
        assert eng.await_ready(60)
        time.sleep(0.3)
        stop.set()
        thread.join(10)
        last = done[-1]
        wait_for(lambda: any(c["new"]["what"] == str(last) for c in receiver.changes()))
    finally:
        stop.set()
        eng.stop()
    for r in receiver.ok_requests():
        replica.apply(r.path, r.body)
    assert replica.rows() == [{"id": 1, "what": str(last)}]
    batches = receiver.ok_requests("/baseline/batch")
    first = batches[0].body["rows"][0]["what"]
    in_baseline = 0 if first == "first" else int(first)
    streamed = [int(c["new"]["what"]) for c in receiver.changes()]
    assert streamed == list(range(in_baseline + 1, last + 1))  # no gap, in order
