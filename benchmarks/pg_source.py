"""PostgreSQL -> IndexedTarget at scale: every figure beside a limit measured in the same run.

The rows of the table (issue 13), each as our figure, the limit and the ratio:

* **baseline**: a typed table (bigint, text, int, numeric, timestamptz, text) loaded through the
  engine into an ``IndexedTarget`` (default and compact storage), against counting the rows of a
  Python ``COPY ... TO STDOUT`` and a naive COPY -> dict loop (text split, untyped values);
* **replica memory**: the replica's settled size per row (process RSS after the load, garbage
  collected and trimmed, minus RSS before it) against the row's ``COPY`` text size; ``get()`` by
  primary key at that size;
* **live stream**: mixed inserts/updates/deletes written in ``--txn``-row transactions while the
  consumer streams, writer start -> last change applied, against a bare pgoutput receive loop on
  the same workload (its own run);
* **backlog drain**: the same changes already in WAL when the consumer starts, against the bare
  loop draining the same backlog (and ``pg_recvlogical``);
* **one huge UPDATE transaction**: every row of the baseline table updated in one transaction
  while the engine streams: commit -> applied, and the peak RSS growth while applying as a
  fraction of the replica's settled size;
* single-change latency (p50/p99) beside a bare receive loop on the same inserts.

CPU figures are this process's CPU time (every Laredo thread; PostgreSQL runs in other
processes): on a shared machine they move less than wall-clock rates.

    .venv/bin/python benchmarks/pg_source.py [--quick] [--rows 1000000] [--changes 500000]
        [--txn 1000] [--skip baseline memory stream backlog update latency]
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import gc
import json
import os
import random
import select
import shutil
import statistics
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import laredo
import psycopg
from laredo.observers import NullObserver
from laredo.types import TableIdentifier
from laredo_source_pg.embedded import EmbeddedPostgres
from laredo_source_pg.lsn import format_lsn, parse_lsn
from laredo_source_pg.source import PostgresSource
from laredo_target_memory import IndexedTarget

ORDERS = TableIdentifier("public", "orders")
CHG = TableIdentifier("public", "chg")
LAT = TableIdentifier("public", "lat")
ORDER_COLUMNS = ["id", "customer", "qty", "price", "created", "address"]

RESULTS: list[tuple[str, str, float, float | None, str]] = []
"""(measure, unit, ours, limit, limit name) in print order."""


class DurableIndexed(IndexedTarget):
    """An IndexedTarget the engine treats as durable, so a stateful source resumes into it."""

    def is_durable(self) -> bool:
        return True


def indexed(storage: str, durable: bool = False) -> IndexedTarget:
    cls = DurableIndexed if durable else IndexedTarget
    if storage == "default":
        return cls()
    return cls(storage=storage)  # type: ignore[call-arg]


def has_storage(name: str) -> bool:
    try:
        indexed(name)
    except TypeError:
        return False
    return True


def rate(n: int, seconds: float) -> float:
    return n / seconds if seconds > 0 else float("inf")


def record(name: str, unit: str, ours: float, limit: float | None, limit_name: str = "") -> None:
    RESULTS.append((name, unit, ours, limit, limit_name))
    lim = "" if limit is None else f"{limit:>12,.2f}"
    ratio = "" if not limit else f"{ours / limit:6.2f}"
    print(f"  {name:<52} {ours:>12,.2f} {unit:<10} {lim:>12} {ratio:>6}  {limit_name}", flush=True)


# -- process measurements ---------------------------------------------------------------------

_PAGE = os.sysconf("SC_PAGE_SIZE")
try:
    _LIBC: Any = ctypes.CDLL("libc.so.6")
except OSError:  # not glibc: no trim
    _LIBC = None


def rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * _PAGE


def settled_rss() -> int:
    """RSS after a full collection and giving freed heap back to the OS."""
    gc.collect()
    if _LIBC is not None:
        _LIBC.malloc_trim(0)
    return rss()


class PeakRss:
    """Samples RSS every 20 ms in a thread; ``peak`` is the highest seen."""

    def __init__(self) -> None:
        self.peak = rss()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.02):
            self.peak = max(self.peak, rss())

    def __enter__(self) -> PeakRss:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, rss())


class Timer:
    """Wall and CPU time of this process between enter and :meth:`stop` (or exit)."""

    def __enter__(self) -> Timer:
        self.wall0 = time.perf_counter()
        self.cpu0 = time.process_time()
        self.wall = self.cpu = 0.0
        return self

    def stop(self) -> None:
        if not self.wall:
            self.wall = time.perf_counter() - self.wall0
            self.cpu = time.process_time() - self.cpu0

    def __exit__(self, *exc: object) -> None:
        self.stop()


class AppliedCounter(NullObserver):
    """Counts changes applied by the engine; ``wait(n)`` blocks until ``n`` were applied (the
    waiter is woken once, not per batch: it must not take CPU from the engine)."""

    def __init__(self) -> None:
        self.applied = 0
        self._target = 0
        self._reached = threading.Event()

    def on_changes_applied(
        self, pipeline_id: str, table: TableIdentifier, count: int, duration: timedelta
    ) -> None:
        self.applied += count  # one worker thread calls this
        if self._target and self.applied >= self._target:
            self._reached.set()

    def wait(self, n: int, timeout: float = 1800) -> None:
        self._reached.clear()
        self._target = n
        if self.applied < n and not self._reached.wait(timeout):
            raise TimeoutError(f"applied {self.applied} of {n} changes")
        self._target = 0


def engine_for(
    dsn: str,
    slot: str,
    table: TableIdentifier,
    target: IndexedTarget,
    counter: AppliedCounter,
    **source_opts: Any,
) -> laredo.Engine:
    src = PostgresSource(dsn, slot_name=slot, **source_opts)
    return laredo.Engine(
        sources={"pg": src}, pipelines=[laredo.Pipeline("pg", table, target)], observer=counter
    )


def start(eng: laredo.Engine, timeout: float = 1800) -> None:
    """Start ``eng`` and wait until it is ready; raise with the pipelines' errors if it fails."""
    eng.start()
    deadline = time.monotonic() + timeout
    while not eng.await_ready(0.05):
        errors = [p.error for p in eng.pipelines() if p.error]
        if errors or time.monotonic() > deadline:
            eng.stop()
            raise RuntimeError(f"engine not ready: {errors or 'timeout'}")


