"""PostgreSQL (stateful slot) -> engine -> IndexedTarget with a local snapshot store.

The guarantee under test: an in-memory target survives a restart only through a snapshot, so
the slot is confirmed no further than the latest snapshot; a restart restores it and resumes
strictly after it (nothing lost, nothing applied twice), and big transactions split into
chunks are never acknowledged half-applied.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import laredo
import pytest
from laredo.testing import RecordingTarget
from laredo_source_pg import PostgresSource
from laredo_source_pg.lsn import parse_lsn
from laredo_source_pg.pytest_plugin import PgTestDb
from laredo_source_pg.testing import wait_until
from laredo_target_memory import IndexedTarget

pytestmark = pytest.mark.integration
USERS = laredo.Table("public", "users")


def _source(db: PgTestDb, **kw: Any) -> PostgresSource:
    return PostgresSource(
        db.dsn,
        slot_mode="stateful",
        slot_name=db.slot_name,
        publication={"create": True},
        status_interval=0.2,
        **kw,
    )


def _confirmed(db: PgTestDb) -> int:
    return parse_lsn(
        db.scalar(
            "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = %s",
            (db.slot_name,),
        )
    )


def _rows(db: PgTestDb) -> dict[int, dict[str, Any]]:
    return {r[0]: {"id": r[0], "name": r[1]} for r in db.execute("SELECT id, name FROM users")}


def test_memory_target_resumes_from_its_snapshot_exactly(
    pg_database: PgTestDb, tmp_path: Path
) -> None:
    db = pg_database
    db.execute("CREATE TABLE users (id int PRIMARY KEY, name text)")
    db.execute("INSERT INTO users SELECT g, 'u' || g FROM generate_series(1, 100) g")
    store = laredo.snapshot_store("local", path=str(tmp_path))

    t1 = IndexedTarget()
    eng = laredo.Engine(
        sources={"pg": _source(db)},
        pipelines=[laredo.Pipeline("pg", USERS, t1)],
        snapshot_store=store,
    )
    eng.start()
    try:
        assert eng.await_ready(30)
        db.execute("INSERT INTO users SELECT g, 'v' || g FROM generate_series(101, 110) g")
        wait_until(lambda: t1.count() == 110)
        eng.create_snapshot({"test": "resume"})
        snap_pos = parse_lsn(store.list()[0].source_positions["pg"])
        wait_until(lambda: _confirmed(db) >= snap_pos)
        db.execute("INSERT INTO users VALUES (111, 'after-snapshot')")
        db.execute("DELETE FROM users WHERE id = 1")
        wait_until(lambda: t1.count() == 110 and t1.get(111) is not None)
        # applied, but the in-memory state is not durable beyond the snapshot
        assert _confirmed(db) <= snap_pos
    finally:
        eng.stop()
    assert _confirmed(db) <= snap_pos

    db.execute("UPDATE users SET name = 'while-down' WHERE id = 2")
    obs = laredo.RecordingObserver()
    t2 = IndexedTarget()
    eng2 = laredo.Engine(
        sources={"pg": _source(db)},
        pipelines=[laredo.Pipeline("pg", USERS, t2)],
        snapshot_store=store,
        observers=[obs],
    )
    eng2.start()
    try:
        assert eng2.await_ready(30)
        assert obs.count("baseline_started") == 0
        assert obs.count("snapshot_restore_completed") == 1
        expected = _rows(db)
        wait_until(lambda: {r["id"]: r for r in t2.all()} == expected)
        applied = sum(a[2] for a in obs.of("changes_applied"))
        assert applied == 3  # insert 111, delete 1, update 2: nothing before the snapshot again
    finally:
        eng2.stop()


def test_chunked_transaction_is_acknowledged_only_when_complete(pg_database: PgTestDb) -> None:
    db = pg_database
    db.execute("CREATE TABLE users (id int PRIMARY KEY, name text)")

    release = threading.Event()
    first_chunk = threading.Event()
    target = RecordingTarget()
    orig = target.on_insert

    def on_insert(table: Any, row: Any) -> None:
        orig(table, row)
        if row["id"] == 11:  # first row of the second chunk: the first is fully applied
            first_chunk.set()
            release.wait(20)

    target.on_insert = on_insert  # type: ignore[method-assign]
    eng = laredo.Engine(
        sources={"pg": _source(db, batch_size=10)}, pipelines=[laredo.Pipeline("pg", USERS, target)]
    )
    eng.start()
    try:
        assert eng.await_ready(30)
        before = _confirmed(db)
        db.execute("INSERT INTO users SELECT g, 'x' FROM generate_series(1, 35) g")
        assert first_chunk.wait(20)
        time.sleep(0.5)
        assert _confirmed(db) == before  # a chunk of 35 applied: the commit is not acknowledged
        release.set()
        wait_until(lambda: target.count() == 35)
        wait_until(lambda: _confirmed(db) > before)
    finally:
        release.set()
        eng.stop()
