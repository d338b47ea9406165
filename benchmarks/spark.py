"""Spark parallel baseline vs a single psycopg COPY read of the same table, in one run.

    python benchmarks/spark.py [rows] [cores...]     # default 200000 rows, local[1] and local[2]

Starts an embedded PostgreSQL, fills ``public.bench`` (id int PK, name text, score numeric,
active bool, at timestamptz), then measures on the same table:

* limit: one ``COPY (SELECT ...) TO STDOUT`` read with psycopg's typed loaders (no target);
* local: the ``postgresql`` source's own single-connection baseline (``baseline_batches``);
* spark local[N]: a fresh session per core count; a first (cold) and a second (warm) run on a
  20k-row table measure the fixed cost per run, then ``spark_baseline`` of the big table
  (slot + exported snapshot, ctid slices read in tasks, filters/transforms, rows to the driver,
  JSONL snapshot written). The crossover point is where the warm fixed cost is paid back by a
  faster per-row rate than the local baseline's (there is none when Spark's rate is lower).

Each line prints rows/s and the ratio to the COPY limit measured in this run. On a 2-core
machine shared with other work Spark's fixed costs (JVM, Python workers, driver-side snapshot
write) dominate small tables; the ratio column is the figure to compare across machines.
"""

from __future__ import annotations

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
    cores = [int(a) for a in sys.argv[2:]] or [1, 2]
    small = 20_000
    work = tempfile.mkdtemp(prefix="laredo-spark-bench-")
    results: list[tuple[str, int, float]] = []
    notes: list[str] = []
    with EmbeddedPostgres() as pg:
        dsn = pg.dsn("postgres")
        t0 = time.perf_counter()
        fill(dsn, "bench", rows)
        fill(dsn, "bench_small", small)
        print(f"filled {rows} + {small} rows in {time.perf_counter() - t0:.1f}s")
        n, secs = copy_read(dsn)
        limit = n / secs
        results.append(("COPY read (limit)", n, secs))
        n_local, secs_local = local_baseline(dsn, "bench_local")
        results.append(("local source baseline", n_local, secs_local))
        rate_local = n_local / secs_local
        for c in cores:
            t0 = time.perf_counter()
            spark = spark_session(f"local[{c}]", f"laredo-bench-{c}")
            started = time.perf_counter() - t0
            t0 = time.perf_counter()
            spark_run(spark, dsn, "bench_small", f"cold_{c}", parts=c, work=work)
            cold = time.perf_counter() - t0
            t0 = time.perf_counter()
            tiny = spark_run(spark, dsn, "bench_small", f"warm_{c}", parts=c, work=work)
            fixed = time.perf_counter() - t0
            t0 = time.perf_counter()
            res = spark_run(spark, dsn, "bench", f"big_{c}", parts=c, work=work)
            secs = time.perf_counter() - t0
            count = sum(res.row_counts.values())
            results.append((f"spark baseline, local[{c}]", count, secs))
            detail = ", ".join(f"{k} {v:.2f}s" for k, v in res.phases.items())
            notes.append(
                f"local[{c}]: session start {started:.1f}s, first (cold) run on {small} rows "
                f"{cold:.1f}s, warm run on {small} rows {fixed:.2f}s "
                f"({sum(tiny.row_counts.values())} rows); big run: {detail}; "
                f"snapshot {res.descriptor.size_bytes / 1e6:.1f} MB"
            )
            rate_spark = count / secs
            if rate_spark > rate_local:
                cross = fixed / (1 / rate_local - 1 / rate_spark)
                notes.append(f"  crossover vs the local baseline on local[{c}]: ~{cross:,.0f} rows")
            else:
                notes.append(
                    f"  no crossover on local[{c}]: Spark's warm rate ({rate_spark:,.0f} rows/s) "
                    f"is below the local baseline's ({rate_local:,.0f} rows/s) at any size"
                )
            spark.stop()
    shutil.rmtree(work, ignore_errors=True)
    print()
    for line in notes:
        print(line)
    print(f"\n{'what':34} {'rows':>9} {'seconds':>8} {'rows/s':>10} {'vs COPY':>8}")
    for name, count, secs in results:
        rate = count / secs if secs else 0.0
        print(f"{name:34} {count:>9} {secs:>8.2f} {rate:>10.0f} {rate / limit:>8.2f}")
    spark_rates = [(name, count / secs) for name, count, secs in results if "local[" in name]
    if len(spark_rates) > 1:
        base = spark_rates[0][1]
        print(
            "scaling: " + ", ".join(f"{n.split(', ')[1]} x{r / base:.2f}" for n, r in spark_rates)
        )


if __name__ == "__main__":
    main()
