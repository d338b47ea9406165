"""Where a streamed change's and a baseline row's CPU goes, stage by stage (issue 24).

Offline and single-threaded, so the figures are CPU per change/row of each stage without the
noise of threads and of the server: the pgoutput messages of the ``pg_source.py`` stream
workload are captured once from an embedded PostgreSQL (``pg_logical_slot_peek_binary_changes``),
then decoded and applied in this process, best of 5:

* ``reference``: the per-change path (``ChangeEvent`` s with row dicts, ``apply_changes``);
* ``batch``: the batch path (value tuples, ``ChangeBatch``, ``apply_change_batch``);
* each with the cycle collector on and off (what it costs on that path).

Baseline: CPU per row of a naive ``COPY -> dict`` loop and of ``PostgresSource.baseline_batches``
into an ``IndexedTarget`` (the engine's baseline minus its thread hand-offs), same cluster.

    .venv/bin/python benchmarks/hot_path.py [--changes 90000] [--rows 200000]
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
from laredo.batches import ChangeBatch
from laredo.types import ColumnDefinition, SourceConfig, TableIdentifier
from laredo_source_pg.embedded import EmbeddedPostgres
from laredo_source_pg.pgoutput import PgOutputDecoder, SchemaItem
from laredo_source_pg.source import PostgresSource
from laredo_target_memory import IndexedTarget
from psycopg import pq
from psycopg.adapt import Transformer

sys.path.insert(0, str(Path(__file__).parent))
from pg_source import ORDER_COLUMNS, ORDERS, Workload, fill_orders

CHG = TableIdentifier("public", "chg")
CHG_COLUMNS = [
    ColumnDefinition("id", "int4", 1, False, True, 1, type_oid=23),
    ColumnDefinition("name", "text", 2, type_oid=25),
    ColumnDefinition("n", "int4", 3, type_oid=23),
]


def best(fn: Callable[[], Any], reps: int = 5) -> float:
    """Least CPU seconds of ``reps`` calls."""
    t = float("inf")
    for _ in range(reps):
        t0 = time.process_time()
        fn()
        t = min(t, time.process_time() - t0)
    return t


def capture(pg: EmbeddedPostgres, changes: int) -> list[bytes]:
    dsn = pg.dsn("bench")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE chg (id int PRIMARY KEY, name text, n int)")
        conn.execute("CREATE PUBLICATION bench_pub FOR TABLE chg")
        conn.execute("SELECT pg_create_logical_replication_slot('cap', 'pgoutput')")
    Workload(dsn, changes, 1000).write()
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT data FROM pg_logical_slot_peek_binary_changes('cap', NULL, NULL, "
            "'proto_version', '1', 'publication_names', 'bench_pub')"
        ).fetchall()
    return [bytes(r[0]) for r in rows]


def stream_stages(msgs: list[bytes]) -> None:
    nchg = sum(1 for m in msgs if m[0] in (73, 85, 68))
    tx = Transformer()

    def loader_for(oid: int) -> Callable[[Any], Any]:
        return tx.get_loader(oid, pq.Format.TEXT).load

    def decode(batches: bool) -> list[Any]:
        d = PgOutputDecoder(loader_for, lambda s, n: CHG if n == "chg" else None, batches=batches)
        feed = d.feed
        return [t for m in msgs if (t := feed(m)) is not None]

    def target() -> IndexedTarget:
        t = IndexedTarget()
        t.on_init(CHG, CHG_COLUMNS)
        return t

    def apply_ref(txs: list[Any]) -> None:
        t = target()
        for x in txs:
            t.apply_changes(CHG, [e for e in x.items if type(e) is not SchemaItem])

    def apply_batch(txs: list[Any]) -> None:
        t = target()
        for x in txs:
            ops = [o for o in x.items if type(o) is tuple]
            if ops:
                t.apply_change_batch(CHG, ChangeBatch(CHG, ops[0][4].names, ops, x.end_lsn))

    ref_txs, batch_txs = decode(False), decode(True)
    us = 1e6 / nchg
    print(f"stream: {nchg:,} changes ({len(msgs):,} messages), CPU us per change, best of 5")
    print(f"  {'stage':<40} {'reference':>10} {'batch':>10}")
    for collector in (True, False):
        if not collector:
            gc.disable()
        on = "on" if collector else "off"
        dec = (best(lambda: decode(False)) * us, best(lambda: decode(True)) * us)
        app = (best(lambda: apply_ref(ref_txs)) * us, best(lambda: apply_batch(batch_txs)) * us)
        print(f"  {f'decode (gc {on})':<40} {dec[0]:>10.3f} {dec[1]:>10.3f}")
        print(f"  {f'apply to IndexedTarget (gc {on})':<40} {app[0]:>10.3f} {app[1]:>10.3f}")
        both = f"decode + apply (gc {on})"
        print(f"  {both:<40} {dec[0] + app[0]:>10.3f} {dec[1] + app[1]:>10.3f}")
        gc.enable()


def baseline_stages(pg: EmbeddedPostgres, rows: int) -> None:
    dsn = pg.dsn("bench")
    fill_orders(dsn, rows)
    conn = psycopg.connect(dsn)

    def naive() -> None:
        with conn.cursor().copy("COPY orders TO STDOUT") as cp:
            for c in cp:
                dict(zip(ORDER_COLUMNS, bytes(c)[:-1].decode().split("\t"), strict=True))

    src = PostgresSource(dsn, slot_name="hot_base", publication={"create": True})
    cols = src.init(SourceConfig(tables=[ORDERS]))[ORDERS]

    def ours() -> None:
        t = IndexedTarget()
        t.on_init(ORDERS, cols)
        src.baseline_batches([ORDERS], t.on_baseline_rows)

    us = 1e6 / rows
    print(f"baseline: {rows:,} rows of orders, CPU us per row, best of 3")
    print(f"  {'naive COPY -> dict (the limit)':<40} {best(naive, 3) * us:>10.3f}")
    print(f"  {'baseline_batches -> IndexedTarget':<40} {best(ours, 3) * us:>10.3f}")
    src.close()
    conn.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--changes", type=int, default=90_000)
    ap.add_argument("--rows", type=int, default=200_000)
    args = ap.parse_args()
    with EmbeddedPostgres() as pg:
        pg.execute("CREATE DATABASE bench")
        stream_stages(capture(pg, args.changes))
        baseline_stages(pg, args.rows)


if __name__ == "__main__":
    main()
