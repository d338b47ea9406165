"""An on-demand whole-table backfill also removes the rows the source no longer has (issue 32,
item 3; ``laredo.engine.backfill_sweep``), against a real PostgreSQL with writers running: the
target ends equal to ``SELECT *`` and the progress counts the rows removed. With ``where`` or
a transform that does not declare it keeps the key, nothing is removed and the reason is
reported."""

from __future__ import annotations

import logging
import random
import threading
from typing import Any

import laredo
import psycopg
import pytest
from laredo_source_pg import PostgresSource
from laredo_source_pg.pytest_plugin import PgTestDb
from laredo_target_memory import IndexedTarget

pytestmark = pytest.mark.integration
ITEMS = laredo.Table("public", "items")
# keys no writer ever touches (writers: 1..6000 and, by key changes, 10001..15999): before the
# first chunk, between the table's keys and after them, so every chunk range holds some
GHOSTS = [*range(-50, 0), *range(7_000, 7_201), *range(16_001, 16_400, 2)]
MISSED = range(6_500, 6_600)  # rows deleted in PostgreSQL the stream did not carry


def _writer(db: PgTestDb, stop: threading.Event, seed: int, counts: list[int]) -> None:
    rnd = random.Random(seed)
    with db.connect() as conn:
        while not stop.is_set():
            k = rnd.randrange(1, 6_000)
            op = rnd.randrange(5)
            with conn.transaction():
                if op == 0:
                    conn.execute(
                        "INSERT INTO items VALUES (%s, %s, 'ins') ON CONFLICT (id) DO UPDATE "
                        "SET v = items.v + 1",
                        (k, seed),
                    )
                elif op in (1, 2):
                    conn.execute("UPDATE items SET v = v + 1, note = 'upd' WHERE id = %s", (k,))
                elif op == 3:
                    conn.execute("DELETE FROM items WHERE id = %s", (k,))
                else:  # a key change, to a key that may be in a range not read yet
                    conn.execute(
                        "UPDATE items SET id = %s WHERE id = %s AND NOT EXISTS "
                        "(SELECT 1 FROM items WHERE id = %s)",
                        (k + 10_000, k, k + 10_000),
                    )
            counts[seed] += 1


def _rows(db: PgTestDb) -> dict[int, dict[str, Any]]:
    with db.connect() as conn, conn.cursor(row_factory=psycopg.rows.dict_row) as cur:
        return {r["id"]: dict(r) for r in cur.execute("SELECT * FROM items")}


def _lsn(db: PgTestDb) -> str:
    with db.connect() as conn:
        row = conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()
        assert row is not None
        return str(row[0])


def _stored(target: IndexedTarget) -> dict[Any, dict[str, Any]]:
    return {k[0] if isinstance(k, tuple) else k: dict(v) for k, v in target.items()}


def _engine(db: PgTestDb, target: IndexedTarget, transforms: list[Any]) -> laredo.Engine:
    db.execute("CREATE TABLE items (id int PRIMARY KEY, v int NOT NULL, note text)")
    db.execute("INSERT INTO items SELECT g, 0, 'seed' FROM generate_series(1, 5000) g")
    db.execute("INSERT INTO items SELECT g, 0, 'seed' FROM generate_series(6500, 6599) g")
    src = PostgresSource(db.dsn, slot_name=db.slot_name, publication={"create": True})
    pipe = laredo.Pipeline("pg", ITEMS, target, transforms=transforms)
    return laredo.Engine(sources={"pg": src}, pipelines=[pipe])


def _drift(db: PgTestDb, target: IndexedTarget) -> None:
    """Rows the source does not have, put into the target behind the engine's back."""
    for k in GHOSTS:
        target.on_insert(ITEMS, {"id": k, "v": -1, "note": "ghost"})


def _unpublished(db: PgTestDb, publish: str, sql: str, keys: range) -> None:
    """Run ``sql`` on ``keys`` while the publication publishes only ``publish``: the stream
    never carries it (a change missed while the table was out of the stream)."""
    with db.connect() as conn:
        row = conn.execute("SELECT pubname FROM pg_publication").fetchone()
        assert row is not None
        alter = psycopg.sql.SQL("ALTER PUBLICATION {} SET (publish = {})")
        pub = psycopg.sql.Identifier(row[0])
        conn.execute(alter.format(pub, psycopg.sql.Literal(publish)))
        conn.execute(sql, (list(keys),))
        conn.execute(alter.format(pub, psycopg.sql.Literal("insert, update, delete, truncate")))


def _missed_deletes(db: PgTestDb, keys: range) -> None:
    _unpublished(db, "insert, update", "DELETE FROM items WHERE id = ANY(%s)", keys)


def test_a_whole_table_backfill_removes_the_rows_the_source_lacks(
    pg_database: PgTestDb, caplog: pytest.LogCaptureFixture
) -> None:
    db = pg_database
    target = IndexedTarget()
    eng = _engine(db, target, [])
    stop = threading.Event()
    counts = [0, 0, 0]
    caplog.set_level(logging.INFO, logger="laredo.engine.backfiller")
    try:
        eng.start()
        assert eng.await_ready(60)
        _drift(db, target)
        target.on_update(ITEMS, {"id": 500, "v": -1, "note": "drift"}, None)  # a stale value
        _missed_deletes(db, MISSED)
        assert eng.wait_for("pg", _lsn(db), timeout=60)
        assert all(target.get(k) is not None for k in MISSED)  # the target did not hear
        writers = [threading.Thread(target=_writer, args=(db, stop, i, counts)) for i in range(3)]
        for w in writers:
            w.start()
        while sum(counts) < 20:  # the writers run before and during the backfill
            stop.wait(0.05)
        before = sum(counts)
        progress = eng.backfill("pg", "public.items", chunk_rows=200, timeout=120)
        during = sum(counts) - before
        stop.set()
        for w in writers:
            w.join()
        assert progress["done"] and progress["chunks"] >= 25, progress
        assert progress["sweep"] == "done", progress
        assert progress["rows_removed"] == len(GHOSTS) + len(MISSED), progress
        assert eng.wait_for("pg", _lsn(db), timeout=60)
        assert _stored(target) == _rows(db)
        [last] = eng.backfills()
        assert last["rows_removed"] == progress["rows_removed"] and last["sweep"] == "done", last
    finally:
        stop.set()
        eng.stop()
    assert during > 0, counts  # changes (inserts, updates, deletes, key changes) during it
    assert f"{len(GHOSTS) + len(MISSED)} removed (not in the source)" in caplog.text


