"""The main job on an embedded default: a live pipeline into an indexed in-memory replica.

The source is ``laredo.testing.TestSource`` (in-process, programmable), so this runs with
nothing but the Laredo packages installed; ``laredo quickstart`` (server package) will run the
same on an embedded PostgreSQL. It baselines a table, applies a live workload of updates and
deletes while the replica is queried, then checks that the replica equals the source.
"""

from __future__ import annotations

import argparse
import random
import threading
import time
from typing import Any

import laredo
from laredo.testing import TestSource, columns
from laredo_target_memory import IndexedTarget

USERS = laredo.Table("public", "users")


def build_test_source(rows: int) -> tuple[Any, Any, Any]:
    src = TestSource(batch_size=500)
    src.add_table(
        USERS,
        columns("id", "name", "email", "score"),
        (
            {"id": i, "name": f"user{i}", "email": f"user{i}@example.com", "score": i % 100}
            for i in range(rows)
        ),
    )

    def write(i: int) -> None:
        if i % 5 == 0:
            src.delete(USERS, {"id": random.randrange(rows)})
        else:
            k = random.randrange(rows + i)
            src.update(
                USERS, {"id": k, "name": f"user{k}", "email": f"u{k}@example.com", "score": i % 100}
            )

    def truth() -> set[Any]:
        return {r["id"] for r in src.rows(USERS)}

    return src, write, truth


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rows", type=int, default=50_000)
    ap.add_argument("--changes", type=int, default=5_000)
    args = ap.parse_args()

    src, write, truth = build_test_source(args.rows)
    kind = "laredo.testing.TestSource (in-process)"
    target = IndexedTarget(lookup_fields=["email"], indexes=[laredo.Index("by_score", ["score"])])
    obs = laredo.RecordingObserver()
    engine = laredo.Engine(
        sources={"demo": src},
        pipelines=[laredo.Pipeline("demo", USERS, target)],
        observers=[obs, laredo.LoggingObserver()],
    )
    print(f"source: {kind}; table {USERS}; {args.rows:,} baseline rows")
    t0 = time.perf_counter()
    engine.start()
    if not engine.await_ready(120):
        print("engine did not become ready:", [p.error for p in engine.pipelines()])
        return 1
    dt = time.perf_counter() - t0
    print(
        f"baseline: {target.count():,} rows ready in {dt:.2f}s ({target.count() / dt:,.0f} rows/s)"
    )

    done = threading.Event()

    def workload() -> None:
        for i in range(args.changes):
            write(i)
        done.set()

    t1 = time.perf_counter()
    threading.Thread(target=workload, daemon=True).start()
    while not done.is_set():
        time.sleep(0.5)
        info = engine.pipelines()[0]
        print(
            f"  streaming: rows={info.row_count:,} state={info.state} buffer={info.buffer_depth} "
            f"acked={engine.source_info('demo').acked_position}"
        )  # type: ignore[union-attr]
    deadline = time.monotonic() + 30
    expected = truth()
    while time.monotonic() < deadline and {r["id"] for r in target.all()} != expected:
        time.sleep(0.05)
    dt = time.perf_counter() - t1
    ok = {r["id"] for r in target.all()} == expected
    print(
        f"live workload: {args.changes:,} transactions applied in {dt:.2f}s; "
        f"replica {'MATCHES' if ok else 'DIFFERS FROM'} the source ({target.count():,} rows)"
    )
    print(f"lookup by email: {target.lookup('user1@example.com')}")
    print(
        f"ack advanced {obs.count('ack_advanced')} times; last acked position "
        f"{engine.source_info('demo').acked_position}"
    )  # type: ignore[union-attr]
    engine.stop()
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
