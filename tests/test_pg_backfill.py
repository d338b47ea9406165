"""Chunked baselines and on-demand backfills against a real PostgreSQL (issue 32): writers run
on several connections (concurrent transactions, inserts, updates, deletes, key changes) while
the table is read in key-range chunks merged with the stream; the target ends equal to
PostgreSQL."""

from __future__ import annotations

import logging
import random
import threading
from typing import Any

import laredo
import psycopg
import pytest
from laredo.errors import ConfigError
from laredo.testing import Churn
from laredo_source_pg import PostgresSource
from laredo_source_pg.pytest_plugin import PgTestDb
from laredo_target_memory import IndexedTarget

pytestmark = pytest.mark.integration
ITEMS = laredo.Table("public", "items")


# random single-row writes on items (weights: insert 1, update 2, delete 1, key change 1)
WRITES = (
    "INSERT INTO items VALUES (%(k)s, %(seed)s, 'ins') ON CONFLICT (id) DO UPDATE "
    "SET v = items.v + 1",
    "UPDATE items SET v = v + 1, note = 'upd' WHERE id = %(k)s",
    "UPDATE items SET v = v + 1, note = 'upd' WHERE id = %(k)s",
    "DELETE FROM items WHERE id = %(k)s",
    # a key change, to a key that may be in a range not read yet
    "UPDATE items SET id = %(k)s + 10000 WHERE id = %(k)s AND NOT EXISTS "
    "(SELECT 1 FROM items WHERE id = %(k)s + 10000)",
)


def _key(rnd: random.Random) -> int:
    return rnd.randrange(1, 6_000)


def _rows(db: PgTestDb) -> dict[int, dict[str, Any]]:
    with db.connect() as conn, conn.cursor(row_factory=psycopg.rows.dict_row) as cur:
        return {r["id"]: dict(r) for r in cur.execute("SELECT * FROM items")}


def _lsn(db: PgTestDb) -> str:
    return str(db.scalar("SELECT pg_current_wal_lsn()::text"))


def _setup(db: PgTestDb) -> None:
    db.execute("CREATE TABLE items (id int PRIMARY KEY, v int NOT NULL, note text)")
    db.execute("INSERT INTO items SELECT g, 0, 'seed' FROM generate_series(1, 5000) g")


def _chunked_source(db: PgTestDb, chunk_rows: int) -> PostgresSource:
    """A source on ``db`` that baselines in chunks of ``chunk_rows`` (publication created)."""
    return PostgresSource(
        db.dsn,
        slot_name=db.slot_name,
        publication={"create": True},
        baseline={"mode": "chunked", "chunk_rows": chunk_rows},
    )


def test_chunked_baseline_with_writers_ends_equal_to_postgres(
    pg_database: PgTestDb, caplog: pytest.LogCaptureFixture
) -> None:
    db = pg_database
    _setup(db)
    writers = Churn(db, 3, _key, WRITES).start()
    target = IndexedTarget()
    src = _chunked_source(db, 150)
    eng = laredo.Engine(sources={"pg": src}, pipelines=[laredo.Pipeline("pg", ITEMS, target)])
    caplog.set_level(logging.INFO, logger="laredo.engine.backfiller")
    try:
        eng.start()
        assert eng.await_ready(120)
        writers.settle(eng)
        expected = _rows(db)
        got = {k[0] if isinstance(k, tuple) else k: dict(v) for k, v in target.items()}
        assert got == expected
    finally:
        writers.stop()
        eng.stop()
    assert sum(writers.counts) > 50, writers.counts  # the writers really ran during the baseline
    done = [r.getMessage() for r in caplog.records if "backfill of public.items" in r.getMessage()]
    assert done, "the table was not read in chunks"


def test_on_demand_backfill_repairs_a_drifted_target_while_streaming(
    pg_database: PgTestDb,
) -> None:
    db = pg_database
    _setup(db)
    target = IndexedTarget()
    src = PostgresSource(db.dsn, slot_name=db.slot_name, publication={"create": True})
    eng = laredo.Engine(sources={"pg": src}, pipelines=[laredo.Pipeline("pg", ITEMS, target)])
    writers = Churn(db, 2, _key, WRITES)
    try:
        eng.start()
        assert eng.await_ready(60)
        # drift: rows lost and changed in the target behind the engine's back
        for k in range(10, 400):
            target.on_delete(ITEMS, {"id": k})
        target.on_update(ITEMS, {"id": 500, "v": -1, "note": "drift"}, None)
        writers.start()
        with pytest.raises(ConfigError, match="without a ';'"):
            eng.backfill("pg", "public.items", "true; DROP TABLE items")
        with pytest.raises(ConfigError, match=r"not a valid condition on public\.items"):
            eng.backfill("pg", "public.items", "nosuchcolumn > 1")
        progress = eng.backfill("pg", "public.items", "id < 1000", chunk_rows=100, timeout=120)
        assert progress["done"] and progress["chunks"] >= 10, progress
        writers.settle(eng)
        expected = _rows(db)
        got = {k[0] if isinstance(k, tuple) else k: dict(v) for k, v in target.items()}
        assert got == expected
        [last] = eng.backfills()
        assert last["done"] and last["table"] == "public.items" and last["source"] == "pg", last
    finally:
        writers.stop()
        eng.stop()


