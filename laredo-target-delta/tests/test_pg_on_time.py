"""On real PostgreSQL: an idle change is readable in Delta (a local path), durable and
acknowledged within ``flush_interval`` + 3 s although nothing follows it."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import laredo
import pytest
from laredo.testing import wait_until
from laredo.types import TableIdentifier
from laredo_source_pg.lsn import parse_lsn
from laredo_source_pg.source import PostgresSource
from laredo_target_delta import DeltaTarget, DeltaTargetOptions, rows_as_of

pytestmark = pytest.mark.integration

ITEMS = TableIdentifier("public", "items")
FLUSH_INTERVAL = 1.0


def _slot_confirmed(db: Any) -> int:
    text = db.scalar(
        "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = %s",
        (db.slot_name,),
    )
    return parse_lsn(text) if text else 0


def _wait(predicate: Any, until: float, what: str) -> None:
    """Poll ``predicate`` until the monotonic deadline ``until`` (a limit under test)."""
    wait_until(predicate, max(0.0, until - time.monotonic()), what, interval=0.02)


def test_an_idle_change_is_in_delta_within_the_flush_interval(
    pg_database: Any, tmp_path: Path
) -> None:
    db = pg_database
    db.execute("CREATE TABLE items (id int PRIMARY KEY, name text)")
    db.execute("INSERT INTO items VALUES (0, 'baseline')")
    uri = str(tmp_path / "lake" / "items")
    src = PostgresSource(
        connection=db.dsn,
        slot_mode="stateful",
        slot_name=db.slot_name,
        publication={"create": True},
    )
    target = DeltaTarget(
        DeltaTargetOptions(uri=uri, flush_interval=FLUSH_INTERVAL, flush_rows=1_000_000)
    )
    eng = laredo.Engine(sources={"pg": src}, pipelines=[laredo.Pipeline("pg", ITEMS, target)])
    eng.start()
    try:
        assert eng.await_ready(60)
        for i in (1, 2):  # twice: the second after a quiet spell of keepalives only
            db.execute("UPDATE items SET name = %s WHERE id = 0", (f"idle {i}",))
            end = parse_lsn(db.scalar("SELECT pg_current_wal_lsn()::text"))
            started = time.monotonic()
            until = started + FLUSH_INTERVAL + 3

            def readable(i: int = i) -> bool:
                rows, _, _ = rows_as_of(uri, "FFFFFFFF/FFFFFFFF")
                return [r["name"] for r in rows] == [f"idle {i}"]

            _wait(readable, until, "the idle change readable in Delta")
            print(f"idle change {i}: in Delta in {time.monotonic() - started:.2f} s")
            # durable, so acknowledged at the source's next status update
            _wait(lambda end=end: _slot_confirmed(db) >= end, until + 15, "the slot ACK")
            time.sleep(2 * FLUSH_INTERVAL)
    finally:
        eng.stop()
