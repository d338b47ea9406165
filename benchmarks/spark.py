"""Spark parallel baseline vs the local paths on the same tables, in one run.

    python benchmarks/spark.py [rows] [partitions...] [--repeat N] [--serializer parquet|jsonl]

Defaults: 200000 rows, partitions 1 2, 3 repeats, the Parquet serializer. Starts an embedded
PostgreSQL and fills two tables of the same shape (id int PK, name text, score numeric,
active bool, at timestamptz): ``bench_small`` (rows / 4) and ``bench_full`` (rows). Then:

* limit: one ``COPY (SELECT ...) TO STDOUT`` read of ``bench_full`` with psycopg's typed
  loaders (no target): what one connection can deliver to Python;
* local read: the ``postgresql`` source's own single-connection baseline (rows only);
* local baseline+snapshot: the same baseline, then the rows written as a snapshot with the same
  serializer and store type as the Spark runs (what the local engine needs to produce the same
  artifact);
* spark, N partitions: a ``local[N]`` session, a first job on a tiny table (Python workers,
  imports), then ``spark_baseline`` of both tables, alternately, repeated. The **marginal
  rate** is ``(rows - rows/4) / (median t_full - median t_small)``: the JVM, session, slot,
  planning and commit costs cancel out. **Driver CPU** is the CPU time of this (the driver's)
  Python process during a run (``time.process_time``; the JVM and the Python workers are other
  processes), per million rows: marginal (between the two sizes) and whole (the full run).

Every line is printed beside the limits measured in the same run, with the median of the
repeats and the load average (the machine may be shared: compare ratios, not absolutes).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from typing import Any

import laredo
from laredo.snapshots.local import LocalSnapshotStore
from laredo.types import SnapshotMetadata, SourceConfig, TableIdentifier, TableSnapshotInfo
from laredo_source_pg.embedded import EmbeddedPostgres
from laredo_spark import spark_baseline, spark_session

COLUMNS = "id, name, score, active, at"


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


def serializer_of(name: str) -> Any:
    return laredo.serializer(name)


def copy_read(dsn: str, table: str) -> tuple[int, float]:
    import psycopg
    from psycopg import sql

    t0 = time.perf_counter()
    n = 0
    query = sql.SQL("COPY (SELECT {} FROM {}) TO STDOUT").format(
        sql.SQL(COLUMNS), sql.Identifier(table)
    )
    with psycopg.connect(dsn) as conn, conn.cursor() as cur, cur.copy(query) as cp:
        cp.set_types(["int4", "text", "numeric", "bool", "timestamptz"])
        for _row in cp.rows():
            n += 1
    return n, time.perf_counter() - t0


def local_baseline(
    dsn: str, table: str, slot: str, store: Any = None, serializer: Any = None
) -> tuple[int, float]:
    """The local source's baseline (rows only), or baseline + snapshot when ``store`` is set."""
    ident = TableIdentifier("public", table)
    src = laredo.source("postgresql", connection=dsn, slot_name=slot, publication={"create": True})
    rows: list[Any] = []
    count = [0]

    def cb(_table: Any, batch: list[Any]) -> None:
        count[0] += len(batch)
        if store is not None:
            rows.extend(batch)

    try:
        columns = src.init(SourceConfig([ident]))
        t0 = time.perf_counter()
        src.baseline_batches([ident], cb)
        if store is not None:
            from datetime import UTC, datetime

            info = TableSnapshotInfo(ident, len(rows), columns=tuple(columns[ident]))
            meta = SnapshotMetadata(
                f"local-{slot}", datetime.now(UTC), {"pg": "0/0"}, (info,), serializer.format_id()
            )
            store.save(f"local-{slot}", meta, {ident: rows}, serializer)
        return count[0], time.perf_counter() - t0
    finally:
        src.close()


def spark_run(
    spark: Any, dsn: str, table: str, slot: str, *, parts: int, work: str, ser: str
) -> Any:
    store = LocalSnapshotStore(f"{work}/{slot}", fsync=False)
    pipe = laredo.Pipeline("pg", TableIdentifier("public", table), object())
    cpu0 = time.process_time()
    t0 = time.perf_counter()
    res = spark_baseline(
        spark,
        {
            "connection": dsn,
            "slot_mode": "stateful",
            "slot_name": slot,
            "publication": {"create": True},
        },
        [pipe],
        snapshot_store=store,
        serializer=serializer_of(ser),
        partitions=parts,
    )
    wall = time.perf_counter() - t0
    cpu = time.process_time() - cpu0
    shutil.rmtree(f"{work}/{slot}", ignore_errors=True)
    return res, wall, cpu