# -- baseline, replica memory, the huge transaction -------------------------------------------


def fill_orders(dsn: str, rows: int) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "CREATE TABLE orders (id bigint PRIMARY KEY, customer text, qty int, "
            "price numeric(12,2), created timestamptz, address text)"
        )
        conn.execute(
            "INSERT INTO orders SELECT g, 'Customer ' || g, g %% 1000, (g %% 100000) / 100.0, "
            "timestamptz '2024-01-01 00:00:00+00' + g * interval '1.234567 second', "
            "g || ' Market Street, Springfield, IL 627' || (g %% 100) || ', United States' "
            "FROM generate_series(1, %s) g",
            (rows,),
        )
        conn.execute("VACUUM ANALYZE orders")


def copy_count(dsn: str) -> tuple[float, int, int]:
    """The limit: count the rows of ``COPY orders TO STDOUT`` (one message per row).

    Returns (seconds, rows, COPY text bytes)."""
    with psycopg.connect(dsn) as conn:
        t0 = time.perf_counter()
        n = size = 0
        with conn.cursor().copy("COPY orders TO STDOUT") as copy:
            for chunk in copy:
                n += 1
                size += len(chunk)
        return time.perf_counter() - t0, n, size


def naive_copy_dicts(dsn: str) -> float:
    """The limit: text COPY split into dicts of strings (no typing, no storage)."""
    names = ORDER_COLUMNS
    with psycopg.connect(dsn) as conn:
        t0 = time.perf_counter()
        with conn.cursor().copy("COPY orders TO STDOUT") as copy:
            for chunk in copy:
                dict(zip(names, bytes(chunk)[:-1].decode().split("\t"), strict=True))
        return time.perf_counter() - t0


