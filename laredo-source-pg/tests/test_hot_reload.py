"""Hot reload against real PostgreSQL: a table joins a running engine (only it is baselined,
aligned exactly with the running stream) and another leaves, with writers on both tables."""

from __future__ import annotations

import random
import threading
from collections.abc import Callable
from typing import Any

import laredo
import pytest
from laredo.testing.recording import RecordingTarget
from laredo.types import TableIdentifier
from laredo_source_pg.pytest_plugin import PgTestDb
from laredo_source_pg.source import PostgresSource
from laredo_source_pg.testing import wait_until

pytestmark = pytest.mark.integration

A = TableIdentifier("public", "a")
B = TableIdentifier("public", "b")


def _rows(db: PgTestDb, table: str) -> dict[tuple[int], dict[str, Any]]:
    return {(r[0],): {"id": r[0], "v": r[1]} for r in db.execute(f"SELECT id, v FROM {table}")}


@pytest.mark.parametrize("create", [True, None])
def test_add_b_to_a_running_engine_then_remove_a(
    pg_database: PgTestDb, make_source: Callable[..., PostgresSource], create: bool | None
) -> None:
    db = pg_database
    for t in ("a", "b"):
        db.execute(f"CREATE TABLE {t} (id int PRIMARY KEY, v int)")
        db.execute(f"INSERT INTO {t} SELECT g, 0 FROM generate_series(1, 300) g")
    publication = {"create": create} if create is not None else {}
    src = make_source(publication=publication)
    obs = laredo.RecordingObserver()
    ta, tb = RecordingTarget(durable=True), RecordingTarget(durable=True)
    eng = laredo.Engine(
        sources={"pg": src}, pipelines=[laredo.Pipeline("pg", A, ta, id="a")], observer=obs
    )
    stop = threading.Event()

    def writer(seed: int) -> None:
        rnd = random.Random(seed)
        with db.connect() as conn:
            n = 1000 * (seed + 1)
            while not stop.is_set():
                for t in ("a", "b"):
                    n += 1
                    conn.execute(f"INSERT INTO {t} VALUES (%s, 1)", (n,))
                    conn.execute(f"UPDATE {t} SET v = v + 1 WHERE id = %s", (rnd.randint(1, 300),))
                    conn.execute(f"DELETE FROM {t} WHERE id = %s", (rnd.randint(1, 300),))

    writers = [threading.Thread(target=writer, args=(i,)) for i in range(2)]
    eng.start()
    try:
        assert eng.await_ready(30)
        for w in writers:
            w.start()
        wait_until(lambda: len(ta.calls) > 400)
        eng.add_pipeline(laredo.Pipeline("pg", B, tb, id="b"), timeout=30)
        assert (
            db.scalar(
                "SELECT count(*) FROM pg_publication_tables WHERE pubname = %s AND tablename = 'b'",
                (src.options.publication_name,),
            )
            == 1
        )
        wait_until(lambda: len(tb.calls) > 600)
        eng.remove_pipeline("a", timeout=30)
        wait_until(lambda: len(tb.calls) > 900)
    finally:
        stop.set()
        for w in writers:
            if w.is_alive():
                w.join()
    try:
        wait_until(lambda: dict(tb.items()) == _rows(db, "b"), 30, what="b == SELECT * FROM b")
        started = [args[0] for args in obs.of("baseline_started")]
        assert started.count("a") == 1 and started.count("b") == 1  # a was not re-baselined
        assert ta.closed
        published = {
            r[0]
            for r in db.execute(
                "SELECT tablename FROM pg_publication_tables WHERE pubname = %s",
                (src.options.publication_name,),
            )
        }
        assert published == {"b"}  # the managed publication let go of a
    finally:
        eng.stop()


def test_adding_a_table_without_a_key_or_twice_is_refused_and_disturbs_nothing(
    pg_database: PgTestDb, make_source: Callable[..., PostgresSource]
) -> None:
    db = pg_database
    db.execute("CREATE TABLE a (id int PRIMARY KEY, v int)")
    db.execute("CREATE TABLE nokey (v int)")
    db.execute("INSERT INTO a VALUES (1, 1)")
    ta = RecordingTarget(durable=True)
    eng = laredo.Engine(
        sources={"pg": make_source()}, pipelines=[laredo.Pipeline("pg", A, ta, id="a")]
    )
    eng.start()
    try:
        assert eng.await_ready(30)
        with pytest.raises(laredo.ConfigError, match="REPLICA_IDENTITY"):
            eng.add_pipeline(
                laredo.Pipeline("pg", TableIdentifier("public", "nokey"), RecordingTarget())
            )
        with pytest.raises(laredo.ConfigError, match="pipeline 'a' already exists"):
            eng.add_pipeline(laredo.Pipeline("pg", A, RecordingTarget(), id="a"))
        with pytest.raises(KeyError, match="unknown pipeline 'zz'"):
            eng.remove_pipeline("zz")
        db.execute("INSERT INTO a VALUES (2, 2)")
        wait_until(lambda: dict(ta.items()).get((2,)) == {"id": 2, "v": 2})
    finally:
        eng.stop()


def test_a_table_added_at_run_time_reports_progress_and_arrives_in_batches(
    pg_database: PgTestDb, make_source: Callable[..., PostgresSource]
) -> None:
    """``add_pipeline`` baselines through the start-up path: row batches from the source,
    ``on_baseline_row_loaded`` every 10,000 rows, the row count in ``on_baseline_completed``."""
    db = pg_database
    db.execute("CREATE TABLE a (id int PRIMARY KEY, v int)")
    db.execute("CREATE TABLE b (id int PRIMARY KEY, v int)")
    db.execute("INSERT INTO b SELECT g, g FROM generate_series(1, 25000) g")
    obs = laredo.RecordingObserver()
    tb = RecordingTarget(durable=True)
    eng = laredo.Engine(
        sources={"pg": make_source(batch_size=5_000)},
        pipelines=[laredo.Pipeline("pg", A, RecordingTarget(durable=True), id="a")],
        observer=obs,
    )
    eng.start()
    try:
        assert eng.await_ready(30)
        assert obs.of("baseline_row_loaded") == []
        eng.add_pipeline(laredo.Pipeline("pg", B, tb, id="b"), timeout=60)
        assert obs.of("baseline_row_loaded") == [("b", B, 10_000), ("b", B, 20_000)]
        assert [(a[0], a[2]) for a in obs.of("baseline_completed")] == [("a", 0), ("b", 25_000)]
        baseline_calls = [c for c in tb.calls if c[0].startswith("on_baseline_row")]
        assert len(baseline_calls) == 25_000  # RecordingTarget takes rows one by one
        db.execute("UPDATE b SET v = -v WHERE id <= 10")
        wait_until(lambda: dict(tb.items()) == _rows(db, "b"), 30, what="b == SELECT * FROM b")
    finally:
        eng.stop()
