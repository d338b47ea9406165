"""A backfill's row estimate (its progress and ETA) on PostgreSQL: the whole table's from
``reltuples``, and with ``where`` the planner's estimate of the matching rows, so the ETA of a
subset is not the whole table's."""

from __future__ import annotations

import laredo
import pytest
from laredo_source_pg import PostgresSource
from laredo_source_pg.pytest_plugin import PgTestDb
from laredo_target_memory import IndexedTarget

pytestmark = pytest.mark.integration
ITEMS = laredo.Table("public", "items")


def _near(estimate: int, actual: int) -> bool:
    return abs(estimate - actual) <= actual * 0.2


def test_a_subset_backfill_estimates_the_rows_it_will_read(pg_database: PgTestDb) -> None:
    db = pg_database
    db.execute("CREATE TABLE items (id int PRIMARY KEY, v int NOT NULL)")
    db.execute("INSERT INTO items SELECT g, g % 10 FROM generate_series(1, 20000) g")
    db.execute("ANALYZE items")
    src = PostgresSource(db.dsn, slot_name=db.slot_name, publication={"create": True})
    eng = laredo.Engine(
        sources={"pg": src}, pipelines=[laredo.Pipeline("pg", ITEMS, IndexedTarget())]
    )
    try:
        eng.start()
        assert eng.await_ready(60)
        whole = eng.backfill("pg", ITEMS, chunk_rows=5000, timeout=60)
        assert whole["done"] and whole["rows_read"] == 20000, whole
        assert _near(whole["rows_estimated"], 20000), whole
        part = eng.backfill("pg", ITEMS, "id <= 3000", chunk_rows=5000, timeout=60)
        assert part["done"] and part["rows_read"] == 3000, part
        assert _near(part["rows_estimated"], 3000), part  # not the table's 20000
        odd = eng.backfill("pg", ITEMS, "v = 3", chunk_rows=5000, timeout=60)
        assert odd["done"] and odd["rows_read"] == 2000, odd
        assert _near(odd["rows_estimated"], 2000), odd
    finally:
        eng.stop()
    # never analyzed: no statistics, no estimate (the ETA is unknown, not a guess)
    db.execute("CREATE TABLE fresh (id int PRIMARY KEY)")
    db.execute("INSERT INTO fresh SELECT generate_series(1, 100)")
    fresh = laredo.Table("public", "fresh")
    probe = PostgresSource(db.dsn, slot_name=db.slot_name + "_p", publication={"create": True})
    try:
        if probe.estimate_rows(fresh) < 0:  # autovacuum may have analyzed it already
            assert probe.estimate_rows(fresh, "id <= 10") == -1
    finally:
        probe.close()
