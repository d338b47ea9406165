"""laredo-server benchmarks: our figure beside a limit measured in the same run.

    .venv/bin/python benchmarks/server.py [--rows 20000] [--calls 2000] [--changes 200000]

* ``GetRow latency``: a Query-service unary call (lookup in an IndexedTarget, typed-JSON
  encoding, auth check, error mapping) vs. the standard gRPC health ``Check`` on the same
  server and channel: the transport's own round trip is the limit. Ratio = limit / ours
  (1.00 = no overhead over an empty RPC).
* ``ListRows``: rows/s paging through the whole table (100-row pages) vs. encoding the same
  rows with ``RowEncoder`` and building the protobuf messages in-process (no network).
* ``Subscribe``: row events/s delivered to a remote gRPC subscriber while the engine applies
  changes (TestSource -> IndexedTarget -> listener -> stream) vs. the same engine delivering
  to an in-process listener; the bare transport figure (pre-built ``RowEvent`` batches of 1000
  on a server-streaming RPC) is printed as a second limit. ``--events`` stays below the
  subscriber buffer (``grpc.watch_buffer``, 16384): a burst larger than the buffer that the
  subscriber cannot drain in time ends its stream with RESOURCE_EXHAUSTED, by design.
* ``engine + Prometheus``: changes/s through the engine (TestSource -> IndexedTarget) with the
  Prometheus observer (per action; per batch) vs. the same engine without observers.

Medians of ``--repeat`` runs; throughput ratio = ours / limit (higher is better).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc
import laredo
from grpc_health.v1 import health_pb2, health_pb2_grpc
from laredo.serialization import RowEncoder
from laredo.testing import TestSource, columns
from laredo_server._proto.laredo_proto.v1 import query_pb2 as q
from laredo_server._proto.laredo_proto.v1 import query_pb2_grpc
from laredo_server.config import Built
from laredo_server.metrics import PrometheusObserver
from laredo_server.server import Runtime
from laredo_target_memory import IndexedTarget

T = laredo.Table("public", "bench")


def make_source(n: int) -> TestSource:
    src = TestSource()
    src.add_table(
        T,
        columns("id", "name", "score"),
        [{"id": i, "name": f"n{i}", "score": i * 0.5} for i in range(n)],
    )
    return src


def runtime(n: int) -> tuple[Runtime, TestSource]:
    src = make_source(n)

    def factory(observers: Any, _s: Any) -> Built:
        eng = laredo.Engine(
            sources={"s": src},
            pipelines=[laredo.Pipeline("s", T, IndexedTarget(), id="bench")],
            observers=list(observers),
        )
        return Built(eng)

    rt = Runtime(factory, grpc_port=0, health_port=None)
    rt.start()
    assert rt.engine.await_ready(60)
    return rt, src


def bench_unary(rt: Runtime, calls: int) -> tuple[float, float]:
    ch = grpc.insecure_channel(f"127.0.0.1:{rt.listeners.grpc_port}")
    qs = query_pb2_grpc.LaredoQueryServiceStub(ch)  # type: ignore[no-untyped-call]
    hs = health_pb2_grpc.HealthStub(ch)
    ref = q.TableRef(table="public.bench")
    req = q.GetRowRequest(table=ref, primary_key=["7"])
    hreq = health_pb2.HealthCheckRequest(service="")
    for _ in range(100):
        qs.GetRow(req)
        hs.Check(hreq)
    t0 = time.perf_counter()
    for _ in range(calls):
        hs.Check(hreq)
    limit = (time.perf_counter() - t0) / calls
    t0 = time.perf_counter()
    for _ in range(calls):
        qs.GetRow(req)
    ours = (time.perf_counter() - t0) / calls
    ch.close()
    return ours, limit


def bench_list(rt: Runtime) -> tuple[float, float]:
    ch = grpc.insecure_channel(f"127.0.0.1:{rt.listeners.grpc_port}")
    qs = query_pb2_grpc.LaredoQueryServiceStub(ch)  # type: ignore[no-untyped-call]
    ref = q.TableRef(table="public.bench")
    n = 0
    token = ""
    t0 = time.perf_counter()
    while True:
        r = qs.ListRows(q.ListRowsRequest(table=ref, page_size=100, page_token=token))
        n += len(r.rows)
        token = r.next_page_token
        if not token:
            break
    ours = n / (time.perf_counter() - t0)
    rows = rt.engine.get_target("s", T).all()
    enc = RowEncoder()
    t0 = time.perf_counter()
    for i in range(0, len(rows), 100):
        q.ListRowsResponse(rows=[q.Row(json=enc.dumps(r)) for r in rows[i : i + 100]])
    limit = len(rows) / (time.perf_counter() - t0)
    ch.close()
    return ours, limit


class _Bare(query_pb2_grpc.LaredoQueryServiceServicer):
    def __init__(self, n: int) -> None:
        enc = RowEncoder()
        self.events = [
            q.RowEvent(action="UPDATE", new_values=q.Row(json=enc.dumps({"id": i, "v": i})))
            for i in range(n)
        ]

    def Subscribe(self, request: Any, context: Any) -> Any:
        for i in range(0, len(self.events), 1000):
            yield q.SubscribeResponse(events=self.events[i : i + 1000])


def bench_subscribe(n: int) -> tuple[float, float]:
    rt, src = runtime(1000)
    ch = grpc.insecure_channel(f"127.0.0.1:{rt.listeners.grpc_port}")
    qs = query_pb2_grpc.LaredoQueryServiceStub(ch)  # type: ignore[no-untyped-call]
    got = 0
    done = threading.Event()
    started = threading.Event()
    call = qs.Subscribe(q.SubscribeRequest(table=q.TableRef(table="public.bench")))

    def consume() -> None:
        nonlocal got
        started.set()
        try:
            for resp in call:
                got += len(resp.events)
                if got >= n:
                    done.set()
                    return
        except grpc.RpcError:
            done.set()

    threading.Thread(target=consume, daemon=True).start()
    started.wait()
    time.sleep(0.3)
    t0 = time.perf_counter()
    rows = [{"id": i % 1000, "name": "x", "score": i} for i in range(n)]
    for i in range(0, n, 1000):
        src.transaction([("UPDATE", T, r, None) for r in rows[i : i + 1000]])
    done.wait(120)
    ours = got / (time.perf_counter() - t0)
    if got < n:
        raise SystemExit(f"Subscribe delivered {got} of {n} events (stream ended early)")
    call.cancel()
    ch.close()
    rt.stop(grace=10)
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    query_pb2_grpc.add_LaredoQueryServiceServicer_to_server(_Bare(n), server)  # type: ignore[no-untyped-call]
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    ch = grpc.insecure_channel(f"127.0.0.1:{port}")
    qs = query_pb2_grpc.LaredoQueryServiceStub(ch)  # type: ignore[no-untyped-call]
    t0 = time.perf_counter()
    k = sum(len(r.events) for r in qs.Subscribe(q.SubscribeRequest()))
    limit = k / (time.perf_counter() - t0)
    ch.close()
    server.stop(0)
    return ours, limit


def engine_rate(changes: int, observers: list[Any]) -> float:
    src = make_source(1000)
    eng = laredo.Engine(
        sources={"s": src},
        pipelines=[laredo.Pipeline("s", T, IndexedTarget(), id="bench")],
        observers=observers,
    )
    eng.start()
    assert eng.await_ready(60)
    target = eng.get_target("s", T)
    done = threading.Event()
    seen = [0]

    def listener(_old: Any, _new: Any) -> None:
        seen[0] += 1
        if seen[0] >= changes:
            done.set()

    target.listen(listener)
    txs = []
    for i in range(0, changes, 1000):
        txs.append(
            [
                ("UPDATE", T, {"id": j % 1000, "name": "x", "score": j}, None)
                for j in range(i, min(changes, i + 1000))
            ]
        )
    t0 = time.perf_counter()
    for tx in txs:
        src.transaction(tx)
    done.wait(300)
    rate = changes / (time.perf_counter() - t0)
    eng.stop()
    return rate


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=20_000)
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--changes", type=int, default=200_000)
    ap.add_argument("--events", type=int, default=15_000)
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    results: list[tuple[str, str, float, float, float]] = []
    with tempfile.TemporaryDirectory() as d:
        Path(d).mkdir(exist_ok=True)
        rt, _ = runtime(a.rows)
        try:
            u = [bench_unary(rt, a.calls) for _ in range(a.repeat)]
            ours = statistics.median(x for x, _ in u)
            limit = statistics.median(y for _, y in u)
            results.append(("GetRow latency", "ms/call", ours * 1e3, limit * 1e3, limit / ours))
            lst = [bench_list(rt) for _ in range(a.repeat)]
            ours = statistics.median(x for x, _ in lst)
            limit = statistics.median(y for _, y in lst)
            results.append(("ListRows (100/page)", "rows/s", ours, limit, ours / limit))
        finally:
            rt.stop(grace=10)
    base = statistics.median(engine_rate(a.changes, []) for _ in range(a.repeat))
    sub = [bench_subscribe(a.events) for _ in range(a.repeat)]
    ours = statistics.median(x for x, _ in sub)
    bare = statistics.median(y for _, y in sub)
    results.append(("Subscribe (vs in-process listener)", "events/s", ours, base, ours / base))
    results.append(("Subscribe (vs bare gRPC stream)", "events/s", ours, bare, ours / bare))
    per_action = statistics.median(
        engine_rate(a.changes, [PrometheusObserver()]) for _ in range(a.repeat)
    )
    per_batch = statistics.median(
        engine_rate(a.changes, [PrometheusObserver(per_action=False)]) for _ in range(a.repeat)
    )
    results.append(
        ("engine + Prometheus (per action)", "changes/s", per_action, base, per_action / base)
    )
    results.append(
        ("engine + Prometheus (per batch)", "changes/s", per_batch, base, per_batch / base)
    )
    print(f"{'measurement':36} {'unit':10} {'ours':>12} {'limit':>12} {'ratio':>6}")
    for name, unit, o, lim, ratio in results:
        print(f"{name:36} {unit:10} {o:12,.3f} {lim:12,.3f} {ratio:6.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
