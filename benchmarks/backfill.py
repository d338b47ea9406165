"""Chunked vs snapshot baseline at 1M rows (issue 32): one embedded PostgreSQL, one table
``items (id bigint PRIMARY KEY, v int, note text, ts timestamptz)``, an ``IndexedTarget``;
the wall time from ``Engine.start()`` to ready, each mode twice, alternating, in one run.
Then an on-demand ``Engine.backfill`` of the whole table (with its end-of-backfill sweep)
against the same backfill with ``where id > 0`` (the same chunks, no sweep: its floor), twice,
alternating, on one streaming engine.

    .venv/bin/python benchmarks/backfill.py [--rows 1000000] [--chunk-rows 10000]
"""

from __future__ import annotations

import argparse
import time

import laredo
from laredo_source_pg import PostgresSource
from laredo_source_pg.embedded import EmbeddedPostgres
from laredo_target_memory import IndexedTarget

ITEMS = laredo.Table("public", "items")


def run(dsn: str, mode: str, chunk_rows: int, n: int) -> float:
    src = PostgresSource(
        dsn,
        slot_name=f"bench_{mode}_{n}",
        publication={"create": True, "name": "bench_pub"},
        baseline={"mode": mode, "chunk_rows": chunk_rows},
    )
    target = IndexedTarget()
    eng = laredo.Engine(sources={"pg": src}, pipelines=[laredo.Pipeline("pg", ITEMS, target)])
    t0 = time.perf_counter()
    eng.start()
    assert eng.await_ready(3600)
    wall = time.perf_counter() - t0
    count = target.count()
    eng.stop()
    assert count == ROWS, count
    return wall


ROWS = 0


def on_demand(dsn: str, chunk_rows: int) -> None:
    """Whole-table backfill (sweep) against ``where id > 0`` (no sweep), on one engine."""
    src = PostgresSource(
        dsn,
        slot_name="bench_on_demand",
        publication={"create": True, "name": "bench_pub"},
    )
    target = IndexedTarget()
    eng = laredo.Engine(sources={"pg": src}, pipelines=[laredo.Pipeline("pg", ITEMS, target)])
    eng.start()
    assert eng.await_ready(3600)
    times: dict[str, list[float]] = {"sweep": [], "where": []}
    try:
        for i in range(2):
            for kind, where in (("where", "id > 0"), ("sweep", None)):
                t0 = time.perf_counter()
                p = eng.backfill("pg", ITEMS, where, chunk_rows=chunk_rows, timeout=None)
                wall = time.perf_counter() - t0
                assert p["done"] and p["rows_removed"] == 0, p
                assert (p["sweep"] == "done") == (where is None), p
                times[kind].append(wall)
                print(f"run {i + 1} backfill {kind:5s}: {wall:6.2f} s", flush=True)
    finally:
        eng.stop()
    for i in range(2):
        ratio = times["sweep"][i] / times["where"][i]
        print(f"run {i + 1}: backfill with sweep / without (where id > 0) = {ratio:.2f}x")


def main() -> None:
    global ROWS
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--chunk-rows", type=int, default=10_000)
    args = ap.parse_args()
    ROWS = args.rows
    settings = {"shared_buffers": "256MB", "max_wal_size": "4GB"}
    with EmbeddedPostgres(settings=settings) as pg:
        pg.execute("CREATE DATABASE bench")
        dsn = pg.dsn("bench")
        import psycopg

        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(
                "CREATE TABLE items (id bigint PRIMARY KEY, v int, note text, ts timestamptz)"
            )
            conn.execute(
                "INSERT INTO items SELECT g, g %% 1000, 'note ' || g, now() "
                "FROM generate_series(1, %s) g",
                (ROWS,),
            )
            conn.execute("VACUUM ANALYZE items")
        times: dict[str, list[float]] = {"snapshot": [], "chunked": []}
        for i in range(2):
            for mode in ("snapshot", "chunked"):
                wall = run(dsn, mode, args.chunk_rows, i)
                times[mode].append(wall)
                print(
                    f"run {i + 1} {mode:8s}: {wall:6.2f} s ({ROWS / wall:,.0f} rows/s)", flush=True
                )
        for i in range(2):
            ratio = times["chunked"][i] / times["snapshot"][i]
            print(f"run {i + 1}: chunked / snapshot wall time = {ratio:.2f}x")
        on_demand(dsn, args.chunk_rows)


if __name__ == "__main__":
    main()
