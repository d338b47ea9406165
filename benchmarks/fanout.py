"""Replication fan-out benchmark: our figures beside a bare grpcio limit measured in the same run.

Run: ``.venv/bin/python benchmarks/fanout.py [--clients 1,10,50] [--changes 50000] [--quick]
[--only broadcast,latency] [--latency-clients 1,10,50,100] [--receiver-procs N]``

* broadcast: a fan-out target (``apply_changes`` in 1,000-change batches, as the engine calls it)
  delivers N changes to each of C streaming receivers over 127.0.0.1. The limit is a bare grpcio
  server streaming the *same pre-encoded batch messages* (same entries per message, same bytes)
  to C receivers: the cost of gRPC and protobuf parsing alone. Receivers in both runs parse each
  message and count entries. Rate = changes delivered per second to *each* client.
* client apply: a real ``FanOutClient`` (decode typed JSON + indexed replica apply) for 1 and
  10 clients, against the same limit.
* snapshot: a FULL_SNAPSHOT sync of R rows to one receiver vs the bare loop streaming the same
  encoded rows.
* latency: one change per ms for 2 s, C receivers in other processes (one per 25 receivers by
  default, ``--receiver-procs``): p50/p99 from ``apply_changes`` to receipt. 100 receiver
  threads in one Python process measure mostly their own GIL queueing (parsing 100 streams),
  not the server, so they are spread over several processes.

Throughput runs keep server and receivers in one process (they share the GIL on a 2-core box),
for ours and for the limit alike: treat the ratios, not the absolute numbers, as the result.
Issue 5's targets: >= 50k changes/s to each of 10 clients; p99 < 50 ms at 1k changes/s with
100 clients.
"""

from __future__ import annotations

import argparse
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import grpc
import laredo
from laredo import ChangeAction, ChangeEvent, ColumnDefinition, Table
from laredo_target_fanout import FanOutClient, _wire
from laredo_target_fanout._proto import replication_pb2 as pb
from laredo_target_fanout.client import build_request, sync_stub
from laredo_target_fanout.service import SERVICE_NAME
from laredo_target_fanout.target import FanOutTarget

TABLE = Table("public", "users")
COLUMNS = [
    ColumnDefinition("id", "int8", 1, False, True, 1),
    ColumnDefinition("email", "text", 2),
    ColumnDefinition("name", "text", 3),
    ColumnDefinition("team", "int4", 4),
    ColumnDefinition("balance", "int8", 5),
]
BATCH = 1000


def row(i: int) -> dict[str, Any]:
    return {
        "id": i,
        "email": f"user{i}@example.com",
        "name": f"User {i}",
        "team": i % 100,
        "balance": i * 7,
    }


def make_target(n_changes: int, baseline: int = 1000, linger: Any = None) -> FanOutTarget:
    t = laredo.target(
        "replication-fanout",
        grpc={"port": 0, "max_batch": BATCH, "drain_timeout": 0, "linger": linger},
        journal={"max_entries": n_changes + 10, "max_age": None},
        client_buffer={"size": n_changes + 10},
        heartbeat_interval=1.0,
    )
    assert isinstance(t, FanOutTarget)
    t.on_init(TABLE, COLUMNS)
    t.on_baseline_rows(TABLE, [row(i) for i in range(baseline)])
    t.set_change_position(0)
    t.on_baseline_complete(TABLE)
    return t


def changes(n: int, start: int) -> list[list[ChangeEvent]]:
    evs = [
        ChangeEvent(TABLE, ChangeAction.INSERT, start + i, new_values=row(start + i))
        for i in range(n)
    ]
    return [evs[i : i + BATCH] for i in range(0, n, BATCH)]