def get_us(target: IndexedTarget, rows: int, n: int = 200_000) -> float:
    """CPU microseconds per ``get()`` by a random primary key (best of 3)."""
    rnd = random.Random(7)
    keys = [rnd.randrange(1, rows + 1) for _ in range(n)]
    get = target.get
    best = float("inf")
    for _ in range(3):
        t0 = time.process_time()
        for k in keys:
            get(k)
        best = min(best, time.process_time() - t0)
    assert get(keys[0]) is not None
    return best / n * 1e6


def bench_baseline(pg: EmbeddedPostgres, rows: int, skip: set[str]) -> None:
    dsn = pg.dsn("bench")
    fill_orders(dsn, rows)
    counts = [copy_count(dsn) for _ in range(2)]
    count_s = min(c[0] for c in counts)
    copy_bytes = counts[0][2] / rows
    naive_s = min(naive_copy_dicts(dsn) for _ in range(2))
    print(
        f"baseline: {rows:,} rows of (bigint, text, int, numeric, timestamptz, text); "
        f"COPY text {copy_bytes:.1f} B/row",
        flush=True,
    )
    storages = ["default"] + (["compact"] if has_storage("compact") else [])
    for storage in storages:
        label = "IndexedTarget" if storage == "default" else f"IndexedTarget({storage})"
        # A fresh process per storage: memory figures are not skewed by earlier runs' heap.
        cmd = [sys.executable, __file__, "--child-baseline", dsn, storage, str(rows)]
        cmd += [f"--skip={x}" for x in sorted(skip & {"memory", "update"})]
        if storage != "default":
            cmd.append("--skip=update")
        out = subprocess.run(cmd, check=True, capture_output=True, text=True)
        res = json.loads(out.stdout.strip().splitlines()[-1])
        ours = rate(rows, res["wall"])
        record(
            f"baseline -> {label} vs COPY count",
            "rows/s",
            ours,
            rate(rows, count_s),
            "Python COPY count",
        )
        record(
            f"baseline -> {label} vs naive COPY->dict",
            "rows/s",
            ours,
            rate(rows, naive_s),
            "naive COPY->dict",
        )
        record(f"  baseline CPU per row ({label})", "us/row", res["cpu"] / rows * 1e6, None)
        if "settled" in res:
            settled = res["settled"]
            record(
                f"replica memory ({label})",
                "B/row",
                settled / rows,
                copy_bytes,
                "COPY text bytes/row",
            )
            record(f"get() by primary key at {rows:,} rows ({label})", "us", res["get_us"], None)
        if "update_s" in res:
            print(
                f"  one {rows:,}-row UPDATE transaction: statement {res['statement_s']:.1f}s, "
                f"commit -> applied {res['update_s']:.1f}s (CPU {res['update_cpu']:.1f}s)",
                flush=True,
            )
            record(f"  {rows:,}-row UPDATE: commit -> applied", "s", res["update_s"], None)
            record(
                f"  {rows:,}-row UPDATE: apply rate", "changes/s", rate(rows, res["update_s"]), None
            )
            if res.get("settled"):
                growth = res["growth"] / res["settled"]
                record(f"  {rows:,}-row UPDATE: peak RSS growth / replica size", "x", growth, None)


