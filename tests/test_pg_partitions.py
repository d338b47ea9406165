"""PostgreSQL partitioned tables and schema changes -> engine -> IndexedTarget, with writers.

A pipeline names the partitioned parent; the managed publication publishes via the partition
root; the baseline reads every partition; a row moved to another partition is one UPDATE; a
partition truncated, attached or detached while streaming re-baselines the parent (seen by the
catalog check); a renamed column reaches the replica without a further row change.
"""

from __future__ import annotations

import random
import threading
from typing import Any

import laredo
import psycopg
import pytest
from laredo.types import TableIdentifier
from laredo_source_pg import PostgresSource
from laredo_source_pg.pytest_plugin import PgTestDb
from laredo_source_pg.testing import wait_until
from laredo_target_memory import IndexedTarget

pytestmark = pytest.mark.integration
EV = TableIdentifier("public", "ev")
CHECK = 0.2  # catalog_check_interval of these tests (seconds)


def _table(db: PgTestDb) -> dict[tuple[int, str], dict[str, Any]]:
    rows = db.execute("SELECT id, region, v, note FROM ev")
    return {(i, r): {"id": i, "region": r, "v": v, "note": n} for i, r, v, n in rows}


def _replica(target: IndexedTarget) -> dict[tuple[int, str], dict[str, Any]]:
    return {(r["id"], r["region"]): dict(r) for r in target.all()}


def _create(db: PgTestDb) -> None:
    db.execute(
        "CREATE TABLE ev (id int, region text, v int, doubled int GENERATED ALWAYS AS (v * 2) "
        "STORED, note text, PRIMARY KEY (id, region)) PARTITION BY LIST (region)"
    )
    db.execute("CREATE TABLE ev_eu PARTITION OF ev FOR VALUES IN ('eu')")
    db.execute("CREATE TABLE ev_us PARTITION OF ev FOR VALUES IN ('us')")
    db.execute(
        "INSERT INTO ev (id, region, v, note) SELECT g, CASE WHEN g % 2 = 0 THEN 'eu' ELSE 'us' "
        "END, g, 'seed' FROM generate_series(1, 3000) g"
    )


def _engine(
    db: PgTestDb, target: IndexedTarget, create: bool | None
) -> tuple[laredo.Engine, PostgresSource]:
    publication: dict[str, Any] = {} if create is None else {"create": create}
    src = PostgresSource(
        db.dsn,
        slot_name=db.slot_name,
        publication=publication,
        status_interval=1.0,
        catalog_check_interval=CHECK,
    )
    eng = laredo.Engine(sources={"pg": src}, pipelines=[laredo.Pipeline("pg", EV, target)])
    return eng, src


def _writer(db: PgTestDb, stop: threading.Event, seed: int, moves: list[int]) -> None:
    rnd = random.Random(seed)
    n = 100_000 * (seed + 1)
    with db.connect() as conn:
        while not stop.is_set():
            n += 1
            region = rnd.choice(("eu", "us"))
            try:
                conn.execute(
                    "INSERT INTO ev (id, region, v, note) VALUES (%s, %s, 1, 'w')", (n, region)
                )
                conn.execute("UPDATE ev SET v = v + 1 WHERE id = %s", (rnd.randint(1, 3000),))
                conn.execute("DELETE FROM ev WHERE id = %s", (rnd.randint(1, 3000),))
                # move a row to the other partition
                moved = conn.execute(
                    "UPDATE ev SET region = CASE region WHEN 'eu' THEN 'us' ELSE 'eu' END, "
                    "note = 'moved' WHERE id = %s RETURNING id",
                    (rnd.randint(1, 3000),),
                ).fetchone()
                if moved:
                    moves.append(moved[0])
            except psycopg.errors.UniqueViolation:
                pass  # moved onto a key that exists in the other partition


@pytest.mark.parametrize("create", [True, None])
def test_partitioned_parent_replicates_exactly_through_moves_truncate_attach_detach(
    pg_database: PgTestDb, create: bool | None
) -> None:
    db = pg_database
    _create(db)
    target = IndexedTarget()
    eng, src = _engine(db, target, create)
    stop = threading.Event()
    moves: list[int] = []
    writers = [threading.Thread(target=_writer, args=(db, stop, i, moves)) for i in range(2)]
    for w in writers:
        w.start()  # writers during the baseline too
    try:
        eng.start()
        assert eng.await_ready(60)
        assert db.scalar(
            "SELECT pubviaroot FROM pg_publication WHERE pubname = %s", (src.publication_name,)
        )
        wait_until(lambda: len(moves) > 50, timeout=30, what="rows moved between partitions")
        # TRUNCATE of one partition: pgoutput sends nothing for it under the partition root
        db.execute("TRUNCATE ev_eu")
        # a partition with rows attached while streaming
        db.execute("CREATE TABLE ev_asia (LIKE ev INCLUDING DEFAULTS INCLUDING GENERATED)")
        db.execute(
            "INSERT INTO ev_asia (id, region, v, note) SELECT g, 'asia', g, 'attached' "
            "FROM generate_series(1, 500) g"
        )
        db.execute("ALTER TABLE ev ATTACH PARTITION ev_asia FOR VALUES IN ('asia')")
        wait_until(
            lambda: target.get(7, "asia") is not None, timeout=30, what="attached partition rows"
        )
        db.execute("ALTER TABLE ev DETACH PARTITION ev_asia")
        wait_until(
            lambda: target.get(7, "asia") is None, timeout=30, what="detached partition rows gone"
        )
    finally:
        stop.set()
        for w in writers:
            w.join()
    try:
        want = _table(db)
        wait_until(lambda: _replica(target) == want, timeout=30, what="replica == SELECT * FROM ev")
        assert not any(k[1] == "asia" for k in want)
        assert all("doubled" not in r for r in target.all()), "generated column replicated"
    finally:
        eng.stop()


def test_renamed_column_reaches_the_replica_without_a_row_change(pg_database: PgTestDb) -> None:
    db = pg_database
    db.execute("CREATE TABLE ev (id int PRIMARY KEY, region text, v int, note text)")
    db.execute("INSERT INTO ev SELECT g, 'eu', g, 'x' FROM generate_series(1, 100) g")
    target = IndexedTarget()
    eng, _src = _engine(db, target, True)
    eng.start()
    try:
        assert eng.await_ready(60)
        db.execute("UPDATE ev SET v = -1 WHERE id = 1")
        wait_until(lambda: (target.get(1) or {}).get("v") == -1, what="stream running")
        db.execute("ALTER TABLE ev RENAME COLUMN note TO remark")
        # no row of ev changes after the rename
        wait_until(
            lambda: "remark" in (target.get(2) or {}),
            timeout=CHECK + 10,
            what="renamed column in the replica",
        )
        row = target.get(2)
        assert row is not None and "note" not in row and row["remark"] == "x"
        assert len(target.all()) == 100
    finally:
        eng.stop()