class Receiver(threading.Thread):
    """Reads one stream, parsing each message, until it has seen ``want`` entries."""

    def __init__(self, call: Any, want: int, latency: bool = False) -> None:
        super().__init__(daemon=True)
        self.call, self.want, self.latency = call, want, latency
        self.got = 0
        self.done_at = 0.0
        self.ready = threading.Event()
        self.lat: list[float] = []

    def run(self) -> None:
        for msg in self.call:
            kind = msg.WhichOneof("msg")
            if kind == "journal":
                entries = msg.journal.entries
                self.got += len(entries)
                if self.latency:
                    now = time.time()
                    self.lat.extend(now - e.timestamp_unix_us / 1e6 for e in entries)
                if self.got >= self.want:
                    self.done_at = time.perf_counter()
                    self.call.cancel()
                    return
            elif kind in ("snapshot_end", "handshake") or kind == "heartbeat":
                self.ready.set()


def ours_broadcast(n_clients: int, n: int) -> float:
    t = make_target(n)
    ch = grpc.insecure_channel(t.address, options=[("grpc.max_receive_message_length", 64 << 20)])
    try:
        rs = []
        for i in range(n_clients):
            call = sync_stub(ch)(build_request(TABLE, f"b{i}", max_batch=BATCH))
            r = Receiver(call, n)
            r.start()
            rs.append(r)
        for r in rs:
            r.ready.wait(10)
        batches = changes(n, 1000)
        t0 = time.perf_counter()
        for b in batches:
            t.apply_changes(TABLE, b)
        for r in rs:
            r.join(120)
        end = max(r.done_at for r in rs)
        assert all(r.got >= n for r in rs), [r.got for r in rs]
        return n / (end - t0)
    finally:
        ch.close()
        t.on_close(TABLE)


def bare_server(messages: list[bytes], ready: threading.Event | None = None) -> tuple[Any, int]:
    """A grpcio server streaming ``messages`` (pre-encoded) on every Sync call."""

    def sync(request: Any, context: Any) -> Any:
        yield pb.SyncResponse(handshake=pb.Handshake())
        if ready is not None:
            ready.wait(30)
        yield from messages

    handler = grpc.method_handlers_generic_handler(
        SERVICE_NAME,
        {
            "Sync": grpc.unary_stream_rpc_method_handler(
                sync,
                request_deserializer=pb.SyncRequest.FromString,
                response_serializer=lambda m: m if isinstance(m, bytes) else m.SerializeToString(),
            )
        },
    )
    server = grpc.server(ThreadPoolExecutor(max_workers=128), handlers=(handler,))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    return server, port


def encoded_batches(n: int) -> list[bytes]:
    t = FanOutTarget(serve=False, journal={"max_entries": n + 10, "max_age": None})
    t.on_init(TABLE, COLUMNS)
    t.set_change_position(0)
    t.on_baseline_complete(TABLE)
    for b in changes(n, 1000):
        t.apply_changes(TABLE, b)
    entries = t.journal_entries(1)
    out = []
    for i in range(0, n, BATCH):
        part = entries[i : i + BATCH]
        out.append(
            _wire.journal_message(
                i, part[-1].sequence, [_wire.entry_chunk(e, t.codec) for e in part]
            )
        )
    t.on_close(TABLE)
    return out


def bare_broadcast(n_clients: int, n: int, msgs: list[bytes]) -> float:
    go = threading.Event()
    server, port = bare_server(msgs, go)
    ch = grpc.insecure_channel(
        f"127.0.0.1:{port}", options=[("grpc.max_receive_message_length", 64 << 20)]
    )
    try:
        rs = []
        for i in range(n_clients):
            r = Receiver(sync_stub(ch)(build_request(TABLE, f"b{i}")), n)
            r.start()
            rs.append(r)
        for r in rs:
            r.ready.wait(10)
        t0 = time.perf_counter()
        go.set()
        for r in rs:
            r.join(120)
        return n / (max(r.done_at for r in rs) - t0)
    finally:
        ch.close()
        server.stop(0)