def child_baseline(dsn: str, storage: str, rows: int, skip: set[str]) -> dict[str, float]:
    """One storage's baseline (and the huge UPDATE) in this process; prints a JSON result."""
    res: dict[str, float] = {}
    before = settled_rss()
    counter = AppliedCounter()
    target = indexed(storage)
    eng = engine_for(
        dsn,
        f"bench_base_{storage}",
        ORDERS,
        target,
        counter,
        publication={"create": True, "name": "orders_pub"},
    )
    with Timer() as t:
        start(eng)
    assert target.count() == rows, target.count()
    res["wall"], res["cpu"] = t.wall, t.cpu
    if "memory" not in skip:
        res["settled"] = settled_rss() - before
        res["get_us"] = get_us(target, rows)
    if "update" not in skip:
        res.update(child_update(dsn, counter, rows))
    eng.stop()
    return res


def child_update(dsn: str, counter: AppliedCounter, rows: int) -> dict[str, float]:
    """One UPDATE of every row in one transaction while the engine streams."""
    first = counter.applied
    with psycopg.connect(dsn, autocommit=True) as conn:
        base = settled_rss()
        with PeakRss() as peak:
            t0 = time.perf_counter()
            conn.execute("UPDATE orders SET qty = qty + 1")
            statement = time.perf_counter() - t0
            with Timer() as t:
                counter.wait(first + rows)
    return {
        "statement_s": statement,
        "update_s": t.wall,
        "update_cpu": t.cpu,
        "growth": peak.peak - base,
    }


# -- streaming ------------------------------------------------------------------------------


