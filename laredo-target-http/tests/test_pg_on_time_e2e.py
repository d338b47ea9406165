"""On real PostgreSQL: an idle change reaches an HTTP receiver, and is durable and acknowledged,
within ``flush_interval`` + 3 s although nothing follows it (PostgreSQL's keepalives then repeat
the same position, so a target that waits for a later position would wait for ever)."""

from __future__ import annotations

import time
from typing import Any

import laredo
import pytest

pytest.importorskip("laredo_source_pg")
from laredo_source_pg.lsn import parse_lsn
from laredo_source_pg.source import PostgresSource
from laredo_target_http import HttpSyncTarget

pytestmark = pytest.mark.integration

ITEMS = laredo.Table("public", "items")
FLUSH_INTERVAL = 1.0


def _slot_confirmed(db: Any) -> int:
    text = db.scalar(
        "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = %s",
        (db.slot_name,),
    )
    return parse_lsn(text) if text else 0


def test_an_idle_change_is_durable_within_the_flush_interval(
    pg_database: Any, receiver: Any, wait_for: Any
) -> None:
    db = pg_database
    db.execute("CREATE TABLE items (id int PRIMARY KEY, name text)")
    src = PostgresSource(
        db.dsn, slot_mode="stateful", slot_name=db.slot_name, publication={"create": True}
    )
    # batch_size far above one change: only the interval can send it
    tgt = HttpSyncTarget(receiver.url, batch_size=1000, flush_interval=FLUSH_INTERVAL)
    eng = laredo.Engine(sources={"pg": src}, pipelines=[laredo.Pipeline("pg", ITEMS, tgt)])
    eng.start()
    try:
        assert eng.await_ready(60)
        for i in range(2):  # the second round: after a quiet spell, not only the first change
            db.execute("INSERT INTO items VALUES (%s, 'idle')", (i,))
            end = parse_lsn(db.scalar("SELECT pg_current_wal_lsn()::text"))
            started = time.monotonic()
            limit = FLUSH_INTERVAL + 3
            wait_for(
                lambda i=i: [c["new"]["id"] for c in receiver.changes()] == list(range(i + 1)),
                timeout=limit,
                what="the idle change delivered",
            )
            at = receiver.changes()[-1]["position"]  # the change's position, as sent
            wait_for(
                lambda at=at: (
                    (d := tgt.durable_position()) is not None and src.position_to_string(d) == at
                ),
                timeout=max(0.1, limit - (time.monotonic() - started)),
                what="the idle change durable",
            )
            elapsed = time.monotonic() - started
            print(f"idle change {i}: delivered and durable in {elapsed:.2f} s (limit {limit} s)")
            assert parse_lsn(at) <= end
            # the ACK then reaches the slot at the source's next status update
            wait_for(lambda end=end: _slot_confirmed(db) >= end, timeout=15, what="the slot ACK")
            time.sleep(2 * FLUSH_INTERVAL)  # quiet: keepalives only
    finally:
        eng.stop()
