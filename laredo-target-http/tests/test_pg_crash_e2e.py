"""End to end: PostgreSQL (stateful slot) -> engine -> HTTP sync target, through a crash.

Run 1 runs in a child process. The receiver dies mid-stream, more rows are committed, and the
child is killed with SIGKILL while those changes sit undelivered in its buffer. The slot must
not have been acknowledged past what the receiver accepted. Run 2 (same slot) resumes from the
slot and redelivers: the receiver ends with every row, nothing lost.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from decimal import Decimal
from pathlib import Path
from typing import Any

import laredo
import pytest

pytest.importorskip("laredo_source_pg")
from laredo_source_pg.lsn import parse_lsn
from laredo_source_pg.source import PostgresSource
from laredo_target_http import HttpSyncTarget, decode_change, decode_row

pytestmark = pytest.mark.integration

USERS = laredo.Table("public", "users")

CHILD = textwrap.dedent(
    """
    import sys, time
    import laredo
    from laredo_source_pg.source import PostgresSource
    from laredo_target_http import HttpSyncTarget

    dsn, slot, url = sys.argv[1:4]
    src = PostgresSource(
        dsn, slot_mode="stateful", slot_name=slot, publication={"create": True},
        status_interval=0.2, lease_timeout=30,
    )
    tgt = HttpSyncTarget(
        url, batch_size=5, flush_interval="50ms", retry_count=1_000_000,
        retry_backoff="20ms", retry_backoff_max="50ms",
        position_formatter=src.position_to_string,
    )
    eng = laredo.Engine(
        sources={"pg": src}, pipelines=[laredo.Pipeline("pg", laredo.Table("public", "users"), tgt)]
    )
    eng.start()
    assert eng.await_ready(60), "engine not ready"
    print("READY", flush=True)
    time.sleep(3600)
    """
)


def _slot_confirmed(db: Any) -> int:
    (text,) = db.execute(
        "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = %s",
        (db.slot_name,),
    )[0]
    return parse_lsn(text)


def _walsender_write(db: Any) -> int:
    rows = db.execute(
        "SELECT r.write_lsn::text FROM pg_stat_replication r JOIN pg_replication_slots s "
        "ON s.active_pid = r.pid WHERE s.slot_name = %s",
        (db.slot_name,),
    )
    return parse_lsn(rows[0][0]) if rows and rows[0][0] else 0


def _insert(db: Any, key: int) -> int:
    """One transaction; returns the WAL position right after its commit."""
    db.execute(
        "INSERT INTO users VALUES (%s, %s, %s, now(), %s)",
        (key, f"user-{key}", f"{key}.50", '{"k": [1, 2]}'),
    )
    return parse_lsn(db.scalar("SELECT pg_current_wal_lsn()::text"))


def _ids(receiver: Any) -> list[int]:
    return [decode_change(c)["new"]["id"] for c in receiver.changes()]


def test_crash_while_the_receiver_is_down_loses_nothing(
    pg_database: Any, receiver: Any, wait_for: Any, tmp_path: Path
) -> None:
    db = pg_database
    db.execute(
        "CREATE TABLE users (id int PRIMARY KEY, name text, price numeric(10,2), "
        "at timestamptz, doc jsonb)"
    )
    for key in range(3):
        _insert(db, key)
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    child = subprocess.Popen(
        [sys.executable, str(script), db.dsn, db.slot_name, receiver.url],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "READY"
        batches = receiver.ok_requests("/baseline/batch")
        baseline = [decode_row(row) for r in batches for row in r.body["rows"]]
        assert sorted(r["id"] for r in baseline) == [0, 1, 2]
        assert {r["price"] for r in baseline} == {Decimal("0.50"), Decimal("1.50"), Decimal("2.50")}
        assert all(r["doc"] == {"k": [1, 2]} for r in baseline)

        # Streaming while the receiver is up: delivered and (all but the newest) acknowledged.
        for key in range(10, 30):
            _insert(db, key)
        wait_for(lambda: sorted(_ids(receiver)) == list(range(10, 30)), what="20 changes")
        acked_before_outage = wait_for(lambda: _slot_confirmed(db) or None, what="first ack")

        # The receiver dies; the child keeps receiving from PostgreSQL but cannot deliver.
        receiver.stop()
        first_outage = None
        last = 0
        for key in range(30, 50):
            last = _insert(db, key)
            first_outage = first_outage or last
        wait_for(lambda: _walsender_write(db) >= last, what="the child to receive the outage")
        confirmed = _slot_confirmed(db)
        assert first_outage is not None and confirmed < first_outage
        assert confirmed >= acked_before_outage
    finally:
        child.send_signal(signal.SIGKILL)  # a crash: no flush, no close
        child.wait(30)

    # Run 2: the receiver is back; the same slot resumes and redelivers what was not acked.
    receiver.start()
    receiver.requests.clear()
    src = PostgresSource(
        db.dsn,
        slot_mode="stateful",
        slot_name=db.slot_name,
        publication={"create": True},
        status_interval=0.2,
        lease_timeout=30,
    )
    tgt = HttpSyncTarget(
        receiver.url,
        batch_size=5,
        flush_interval="50ms",
        retry_backoff="20ms",
        position_formatter=src.position_to_string,
    )
    eng = laredo.Engine(sources={"pg": src}, pipelines=[laredo.Pipeline("pg", USERS, tgt)])
    eng.start()
    try:
        assert eng.await_ready(60)
        wait_for(lambda: set(range(30, 50)) <= set(_ids(receiver)), what="redelivery", timeout=30)
        _insert(db, 50)
        wait_for(lambda: 50 in _ids(receiver), what="a live change after restart")
    finally:
        eng.stop()
    assert not receiver.all_requests("/baseline/start")  # resumed from the slot, no baseline
    redelivered = _ids(receiver)
    # Redelivery starts after the last acknowledged change: at most the unacknowledged tail.
    assert min(redelivered) >= 29
    assert redelivered == sorted(redelivered)
    assert set(redelivered) >= set(range(30, 51))
    positions = [c["position"] for c in receiver.changes()]
    assert all("/" in p for p in positions)  # the source's own LSN text


CHUNKED_CHILD = textwrap.dedent(
    """
    import sys, time
    import laredo
    from laredo_source_pg.source import PostgresSource
    from laredo_target_http import HttpSyncTarget

    dsn, slot, url = sys.argv[1:4]
    src = PostgresSource(
        dsn, slot_mode="stateful", slot_name=slot, publication={"create": True},
        status_interval=0.1, heartbeat_interval=0.1, lease_timeout=30, batch_size=2,
    )
    tgt = HttpSyncTarget(url, batch_size=2, flush_interval="1h", retry_count=0)
    eng = laredo.Engine(
        sources={"pg": src}, pipelines=[laredo.Pipeline("pg", laredo.Table("public", "users"), tgt)]
    )
    eng.start()
    assert eng.await_ready(60), "engine not ready"
    print("READY", flush=True)
    time.sleep(3600)
    """
)


def test_a_crash_inside_a_chunked_transaction_loses_none_of_it(
    pg_database: Any, receiver: Any, wait_for: Any, tmp_path: Path
) -> None:
    """A transaction larger than the source's ``batch_size`` arrives in chunks whose position
    lies inside it. The target writes it whole once its end arrives, in requests of
    ``batch_size``: the first two are delivered, the last is refused; a crash then. The slot
    must not have been acknowledged inside the transaction (PostgreSQL would skip the whole
    transaction on resume): run 2 redelivers it, the undelivered row included."""
    db = pg_database
    db.execute(
        "CREATE TABLE users (id int PRIMARY KEY, name text, price numeric(10,2), "
        "at timestamptz, doc jsonb)"
    )
    script = tmp_path / "child.py"
    script.write_text(CHUNKED_CHILD)
    child = subprocess.Popen(
        [sys.executable, str(script), db.dsn, db.slot_name, receiver.url],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "READY"
        before = _slot_confirmed(db)
        # 5 rows in one transaction: chunks of 2, 2 (inside it) and 1 (its end); the requests
        # [1, 2] and [3, 4] are delivered, [5] is refused
        receiver.script(200, 200)
        receiver.default = receiver.reply(503)
        db.execute("INSERT INTO users (id, name) SELECT g, 'u' FROM generate_series(1, 5) g")
        end = parse_lsn(db.scalar("SELECT pg_current_wal_lsn()::text"))
        wait_for(lambda: len(_ids(receiver)) == 4, what="the first two chunks delivered")
        wait_for(lambda: _walsender_write(db) >= end, what="the child to receive it all")
        time.sleep(1.0)  # several status intervals: any acknowledgement has reached the slot
        assert _ids(receiver) == [1, 2, 3, 4]
        confirmed = _slot_confirmed(db)
        assert confirmed < end
    finally:
        child.send_signal(signal.SIGKILL)  # a crash: the buffered row is lost with the process
        child.wait(30)
    assert confirmed == before, "acknowledged inside the transaction"

    receiver.requests.clear()
    receiver.default = receiver.reply(200)
    src = PostgresSource(
        db.dsn, slot_mode="stateful", slot_name=db.slot_name, publication={"create": True}
    )
    tgt = HttpSyncTarget(receiver.url, batch_size=1, flush_interval=0)
    eng = laredo.Engine(sources={"pg": src}, pipelines=[laredo.Pipeline("pg", USERS, tgt)])
    eng.start()
    try:
        assert eng.await_ready(60)
        wait_for(lambda: 5 in _ids(receiver), what="the whole transaction redelivered")
    finally:
        eng.stop()
    assert _ids(receiver) == [1, 2, 3, 4, 5]