def client_apply(n_clients: int, n: int) -> float:
    t = make_target(n)
    clients = [FanOutClient(t.address, TABLE, client_id=f"c{i}") for i in range(n_clients)]
    try:
        for c in clients:
            c.start()
        for c in clients:
            c.await_ready(10)
        t0 = time.perf_counter()
        for b in changes(n, 1000):
            t.apply_changes(TABLE, b)
        want = t.current_sequence
        while any(c.last_sequence < want for c in clients):
            time.sleep(0.002)
        return n / (time.perf_counter() - t0)
    finally:
        for c in clients:
            c.stop(save=False)
        t.on_close(TABLE)


def snapshot_transfer(rows: int) -> tuple[float, float]:
    t = make_target(10, baseline=rows)
    ch = grpc.insecure_channel(t.address, options=[("grpc.max_receive_message_length", 64 << 20)])
    try:
        t0 = time.perf_counter()
        call = sync_stub(ch)(build_request(TABLE, "snap", max_batch=BATCH))
        got = 0
        for msg in call:
            kind = msg.WhichOneof("msg")
            if kind == "snapshot_rows":
                got += len(msg.snapshot_rows.rows)
            elif kind == "snapshot_end":
                break
        ours = got / (time.perf_counter() - t0)
        call.cancel()
        snap = t.snapshots()[0]
        enc = snap.encoded_rows(_wire.encode_row)
        msgs = [_wire.snapshot_rows_message(enc[i : i + BATCH]) for i in range(0, len(enc), BATCH)]
    finally:
        ch.close()
        t.on_close(TABLE)
    server, port = bare_server(msgs)
    ch = grpc.insecure_channel(
        f"127.0.0.1:{port}", options=[("grpc.max_receive_message_length", 64 << 20)]
    )
    try:
        t0 = time.perf_counter()
        got = 0
        for msg in sync_stub(ch)(build_request(TABLE, "snap")):
            if msg.WhichOneof("msg") == "snapshot_rows":
                got += len(msg.snapshot_rows.rows)
                if got >= rows:
                    break
        bare = got / (time.perf_counter() - t0)
    finally:
        ch.close()
        server.stop(0)
    return ours, bare


LATENCY_CLIENTS = r"""
import json, statistics, sys, threading, time
import grpc
from laredo import Table
from laredo_target_fanout.client import build_request, sync_stub

address, n_clients, n, first = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
lat, lock, ready = [], threading.Lock(), threading.Semaphore(0)
chans = [grpc.insecure_channel(address) for _ in range(max(1, n_clients // 10))]


def receive(i):
    got, mine = 0, []
    request = build_request(Table("public", "users"), f"l{first + i}")
    call = sync_stub(chans[i % len(chans)])(request)
    for msg in call:
        kind = msg.WhichOneof("msg")
        if kind == "snapshot_end":
            ready.release()
        elif kind == "journal":
            now = time.time()
            mine.extend(now - e.timestamp_unix_us / 1e6 for e in msg.journal.entries)
            got += len(msg.journal.entries)
            if got >= n:
                call.cancel()
                break
    with lock:
        lat.extend(mine)


threads = [threading.Thread(target=receive, args=(i,)) for i in range(n_clients)]
for t in threads:
    t.start()
for _ in threads:
    ready.acquire()
print("ready", flush=True)
for t in threads:
    t.join()
print(json.dumps([x * 1000 for x in lat]))
"""


