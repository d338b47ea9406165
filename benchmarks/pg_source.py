"""PostgreSQL source: baseline rows/s, backlog streaming changes/s, single-change latency.

Every figure is printed beside a limit measured in the same run, on the same embedded cluster:

* baseline: ``PostgresSource.baseline_batches`` (source only) and source -> engine ->
  ``IndexedTarget``, against a bare psycopg ``COPY ... TO STDOUT`` into a byte sink and a bare
  psycopg SELECT building the same dict rows;
* streaming a backlog (changes already in WAL, mixed inserts/updates/deletes in 1,000-row
  transactions): ``pg_recvlogical`` to /dev/null and a bare psycopg pgoutput receive loop (the
  limits) against ``PostgresSource.stream`` (typed ChangeEvents) and source -> engine ->
  ``IndexedTarget``;
* latency: single-row inserts at ~100/s, INSERT start -> ChangeEvent in the handler (beside a
  bare receive loop on the same inserts), and INSERT start ->
  row visible in an ``IndexedTarget`` through the engine (p50/p99).

    .venv/bin/python benchmarks/pg_source.py [--rows 1000000] [--changes 500000] [--txn 1000]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import struct
import subprocess
import threading
import time
from typing import Any

import laredo
import psycopg
from laredo.types import SourceConfig, TableIdentifier
from laredo_source_pg.embedded import EmbeddedPostgres
from laredo_source_pg.lsn import format_lsn, parse_lsn
from laredo_source_pg.source import PostgresSource
from laredo_target_memory import IndexedTarget

BASE = TableIdentifier("public", "base")
CHG = TableIdentifier("public", "chg")


class DurableIndexed(IndexedTarget):
    """An IndexedTarget the engine treats as durable, so a stateful source resumes into it."""

    def is_durable(self) -> bool:
        return True


def rate(n: int, seconds: float) -> float:
    return n / seconds if seconds > 0 else float("inf")


def row(name: str, ours: float, limit: float, unit: str) -> None:
    print(
        f"  {name:<44} {ours:>12,.0f} {unit:<9} limit {limit:>12,.0f}   ratio {ours / limit:5.2f}"
    )


# -- baseline ------------------------------------------------------------------------------


def bench_baseline(pg: EmbeddedPostgres, rows: int) -> None:
    dsn = pg.dsn("bench")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "CREATE TABLE base (id int PRIMARY KEY, name text, email text, score int, "
            "created timestamptz)"
        )
        conn.execute(
            "INSERT INTO base SELECT g, 'name ' || g, 'user' || g || '@example.com', g %% 1000, "
            "now() FROM generate_series(1, %s) g",
            (rows,),
        )
        conn.execute("VACUUM ANALYZE base")

    def bare_copy() -> float:
        with psycopg.connect(dsn) as conn:
            t0 = time.perf_counter()
            n = 0
            with conn.cursor().copy("COPY base TO STDOUT (FORMAT binary)") as copy:
                for chunk in copy:
                    n += len(chunk)
            return time.perf_counter() - t0

    def bare_select() -> float:
        """The fastest plain psycopg way to dict rows measured here: Cursor.stream in chunks."""
        with psycopg.connect(dsn) as conn:
            t0 = time.perf_counter()
            names = ["id", "name", "email", "score", "created"]
            n = 0
            batch = []
            q = "SELECT id, name, email, score, created FROM base"
            for r in conn.cursor().stream(q, size=10_000):
                batch.append(dict(zip(names, r, strict=True)))
                if len(batch) >= 10_000:
                    n += len(batch)
                    batch = []
            n += len(batch)
            assert n == rows
            return time.perf_counter() - t0

    def source_only() -> float:
        src = PostgresSource(dsn, slot_name="bench_base", publication={"create": True})
        try:
            src.init(SourceConfig([BASE]))
            count = 0

            def cb(table: TableIdentifier, batch: list[dict[str, Any]]) -> None:
                nonlocal count
                count += len(batch)

            t0 = time.perf_counter()
            src.baseline_batches([BASE], cb)
            elapsed = time.perf_counter() - t0
            assert count == rows
            return elapsed
        finally:
            src.close()

    def engine_indexed() -> float:
        src = PostgresSource(dsn, slot_name="bench_base2", publication={"create": True})
        target = IndexedTarget()
        eng = laredo.Engine(sources={"pg": src}, pipelines=[laredo.Pipeline("pg", BASE, target)])
        t0 = time.perf_counter()
        eng.start()
        assert eng.await_ready(600)
        elapsed = time.perf_counter() - t0
        assert target.count() == rows
        eng.stop()
        return elapsed

    copy_s = min(bare_copy() for _ in range(2))
    select_s = min(bare_select() for _ in range(2))
    ours_s = min(source_only() for _ in range(2))
    e2e_s = engine_indexed()
    print(f"baseline: {rows:,} rows (5 columns)")
    row(
        "source.baseline_batches vs bare COPY bytes",
        rate(rows, ours_s),
        rate(rows, copy_s),
        "rows/s",
    )
    row(
        "source.baseline_batches vs bare SELECT->dicts",
        rate(rows, ours_s),
        rate(rows, select_s),
        "rows/s",
    )
    row(
        "engine -> IndexedTarget vs bare SELECT->dicts",
        rate(rows, e2e_s),
        rate(rows, select_s),
        "rows/s",
    )


# -- streaming -------------------------------------------------------------------------------


def make_backlog(dsn: str, changes: int, txn: int) -> tuple[int, int]:
    """Mixed changes in ``txn``-row transactions, then a sentinel row.

    Returns (changes, an LSN only the sentinel's commit reaches)."""
    third = max(1, changes // 3)
    done = 0
    with psycopg.connect(dsn, autocommit=True) as conn:
        # inserts, then updates of those rows, then deletes; each statement one transaction
        for lo in range(0, third, txn):
            hi = min(third, lo + txn)
            cur = conn.execute(
                "INSERT INTO chg SELECT g, 'v' || g, g FROM generate_series(%s::int, %s::int) g",
                (lo + 1, hi),
            )
            done += cur.rowcount
        for lo in range(0, third, txn):
            hi = min(third, lo + txn)
            cur = conn.execute("UPDATE chg SET n = n + 1 WHERE id > %s AND id <= %s", (lo, hi))
            done += cur.rowcount
        rest = min(third, changes - done)
        for lo in range(0, rest, txn):
            hi = min(rest, lo + txn)
            cur = conn.execute("DELETE FROM chg WHERE id > %s AND id <= %s", (lo, hi))
            done += cur.rowcount
        before = conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()
        conn.execute("INSERT INTO chg VALUES (-1, 'sentinel', 0)")
        done += 1
    assert before is not None
    # Every commit before the sentinel ends at or before ``before``; the sentinel's after it.
    return done, parse_lsn(before[0]) + 1


def bare_loop(dsn: str, slot: str, pub: str, end: int) -> tuple[float, int]:
    """Receive pgoutput and count row messages until a commit reaches ``end`` (the limit)."""
    conn = psycopg.connect(dsn, autocommit=True, replication="database")
    t0 = time.perf_counter()
    conn.execute(
        f"START_REPLICATION SLOT {slot} LOGICAL 0/0 (proto_version '1', publication_names '{pub}')"
    )
    pg = conn.pgconn
    n = 0
    import select

    unpack = struct.Struct(">bQQq").unpack_from
    while True:
        k, data = pg.get_copy_data(1)
        if k > 0:
            if data[0] == 119:
                tag = data[25]
                if tag in (73, 85, 68):
                    n += 1
                elif tag == 67 and unpack(data, 26)[2] >= end:
                    break
            continue
        if k == 0:
            select.select([pg.socket], [], [], 1)
            pg.consume_input()
            continue
        raise RuntimeError("stream ended")
    elapsed = time.perf_counter() - t0
    conn.close()
    return elapsed, n


def recvlogical(pg: EmbeddedPostgres, slot: str, pub: str, end: int) -> float | None:
    exe = shutil.which("pg_recvlogical") or str(pg.bindir / "pg_recvlogical")
    if not shutil.which(exe):
        return None
    t0 = time.perf_counter()
    subprocess.run(
        [
            exe,
            "-d",
            pg.dsn("bench"),
            "--slot",
            slot,
            "--start",
            "--no-loop",
            f"--endpos={format_lsn(end)}",
            "-o",
            "proto_version=1",
            "-o",
            f"publication_names={pub}",
            "-f",
            "/dev/null",
        ],
        check=True,
        capture_output=True,
    )
    return time.perf_counter() - t0


class Counter:
    def __init__(self, end: int) -> None:
        self.n = 0
        self.end = end
        self.done = threading.Event()

    def on_changes(self, events: Any) -> None:
        self.n += len(events)
        if events[-1].position >= self.end:
            self.done.set()

    def on_change(self, event: Any) -> None:
        self.on_changes([event])

    def on_heartbeat(self, position: Any) -> None:
        if position >= self.end:
            self.done.set()

    def on_schema_change(self, *args: Any) -> None:
        pass


def bench_stream(pg: EmbeddedPostgres, changes: int, txn: int) -> None:
    dsn = pg.dsn("bench")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE chg (id int PRIMARY KEY, name text, n int)")
        conn.execute("CREATE PUBLICATION bench_pub FOR TABLE chg")
        for slot in ("bench_bare", "bench_recv"):
            conn.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (slot,))
    opts = {"slot_mode": "stateful", "publication": {"name": "bench_pub"}, "lease": False}
    # Our slots exist before the backlog: the source (slot "bench_src") and the engine's.
    for slot in ("bench_src", "bench_eng"):
        src = PostgresSource(dsn, slot_name=slot, **opts)  # type: ignore[arg-type]
        src.init(SourceConfig([CHG]))
        src.baseline([CHG], lambda t, r: None)
        src.close()
    target = DurableIndexed()
    eng = laredo.Engine(
        sources={"pg": PostgresSource(dsn, slot_name="bench_eng", **opts)},  # type: ignore[arg-type]
        pipelines=[laredo.Pipeline("pg", CHG, target)],
    )
    eng.start()  # baseline (empty), then the engine stops before the backlog
    assert eng.await_ready(60)
    eng.stop()

    n, end = make_backlog(dsn, changes, txn)
    print(f"streaming backlog: {n:,} changes in {txn}-row transactions (mixed I/U/D)")

    recv_s = recvlogical(pg, "bench_recv", "bench_pub", end)
    bare_s, bare_n = bare_loop(dsn, "bench_bare", "bench_pub", end)
    assert bare_n == n, (bare_n, n)

    src = PostgresSource(dsn, slot_name="bench_src", **opts)  # type: ignore[arg-type]
    src.init(SourceConfig([CHG]))
    counter = Counter(end)
    th = threading.Thread(target=src.stream, args=(src.last_acked_position(), counter))
    t0 = time.perf_counter()
    th.start()
    counter.done.wait(600)
    ours_s = time.perf_counter() - t0
    src.stop_stream()
    th.join()
    src.close()
    assert counter.n == n, (counter.n, n)

    target2 = DurableIndexed()
    eng = laredo.Engine(
        sources={"pg": PostgresSource(dsn, slot_name="bench_eng", **opts)},  # type: ignore[arg-type]
        pipelines=[laredo.Pipeline("pg", CHG, target2)],
    )
    seen = threading.Event()
    target2.listen(lambda old, new: seen.set() if new and new.get("id") == -1 else None)
    t0 = time.perf_counter()
    eng.start()
    seen.wait(600)
    e2e_s = time.perf_counter() - t0
    eng.stop()

    if recv_s is not None:
        row("pg_recvlogical (C) to /dev/null", rate(n, recv_s), rate(n, bare_s), "changes/s")
    row("source.stream -> ChangeEvents vs bare loop", rate(n, ours_s), rate(n, bare_s), "changes/s")
    row("engine -> IndexedTarget vs bare loop", rate(n, e2e_s), rate(n, bare_s), "changes/s")
    if recv_s is not None:
        row(
            "engine -> IndexedTarget vs pg_recvlogical",
            rate(n, e2e_s),
            rate(n, recv_s),
            "changes/s",
        )


# -- latency ----------------------------------------------------------------------------------


def bench_latency(pg: EmbeddedPostgres, samples: int) -> None:
    dsn = pg.dsn("bench")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE lat (id int PRIMARY KEY, t float8)")
    lat = TableIdentifier("public", "lat")

    # 1) source -> handler
    src = PostgresSource(
        dsn, slot_name="bench_lat", publication={"create": True, "name": "lat_pub"}
    )
    src.init(SourceConfig([lat]))
    pos = src.baseline([lat], lambda t, r: None)
    arrivals: dict[int, float] = {}

    class H(Counter):
        def on_changes(self, events: Any) -> None:
            now = time.perf_counter()
            for e in events:
                arrivals[e.new_values["id"]] = now

    # The limit, on the same inserts at the same time: a bare pgoutput loop on its own slot.
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT pg_create_logical_replication_slot('bench_lat_bare', 'pgoutput')")
    bare_arrivals: dict[int, float] = {}
    bare_stop = threading.Event()

    def bare() -> None:
        import select

        conn = psycopg.connect(dsn, autocommit=True, replication="database")
        conn.execute(
            "START_REPLICATION SLOT bench_lat_bare LOGICAL 0/0 (proto_version '1', "
            "publication_names 'lat_pub')"
        )
        pgc = conn.pgconn
        while not bare_stop.is_set():
            k, data = pgc.get_copy_data(1)
            if k > 0:
                if data[0] == 119 and data[25] == 73:  # XLogData carrying an Insert
                    # 'I' relid 'N' ncols 't' len value: the first column is the id
                    ln = struct.unpack_from(">I", data, 25 + 1 + 4 + 1 + 2 + 1)[0]
                    start = 25 + 13
                    bare_arrivals[int(bytes(data[start : start + ln]))] = time.perf_counter()
                continue
            if k == 0:
                select.select([pgc.socket], [], [], 0.2)
                pgc.consume_input()
                continue
            break
        conn.close()

    bt = threading.Thread(target=bare, daemon=True)
    bt.start()
    th = threading.Thread(target=src.stream, args=(pos, H(0)), daemon=True)
    th.start()
    time.sleep(0.3)
    commits = drive(dsn, samples, 0)
    wait_for(lambda: len(arrivals) >= samples and len(bare_arrivals) >= samples)
    src.stop_stream()
    bare_stop.set()
    th.join()
    bt.join()
    src.close()
    src_lat = [(arrivals[i] - commits[i]) * 1000 for i in commits]
    bare_lat = [(bare_arrivals[i] - commits[i]) * 1000 for i in commits]

    # 2) engine -> IndexedTarget (listener fires after the change is applied)
    target = IndexedTarget()
    applied: dict[int, float] = {}
    target.listen(
        lambda old, new: applied.__setitem__(new["id"], time.perf_counter()) if new else None
    )
    eng = laredo.Engine(
        sources={
            "pg": PostgresSource(dsn, slot_name="bench_lat2", publication={"name": "lat_pub"})
        },
        pipelines=[laredo.Pipeline("pg", lat, target)],
    )
    eng.start()
    assert eng.await_ready(60)
    commits2 = drive(dsn, samples, 100_000)
    wait_for(lambda: len(applied) >= samples + len(commits))
    eng.stop()
    eng_lat = [(applied[i] - commits2[i]) * 1000 for i in commits2]

    print(f"latency: {samples} single-row autocommit inserts at ~100/s, INSERT start -> delivery")
    for name, values in (
        ("limit: bare pgoutput loop", bare_lat),
        ("source -> handler (same inserts as the limit)", src_lat),
        ("engine -> IndexedTarget (own run)", eng_lat),
    ):
        q = statistics.quantiles(values, n=100)
        print(f"  {name:<48} p50 {q[49]:6.2f} ms   p99 {q[98]:6.2f} ms   max {max(values):6.2f} ms")


def drive(dsn: str, samples: int, base: int) -> dict[int, float]:
    commits: dict[int, float] = {}
    with psycopg.connect(dsn, autocommit=True) as conn:
        nxt = time.perf_counter()
        for i in range(samples):
            nxt += 0.01
            delay = nxt - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            # Measured from the start of the autocommit INSERT: the stream can deliver the row
            # before the client has read the commit acknowledgement.
            commits[base + i] = time.perf_counter()
            conn.execute("INSERT INTO lat VALUES (%s, 0)", (base + i,))
    return commits


def wait_for(pred: Any, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            raise TimeoutError("benchmark did not finish")
        time.sleep(0.005)


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--changes", type=int, default=500_000)
    ap.add_argument("--txn", type=int, default=1000)
    ap.add_argument("--samples", type=int, default=500)
    ap.add_argument("--skip", nargs="*", default=[], choices=["baseline", "stream", "latency"])
    args = ap.parse_args()
    with EmbeddedPostgres(settings={"shared_buffers": "256MB", "max_wal_size": "4GB"}) as pg:
        pg.execute("CREATE DATABASE bench")
        if "baseline" not in args.skip:
            bench_baseline(pg, args.rows)
        if "stream" not in args.skip:
            bench_stream(pg, args.changes, args.txn)
        if "latency" not in args.skip:
            bench_latency(pg, args.samples)


if __name__ == "__main__":
    main()
