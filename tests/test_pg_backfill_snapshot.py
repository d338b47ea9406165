"""A chunked baseline into an in-memory target continues from a snapshot (issue 32, item 2).

The engine snapshots an ``IndexedTarget`` part way through its chunked baseline (the snapshot
holds the rows and the baseline's progress record, on a real local snapshot store); the
process's state is then lost. The restart restores the snapshot and continues the chunks after
the record's key — PostgreSQL's ``pg_stat_user_tables`` shows it reads only the rest of the
table — while writers change it, and the target ends equal to PostgreSQL."""

from __future__ import annotations

import json
import random
import threading
import time
from pathlib import Path
from typing import Any

import laredo
import pytest
from laredo.testing import wait_until
from laredo.types import TableIdentifier
from laredo_source_pg import PostgresSource
from laredo_source_pg.pytest_plugin import PgTestDb
from laredo_target_memory import IndexedTarget

pytestmark = pytest.mark.integration
ITEMS = laredo.Table("public", "items")
N = 20_000
CHUNK = 500


class Paced(IndexedTarget):
    """Slowed per progress record so the test can snapshot the baseline part way."""

    pace = 0.0

    def save_progress(self, table: TableIdentifier, record: str | None) -> None:
        super().save_progress(table, record)
        time.sleep(self.pace)


def _engine(
    db: PgTestDb, target: IndexedTarget, store: Any
) -> tuple[laredo.Engine, laredo.RecordingObserver]:
    src = PostgresSource(
        db.dsn,
        slot_name=db.slot_name,
        slot_mode="stateful",
        publication={"create": True},
        status_interval=0.2,
        baseline={"mode": "chunked", "chunk_rows": CHUNK},
    )
    obs = laredo.RecordingObserver()
    pipes = [laredo.Pipeline("pg", ITEMS, target)]
    eng = laredo.Engine(sources={"pg": src}, pipelines=pipes, snapshot_store=store, observers=[obs])
    return eng, obs


def _done(target: IndexedTarget) -> int:
    record = target.load_progress(ITEMS)
    key = None if record is None else json.loads(record)["last_key"]
    return 0 if key is None else int(key[0])


def _writer(db: PgTestDb, stop: threading.Event, counts: list[int]) -> None:
    rnd = random.Random(7)
    with db.connect() as conn:
        while not stop.is_set():
            k = rnd.randrange(1, N + 1)
            with conn.transaction():
                op = rnd.randrange(3)
                if op == 0:
                    conn.execute("UPDATE items SET v = v + 1 WHERE id = %s", (k,))
                elif op == 1:
                    conn.execute("DELETE FROM items WHERE id = %s", (k,))
                else:
                    conn.execute(
                        "INSERT INTO items VALUES (%s, 1) ON CONFLICT (id) DO NOTHING", (k + N,)
                    )
            counts[0] += 1
            time.sleep(0.002)


def test_a_snapshot_mid_chunks_restores_and_continues_after_its_key(
    pg_database: PgTestDb, tmp_path: Path
) -> None:
    db = pg_database
    db.execute("CREATE TABLE items (id int PRIMARY KEY, v int NOT NULL)")
    db.execute(f"INSERT INTO items SELECT g, 0 FROM generate_series(1, {N}) g")
    store = laredo.snapshot_store("local", path=str(tmp_path))
    stop, counts = threading.Event(), [0]
    writer = threading.Thread(target=_writer, args=(db, stop, counts))
    writer.start()
    try:
        t1 = Paced()
        t1.pace = 0.03
        eng, _ = _engine(db, t1, store)
        eng.start()
        try:
            wait_until(lambda: _done(t1) >= 0.4 * N, 120, "40 % of the chunks", interval=0.01)
            eng.create_snapshot({"test": "mid-chunks"})  # not ready: allowed mid-chunks
            assert not eng.await_ready(0)
        finally:
            eng.stop()  # the in-memory state is gone; the slot confirmed nothing since
        (desc,) = store.list()
        meta, _ = store.load(desc.snapshot_id, laredo.JsonlSerializer())
        (info,) = meta.tables
        done = json.loads(info.progress or "null")["last_key"][0]
        assert 0.4 * N <= done < 0.7 * N, done
        before = db.rows_read("items")
        t2 = IndexedTarget()
        eng2, obs = _engine(db, t2, store)
        eng2.start()
        try:
            assert eng2.await_ready(120)
            assert obs.count("snapshot_restore_completed") == 1
            stop.set()
            writer.join()
            lsn = db.scalar("SELECT pg_current_wal_lsn()::text")
            assert eng2.wait_for("pg", lsn, timeout=60)
            assert t2.load_progress(ITEMS) is None  # finished
        finally:
            eng2.stop()
        reread = db.rows_read("items") - before  # (backends report their counters when they exit)
        expected = {r[0]: {"id": r[0], "v": r[1]} for r in db.execute("SELECT * FROM items")}
        assert {r["id"]: r for r in t2.all()} == expected
    finally:
        stop.set()
        writer.join()
    assert counts[0] > 50, counts  # the writer ran across both runs
    assert reread <= 0.7 * N, (reread, done)
    print(f"snapshot after key {done} of {N}; the restart read {reread} tuples ({reread / N:.0%})")
