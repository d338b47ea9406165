"""A stop in the middle of a large PostgreSQL transaction: the ``delta`` target's shutdown
commit holds part of it (marked ``laredo.partial``) and is not acknowledged; the restarted
engine gets the whole transaction again and the Delta table ends equal to ``SELECT *``, no row
doubled or lost."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import laredo
import pytest
from laredo.testing import wait_until
from laredo.types import TableIdentifier
from laredo_source_pg.lsn import parse_lsn
from laredo_source_pg.source import PostgresSource
from laredo_target_delta import DeltaTarget, DeltaTargetOptions, history, rows_as_of

pytestmark = pytest.mark.integration

ITEMS = TableIdentifier("public", "items")
BIG = 150_000


def _pg_rows(db: Any) -> dict[int, dict[str, Any]]:
    with db.connect() as conn:
        cur = conn.execute("SELECT * FROM items")
        names = [d.name for d in cur.description]
        return {r[0]: dict(zip(names, r, strict=True)) for r in cur.fetchall()}


def _delta_rows(uri: str) -> dict[int, dict[str, Any]]:
    rows, _, _ = rows_as_of(uri, "FFFFFFFF/FFFFFFFF")
    by_id = {r["id"]: r for r in rows}
    assert len(by_id) == len(rows), "a key is in the Delta table twice"
    return by_id


def _engine(db: Any, uri: str, flush_interval: str) -> tuple[laredo.Engine, DeltaTarget]:
    src = PostgresSource(
        connection=db.dsn,
        slot_mode="stateful",
        slot_name=db.slot_name,
        publication={"create": True},
        status_interval=0.2,
    )
    options = DeltaTargetOptions(uri=uri, flush_interval=flush_interval, flush_rows=10_000_000)
    target = DeltaTarget(options)
    eng = laredo.Engine(sources={"pg": src}, pipelines=[laredo.Pipeline("pg", ITEMS, target)])
    return eng, target


def test_stop_during_a_large_transaction_then_restart_applies_it_once(
    pg_database: Any, tmp_path: Path
) -> None:
    db = pg_database
    db.execute("CREATE TABLE items (id int PRIMARY KEY, name text, n int)")
    db.execute("INSERT INTO items SELECT g, 'n' || g, 0 FROM generate_series(1, 1000) g")
    uri = str(tmp_path / "lake" / "items")
    # no commit but the one at shutdown: the large transaction is in the buffer when it stops
    eng, target = _engine(db, uri, "1h")
    eng.start()
    try:
        assert eng.await_ready(60)
        db.execute("UPDATE items SET n = 1 WHERE id <= 10")  # a small whole transaction first
        with db.connect() as conn, conn.transaction():
            conn.execute(
                "INSERT INTO items SELECT g, 'big' || g, 2 FROM generate_series(1001, %s) g",
                (1000 + BIG,),
            )
            conn.execute("UPDATE items SET name = 'upd', n = n + 1 WHERE id % 3 = 0")
            conn.execute("DELETE FROM items WHERE id % 7 = 0")
        big_commit = parse_lsn(db.scalar("SELECT pg_current_wal_lsn()::text"))
        # the large transaction is arriving
        wait_until(lambda: target.pending_changes() >= 1000, 60, "the large transaction")
    finally:
        eng.stop()  # mid-transaction (or just after its last change): the close commits it all
    commits = history(uri)
    assert commits[-1].partial, [(c.kind, c.position, c.partial) for c in commits]
    confirmed = db.scalar(
        "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = %s",
        (db.slot_name,),
    )
    assert parse_lsn(confirmed) < big_commit  # the partial commit was not acknowledged

    eng, target = _engine(db, uri, "200ms")
    eng.start()
    try:
        assert eng.await_ready(60)
        db.execute("UPDATE items SET n = 99 WHERE id = 1001")  # and a change after it
        expected = _pg_rows(db)
        wait_until(lambda: _delta_rows(uri) == expected, 120, "the Delta table", interval=0.5)
    finally:
        eng.stop()
    kinds = [c.kind for c in history(uri)]
    assert kinds.count("baseline") == 1  # resumed from the slot, not baselined again
    assert _delta_rows(uri) == _pg_rows(db)