def test_a_table_without_a_key_keeps_the_snapshot_baseline(
    pg_database: PgTestDb, caplog: pytest.LogCaptureFixture
) -> None:
    db = pg_database
    _setup(db)
    db.execute("CREATE TABLE nokey (id int, v text)")
    db.execute("ALTER TABLE nokey REPLICA IDENTITY FULL")
    db.execute("INSERT INTO nokey SELECT g, 'x' FROM generate_series(1, 300) g")
    nokey = laredo.Table("public", "nokey")
    items, loose = IndexedTarget(), IndexedTarget(lookup_fields=["id"])
    src = _chunked_source(db, 1000)
    eng = laredo.Engine(
        sources={"pg": src},
        pipelines=[laredo.Pipeline("pg", ITEMS, items), laredo.Pipeline("pg", nokey, loose)],
    )
    caplog.set_level(logging.INFO)
    try:
        eng.start()
        assert eng.await_ready(60)
        assert items.count() == 5000 and loose.count() == 300
    finally:
        eng.stop()
    text = caplog.text
    assert "public.nokey has no primary key (nor replica identity index): baselined" in text
    assert "backfill of public.items: 6 chunk(s), 5000 row(s) read" in text


class _DurableIndexed(IndexedTarget):
    """A durable target that keeps no chunk progress: it opts out of the memory target's
    ``ProgressTarget`` (which only the memory target's snapshots make durable)."""

    save_progress = None  # type: ignore[assignment]

    def is_durable(self) -> bool:
        return True


def test_a_durable_target_without_chunk_progress_keeps_the_snapshot_baseline(
    pg_database: PgTestDb, caplog: pytest.LogCaptureFixture
) -> None:
    """The stream runs beside the chunks from the start, so a durable target that cannot keep
    the chunks' progress would resume over a partial table after a crash: it is baselined in
    one snapshot instead (said in the log), while a memory target on the same source is read in
    chunks."""
    db = pg_database
    _setup(db)
    durable, memory = _DurableIndexed(), IndexedTarget()
    src = _chunked_source(db, 1000)
    eng = laredo.Engine(
        sources={"pg": src},
        pipelines=[
            laredo.Pipeline("pg", ITEMS, durable, id="durable"),
            laredo.Pipeline("pg", ITEMS, memory, id="memory"),
        ],
    )
    caplog.set_level(logging.INFO)
    try:
        eng.start()
        assert eng.await_ready(60)
        assert durable.count() == 5000 and memory.count() == 5000
    finally:
        eng.stop()
    text = caplog.text
    assert "pipeline durable: its target is durable but keeps no chunk progress" in text
    assert "pipeline memory: its target" not in text
    assert "backfill of public.items: 6 chunk(s), 5000 row(s) read" in text


def test_a_table_joining_a_chunked_source_is_baselined_in_chunks(
    pg_database: PgTestDb, caplog: pytest.LogCaptureFixture
) -> None:
    db = pg_database
    _setup(db)
    db.execute("CREATE TABLE other (id int PRIMARY KEY, v int NOT NULL, note text)")
    db.execute("INSERT INTO other SELECT g, 0, 'seed' FROM generate_series(1, 2000) g")
    other = laredo.Table("public", "other")
    src = _chunked_source(db, 100)
    eng = laredo.Engine(
        sources={"pg": src}, pipelines=[laredo.Pipeline("pg", ITEMS, IndexedTarget())]
    )
    caplog.set_level(logging.INFO, logger="laredo.engine.backfiller")
    stop = threading.Event()

    def write_other() -> None:
        rnd = random.Random(3)
        with db.connect() as conn:
            while not stop.is_set():
                k = rnd.randrange(1, 2500)
                conn.execute(
                    "INSERT INTO other VALUES (%s, 1, 'w') ON CONFLICT (id) DO UPDATE "
                    "SET v = other.v + 1",
                    (k,),
                )
                conn.execute("DELETE FROM other WHERE id = %s", (rnd.randrange(1, 2500),))

    w = threading.Thread(target=write_other)
    try:
        eng.start()
        assert eng.await_ready(60)
        w.start()
        target = IndexedTarget()
        eng.add_pipeline(laredo.Pipeline("pg", other, target), timeout=120)
        stop.set()
        w.join()
        assert eng.wait_for("pg", _lsn(db), timeout=60)
        with db.connect() as conn, conn.cursor(row_factory=psycopg.rows.dict_row) as cur:
            expected = {r["id"]: dict(r) for r in cur.execute("SELECT * FROM other")}
        got = {k[0] if isinstance(k, tuple) else k: dict(v) for k, v in target.items()}
        assert got == expected
    finally:
        stop.set()
        if w.is_alive():
            w.join()
        eng.stop()
    assert any("backfill of public.other" in r.getMessage() for r in caplog.records)


def test_chunks_load_infinities_and_dead_letter_unrepresentable_rows(
    pg_database: PgTestDb,
) -> None:
    from datetime import datetime

    from laredo.deadletter import MemoryDeadLetterStore

    db = pg_database
    db.execute("CREATE TABLE ev (id int PRIMARY KEY, ts timestamp)")
    db.execute(
        "INSERT INTO ev VALUES (1, '2020-01-01'), (2, 'infinity'), (3, '10000-01-01'), (4, NULL)"
    )
    ev = laredo.Table("public", "ev")
    store = MemoryDeadLetterStore()
    target = IndexedTarget()
    src = _chunked_source(db, 2)
    eng = laredo.Engine(
        sources={"pg": src}, pipelines=[laredo.Pipeline("pg", ev, target)], dead_letter_store=store
    )
    try:
        eng.start()
        assert eng.await_ready(60)
        got = {k[0] if isinstance(k, tuple) else k: dict(v) for k, v in target.items()}
        assert got == {
            1: {"id": 1, "ts": datetime(2020, 1, 1)},
            2: {"id": 2, "ts": datetime.max},
            4: {"id": 4, "ts": None},
        }
        [letter] = store.read(eng.pipelines()[0].id)
        assert letter.change.new_values is not None and letter.change.new_values["id"] == 3
        assert "10000-01-01" in letter.error.message
    finally:
        eng.stop()