def latency(
    n_clients: int, seconds: float = 2.0, rate: int = 1000, procs: int = 0, linger: Any = None
) -> tuple[float, float]:
    """Receivers run in other processes (as real clients would; ``procs`` of them, default one
    per 25 clients, so that receivers do not queue on one process's GIL): p50/p99 in ms."""
    import json
    import statistics
    import subprocess
    import sys

    n = int(seconds * rate)
    t = make_target(n, linger=linger)
    procs = procs or max(1, -(-n_clients // 25))
    share = [n_clients // procs + (1 if i < n_clients % procs else 0) for i in range(procs)]
    firsts = [sum(share[:i]) for i in range(procs)]
    ps = [
        subprocess.Popen(
            [sys.executable, "-c", LATENCY_CLIENTS, t.address, str(k), str(n), str(f)],
            stdout=subprocess.PIPE,
            text=True,
        )
        for k, f in zip(share, firsts, strict=True)
        if k
    ]
    try:
        for proc in ps:
            assert proc.stdout is not None
            assert proc.stdout.readline().strip() == "ready"
        start = time.perf_counter()
        for i in range(n):
            delay = start + i / rate - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            ev = ChangeEvent(TABLE, ChangeAction.INSERT, i + 1, new_values=row(10_000 + i))
            t.apply_changes(TABLE, [ev])
        lat: list[float] = []
        for proc in ps:
            assert proc.stdout is not None
            lat.extend(json.loads(proc.stdout.readline()))
        lat.sort()
        return statistics.median(lat), lat[int(len(lat) * 0.99) - 1]
    finally:
        for proc in ps:
            proc.wait(30)
        t.on_close(TABLE)


def catch_up(n: int, msgs: list[bytes]) -> tuple[float, float]:
    """A client connecting after ``n`` changes: journal entries/s it receives (ours) vs the bare
    loop streaming the same pre-encoded batches."""
    t = make_target(n)
    for b in changes(n, 1000):
        t.apply_changes(TABLE, b)
    ch = grpc.insecure_channel(t.address, options=[("grpc.max_receive_message_length", 64 << 20)])
    try:
        t0 = time.perf_counter()
        got = 0
        for msg in sync_stub(ch)(build_request(TABLE, "late", max_batch=BATCH)):
            if msg.WhichOneof("msg") == "journal":
                got += len(msg.journal.entries)
                if got >= n:
                    break
        ours = got / (time.perf_counter() - t0)
    finally:
        ch.close()
        t.on_close(TABLE)
    server, port = bare_server(msgs)
    ch = grpc.insecure_channel(
        f"127.0.0.1:{port}", options=[("grpc.max_receive_message_length", 64 << 20)]
    )
    try:
        t0 = time.perf_counter()
        got = 0
        for msg in sync_stub(ch)(build_request(TABLE, "late")):
            if msg.WhichOneof("msg") == "journal":
                got += len(msg.journal.entries)
                if got >= n:
                    break
        bare = got / (time.perf_counter() - t0)
    finally:
        ch.close()
        server.stop(0)
    return ours, bare


def memory(rows: int, entries: int) -> tuple[float, float, float]:
    """Bytes per row held by the target (beyond the row dicts, which any store keeps) against
    a plain dict holding the same rows, and bytes per journal entry."""
    import gc
    import tracemalloc

    data = [row(i) for i in range(rows)]
    gc.collect()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    plain = {r["id"]: dict(r) for r in data}
    plain_bytes = tracemalloc.get_traced_memory()[0] - base
    del plain
    gc.collect()
    base = tracemalloc.get_traced_memory()[0]
    t = FanOutTarget(serve=False, journal={"max_entries": entries + 10, "max_age": None})
    t.on_init(TABLE, COLUMNS)
    t.on_baseline_rows(TABLE, data)
    t.set_change_position(0)
    t.on_baseline_complete(TABLE)
    state_bytes = tracemalloc.get_traced_memory()[0] - base
    base = tracemalloc.get_traced_memory()[0]
    for i in range(0, entries, BATCH):
        t.apply_changes(
            TABLE,
            [
                ChangeEvent(TABLE, ChangeAction.UPDATE, i + j, new_values=data[(i + j) % rows])
                for j in range(BATCH)
            ],
        )
    journal_bytes = tracemalloc.get_traced_memory()[0] - base
    tracemalloc.stop()
    t.on_close(TABLE)
    return state_bytes / rows, plain_bytes / rows, journal_bytes / entries


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--clients", default="1,10,50")
    ap.add_argument("--changes", type=int, default=50_000)
    ap.add_argument("--quick", action="store_true", help="fewer changes (smoke run)")
    ap.add_argument(
        "--only",
        default="",
        help="comma-separated sections: broadcast,apply,snapshot,catchup,memory,latency",
    )
    ap.add_argument(
        "--latency-clients", default="1,10,50,100", help="client counts of the latency table"
    )
    ap.add_argument(
        "--receiver-procs",
        type=int,
        default=0,
        help="latency receiver processes (default: one per 25 clients)",
    )
    args = ap.parse_args()
    only = set(filter(None, args.only.split(",")))

    def want(section: str) -> bool:
        return not only or section in only

    n = 5_000 if args.quick else args.changes
    counts = [int(x) for x in args.clients.split(",")]
    msgs = encoded_batches(n) if only - {"latency", "memory", "snapshot"} or not only else []
    if want("broadcast"):
        print(
            f"broadcast: {n} changes, {BATCH} per message; rate = changes/s delivered to each "
            "client"
        )
        print(
            f"{'clients':>8} {'ours/s':>12} {'bare grpc/s':>12} {'ratio':>7} {'ours total/s':>14}"
        )
        for c in counts:
            ours = ours_broadcast(c, n)
            bare = bare_broadcast(c, n, msgs)
            print(f"{c:>8} {ours:>12,.0f} {bare:>12,.0f} {ours / bare:>7.2f} {ours * c:>14,.0f}")
    if want("apply"):
        print("\nclient apply (FanOutClient: typed-JSON decode + indexed replica), per client")
        print(f"{'clients':>8} {'ours/s':>12} {'bare grpc/s':>12} {'ratio':>7}")
        for c in [x for x in (1, 10) if x in counts or not args.quick]:
            m = max(2_000, n // 5)
            ours = client_apply(c, m)
            bare = bare_broadcast(c, m, msgs[: max(1, m // BATCH)])
            print(f"{c:>8} {ours:>12,.0f} {bare:>12,.0f} {ours / bare:>7.2f}")
    rows = 20_000 if args.quick else 100_000
    if want("snapshot"):
        ours_s, bare_s = snapshot_transfer(rows)
        print(f"\nsnapshot transfer ({rows} rows, FULL_SNAPSHOT to one receiver)")
        print(f"{'ours rows/s':>12} {'bare rows/s':>12} {'ratio':>7}")
        print(f"{ours_s:>12,.0f} {bare_s:>12,.0f} {ours_s / bare_s:>7.2f}")
    if want("catchup"):
        ours_c, bare_c = catch_up(n, msgs)
        print(f"\ncatch-up from the journal ({n} changes, one client connecting afterwards)")
        print(f"{'ours/s':>12} {'bare/s':>12} {'ratio':>7}")
        print(f"{ours_c:>12,.0f} {bare_c:>12,.0f} {ours_c / bare_c:>7.2f}")
    if want("memory"):
        per_row, plain_row, per_entry = memory(rows, min(n, 50_000))
        print(f"\nmemory ({rows} rows; journal of UPDATEs; tracemalloc)")
        print(f"{'target B/row':>13} {'plain dict B/row':>17} {'ratio':>7} {'B/journal entry':>16}")
        print(
            f"{per_row:>13,.0f} {plain_row:>17,.0f} {per_row / plain_row:>7.2f} {per_entry:>16,.0f}"
        )
    if want("latency"):
        print(
            "\nbroadcast latency at 1k changes/s (apply_changes -> receipt; receivers in "
            f"other processes, {args.receiver_procs or 'one per 25 clients'}); limit: issue "
            "5's p99 < 50 ms"
        )
        print(f"{'clients':>8} {'procs':>6} {'p50 ms':>8} {'p99 ms':>8} {'limit':>6} {'ratio':>6}")
        lat_counts = [int(x) for x in args.latency_clients.split(",")]
        for c in [x for x in lat_counts if not args.quick or x == 1]:
            procs = args.receiver_procs or max(1, -(-c // 25))
            p50, p99 = latency(c, seconds=1.0 if args.quick else 2.0, procs=procs)
            print(f"{c:>8} {procs:>6} {p50:>8.2f} {p99:>8.2f} {50:>6} {p99 / 50:>6.2f}")


if __name__ == "__main__":
    main()
