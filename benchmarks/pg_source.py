"""PostgreSQL -> IndexedTarget at scale: every figure beside a limit measured in the same run.

The rows of the table (issue 13), each as our figure, the limit and the ratio:

* **baseline**: a typed table (bigint, text, int, numeric, timestamptz, text) loaded through the
  engine into an ``IndexedTarget`` (default and compact storage), against counting the rows of a
  Python ``COPY ... TO STDOUT`` and a naive COPY -> dict loop (text split, untyped values);
* **replica memory**: the replica's settled size per row (process RSS after the load, garbage
  collected and trimmed, minus RSS before it) against the row's ``COPY`` text size; ``get()`` by
  primary key at that size;
* **live stream**: mixed inserts/updates/deletes written in ``--txn``-row transactions (by a
  server-side block, faster than any consumer) while the consumer streams; the figure is the
  consumer's rate over its busy span (from each commit to the arrival of its last change, the
  writer's own time out), against a receive-and-count loop that drains as fast as the walsender
  sends (``stream_limits.py``), each on its own run, twice, alternating; writer start -> last
  change applied beside it, also against ``pg_recvlogical``;
* **backlog drain**: the same changes already in WAL when the consumer starts, against the same
  loop and ``pg_recvlogical`` draining the same backlog (loop, engine, pg_recvlogical, loop,
  engine); the faster pass of each side is compared;
* **one huge UPDATE transaction**: every row of the baseline table updated in one transaction
  while the engine streams: commit -> applied, and the peak RSS growth while applying as a
  fraction of the replica's settled size;
* single-change latency (p50/p99) beside a bare receive loop on the same inserts.

CPU figures are this process's CPU time (every Laredo thread; PostgreSQL runs in other
processes): on a shared machine they move less than wall-clock rates. The walsender's CPU per
change (read from ``/proc``) is the server's side of the stream: a consumer that makes it wake
more often makes it slower.

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
import statistics
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import laredo
import psycopg
import stream_limits
from laredo.events import ChangesApplied, handles
from laredo.observers import NullObserver
from laredo.types import TableIdentifier
from laredo_source_pg.embedded import EmbeddedPostgres
from laredo_source_pg.lsn import parse_lsn
from laredo_source_pg.source import PostgresSource
from laredo_target_memory import IndexedTarget
from stream_limits import (
    Arrivals,
    Workload,
    bare_loop,
    busy_seconds,
    proc_cpu,
    recvlogical_backlog,
    recvlogical_live,
    slot_pid,
    stream_dsn,
)

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

    def __init__(self, arrivals: Arrivals | None = None) -> None:
        self.applied = 0
        self.arrivals = arrivals  # (time.time(), applied so far) per call, when given
        self._target = 0
        self._reached = threading.Event()

    @handles(ChangesApplied)
    def _changes_applied(self, ev: ChangesApplied) -> None:
        self.applied += ev.count  # one worker thread calls this
        if self.arrivals is not None:
            self.arrivals.append((time.time(), self.applied))
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


def per_change(seconds: float | None, n: int) -> float:
    return float("nan") if seconds is None else seconds / n * 1e6


class Pass:
    """One consumer's pass over one run of the workload: wall, client CPU, walsender CPU and,
    live, the busy seconds (commit -> arrival, the writer's own time out)."""

    def __init__(self, wall: float, cpu: float, server: float | None, busy: float = 0.0) -> None:
        self.wall, self.cpu, self.server, self.busy = wall, cpu, server, busy


def live_bare(dsn: str, work: Workload, slot: str) -> Pass:
    create_slot(dsn, slot)
    ready = threading.Event()
    arrivals: Arrivals = []
    stats: dict[str, Any] = {}
    th = threading.Thread(
        target=bare_loop,
        args=(dsn, slot, "bench_pub", work.expected),
        kwargs={"ready": ready, "arrivals": arrivals, "stats": stats},
        daemon=True,
    )
    th.start()
    ready.wait(60)
    with Timer() as t:
        commits = work.write()
        th.join()
    drop_slot(dsn, slot)
    return Pass(t.wall, t.cpu, stats.get("walsender_cpu"), busy_seconds(commits, arrivals))


def live_engine(dsn: str, work: Workload, slot: str) -> Pass:
    counter = AppliedCounter(arrivals=[])
    eng = engine_for(dsn, slot, CHG, IndexedTarget(), counter, **STREAM_OPTS)
    start(eng)
    pid = slot_pid(dsn, slot, wait=5)
    cpu0 = proc_cpu(pid)
    with Timer() as t:
        commits = work.write()
        counter.wait(work.expected)
    cpu1 = proc_cpu(pid)
    eng.stop()
    server = None if cpu0 is None or cpu1 is None else cpu1 - cpu0
    assert counter.arrivals is not None
    return Pass(t.wall, t.cpu, server, busy_seconds(commits, counter.arrivals))


def record_stream(kind: str, n: int, ours: list[Pass], bare: list[Pass], live: bool) -> None:
    """Ours (the faster pass) against the faster bare pass, by the live busy span or wall."""

    def secs(p: Pass) -> float:
        return p.busy if live else p.wall

    o = min(ours, key=secs)
    b = min(bare, key=secs)
    cpu_o, cpu_b = min(p.cpu for p in ours), min(p.cpu for p in bare)
    srv_o = min((p.server for p in ours if p.server is not None), default=None)
    srv_b = min((p.server for p in bare if p.server is not None), default=None)
    what = "commit -> applied, busy span" if live else "drain"
    record(
        f"{kind} -> IndexedTarget vs bare loop ({what})",
        "changes/s",
        rate(n, secs(o)),
        rate(n, secs(b)),
        "bare pgoutput loop",
    )
    for label, passes in (("ours", ours), ("bare loop", bare)):
        each = ", ".join(f"{rate(n, secs(p)):,.0f}" for p in passes)
        print(f"    {label} passes (changes/s, in run order): {each}", flush=True)
    if secs(o) < secs(b):
        print(
            "    (the loop was slower by wall: the walsender bounds the stream here and spends "
            "more CPU per change on a client that reads promptly; compare the CPU lines)",
            flush=True,
        )
    record(
        f"  CPU per change, {kind} (least)",
        "us",
        per_change(cpu_o, n),
        per_change(cpu_b, n),
        "bare",
    )
    record(
        f"  walsender CPU per change, {kind} (least)",
        "us",
        per_change(srv_o, n),
        per_change(srv_b, n),
        "walsender feeding the bare loop",
    )


def bench_live(pg: EmbeddedPostgres, work: Workload, passes: int = 3) -> None:
    """Changes applied while they are written, each consumer on its own run of the writer (a
    server-side block, faster than the consumers): bare loop, engine, ``passes`` times, then
    ``pg_recvlogical``. The figure is the busy span (:func:`busy_seconds`), best pass of each
    side (load from other processes only ever slows a pass)."""
    dsn = stream_dsn(pg)
    n = work.expected
    print(
        f"live stream: {n:,} changes in {work.txn}-row transactions (mixed I/U/D), consumers "
        f"over {stream_limits.TRANSPORT}",
        flush=True,
    )
    bare: list[Pass] = []
    ours: list[Pass] = []
    writer: list[float] = []
    for i in range(passes):
        bare.append(live_bare(dsn, work, f"bench_live_bare{i}"))
        writer.append(work.seconds)
        ours.append(live_engine(dsn, work, f"bench_live_eng{i}"))
        writer.append(work.seconds)
    record_stream("live stream", n, ours, bare, live=True)
    e2e = min(p.wall for p in ours)
    record(
        "  live, writer start -> last applied",
        "changes/s",
        rate(n, e2e),
        rate(n, min(p.wall for p in bare)),
        "bare loop, same",
    )
    print(f"    the writer's own time: {min(writer):.2f}-{max(writer):.2f} s", flush=True)
    create_slot(dsn, "bench_live_recv")
    recv = recvlogical_live(pg, "bench_live_recv", "bench_pub", work)
    drop_slot(dsn, "bench_live_recv")
    if recv is not None:
        record(
            "  live, writer start -> last applied",
            "changes/s",
            rate(n, e2e),
            rate(n, recv[0]),
            "pg_recvlogical, same",
        )
        record(
            "  CPU per change, live",
            "us",
            per_change(min(p.cpu for p in ours), n),
            per_change(recv[1], n),
            "pg_recvlogical CPU",
        )


def bench_backlog(pg: EmbeddedPostgres, work: Workload, passes: int = 3) -> None:
    """Changes already in WAL when the consumer starts: bare loop, engine, ``pg_recvlogical``,
    then bare loop, engine again (``passes`` pairs in all), each from its own slot created
    before the backlog was written; the best pass of each side is compared."""
    dsn = stream_dsn(pg)
    n = work.expected
    order = ["bare0", "eng0", "recv"]
    for i in range(1, passes):
        order += [f"bare{i}", f"eng{i}"]
    targets: dict[str, DurableIndexed] = {}
    for name in order:
        if name.startswith("eng"):
            # the engine resumes from its slot into a durable target
            targets[name] = DurableIndexed()
            eng = engine_for(
                dsn, f"bench_bl_{name}", CHG, targets[name], AppliedCounter(), **STREAM_OPTS
            )
            start(eng)
            eng.stop()
        else:
            create_slot(dsn, f"bench_bl_{name}")
    work.write()
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()
    assert row is not None
    end = parse_lsn(row[0])
    print(f"backlog drain: {n:,} changes in {work.txn}-row transactions already in WAL", flush=True)
    bare: list[Pass] = []
    ours: list[Pass] = []
    recv = None
    for name in order:
        slot = f"bench_bl_{name}"
        if name == "recv":
            recv = recvlogical_backlog(pg, slot, "bench_pub", end)
        elif name.startswith("bare"):
            stats: dict[str, Any] = {}
            with Timer() as t:
                bare_loop(dsn, slot, "bench_pub", n, stats=stats)
            bare.append(Pass(t.wall, t.cpu, stats.get("walsender_cpu")))
            print(f"    bare loop {name}: {stats['wakes'] / n:.4f} wake-ups per change", flush=True)
        else:
            counter = AppliedCounter()
            eng = engine_for(dsn, slot, CHG, targets[name], counter, **STREAM_OPTS)
            with Timer() as t:
                eng.start()
                counter.wait(n)
            # its walsender's whole life (start-up included: a few ms of CPU)
            server = proc_cpu(slot_pid(dsn, slot))
            eng.stop()
            ours.append(Pass(t.wall, t.cpu, server))
    record_stream("backlog drain", n, ours, bare, live=False)
    if recv is not None:
        record(
            "  backlog drain vs pg_recvlogical (C, to /dev/null)",
            "changes/s",
            rate(n, min(p.wall for p in ours)),
            rate(n, recv[0]),
            "pg_recvlogical",
        )
        record(
            "  CPU per change, backlog",
            "us",
            per_change(min(p.cpu for p in ours), n),
            per_change(recv[1], n),
            "pg_recvlogical CPU",
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
    ap.add_argument("--passes", type=int, default=3, help="stream/backlog passes of each side")
    ap.add_argument(
        "--transport",
        choices=["unix", "tcp"],
        default="unix",
        help="how the stream's consumers connect (see stream_limits.TRANSPORT)",
    )
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
    stream_limits.TRANSPORT = args.transport
    print(f"columns: ours, unit, limit, ratio (ours/limit), limit name; {time.ctime()}")
    with cluster() as pg:
        if "baseline" not in skip:
            bench_baseline(pg, args.rows, skip)
        dsn = pg.dsn("bench")
        setup_chg(dsn)
        work = Workload(dsn, args.changes, args.txn)
        if "stream" not in skip:
            bench_live(pg, work, args.passes)
        if "backlog" not in skip:
            bench_backlog(pg, work, args.passes)
        if "latency" not in skip:
            bench_latency(pg, args.samples)
    summary()


if __name__ == "__main__":
    main()