def load() -> str:
    return "/".join(f"{x:.1f}" for x in os.getloadavg())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("rows", nargs="?", type=int, default=200_000)
    ap.add_argument("partitions", nargs="*", type=int)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--serializer", default="parquet", choices=["parquet", "jsonl"])
    args = ap.parse_args()
    full = args.rows
    half = full // 4
    parts_list = args.partitions or [1, 2]
    work = tempfile.mkdtemp(prefix="laredo-spark-bench-")
    print(f"load average at start: {load()} ({os.cpu_count()} cores)", flush=True)
    lines: list[tuple[str, float, str]] = []  # what, rows/s, detail
    notes: list[str] = []
    with EmbeddedPostgres() as pg:
        dsn = pg.dsn("postgres")
        t0 = time.perf_counter()
        fill(dsn, "bench_full", full)
        fill(dsn, "bench_small", half)
        fill(dsn, "bench_tiny", 2000)
        print(f"filled {full} + {half} rows in {time.perf_counter() - t0:.1f}s", flush=True)
        copies = [copy_read(dsn, "bench_full") for _ in range(args.repeat)]
        limit = statistics.median(n / s for n, s in copies)
        lines.append(("COPY read, one connection (limit)", limit, ""))
        reads = [local_baseline(dsn, "bench_full", f"lr{i}") for i in range(args.repeat)]
        rate_read = statistics.median(n / s for n, s in reads)
        lines.append(("local source baseline, rows only", rate_read, ""))
        ser = serializer_of(args.serializer)
        snaps = []
        for i in range(args.repeat):
            store = LocalSnapshotStore(f"{work}/local{i}", fsync=False)
            snaps.append(local_baseline(dsn, "bench_full", f"ls{i}", store, ser))
            shutil.rmtree(f"{work}/local{i}", ignore_errors=True)
        rate_local = statistics.median(n / s for n, s in snaps)
        lines.append((f"local baseline + {args.serializer} snapshot", rate_local, ""))
        scaling: dict[int, float] = {}
        for c in parts_list:
            t0 = time.perf_counter()
            spark = spark_session(f"local[{c}]", f"laredo-bench-{c}")
            started = time.perf_counter() - t0
            _r, first_job, _cpu = spark_run(
                spark, dsn, "bench_tiny", f"tiny_{c}", parts=c, work=work, ser=args.serializer
            )
            small_walls, full_walls, small_cpu, full_cpu = [], [], [], []
            for i in range(args.repeat):
                r_half, w_half, c_half = spark_run(
                    spark, dsn, "bench_small", f"h{c}_{i}", parts=c, work=work, ser=args.serializer
                )
                r_full, w_full, c_full = spark_run(
                    spark, dsn, "bench_full", f"f{c}_{i}", parts=c, work=work, ser=args.serializer
                )
                n_half = sum(r_half.row_counts.values())
                n_full = sum(r_full.row_counts.values())
                assert (n_half, n_full) == (half, full), (n_half, n_full)
                small_walls.append(w_half)
                full_walls.append(w_full)
                small_cpu.append(c_half)
                full_cpu.append(c_full)
            med = statistics.median
            rate = (full - half) / max(med(full_walls) - med(small_walls), 1e-9)
            cpu_marg = (med(full_cpu) - med(small_cpu)) / (full - half) * 1e6
            cpu_whole = med(full_cpu) / full * 1e6
            scaling[c] = rate
            lines.append(
                (
                    f"spark_baseline, {c} partition(s), marginal",
                    rate,
                    f"driver CPU {cpu_marg:.2f} s/M marginal, {cpu_whole:.2f} s/M whole run",
                )
            )
            phases = ", ".join(f"{k} {v:.2f}s" for k, v in r_full.phases.items())
            notes.append(
                f"local[{c}]: session start {started:.1f}s, first job (2000 rows) "
                f"{first_job:.1f}s; walls {half} rows: "
                f"{', '.join(f'{w:.2f}' for w in small_walls)}s, {full} rows: "
                f"{', '.join(f'{w:.2f}' for w in full_walls)}s (last: {phases}); snapshot "
                f"{r_full.descriptor.size_bytes / 1e6:.1f} MB; load {load()}"
            )
            spark.stop()
    shutil.rmtree(work, ignore_errors=True)
    print()
    for line in notes:
        print(line)
    print(f"\n{'what':46} {'rows/s':>10} {'vs COPY':>8} {'vs local b+s':>12}  detail")
    for what, rate, detail in lines:
        print(f"{what:46} {rate:>10,.0f} {rate / limit:>8.2f} {rate / rate_local:>12.2f}  {detail}")
    if 1 in scaling and len(scaling) > 1:
        print(
            "scaling vs 1 partition: "
            + ", ".join(f"{c} partitions x{r / scaling[1]:.2f}" for c, r in scaling.items())
        )
    print(f"load average at end: {load()} ({os.cpu_count()} cores)")


if __name__ == "__main__":
    main()
