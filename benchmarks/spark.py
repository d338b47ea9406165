"""Spark parallel baseline vs a single psycopg COPY read of the same table, in one run.

    python benchmarks/spark.py [rows] [partitions...]   # default 200000 rows; 1, 2, 4 partitions

Starts an embedded PostgreSQL, fills ``public.bench`` (id int PK, name text, score numeric,
active bool, at timestamptz), then measures on the same table:

* limit: one ``COPY (SELECT ...) TO STDOUT`` read with psycopg's typed loaders (no target);
* local: the ``postgresql`` source's own single-connection baseline (``baseline_batches``);
* spark, N partitions: a ``local[N]`` session per partition count (its start is timed; the
  first one includes the JVM launch), a first job on a 20k-row table (Python workers, imports),
  then ``spark_baseline`` of the big table (slot + exported snapshot, ctid slices read in tasks,
  rows to the driver, JSONL snapshot written). ``wall+start`` is what a fresh process pays:
  JVM + session start + first job + the big table. The crossover point is where those fixed
  costs are paid back by a faster per-row rate than the local baseline's (there is none when
  Spark's rate is lower).

Each line prints rows/s and the ratio to the COPY limit measured in this run. On a 2-core
machine shared with other work Spark's fixed costs (JVM, Python workers, driver-side snapshot
write) dominate small tables; the ratio column is the figure to compare across machines.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from typing import Any

import laredo
from laredo.snapshots.jsonl import JsonlSerializer
from laredo.snapshots.local import LocalSnapshotStore
from laredo.types import SourceConfig, TableIdentifier
from laredo_source_pg.embedded import EmbeddedPostgres
from laredo_spark import spark_baseline, spark_session

TABLE = TableIdentifier("public", "bench")


def fill(dsn: str, table: str, n: int) -> None:
    import psycopg
    from psycopg import sql

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            sql.SQL(
                "CREATE TABLE {} (id int PRIMARY KEY, name text, score numeric, active bool, "
                "at timestamptz)"
            ).format(sql.Identifier(table))
        )
        conn.execute(
            sql.SQL(
                "INSERT INTO {} SELECT g, 'user-' || g, (g %% 1000) / 10.0, g %% 3 <> 0, "
                "now() - g * interval '1 second' FROM generate_series(1, %s) g"
            ).format(sql.Identifier(table)),
            (n,),
        )
        conn.execute(sql.SQL("VACUUM ANALYZE {}").format(sql.Identifier(table)))


def copy_read(dsn: str) -> tuple[int, float]:
    import psycopg

    t0 = time.perf_counter()
    n = 0
    with (
        psycopg.connect(dsn) as conn,
        conn.cursor() as cur,
        cur.copy("COPY (SELECT id, name, score, active, at FROM bench) TO STDOUT") as cp,
    ):
        cp.set_types(["int4", "text", "numeric", "bool", "timestamptz"])
        for _row in cp.rows():
            n += 1
    return n, time.perf_counter() - t0


def local_baseline(dsn: str, slot: str) -> tuple[int, float]:
    src = laredo.source("postgresql", connection=dsn, slot_name=slot, publication={"create": True})
    count = [0]

    def cb(table: Any, rows: list[Any]) -> None:
        count[0] += len(rows)

    try:
        src.init(SourceConfig([TABLE]))
        t0 = time.perf_counter()
        src.baseline_batches([TABLE], cb)
        return count[0], time.perf_counter() - t0
    finally:
        src.close()


def spark_run(spark: Any, dsn: str, table: str, slot: str, *, parts: int, work: str) -> Any:
    store = LocalSnapshotStore(f"{work}/{slot}", fsync=False)
    pipe = laredo.Pipeline("pg", TableIdentifier("public", table), object())
    return spark_baseline(
        spark,
        {
            "connection": dsn,
            "slot_mode": "stateful",
            "slot_name": slot,
            "publication": {"create": True},
        },
        [pipe],
        snapshot_store=store,
        serializer=JsonlSerializer(),
        partitions=parts,
    )


def main() -> None:
    rows = int(sys.argv[1]) if len(sys.argv) > 1 else 200_000
    parts_list = [int(a) for a in sys.argv[2:]] or [1, 2, 4]
    small = 20_000
    work = tempfile.mkdtemp(prefix="laredo-spark-bench-")
    results: list[tuple[str, int, float, float]] = []  # name, rows, seconds, wall incl. start
    notes: list[str] = []
    crossover: list[str] = []
    with EmbeddedPostgres() as pg:
        dsn = pg.dsn("postgres")
        t0 = time.perf_counter()
        fill(dsn, "bench", rows)
        fill(dsn, "bench_small", small)
        print(f"filled {rows} + {small} rows in {time.perf_counter() - t0:.1f}s", flush=True)
        n, secs = copy_read(dsn)
        limit = n / secs
        results.append(("COPY read (limit)", n, secs, secs))
        n_local, secs_local = local_baseline(dsn, "bench_local")
        results.append(("local source baseline", n_local, secs_local, secs_local))
        rate_local = n_local / secs_local
        first_start: float | None = None
        for c in parts_list:
            # one session per partition count, local[c]: c task slots for c partitions (on a
            # 2-core box local[4] oversubscribes the cores, which is what this measures)
            t0 = time.perf_counter()
            spark = spark_session(f"local[{c}]", f"laredo-bench-{c}")
            started = time.perf_counter() - t0
            if first_start is None:
                first_start = started  # JVM launch + context: paid once per process
            t0 = time.perf_counter()
            tiny = spark_run(spark, dsn, "bench_small", f"cold_{c}", parts=c, work=work)
            cold = time.perf_counter() - t0  # first job: Python workers, imports
            t0 = time.perf_counter()
            res = spark_run(spark, dsn, "bench", f"big_{c}", parts=c, work=work)
            secs = time.perf_counter() - t0
            count = sum(res.row_counts.values())
            # a fresh process: JVM + session start, the first job's fixed cost, then the table
            wall = first_start + cold + secs
            results.append((f"spark baseline, {c} partition(s)", count, secs, wall))
            detail = ", ".join(f"{k} {v:.2f}s" for k, v in res.phases.items())
            notes.append(
                f"{c} partition(s), local[{c}]: session start {started:.1f}s (first session, "
                f"with JVM launch: {first_start:.1f}s); first job ({small} rows) {cold:.2f}s "
                f"({sum(tiny.row_counts.values())} rows); {count} rows: {detail}; snapshot "
                f"{res.descriptor.size_bytes / 1e6:.1f} MB ({res.descriptor.size_bytes / count:.0f}"
                f" B/row)"
            )
            rate_spark = count / secs
            overhead = first_start + cold
            if rate_spark > rate_local:
                cross = overhead / (1 / rate_local - 1 / rate_spark)
                crossover.append(f"{c} partition(s): Spark wins above ~{cross:,.0f} rows")
            else:
                crossover.append(
                    f"{c} partition(s): no crossover: Spark's per-row rate ({rate_spark:,.0f} "
                    f"rows/s) is below the local baseline's ({rate_local:,.0f} rows/s), so it "
                    f"loses at any table size"
                )
            spark.stop()
    shutil.rmtree(work, ignore_errors=True)
    print()
    for line in notes:
        print(line)
    print(
        f"\n{'what':34} {'rows':>9} {'seconds':>8} {'rows/s':>10} {'vs COPY':>8} "
        f"{'wall+start':>10} {'rows/s e2e':>10}"
    )
    for name, count, secs, wall in results:
        rate = count / secs if secs else 0.0
        print(
            f"{name:34} {count:>9} {secs:>8.2f} {rate:>10.0f} {rate / limit:>8.2f} "
            f"{wall:>10.2f} {count / wall:>10.0f}"
        )
    spark_rows = [(name, count / secs) for name, count, secs, _ in results if "partition" in name]
    if len(spark_rows) > 1:
        base = spark_rows[0][1]
        print(
            "scaling vs 1 partition: "
            + ", ".join(f"{n.split(', ')[1]} x{r / base:.2f}" for n, r in spark_rows)
            + f" (machine has {os.cpu_count()} cores)"
        )
    for line in crossover:
        print("crossover: " + line)


if __name__ == "__main__":
    main()