def test_a_backfill_with_where_removes_nothing_and_says_why(
    pg_database: PgTestDb, caplog: pytest.LogCaptureFixture
) -> None:
    db = pg_database
    target = IndexedTarget()
    eng = _engine(db, target, [])
    caplog.set_level(logging.INFO, logger="laredo.engine.backfiller")
    try:
        eng.start()
        assert eng.await_ready(60)
        _drift(db, target)
        progress = eng.backfill("pg", "public.items", "id < 8000", chunk_rows=500, timeout=120)
        assert progress["done"], progress
        assert progress["rows_removed"] == 0, progress
        assert progress["sweep"].startswith("skipped: a --where backfill re-syncs a subset")
        assert eng.wait_for("pg", _lsn(db), timeout=60)
        stored = _stored(target)
        assert {k for k in stored if stored[k]["note"] == "ghost"} == set(GHOSTS)
    finally:
        eng.stop()
    assert "rows the source lacks are not removed: a --where backfill" in caplog.text


def _scale(row: dict[str, Any]) -> dict[str, Any]:
    return {**row, "id": row["id"] * 10}


def test_a_transform_that_may_change_the_key_skips_the_sweep(
    pg_database: PgTestDb,
) -> None:
    """A plain function transform declares nothing (here it does change the key): the target's
    keys cannot be matched with the source's, so nothing is removed, and the reason names the
    transform; the built-in field transforms keep the key and are swept."""
    db = pg_database
    target = IndexedTarget()
    eng = _engine(db, target, [_scale])
    try:
        eng.start()
        assert eng.await_ready(60)
        target.on_insert(ITEMS, {"id": 7, "v": -1, "note": "ghost"})  # 7: no source row maps
        progress = eng.backfill("pg", "public.items", chunk_rows=1000, timeout=120)
        assert progress["done"] and progress["rows_removed"] == 0, progress
        assert progress["sweep"].startswith("skipped: pipeline "), progress
        assert (
            "transform CallableTransform does not declare that it keeps the key"
            in (progress["sweep"])
        )
        assert target.get(7) is not None and target.count() == 5101
    finally:
        eng.stop()


def test_built_in_field_transforms_keep_the_key_and_are_swept(pg_database: PgTestDb) -> None:
    db = pg_database
    target = IndexedTarget()
    rename = laredo.RenameFields({"note": "remark"})
    eng = _engine(db, target, [rename, laredo.DropFields(["v"])])
    try:
        eng.start()
        assert eng.await_ready(60)
        for k in GHOSTS:
            target.on_insert(ITEMS, {"id": k, "remark": "ghost"})
        db.execute("DELETE FROM items WHERE id > 4900")
        progress = eng.backfill("pg", "public.items", chunk_rows=700, timeout=120)
        assert progress["done"] and progress["sweep"] == "done", progress
        assert progress["rows_removed"] == len(GHOSTS), progress
        assert eng.wait_for("pg", _lsn(db), timeout=60)
        expected = {k: {"id": k, "remark": r["note"]} for k, r in _rows(db).items()}
        assert _stored(target) == expected
    finally:
        eng.stop()


def test_rows_a_filter_no_longer_passes_are_removed_and_ghosts_swept(
    pg_database: PgTestDb,
) -> None:
    """A pipeline with a filter: rows changed while out of the stream so that they no longer
    pass it (as after a filter change) go with their chunk rows (UPDATEs leaving the filter);
    rows the source lacks go with the sweep."""
    db = pg_database
    target = IndexedTarget()
    db.execute("CREATE TABLE items (id int PRIMARY KEY, v int NOT NULL, note text)")
    db.execute("INSERT INTO items SELECT g, 0, 'seed' FROM generate_series(1, 3000) g")
    src = PostgresSource(db.dsn, slot_name=db.slot_name, publication={"create": True})
    pipe = laredo.Pipeline("pg", ITEMS, target, filters=[lambda row: row["v"] >= 0])
    eng = laredo.Engine(sources={"pg": src}, pipelines=[pipe])
    failing = range(100, 150)
    try:
        eng.start()
        assert eng.await_ready(60)
        _drift(db, target)
        _unpublished(db, "insert, delete", "UPDATE items SET v = -5 WHERE id = ANY(%s)", failing)
        assert eng.wait_for("pg", _lsn(db), timeout=60)
        assert all(target.get(k) is not None for k in failing)  # the target did not hear
        progress = eng.backfill("pg", "public.items", chunk_rows=400, timeout=120)
        assert progress["done"] and progress["sweep"] == "done", progress
        assert progress["rows_removed"] == len(GHOSTS), progress
        assert eng.wait_for("pg", _lsn(db), timeout=60)
        expected = {k: r for k, r in _rows(db).items() if r["v"] >= 0}
        assert len(expected) == 3000 - len(failing)
        assert _stored(target) == expected
    finally:
        eng.stop()
