"""The stream's limits for ``pg_source.py``: a server-side writer, a receive-and-count loop that
drains as fast as the walsender sends, ``pg_recvlogical``, and the measures that take the
writer's own time out of a live figure.

Why the loop naps inside a transaction: a consumer that waits in ``select`` whenever its socket
is empty is woken for every message or two (the walsender sends each message as it is decoded),
and on a 2-core box each of those wake-ups is paid by the walsender, the process that bounds the
stream: in the last note's set-up the loop woke 0.5 times per change and the walsender spent
5.0-5.4 us of CPU per change, against 3.9-4.1 us while feeding the (slower, rarely idle) engine,
so the "limit" ran 1.2-1.5x slower than the engine. pgoutput (``proto_version`` 1) sends a
transaction only once it committed, whole, so between its Begin and its Commit more data is
always on the way: the loop reads whatever arrived every ``NAP`` seconds there (one wake-up per
~200 messages) and waits on the socket only between transactions, where the next data may be
far off. Its end-to-end delay for a transaction grows by at most one ``NAP``.
"""

from __future__ import annotations

import os
import select
import shutil
import struct
import subprocess
import threading
import time
from typing import Any

import psycopg
from laredo_source_pg.embedded import EmbeddedPostgres
from laredo_source_pg.lsn import format_lsn

NAP = 0.0005
"""Seconds between reads inside a transaction (the walsender fills ~30 KB meanwhile)."""

Arrivals = list[tuple[float, int]]
"""(wall-clock ``time.time()``, changes received so far) at each transaction's arrival."""

_STATUS = struct.Struct(">cQQQqb")
_TICK = os.sysconf("SC_CLK_TCK")


TRANSPORT = "unix"
"""How the stream's consumers connect: ``unix`` (the cluster's socket) or ``tcp`` (loopback).

Over TCP loopback the walsender's kernel cost per change depends on how promptly its client
reads (a prompt reader gets every message as its own segment: 1.4-1.7x the walsender CPU per
change of a slower client), so on a 2-core box no client loop is a ceiling for a slower one;
over the unix socket it does not (see ``NOTES-hot-path.md``, issue 35)."""


def stream_dsn(pg: EmbeddedPostgres) -> str:
    """The ``bench`` database over the chosen :data:`TRANSPORT`."""
    return pg.socket_dsn("bench") if TRANSPORT == "unix" else pg.dsn("bench")


def proc_cpu(pid: int | None) -> float | None:
    """CPU seconds (user + system) of a local process, or None when it cannot be read."""
    if not pid:
        return None
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / _TICK


def slot_pid(dsn: str, slot: str, wait: float = 0.0) -> int | None:
    """The pid of the walsender streaming ``slot``, waiting up to ``wait`` seconds for it to
    become active (None when it does not)."""
    deadline = time.monotonic() + wait
    with psycopg.connect(dsn, autocommit=True) as conn:
        while True:
            row = conn.execute(
                "SELECT active_pid FROM pg_replication_slots WHERE slot_name = %s", (slot,)
            ).fetchone()
            if (row is not None and row[0]) or time.monotonic() >= deadline:
                return None if row is None else row[0]
            time.sleep(0.01)


