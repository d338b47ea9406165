"""Snapshot serializers and the local store: rows/s and bytes, beside a plain json baseline.

    python benchmarks/snapshots.py [rows]      # default 100000

Each figure is printed beside a limit measured in the same run on the same rows: a bare
``json.dumps`` / ``json.loads`` loop over 5-column rows (no file, no typing), so the ratio says
what the typed encoding, line framing and file I/O cost. Target: JSONL write and read
>= 200k rows/s for 5-column rows. Medians of 3 runs.
"""

from __future__ import annotations

import io
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from decimal import Decimal

from laredo.snapshots.jsonl import JsonlSerializer
from laredo.snapshots.local import LocalSnapshotStore
from laredo.types import SnapshotMetadata, TableIdentifier, TableSnapshotInfo

TABLE = TableIdentifier("public", "users")
T0 = datetime(2026, 1, 1, tzinfo=UTC)


def plain_rows(n: int) -> list[dict]:
    return [
        {
            "id": i,
            "name": f"user-{i}",
            "email": f"u{i}@example.com",
            "score": i * 0.5,
            "ok": i % 2 == 0,
        }
        for i in range(n)
    ]


def typed_rows(n: int) -> list[dict]:
    return [
        {
            "id": i,
            "name": f"user-{i}",
            "price": Decimal(i) / 100,
            "created": T0 + timedelta(seconds=i),
            "ok": i % 2 == 0,
        }
        for i in range(n)
    ]


def median_time(fn: Callable[[], object], runs: int = 3) -> float:
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def json_limits(rows: list[dict]) -> tuple[float, float]:
    """Plain json of the same rows: no typing, no framing, no I/O (rows/s write, read)."""
    n = len(rows)

    def json_write() -> None:
        dumps = json.dumps
        for r in rows:
            dumps(r, default=str)

    lines = [json.dumps(r, default=str) for r in rows]

    def json_read() -> None:
        loads = json.loads
        for ln in lines:
            loads(ln)

    return n / median_time(json_write), n / median_time(json_read)


def bench_serializer(
    name: str, ser: object, rows: list[dict]
) -> list[tuple[str, float, float, int]]:
    info = TableSnapshotInfo(TABLE, len(rows))
    n = len(rows)
    out: list[tuple[str, float, float, int]] = []

    def write() -> bytes:
        buf = io.BytesIO()
        ser.write(info, rows, buf)  # type: ignore[attr-defined]
        return buf.getvalue()

    data = write()

    def read() -> None:
        _, it = ser.read(io.BytesIO(data))  # type: ignore[attr-defined]
        for _ in it:
            pass

    lim_w, lim_r = json_limits(rows)
    out.append((f"{name} write", n / median_time(write), lim_w, len(data)))
    out.append((f"{name} read", n / median_time(read), lim_r, len(data)))
    return out


def bench_store(rows: list[dict]) -> list[tuple[str, float, float, int]]:
    n = len(rows)
    ser = JsonlSerializer()
    with tempfile.TemporaryDirectory() as tmp:
        store = LocalSnapshotStore(tmp)
        counter = iter(range(1000))

        def save() -> None:
            sid = f"s{next(counter)}"
            meta = SnapshotMetadata(sid, T0, {}, (TableSnapshotInfo(TABLE, n),))
            store.save(sid, meta, {TABLE: rows}, ser)

        t_save = median_time(save)

        def load() -> None:
            _, tables = store.load("s0", ser)
            for _ in tables[TABLE]:
                pass

        t_load = median_time(load)
        size = store.describe("s0").size_bytes
    lim_w, lim_r = json_limits(rows)
    return [
        ("local store save (jsonl, fsync)", n / t_save, lim_w, size),
        ("local store load (jsonl)", n / t_load, lim_r, size),
    ]


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 100_000
    results: list[tuple[str, float, float, int]] = []
    results += bench_serializer("jsonl plain 5-col", JsonlSerializer(), plain_rows(n))
    results += bench_serializer("jsonl typed 5-col", JsonlSerializer(), typed_rows(n))
    try:
        from laredo.snapshots.parquet import ParquetSerializer

        results += bench_serializer("parquet plain 5-col", ParquetSerializer(), plain_rows(n))
        results += bench_serializer("parquet typed 5-col", ParquetSerializer(), typed_rows(n))
    except ImportError:
        print("(pyarrow missing: parquet skipped)")
    results += bench_store(plain_rows(n))
    print(f"{n} rows per run, median of 3; limit = bare json.dumps/loads loop of the same rows")
    print(f"{'case':34} {'rows/s':>12} {'limit rows/s':>13} {'ratio':>7} {'bytes':>12}")
    for name, ours, lim, size in results:
        print(f"{name:34} {ours:12,.0f} {lim:13,.0f} {ours / lim:7.2f} {size:12,}")
    jsonl = {name: v for name, v, _, _ in results if name.startswith("jsonl plain")}
    ok = all(v >= 200_000 for v in jsonl.values())
    print(f"target: jsonl plain write/read >= 200,000 rows/s: {'met' if ok else 'NOT met'}")


if __name__ == "__main__":
    main()
