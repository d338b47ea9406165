"""Engine streaming apply: changes/s through the full engine path from the test source.

The limit is measured in the same run: the same transactions applied directly to a fresh
``IndexedTarget.apply_changes`` with no engine in between. Prints ours / limit as a ratio.

    .venv/bin/python benchmarks/engine.py [--changes 500000] [--txn 1000]
"""

from __future__ import annotations

import argparse
import time

import laredo
from laredo.testing import TestSource, columns
from laredo_target_memory import IndexedTarget

T = laredo.Table("public", "bench")


def make_source(n: int, txn: int) -> TestSource:
    src = TestSource(batch_size=64)
    src.add_table(T, columns("id", "name", "grp", "val"), ())
    txns = []
    for start in range(0, n, txn):
        ops = []
        for i in range(start, min(n, start + txn)):
            k = i % (n // 4 or 1)
            if i % 10 == 9:
                ops.append(("DELETE", T, None, {"id": k}))
            else:
                ops.append(
                    (
                        "INSERT" if i < n // 4 else "UPDATE",
                        T,
                        {"id": k, "name": f"n{i}", "grp": f"g{i % 7}", "val": i},
                        None,
                    )
                )
        txns.append(ops)
    src.load_changes(txns)
    return src


def bare(src: TestSource) -> float:
    target = IndexedTarget()
    target.on_init(T, src._columns[T])
    target.on_baseline_complete(T)
    t0 = time.perf_counter()
    n = 0
    for txn in src._log:
        target.apply_changes(T, txn)
        n += len(txn)
    return n / (time.perf_counter() - t0)


def engine(src: TestSource, n: int, with_chain: bool) -> float:
    target = IndexedTarget()
    kw = {}
    if with_chain:
        kw = {
            "filters": [laredo.filters.FieldPrefix("grp", "g")],
            "transforms": [laredo.transforms.RenameFields({"val": "value"})],
        }
    eng = laredo.Engine(sources={"b": src}, pipelines=[laredo.Pipeline("b", T, target, **kw)])
    # baseline at position 0 would include the final state; stream from 0 instead
    src._rows[T] = {}
    src._last_ack = None
    src.acks = []
    orig = src.baseline
    src.baseline = lambda tables, cb: 0  # type: ignore[method-assign]
    t0 = time.perf_counter()
    eng.start()
    eng.await_ready(30)
    last = src.position
    while eng.source_info("b").acked_position != str(last):  # type: ignore[union-attr]
        time.sleep(0.001)
    rate = n / (time.perf_counter() - t0)
    eng.stop()
    src.baseline = orig  # type: ignore[method-assign]
    return rate


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--changes", type=int, default=500_000)
    ap.add_argument("--txn", type=int, default=1000)
    a = ap.parse_args()
    src = make_source(a.changes, a.txn)
    limit = max(bare(src) for _ in range(2))
    plain = max(engine(src, a.changes, False) for _ in range(2))
    chain = max(engine(src, a.changes, True) for _ in range(2))
    print(
        f"{'engine streaming apply (' + str(a.changes) + ' changes, txn ' + str(a.txn) + ')':<58}"
        f"{'ours/s':>12}{'limit/s':>12}{'ratio':>8}"
    )
    print(
        f"{'  engine + IndexedTarget, no filters':<58}{plain:>12,.0f}{limit:>12,.0f}"
        f"{plain / limit:>8.2f}"
    )
    print(
        f"{'  engine + IndexedTarget, filter + transform':<58}{chain:>12,.0f}{limit:>12,.0f}"
        f"{chain / limit:>8.2f}"
    )
    print("  limit = the same transactions applied directly to IndexedTarget.apply_changes")


if __name__ == "__main__":
    main()