class Workload:
    """Mixed changes on ``chg`` in ``txn``-row transactions: inserts, updates of those rows,
    deletes of them, written by one server-side ``DO`` block (a ``COMMIT`` per transaction, no
    client round trip: the writer is as fast as the server). Each run uses fresh ids;
    ``expected`` changes per run. ``write()`` returns each commit's server clock time with the
    changes committed so far (the server runs on this host: same clock as ``time.time()``)."""

    def __init__(self, dsn: str, changes: int, txn: int) -> None:
        self.dsn = dsn
        self.txn = txn
        self.third = max(1, changes // 3)
        self.expected = 3 * self.third
        self.runs = 0
        self.seconds = 0.0  # the last write's own duration (client wall clock)

    def write(self, marker: str | None = None) -> Arrivals:
        """One run of changes; ``marker`` adds one more transaction after them, inserting a row
        whose ``name`` is the marker (for a consumer that cannot count changes)."""
        base = self.runs * 100_000_000
        self.runs += 1
        third, txn = self.third, self.txn
        # ints only, formatted into the block (DO takes no parameters)
        steps = [
            "INSERT INTO chg SELECT g, 'v' || g, g FROM generate_series(b + lo + 1, b + hi) g",
            "UPDATE chg SET n = n + 1 WHERE id > b + lo AND id <= b + hi",
            "DELETE FROM chg WHERE id > b + lo AND id <= b + hi",
        ]
        loops = "\n".join(
            f"FOR lo IN 0..{third - 1} BY {txn} LOOP hi := least({third}, lo + {txn}); {s}; "
            "COMMIT; RAISE NOTICE 'c %', extract(epoch FROM clock_timestamp()); END LOOP;"
            for s in steps
        )
        block = f"DO $$ DECLARE b int := {base}; lo int; hi int; BEGIN {loops} END $$"
        stamps: list[float] = []
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            conn.add_notice_handler(lambda d: stamps.append(float((d.message_primary or "")[2:])))
            t0 = time.perf_counter()
            conn.execute(block)
            self.seconds = time.perf_counter() - t0
            if marker is not None:
                conn.execute("INSERT INTO chg VALUES (%s, %s, 0)", (-self.runs, marker))
            (count,) = conn.execute("SELECT count(*) FROM chg WHERE id > %s", (base,)).fetchone()
        assert count == 0, f"the writer left {count} rows"
        sizes = [min(txn, third - lo) for lo in range(0, third, txn)] * 3
        assert len(stamps) == len(sizes), (len(stamps), len(sizes))
        commits: Arrivals = []
        done = 0
        for stamp, size in zip(stamps, sizes, strict=True):
            done += size
            commits.append((stamp, done))
        return commits


def busy_seconds(commits: Arrivals, arrivals: Arrivals) -> float:
    """Seconds during which some committed change had not yet arrived: the union of the
    intervals from each commit to the arrival of its last change. A consumer that keeps up
    with the writer is busy only while it works, so ``changes / busy`` is its rate with the
    writer's own time taken out (the walsender's decoding after each commit included)."""
    total = 0.0
    cur_start = cur_end = None
    j = 0
    for t_commit, cum in commits:
        while arrivals[j][1] < cum:
            j += 1
        end = max(t_commit, arrivals[j][0])
        if cur_end is None or t_commit > cur_end:
            if cur_end is not None and cur_start is not None:
                total += cur_end - cur_start
            cur_start, cur_end = t_commit, end
        else:
            cur_end = max(cur_end, end)
    if cur_end is not None and cur_start is not None:
        total += cur_end - cur_start
    return total


def bare_loop(
    dsn: str,
    slot: str,
    pub: str,
    expected: int,
    *,
    ready: threading.Event | None = None,
    arrivals: Arrivals | None = None,
    stats: dict[str, Any] | None = None,
    nap: float = NAP,
) -> None:
    """The limit: receive pgoutput and count row messages (no decoding) until ``expected``,
    napping inside transactions (see the module docstring). ``arrivals`` gets each Commit's
    arrival; ``stats`` the walsender's CPU seconds (``walsender_cpu``) and wake-ups."""
    conn = psycopg.connect(dsn, autocommit=True, replication="database")
    (pid,) = conn.execute("SELECT pg_backend_pid()").fetchone() or (None,)
    conn.execute(
        f"START_REPLICATION SLOT {slot} LOGICAL 0/0 (proto_version '1', publication_names '{pub}')"
    )
    cpu0 = proc_cpu(pid)
    if ready is not None:
        ready.set()
    pgc = conn.pgconn
    get = pgc.get_copy_data
    sock = pgc.socket
    now = time.time
    n = wakes = 0
    in_txn = False
    while n < expected:
        k, data = get(1)
        if k > 0:
            if data[0] == 119:  # XLogData: its pgoutput message starts at byte 25
                tag = data[25]
                if tag in (73, 85, 68):  # Insert, Update, Delete
                    n += 1
                elif tag == 66:  # Begin
                    in_txn = True
                elif tag == 67:  # Commit
                    in_txn = False
                    if arrivals is not None:
                        arrivals.append((now(), n))
            elif data[0] == 107 and data[17]:  # keepalive asking for a reply
                (last,) = struct.unpack_from(">Q", data, 1)
                pgc.put_copy_data(_STATUS.pack(b"r", last, last, last, 0, 0))
                pgc.flush()
            continue
        if k == 0:
            wakes += 1
            if in_txn:
                # libpq reads ~16 KB per call: nap only once the socket itself is empty, or
                # the loop would throttle the walsender (its socket buffer fills)
                if not select.select([sock], [], [], 0)[0]:
                    time.sleep(nap)
            else:
                select.select([sock], [], [], 1)
            pgc.consume_input()
            continue
        raise RuntimeError("stream ended")
    if arrivals is not None and (not arrivals or arrivals[-1][1] < n):
        arrivals.append((now(), n))
    if stats is not None:
        cpu1 = proc_cpu(pid)
        stats["walsender_cpu"] = None if cpu0 is None or cpu1 is None else cpu1 - cpu0
        stats["wakes"] = wakes
    conn.close()


def recvlogical_cmd(pg: EmbeddedPostgres, slot: str, pub: str) -> list[str] | None:
    exe = shutil.which("pg_recvlogical") or str(pg.bindir / "pg_recvlogical")
    if not shutil.which(exe):
        return None
    return [
        exe,
        "-d",
        stream_dsn(pg),
        "--slot",
        slot,
        "--start",
        "--no-loop",
        "-o",
        "proto_version=1",
        "-o",
        f"publication_names={pub}",
    ]


def children_cpu() -> float:
    t = os.times()
    return t.children_user + t.children_system


def recvlogical_backlog(
    pg: EmbeddedPostgres, slot: str, pub: str, end: int
) -> tuple[float, float] | None:
    """``pg_recvlogical`` draining ``slot`` to ``end`` into /dev/null: (wall, its CPU)."""
    cmd = recvlogical_cmd(pg, slot, pub)
    if cmd is None:
        return None
    cpu0 = children_cpu()
    t0 = time.perf_counter()
    cmd += [f"--endpos={format_lsn(end)}", "-f", "/dev/null"]
    subprocess.run(cmd, check=True, capture_output=True)
    return time.perf_counter() - t0, children_cpu() - cpu0


def recvlogical_live(
    pg: EmbeddedPostgres, slot: str, pub: str, work: Workload
) -> tuple[float, float] | None:
    """``pg_recvlogical`` while ``work`` writes (its end unknown beforehand): writer start ->
    the arrival of a marker row written after the run (found in its output by a C-level
    search). Returns (wall, its CPU)."""
    cmd = recvlogical_cmd(pg, slot, pub)
    if cmd is None:
        return None
    marker = f"laredo-end-{os.getpid()}-{work.runs}".encode()
    proc = subprocess.Popen([*cmd, "-f", "-"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    assert proc.stdout is not None
    seen = threading.Event()
    out = proc.stdout

    def scan() -> None:
        tail = b""
        while chunk := out.read1(1 << 20):
            if marker in tail + chunk[: len(marker)] or marker in chunk:
                seen.set()
            tail = chunk[-len(marker) :]
        seen.set()

    reader = threading.Thread(target=scan, daemon=True)
    reader.start()
    time.sleep(0.3)  # connected and streaming (its slot existed before the writer started)
    cpu0 = children_cpu()
    t0 = time.perf_counter()
    work.write(marker=marker.decode())
    if not seen.wait(600):
        raise TimeoutError("pg_recvlogical did not see the end of the run")
    wall = time.perf_counter() - t0
    proc.terminate()
    proc.wait(30)
    reader.join(30)
    return wall, children_cpu() - cpu0
