"""Spark baseline into a ``delta`` target: executors write the first version's files, the
driver commits them at the slot's position; the engine then streams on from the slot into the
same Delta table with no gap and no duplicate."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import laredo
import pytest
from laredo.types import TableIdentifier

pytest.importorskip("laredo_target_delta")
from laredo_source_pg.source import PostgresSource
from laredo_spark.delta_baseline import spark_delta_baseline
from laredo_target_delta import DeltaTarget, DeltaTargetOptions, history, rows_as_of

pytestmark = [pytest.mark.spark, pytest.mark.integration]

ITEMS = TableIdentifier("public", "items")


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


def test_spark_writes_the_first_version_and_the_engine_continues(
    spark: Any, pg_database: Any, tmp_path: Path
) -> None:
    db = pg_database
    db.execute(
        "CREATE TABLE items (id int PRIMARY KEY, sku text, price numeric, at timestamptz, "
        "doc jsonb)"
    )
    db.execute(
        "INSERT INTO items SELECT g, 'sku-' || g, g / 8.0, "
        "timestamptz '2026-01-01 00:00:00+00' + g * interval '1 second', "
        "jsonb_build_object('g', g) FROM generate_series(1, 300) g"
    )
    uri = str(tmp_path / "lake" / "items")
    cfg = {
        "connection": db.dsn,
        "slot_mode": "stateful",
        "slot_name": db.slot_name,
        "publication": {"create": True},
    }
    pipe = laredo.Pipeline("pg", ITEMS, DeltaTarget(DeltaTargetOptions(uri=uri)))
    stop = threading.Event()

    def write() -> None:  # concurrent writers during the Spark job
        with db.connect() as conn:
            i = 2000
            while not stop.is_set():
                conn.execute("INSERT INTO items VALUES (%s, 'during', 2.5, now(), '{}')", (i,))
                conn.execute("UPDATE items SET sku = %s WHERE id = %s", (f"u{i}", i % 300 + 1))
                i += 1
                time.sleep(0.01)

    writer = threading.Thread(target=write)
    writer.start()
    try:
        res = spark_delta_baseline(spark, cfg, [pipe], source_id="pg", partitions=3)
    finally:
        stop.set()
        writer.join()
    assert sum(res.row_counts.values()) >= 300
    commits = history(uri)
    assert [(c.kind, c.position) for c in commits] == [("baseline", res.position)]

    # changes after the baseline's snapshot: the engine streams them from the slot
    db.execute("UPDATE items SET sku = 'changed' WHERE id <= 10")
    db.execute("DELETE FROM items WHERE id > 290")
    db.execute("INSERT INTO items VALUES (1000, 'new', 1.5, now(), '{\"n\": 1}')")
    src = PostgresSource(**cfg, status_interval=0.2)
    target = DeltaTarget(DeltaTargetOptions(uri=uri, flush_interval="100ms"))
    eng = laredo.Engine(sources={"pg": src}, pipelines=[laredo.Pipeline("pg", ITEMS, target)])
    eng.start()
    try:
        assert eng.await_ready(60)
        deadline = time.monotonic() + 60
        while _delta_rows(uri) != _pg_rows(db):
            assert time.monotonic() < deadline, "the Delta table did not converge"
            time.sleep(0.2)
    finally:
        eng.stop()
    kinds = [c.kind for c in history(uri)]
    assert kinds.count("baseline") == 1  # resumed from the slot: no second baseline
