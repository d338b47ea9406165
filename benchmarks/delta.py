"""Delta target benchmark: our figures beside a limit measured in the same run.

    .venv/bin/python benchmarks/delta.py [--rows 1000000] [--changes 600000] [--txn 100]
                                         [--flush-interval 10] [--flush-rows 300000]
    .venv/bin/python benchmarks/delta.py --merge-rows 1000000,10000000
    .venv/bin/python benchmarks/delta.py --lake 1000000,10000000 [--flushes 20]
                                         [--flush-changes 2000] [--sustained 300000]

``--lake`` measures the write path against its limit, in the same run, per table size: the
limit is appending the same changes (encoded to Arrow the same way) with
``deltalake.write_deltalake`` into a table of their own, the least any Delta writer must write.

* ``flush``: ``--flushes`` flushes of ``--flush-changes`` changes to random keys (60 %
  updates, 25 % inserts, 15 % deletes) through the target; bytes of the Parquet files each
  flush added (compactions included: they are counted in the flush that triggered them), as a
  share of the table's bytes (goal: <= 10 % for 2,000 changes at 1M rows), and beside the
  bytes the limit wrote for the same changes (ratio = ours / limit);
* ``sustained``: ``--sustained`` changes (the same mix, 100 per transaction) from the first
  ``apply_changes`` until the last is durable, ``flush_rows`` = ``--flush-rows``, compactions
  included, beside the limit appending the same changes in batches of ``--flush-rows``
  (ratio = ours / limit; goal >= 50k changes/s).

``--merge-rows`` measures only the MERGE flushes and ``read_as_of``, for each table size in
the same run (1M beside 10M): baseline, then one MERGE of 1k / 10k / 100k updates of random
keys, then ``read_as_of`` at the baseline's and at the last position.

A table of ``--rows`` rows (int key, text, numeric(12,2), timestamptz, jsonb) is baselined into
a ``delta`` target (local disk) and into an IndexedTarget; then the same stream of ``--changes``
changes (60 % updates, 25 % inserts, 15 % deletes on random keys, ``--txn`` per transaction,
positions rising) is applied to each through ``apply_changes``, as the engine does.

* ``stream (accepted)``: changes/s the target accepts (its ``apply_changes`` returns; the
  delta target commits on its flusher thread and holds the caller back only when
  ``4 * flush_rows`` wait) vs. the IndexedTarget on the same stream: ratio = delta / indexed.
* ``stream (durable)``: the sustained figure, counting until the last change is committed:
  ratio = delta / indexed (goal >= 0.5).
* ``MERGE s/flush``: seconds of one MERGE commit of 1k / 10k / 100k changes into the table;
  ``rewritten``: bytes of the Parquet files that commit added (MERGE rewrites the files it
  touches).
* ``flush latency``: a single change to durable (its commit in the Delta log) at the flush
  interval: interval + MERGE.
* ``read_as_of``: seconds to read the table as of a position in the middle of the history.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import random
import shutil
import tempfile
import time
from decimal import Decimal
from pathlib import Path
from typing import Any

from laredo.types import ChangeAction, ChangeEvent, ColumnDefinition, TableIdentifier
from laredo_target_delta import DeltaTarget, DeltaTargetOptions, history, read_as_of
from laredo_target_memory import IndexedTarget

T = TableIdentifier("public", "bench")
T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
COLUMNS = [
    ColumnDefinition("id", "int8", 1, False, True, 1, 20),
    ColumnDefinition("name", "text", 2, True, False, 0, 25),
    ColumnDefinition("amount", "numeric(12,2)", 3, True, False, 0, 1700),
    ColumnDefinition("at", "timestamptz", 4, True, False, 0, 1184),
    ColumnDefinition("doc", "jsonb", 5, True, False, 0, 3802),
]


def row(i: int, v: int = 0) -> dict[str, Any]:
    return {
        "id": i,
        "name": f"name-{i}-{v}",
        "amount": Decimal(f"{i % 100000}.{v % 100:02d}"),
        "at": T0 + dt.timedelta(seconds=i + v),
        "doc": {"v": v, "tags": ["a", "b"]},
    }


def baseline(target: Any, n: int, position: int) -> float:
    t0 = time.perf_counter()
    target.on_init(T, COLUMNS)
    for lo in range(0, n, 50_000):
        target.on_baseline_rows(T, [row(i) for i in range(lo, min(n, lo + 50_000))])
    if hasattr(target, "set_change_position"):
        target.set_change_position(position)
    target.on_baseline_complete(T)
    return time.perf_counter() - t0


def stream(n_rows: int, n_changes: int, txn: int) -> list[list[ChangeEvent]]:
    rnd = random.Random(7)
    next_id = n_rows
    out: list[list[ChangeEvent]] = []
    pos = 1000
    batch: list[ChangeEvent] = []
    for k in range(n_changes):
        r = rnd.random()
        if r < 0.6:
            ev = ChangeEvent(T, ChangeAction.UPDATE, pos, new_values=row(rnd.randrange(n_rows), k))
        elif r < 0.85:
            ev = ChangeEvent(T, ChangeAction.INSERT, pos, new_values=row(next_id, k))
            next_id += 1
        else:
            ev = ChangeEvent(T, ChangeAction.DELETE, pos, old_values={"id": rnd.randrange(n_rows)})
        batch.append(ev)
        if len(batch) == txn:
            out.append(batch)
            batch = []
            pos += 10
    if batch:
        out.append(batch)
    return out


def apply_all(target: Any, txns: list[list[ChangeEvent]]) -> float:
    t0 = time.perf_counter()
    for events in txns:
        target.apply_changes(T, events)
    return time.perf_counter() - t0


def wait_durable(target: DeltaTarget, position: int, timeout: float = 600) -> None:
    deadline = time.monotonic() + timeout
    while target.durable_position() != position:
        if time.monotonic() > deadline:
            raise SystemExit(f"not durable after {timeout} s")
        time.sleep(0.01)


def added_bytes(uri: str, version: int) -> int:
    log = Path(uri, "_delta_log", f"{version:020d}.json")
    total = 0
    for line in log.read_text().splitlines():
        action = json.loads(line)
        if "add" in action:
            total += int(action["add"]["size"])
    return total


def merge_flush(target: DeltaTarget, n: int, n_rows: int, pos: int) -> tuple[float, int]:
    rnd = random.Random(n)
    events = [
        ChangeEvent(T, ChangeAction.UPDATE, pos, new_values=row(rnd.randrange(n_rows), n))
        for _ in range(n)
    ]
    target.apply_changes(T, events)
    target.set_change_position(pos + 1)
    t0 = time.perf_counter()
    target.flush()
    seconds = time.perf_counter() - t0
    assert target.last_stats is not None
    return seconds, added_bytes(target.options.uri, target.last_stats.version)


def merge_scale(sizes: list[int], work: Path) -> None:
    """MERGE seconds and bytes rewritten per flush, and read_as_of seconds, per table size."""
    for n in sizes:
        uri = str(work / f"merge-{n}")
        d = DeltaTarget(DeltaTargetOptions(uri=uri, flush_interval=0, flush_rows=10_000_000))
        b = baseline(d, n, 999)
        table_bytes = added_bytes(uri, 0)
        print(f"{n:>11,} rows  baseline {b:7.1f} s  table {table_bytes / 1e6:8.1f} MB", flush=True)
        pos = 2000
        for k in (1_000, 10_000, 100_000):
            seconds, written = merge_flush(d, k, n, pos)
            print(
                f"{n:>11,} rows  MERGE {k:>7,} changes  {seconds:7.2f} s/flush   "
                f"rewritten {written / 1e6:8.1f} MB",
                flush=True,
            )
            pos += 100
        d.on_close(T)
        for at in (999, pos - 100):
            t0 = time.perf_counter()
            table, got = read_as_of(uri, at)
            print(
                f"{n:>11,} rows  read_as_of {got:>5}  {time.perf_counter() - t0:7.2f} s "
                f"({table.num_rows:,} rows)",
                flush=True,
            )
            del table
        shutil.rmtree(uri, ignore_errors=True)


def log_bytes(uri: str, after: int, upto: int) -> int:
    """Bytes of the Parquet files versions ``after+1 .. upto`` added."""
    return sum(added_bytes(uri, v) for v in range(after + 1, upto + 1))


def version_of(uri: str) -> int:
    return max(int(p.stem) for p in Path(uri, "_delta_log").glob("*.json"))


def limit_append(uri: str, batches: list[list[dict[str, Any]]]) -> tuple[float, int]:
    """The limit: the same rows appended with write_deltalake (Arrow encoding included)."""
    from deltalake import write_deltalake
    from laredo_target_delta.columns import codecs_for, to_arrow

    codecs = codecs_for(COLUMNS)
    write_deltalake(uri, to_arrow(codecs, [row(0)]))
    first = version_of(uri)
    t0 = time.perf_counter()
    for rows in batches:
        write_deltalake(uri, to_arrow(codecs, rows), mode="append")
    return time.perf_counter() - t0, log_bytes(uri, first, version_of(uri))


def changes(rnd: random.Random, n: int, n_rows: int, next_id: int, pos: int) -> list[ChangeEvent]:
    out = []
    for k in range(n):
        r = rnd.random()
        if r < 0.6:
            ev = ChangeEvent(T, ChangeAction.UPDATE, pos, new_values=row(rnd.randrange(n_rows), k))
        elif r < 0.85:
            ev = ChangeEvent(T, ChangeAction.INSERT, pos, new_values=row(next_id + k, k))
        else:
            ev = ChangeEvent(T, ChangeAction.DELETE, pos, old_values={"id": rnd.randrange(n_rows)})
        out.append(ev)
    return out


def as_rows(events: list[ChangeEvent]) -> list[dict[str, Any]]:
    return [e.new_values or dict(e.old_values or {}) for e in events]


def lake(sizes: list[int], args: argparse.Namespace, work: Path) -> None:
    """Bytes per flush and sustained changes/s, each beside the write_deltalake limit."""
    for n in sizes:
        uri = str(work / f"lake-{n}")
        opts = DeltaTargetOptions(uri=uri, flush_interval=0, flush_rows=10_000_000)
        d = DeltaTarget(opts)
        b = baseline(d, n, 999)
        table_bytes = added_bytes(uri, 0)
        print(f"{n:>11,} rows  baseline {b:6.1f} s  table {table_bytes / 1e6:7.1f} MB", flush=True)
        rnd = random.Random(n)
        pos, next_id = 2000, n
        ours: list[int] = []
        secs: list[float] = []
        batches = []
        for _ in range(args.flushes):
            events = changes(rnd, args.flush_changes, n, next_id, pos)
            next_id += args.flush_changes
            batches.append(as_rows(events))
            before = version_of(uri)
            d.apply_changes(T, events)
            d.set_change_position(pos + 1)
            t0 = time.perf_counter()
            d.flush()
            secs.append(time.perf_counter() - t0)
            ours.append(log_bytes(uri, before, version_of(uri)))
            pos += 10
        d.on_close(T)
        lim_s, lim_b = limit_append(str(work / f"limit-{n}"), batches)
        mean = sum(ours) / len(ours)
        print(
            f"{n:>11,} rows  flush of {args.flush_changes:,} changes: median "
            f"{sorted(ours)[len(ours) // 2] / 1e6:6.2f} MB, mean {mean / 1e6:6.2f} MB "
            f"= {100 * mean / table_bytes:5.2f} % of the table (goal <= 10 %), max "
            f"{max(ours) / 1e6:6.2f} MB; limit {lim_b / len(ours) / 1e6:6.2f} MB/flush; "
            f"ratio {mean / (lim_b / len(ours)):5.2f}; {sum(secs) / len(secs):5.2f} s/flush "
            f"vs {lim_s / len(ours):5.2f} s",
            flush=True,
        )
        t0 = time.perf_counter()
        read_as_of(uri, pos)
        print(f"{n:>11,} rows  read_as_of {time.perf_counter() - t0:6.2f} s", flush=True)
        shutil.rmtree(uri, ignore_errors=True)
        shutil.rmtree(work / f"limit-{n}", ignore_errors=True)
        sustained(n, args, work)


def sustained(n: int, args: argparse.Namespace, work: Path) -> None:
    uri = str(work / f"sustained-{n}")
    d = DeltaTarget(DeltaTargetOptions(uri=uri, flush_interval=0, flush_rows=args.flush_rows))
    baseline(d, n, 999)
    rnd = random.Random(n + 1)
    txns = []
    pos, next_id = 2000, n
    for _ in range(args.sustained // 100):
        txns.append(changes(rnd, 100, n, next_id, pos))
        next_id += 100
        pos += 10
    last = txns[-1][0].position
    t0 = time.perf_counter()
    for events in txns:
        d.apply_changes(T, events)
    d.set_change_position(last + 1)
    d.flush()
    wait_durable(d, last)
    ours = time.perf_counter() - t0
    d.on_close(T)
    flat = [r for events in txns for r in as_rows(events)]
    step = args.flush_rows
    lim_s, _ = limit_append(
        str(work / f"slimit-{n}"), [flat[i : i + step] for i in range(0, len(flat), step)]
    )
    total = len(flat)
    print(
        f"{n:>11,} rows  sustained {total:,} changes: {total / ours:9,.0f}/s (goal >= 50,000) "
        f"vs limit {total / lim_s:9,.0f}/s; ratio {lim_s / ours:4.2f}",
        flush=True,
    )
    kinds = [c.kind for c in history(uri)]
    fraction = getattr(DeltaTargetOptions(uri=uri).maintenance, "compact_fraction", None)
    if fraction is None:  # a write path without compaction (the MERGE before merge-on-read)
        shutil.rmtree(uri, ignore_errors=True)
        shutil.rmtree(work / f"slimit-{n}", ignore_errors=True)
        return
    comp = compaction_seconds(uri, last)
    share = comp * total / (fraction * n)  # the compaction that many changes cost, amortised
    note = (
        f"{kinds.count('compaction')} compaction(s) in the run"
        if "compaction" in kinds
        else f"incl. amortised compaction {total / (ours + share):9,.0f}/s"
    )
    print(
        f"{n:>11,} rows  compaction {comp:6.1f} s (every {fraction:g} x the table's rows "
        f"of changes); {note}",
        flush=True,
    )
    shutil.rmtree(uri, ignore_errors=True)
    shutil.rmtree(work / f"slimit-{n}", ignore_errors=True)


def compaction_seconds(uri: str, position: int) -> float:
    """Seconds of one compaction of the change rows in the table at ``uri``."""
    from laredo_target_delta.writer import DeltaWriter

    w = DeltaWriter(DeltaTargetOptions(uri=uri), T, "bench")
    w.set_columns(COLUMNS)
    w.open_existing()
    t0 = time.perf_counter()
    w.compact_changes(str(position), position, force=True)
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--merge-rows", default="", help="e.g. 1000000,10000000: MERGE scale only")
    ap.add_argument("--lake", default="", help="e.g. 1000000,10000000: flush bytes, sustained")
    ap.add_argument("--flushes", type=int, default=20)
    ap.add_argument("--flush-changes", type=int, default=2_000)
    ap.add_argument("--sustained", type=int, default=300_000)
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--changes", type=int, default=600_000)
    ap.add_argument("--txn", type=int, default=100)
    ap.add_argument("--flush-interval", type=float, default=10.0)
    ap.add_argument("--flush-rows", type=int, default=300_000)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="laredo-delta-bench-"))
    try:
        if args.lake:
            lake([int(x) for x in args.lake.split(",")], args, work)
        elif args.merge_rows:
            merge_scale([int(x) for x in args.merge_rows.split(",")], work)
        else:
            run(args, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def run(args: argparse.Namespace, work: Path) -> None:
    txns = stream(args.rows, args.changes, args.txn)
    last_pos = txns[-1][0].position
    print(f"table {args.rows:,} rows; stream {args.changes:,} changes in {len(txns):,} txns")

    indexed = IndexedTarget()
    b_idx = baseline(indexed, args.rows, 999)
    s_idx = apply_all(indexed, txns)
    del indexed

    uri = str(work / "stream")
    delta = DeltaTarget(
        DeltaTargetOptions(uri=uri, flush_interval=args.flush_interval, flush_rows=args.flush_rows)
    )
    b_delta = baseline(delta, args.rows, 999)
    s_delta = apply_all(delta, txns)
    delta.set_change_position(last_pos + 1)
    wait_durable(delta, last_pos)
    commits = delta.commits
    delta.on_close(T)

    rate_idx = args.changes / s_idx
    rate_delta = args.changes / s_delta
    print(f"baseline             delta {b_delta:7.2f} s   indexed {b_idx:7.2f} s")
    print(
        f"stream (accepted)    delta {rate_delta:10,.0f}/s   indexed {rate_idx:10,.0f}/s   "
        f"ratio {rate_delta / rate_idx:.2f} (goal >= 0.50)  [{commits} commits]"
    )

    # durable rate: a fresh run, timing until the last change is committed
    uri2 = str(work / "durable")
    d2 = DeltaTarget(
        DeltaTargetOptions(uri=uri2, flush_interval=args.flush_interval, flush_rows=args.flush_rows)
    )
    baseline(d2, args.rows, 999)
    t0 = time.perf_counter()
    for events in txns:
        d2.apply_changes(T, events)
    d2.set_change_position(last_pos + 1)
    d2.flush()  # what is left after the stream ends (the engine flushes at the interval)
    wait_durable(d2, last_pos)
    durable = time.perf_counter() - t0
    rate_durable = args.changes / durable
    print(
        f"stream (durable)     delta {rate_durable:10,.0f}/s   indexed {rate_idx:10,.0f}/s   "
        f"ratio {rate_durable / rate_idx:.2f}"
    )

    pos = last_pos + 100
    for n in (1_000, 10_000, 100_000):
        seconds, written = merge_flush(d2, n, args.rows, pos)
        print(f"MERGE {n:>7,} changes  {seconds:6.2f} s/flush   rewritten {written / 1e6:8.1f} MB")
        pos += 100
    mid = txns[len(txns) // 2][0].position
    t0 = time.perf_counter()
    table, at = read_as_of(uri2, mid)
    print(
        f"read_as_of           {time.perf_counter() - t0:6.2f} s ({table.num_rows:,} rows at {at})"
    )

    # flush latency: one change to durable at the configured interval
    d2.apply_changes(T, [ChangeEvent(T, ChangeAction.UPDATE, pos, new_values=row(1, 1))])
    t0 = time.perf_counter()
    d2.set_change_position(pos + 1)
    wait_durable(d2, pos)
    print(
        f"flush latency        {time.perf_counter() - t0:6.2f} s "
        f"(flush_interval {args.flush_interval:g} s + MERGE)"
    )
    d2.on_close(T)


if __name__ == "__main__":
    main()