class Workload:
    """Mixed changes on ``chg`` in ``txn``-row transactions: inserts, updates of those rows,
    deletes of them. Each run uses fresh ids; ``expected`` changes per run."""

    def __init__(self, dsn: str, changes: int, txn: int) -> None:
        self.dsn = dsn
        self.txn = txn
        self.third = max(1, changes // 3)
        self.expected = 3 * self.third
        self.runs = 0

    def write(self) -> int:
        base = self.runs * 100_000_000
        self.runs += 1
        third, txn = self.third, self.txn
        done = 0
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            for lo in range(0, third, txn):
                hi = min(third, lo + txn)
                done += conn.execute(
                    "INSERT INTO chg SELECT g, 'v' || g, g FROM generate_series(%s::int, "
                    "%s::int) g",
                    (base + lo + 1, base + hi),
                ).rowcount
            for lo in range(0, third, txn):
                hi = min(third, lo + txn)
                done += conn.execute(
                    "UPDATE chg SET n = n + 1 WHERE id > %s AND id <= %s", (base + lo, base + hi)
                ).rowcount
            for lo in range(0, third, txn):
                hi = min(third, lo + txn)
                done += conn.execute(
                    "DELETE FROM chg WHERE id > %s AND id <= %s", (base + lo, base + hi)
                ).rowcount
        assert done == self.expected, (done, self.expected)
        return done


def bare_loop(
    dsn: str, slot: str, pub: str, expected: int, ready: threading.Event | None = None
) -> None:
    """The limit: receive pgoutput and count row messages (no decoding) until ``expected``."""
    conn = psycopg.connect(dsn, autocommit=True, replication="database")
    conn.execute(
        f"START_REPLICATION SLOT {slot} LOGICAL 0/0 (proto_version '1', publication_names '{pub}')"
    )
    if ready is not None:
        ready.set()
    pgc = conn.pgconn
    n = 0
    last = 0
    status = struct.Struct(">cQQQqb")
    while n < expected:
        k, data = pgc.get_copy_data(1)
        if k > 0:
            if data[0] == 119:
                tag = data[25]
                if tag in (73, 85, 68):
                    n += 1
            elif data[0] == 107 and data[17]:
                (last,) = struct.unpack_from(">Q", data, 1)
                pgc.put_copy_data(status.pack(b"r", last, last, last, 0, 0))
                pgc.flush()
            continue
        if k == 0:
            select.select([pgc.socket], [], [], 1)
            pgc.consume_input()
            continue
        raise RuntimeError("stream ended")
    conn.close()


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


STREAM_OPTS: dict[str, Any] = {
    "slot_mode": "stateful",
    "publication": {"name": "bench_pub"},
    "lease": False,
}


def setup_chg(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE chg (id int PRIMARY KEY, name text, n int)")
        conn.execute("CREATE PUBLICATION bench_pub FOR TABLE chg")


def create_slot(dsn: str, slot: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (slot,))


def drop_slot(dsn: str, slot: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT pg_drop_replication_slot(%s)", (slot,))


def bench_live(pg: EmbeddedPostgres, work: Workload) -> None:
    """Changes applied while they are written: writer start -> last change applied."""
    dsn = pg.dsn("bench")
    n = work.expected
    print(f"live stream: {n:,} changes in {work.txn}-row transactions (mixed I/U/D)", flush=True)
    # the limit: a bare loop consuming while the writer writes
    create_slot(dsn, "bench_live_bare")
    ready = threading.Event()
    th = threading.Thread(
        target=bare_loop, args=(dsn, "bench_live_bare", "bench_pub", n, ready), daemon=True
    )
    th.start()
    ready.wait(60)
    with Timer() as bare:
        work.write()
        th.join()
    drop_slot(dsn, "bench_live_bare")
    # ours: the engine streaming into an IndexedTarget
    counter = AppliedCounter()
    eng = engine_for(dsn, "bench_live_eng", CHG, IndexedTarget(), counter, **STREAM_OPTS)
    start(eng)
    with Timer() as ours:
        work.write()
        counter.wait(n)
    eng.stop()
    record(
        "live stream -> IndexedTarget vs bare loop",
        "changes/s",
        rate(n, ours.wall),
        rate(n, bare.wall),
        "bare pgoutput loop",
    )
    record(
        "  CPU per change, live",
        "us",
        ours.cpu / n * 1e6,
        bare.cpu / n * 1e6,
        "bare loop CPU per change",
    )


def bench_backlog(pg: EmbeddedPostgres, work: Workload) -> None:
    """Changes already in WAL when the consumer starts."""
    dsn = pg.dsn("bench")
    n = work.expected
    for slot in ("bench_bl_bare", "bench_bl_recv"):
        create_slot(dsn, slot)
    # our slot exists before the backlog; the engine resumes from it into a durable target
    counter = AppliedCounter()
    target = DurableIndexed()
    eng = engine_for(dsn, "bench_bl_eng", CHG, target, counter, **STREAM_OPTS)
    start(eng)
    eng.stop()
    work.write()
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()
    assert row is not None
    end = parse_lsn(row[0])
    print(f"backlog drain: {n:,} changes in {work.txn}-row transactions already in WAL", flush=True)
    with Timer() as bare:
        bare_loop(dsn, "bench_bl_bare", "bench_pub", n)
    recv_s = recvlogical(pg, "bench_bl_recv", "bench_pub", end)
    counter = AppliedCounter()
    eng = engine_for(dsn, "bench_bl_eng", CHG, target, counter, **STREAM_OPTS)
    with Timer() as ours:
        eng.start()
        counter.wait(n)
    eng.stop()
    record(
        "backlog drain -> IndexedTarget vs bare loop",
        "changes/s",
        rate(n, ours.wall),
        rate(n, bare.wall),
        "bare pgoutput loop",
    )
    record(
        "  CPU per change, backlog",
        "us",
        ours.cpu / n * 1e6,
        bare.cpu / n * 1e6,
        "bare loop CPU per change",
    )
    if recv_s is not None:
        record(
            "  pg_recvlogical (C) to /dev/null vs bare loop",
            "changes/s",
            rate(n, recv_s),
            rate(n, bare.wall),
            "bare pgoutput loop",
        )


# -- latency ----------------------------------------------------------------------------------


def bench_latency(pg: EmbeddedPostgres, samples: int) -> None:
    dsn = pg.dsn("bench")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE lat (id int PRIMARY KEY, t float8)")
        conn.execute("CREATE PUBLICATION lat_pub FOR TABLE lat")
        conn.execute("SELECT pg_create_logical_replication_slot('bench_lat_bare', 'pgoutput')")
    bare_arrivals: dict[int, float] = {}
    bare_stop = threading.Event()

    def bare() -> None:
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

    target = IndexedTarget()
    applied: dict[int, float] = {}
    target.listen(
        lambda old, new: applied.__setitem__(new["id"], time.perf_counter()) if new else None
    )
    eng = laredo.Engine(
        sources={
            "pg": PostgresSource(dsn, slot_name="bench_lat_eng", publication={"name": "lat_pub"})
        },
        pipelines=[laredo.Pipeline("pg", LAT, target)],
    )
    start(eng)
    bt = threading.Thread(target=bare, daemon=True)
    bt.start()
    time.sleep(0.3)
    commits = drive(dsn, samples)
    wait_until(lambda: len(applied) >= samples and len(bare_arrivals) >= samples)
    bare_stop.set()
    bt.join()
    eng.stop()
    print(f"latency: {samples} single-row autocommit inserts at ~100/s, INSERT start -> delivery")
    for name, values in (
        ("limit: bare pgoutput loop", [(bare_arrivals[i] - commits[i]) * 1000 for i in commits]),
        (
            "engine -> IndexedTarget (same inserts)",
            [(applied[i] - commits[i]) * 1000 for i in commits],
        ),
    ):
        q = statistics.quantiles(values, n=100)
        print(f"  {name:<48} p50 {q[49]:6.2f} ms   p99 {q[98]:6.2f} ms   max {max(values):6.2f} ms")


def drive(dsn: str, samples: int) -> dict[int, float]:
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
            commits[i] = time.perf_counter()
            conn.execute("INSERT INTO lat VALUES (%s, 0)", (i,))
    return commits


def wait_until(pred: Callable[[], bool], timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            raise TimeoutError("benchmark did not finish")
        time.sleep(0.005)


@contextlib.contextmanager
def cluster() -> Iterator[EmbeddedPostgres]:
    settings = {"shared_buffers": "256MB", "max_wal_size": "4GB"}
    with EmbeddedPostgres(settings=settings) as pg:
        pg.execute("CREATE DATABASE bench")
        yield pg


def summary() -> None:
    print("\nsummary (ours / limit in the same run):")
    for name, unit, ours, limit, limit_name in RESULTS:
        if limit:
            figures = f"{ours:,.2f} vs {limit:,.2f} {unit}, {limit_name}"
            print(f"  {name.strip():<52} {ours / limit:6.2f}x  ({figures})")


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child-baseline":
        dsn, storage, rows = sys.argv[2], sys.argv[3], int(sys.argv[4])
        skip = {a.split("=", 1)[1] for a in sys.argv[5:] if a.startswith("--skip=")}
        print(json.dumps(child_baseline(dsn, storage, rows, skip)))
        return
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--changes", type=int, default=500_000)
    ap.add_argument("--txn", type=int, default=1000)
    ap.add_argument("--samples", type=int, default=500)
    ap.add_argument("--quick", action="store_true", help="100k rows, 60k changes, 200 samples")
    ap.add_argument(
        "--skip",
        nargs="*",
        default=[],
        choices=["baseline", "memory", "update", "stream", "backlog", "latency"],
    )
    args = ap.parse_args()
    if args.quick:
        args.rows, args.changes, args.samples = 100_000, 60_000, 200
    skip = set(args.skip)
    print(f"columns: ours, unit, limit, ratio (ours/limit), limit name; {time.ctime()}")
    with cluster() as pg:
        if "baseline" not in skip:
            bench_baseline(pg, args.rows, skip)
        dsn = pg.dsn("bench")
        setup_chg(dsn)
        work = Workload(dsn, args.changes, args.txn)
        if "stream" not in skip:
            bench_live(pg, work)
        if "backlog" not in skip:
            bench_backlog(pg, work)
        if "latency" not in skip:
            bench_latency(pg, args.samples)
    summary()


if __name__ == "__main__":
    main()
