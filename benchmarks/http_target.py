"""HTTP sync target benchmark: changes/s delivered to a local receiver, beside the limit.

Run: ``.venv/bin/python benchmarks/http_target.py [--changes 50000] [--batch-sizes 100,500,5000]
[--repeat 5]``

The receiver is a minimal asyncio HTTP/1.1 server in a child process (it reads each body and
answers 204). Per batch size:

* ``ours``: ``HttpSyncTarget.apply_changes`` over typed rows (int, text, numeric, timestamptz,
  bool, jsonb) in chunks of 1,000 changes, 10 changes per transaction, then ``flush()``: value
  encoding, JSON, HTTP and durability tracking, on one kept-alive connection;
* ``limit``: bare ``http.client`` POSTs, on one kept-alive connection, of the very bodies the
  target sent (pre-encoded, so no encoding cost): the fastest this receiver can be fed;
* ``encode``: encoding alone (codec + ``json.dumps``, no HTTP), to show where the time goes.

Figures are medians of ``--repeat`` interleaved runs; ratio = ours / limit. ``ours CPU us`` is
the client's CPU time per change (steadier than wall time on a shared box).
"""

from __future__ import annotations

import argparse
import gc
import http.client
import json
import statistics
import subprocess
import sys
import textwrap
import time
from datetime import UTC, datetime, timedelta
from decimal import Decimal

from laredo import ChangeAction, ChangeEvent, Table
from laredo_target_http import HttpSyncTarget
from laredo_target_http._codec import encode_row

TABLE = Table("public", "users")
CHUNK = 1000
PER_TXN = 10

SERVER = textwrap.dedent(
    """
    import asyncio, sys

    async def handle(reader, writer):
        try:
            while True:
                head = await reader.readuntil(b"\\r\\n\\r\\n")
                length = 0
                for line in head.split(b"\\r\\n"):
                    if line[:15].lower() == b"content-length:":
                        length = int(line[15:])
                if length:
                    await reader.readexactly(length)
                writer.write(b"HTTP/1.1 204 No Content\\r\\nContent-Length: 0\\r\\n\\r\\n")
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    async def main():
        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        print(server.sockets[0].getsockname()[1], flush=True)
        async with server:
            await server.serve_forever()

    asyncio.run(main())
    """
)


def make_events(n: int) -> list[ChangeEvent]:
    base = datetime(2026, 1, 1, tzinfo=UTC)
    out = []
    for i in range(n):
        row = {
            "id": i,
            "email": f"user{i}@example.com",
            "name": f"User {i}",
            "balance": Decimal(i) / 100,
            "updated_at": base + timedelta(seconds=i),
            "active": i % 3 == 0,
            "prefs": {"theme": "dark", "n": i % 7},
        }
        pos = i // PER_TXN + 1
        out.append(ChangeEvent(TABLE, ChangeAction.INSERT, pos, new_values=row, xid=pos))
    return out


def run_ours(url: str, events: list[ChangeEvent], batch_size: int) -> float:
    t = HttpSyncTarget(url, batch_size=batch_size, flush_interval=0)
    t.on_init(TABLE, [])
    gc.collect()
    start = time.perf_counter()
    for i in range(0, len(events), CHUNK):
        t.apply_changes(TABLE, events[i : i + CHUNK])
    t.flush()
    elapsed = time.perf_counter() - start
    assert t.changes_sent == len(events)
    t.on_close(TABLE)
    return len(events) / elapsed


def bodies_for(events: list[ChangeEvent], batch_size: int) -> list[bytes]:
    """The exact bodies the target sends (same encoding path, no HTTP)."""
    captured: list[bytes] = []
    t = HttpSyncTarget("http://127.0.0.1:9", batch_size=batch_size, flush_interval=0)
    t.on_init(TABLE, [])

    def capture(path: str, body: bytes, what: str) -> None:
        captured.append(body)

    t._client.post = capture  # type: ignore[method-assign]
    for i in range(0, len(events), CHUNK):
        t.apply_changes(TABLE, events[i : i + CHUNK])
    t.flush()
    return captured


def run_limit(port: int, bodies: list[bytes], n: int) -> float:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    headers = {"Content-Type": "application/json"}
    gc.collect()
    start = time.perf_counter()
    for body in bodies:
        conn.request("POST", "/changes", body=body, headers=headers)
        resp = conn.getresponse()
        resp.read()
        assert resp.status == 204
    elapsed = time.perf_counter() - start
    conn.close()
    return n / elapsed


def run_encode(events: list[ChangeEvent], batch_size: int) -> float:
    gc.collect()
    start = time.perf_counter()
    for i in range(0, len(events), batch_size):
        batch = [
            {
                "action": e.action.name,
                "table": "public.users",
                "position": str(e.position),
                "new": encode_row(e.new_values or {}),
            }
            for e in events[i : i + batch_size]
        ]
        json.dumps({"changes": batch}, separators=(",", ":")).encode()
    return len(events) / (time.perf_counter() - start)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--changes", type=int, default=50_000)
    ap.add_argument("--batch-sizes", default="100,500,5000")
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()

    server = subprocess.Popen([sys.executable, "-c", SERVER], stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None
        port = int(server.stdout.readline())
        url = f"http://127.0.0.1:{port}"
        events = make_events(args.changes)
        print(f"{args.changes:,} changes, typed rows, chunks of {CHUNK}, median of {args.repeat}")
        print(
            f"{'batch':>6} {'body KiB':>9} {'ours/s':>10} {'limit/s':>10} {'ratio':>6} "
            f"{'encode-only/s':>14} {'ours CPU us':>12}"
        )
        for bs in [int(x) for x in args.batch_sizes.split(",")]:
            bodies = bodies_for(events, bs)
            kib = statistics.mean(len(b) for b in bodies) / 1024
            ours, limit, enc, cpu = [], [], [], []
            for _ in range(args.repeat):  # interleaved, so load changes hit all three alike
                c0 = time.process_time()
                ours.append(run_ours(url, events, bs))
                cpu.append((time.process_time() - c0) / len(events) * 1e6)
                limit.append(run_limit(port, bodies, len(events)))
                enc.append(run_encode(events, bs))
            o, lim = statistics.median(ours), statistics.median(limit)
            print(
                f"{bs:>6} {kib:>9.1f} {o:>10,.0f} {lim:>10,.0f} {o / lim:>6.2f} "
                f"{statistics.median(enc):>14,.0f} {statistics.median(cpu):>12.1f}"
            )
    finally:
        server.kill()
        server.wait()


if __name__ == "__main__":
    main()
