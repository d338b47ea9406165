"""Parallel consistent baseline on Spark, restored by the local engine: no gap, no duplicate."""

from __future__ import annotations

import random
import threading
from typing import Any

import laredo
import pytest
from laredo.filters import FieldEquals
from laredo.snapshots.jsonl import JsonlSerializer
from laredo.snapshots.local import LocalSnapshotStore
from laredo.snapshots.parquet import ParquetSerializer
from laredo.testing import wait_until
from laredo.transforms import DropFields, RenameFields
from laredo.types import TableIdentifier
from laredo_spark import ExportedSnapshot, spark_baseline
from laredo_spark.pg import ctid_slices
from laredo_target_memory import IndexedTarget

from ._support import pg_source

pytestmark = [pytest.mark.spark, pytest.mark.integration]

USERS = TableIdentifier("public", "users")


class StrictTarget:
    """An IndexedTarget that counts inserts of keys it already holds (duplicates)."""

    def __init__(self) -> None:
        self.inner = IndexedTarget()
        self.duplicates = 0
        self.restored = 0

    def on_init(self, table: Any, columns: Any) -> None:
        self.inner.on_init(table, columns)

    def on_baseline_row(self, table: Any, row: Any) -> None:
        self.inner.on_baseline_row(table, row)

    def on_baseline_complete(self, table: Any) -> None:
        self.inner.on_baseline_complete(table)

    def on_insert(self, table: Any, row: Any) -> None:
        before = self.inner.count()
        self.inner.on_insert(table, row)
        if self.inner.count() == before:
            self.duplicates += 1

    def on_update(self, table: Any, row: Any, identity: Any) -> None:
        self.inner.on_update(table, row, identity)

    def on_delete(self, table: Any, identity: Any) -> None:
        self.inner.on_delete(table, identity)

    def on_truncate(self, table: Any) -> None:
        self.inner.on_truncate(table)

    def is_durable(self) -> bool:
        return False

    def on_schema_change(self, table: Any, old: Any, new: Any) -> Any:
        return self.inner.on_schema_change(table, old, new)

    def export_snapshot(self) -> Any:
        return self.inner.export_snapshot()

    def restore_snapshot(self, info: Any, rows: Any) -> None:
        self.inner.restore_snapshot(info, rows)
        self.restored = self.inner.count()

    def supports_consistent_snapshot(self) -> bool:
        return True

    def on_close(self, table: Any) -> None:
        self.inner.on_close(table)

    def count(self) -> int:
        return self.inner.count()


def _writer(db: Any, stop: threading.Event, seed: int, counter: list[int]) -> None:
    rnd = random.Random(seed)
    n = 10_000_000 * (seed + 1)
    with db.connect() as conn:
        while not stop.is_set():
            op = rnd.random()
            if op < 0.4:
                n += 1
                conn.execute(
                    "INSERT INTO users VALUES (%s, %s, %s, %s, now(), '{\"w\": 1}')",
                    (n, f"w{n}", rnd.randint(0, 99), rnd.random() < 0.7),
                )
            elif op < 0.8:
                conn.execute(
                    "UPDATE users SET active = NOT active, score = score + 1, at = now() "
                    "WHERE id = %s",
                    (rnd.randint(1, 3000),),
                )
            else:
                conn.execute("DELETE FROM users WHERE id = %s", (rnd.randint(1, 3000),))
            counter[0] += 1


def _expected(db: Any, pipeline: laredo.Pipeline) -> dict[Any, dict[str, Any]]:
    from laredo.filters import as_filter
    from laredo.transforms import as_transform

    fs = [as_filter(f) for f in pipeline.filters]
    ts = [as_transform(t) for t in pipeline.transforms]
    out = {}
    with db.connect() as conn:
        cur = conn.execute("SELECT * FROM users")
        names = [d.name for d in cur.description]
        for values in cur.fetchall():
            row = dict(zip(names, values, strict=True))
            if all(f.include(USERS, row) for f in fs):
                for t in ts:
                    row = t.transform(USERS, row)
                out[row["id"]] = row
    return out


@pytest.mark.parametrize(
    "serializer", [JsonlSerializer(), ParquetSerializer()], ids=["jsonl", "parquet"]
)
def test_spark_baseline_then_engine_streams_without_gap_or_duplicate(
    spark: Any, pg_database: Any, tmp_path: Any, serializer: Any
) -> None:
    db = pg_database
    db.execute(
        "CREATE TABLE users (id int PRIMARY KEY, name text, score numeric, active bool, "
        "at timestamptz, doc jsonb)"
    )
    db.execute(
        "INSERT INTO users SELECT g, 'u' || g, g % 100, g % 3 <> 0, now(), '{\"k\": [1, 2]}' "
        "FROM generate_series(1, 3000) g"
    )
    cfg = pg_source(db)
    target = StrictTarget()
    pipeline = laredo.Pipeline(
        "pg",
        USERS,
        target,
        filters=[FieldEquals("active", True)],
        transforms=[DropFields(["doc"]), RenameFields({"name": "label"})],
    )
    store = LocalSnapshotStore(tmp_path / "snaps")
    stop = threading.Event()
    counter = [0]
    writers = [threading.Thread(target=_writer, args=(db, stop, i, counter)) for i in range(2)]
    for w in writers:
        w.start()
    try:
        wait_until(lambda: counter[0] > 50, 60, what="writers running", interval=0.1)
        result = spark_baseline(
            spark, cfg, [pipeline], snapshot_store=store, serializer=serializer, partitions=3
        )
        assert result.row_counts[pipeline.pipeline_id()] > 1000
        meta, _data = store.load(result.snapshot_id)
        assert meta.source_positions == {"pg": result.position}
        src = laredo.source("postgresql", **{k: v for k, v in cfg.items() if k != "type"})
        eng = laredo.Engine(
            sources={"pg": src},
            pipelines=[pipeline],
            snapshot_store=store,
            snapshot_serializer=serializer,
        )
        eng.start()
        try:
            assert eng.await_ready(60)
            assert target.restored == result.row_counts[pipeline.pipeline_id()]
            writes = counter[0]
            wait_until(
                lambda: counter[0] > writes + 100, 60, what="writes after the restore", interval=0.1
            )
            stop.set()
            for w in writers:
                w.join()
            want = _expected(db, pipeline)

            def same() -> bool:
                got = {r["id"]: r for r in target.export_snapshot()}
                return got == want

            wait_until(same, 60, "target == filtered/transformed SELECT *", interval=0.1)
            assert target.duplicates == 0
            assert "doc" not in next(iter(want.values()))
        finally:
            eng.stop()
    finally:
        stop.set()
        for w in writers:
            w.join()


@pytest.mark.parametrize("partitioned", [False, True])
def test_ctid_slices_cover_the_table_disjointly(
    spark: Any, pg_database: Any, partitioned: bool
) -> None:
    db = pg_database
    if partitioned:  # page ranges apply to every partition: sized by the largest
        db.execute("CREATE TABLE t (id int PRIMARY KEY, pad text) PARTITION BY RANGE (id)")
        db.execute("CREATE TABLE t_lo PARTITION OF t FOR VALUES FROM (1) TO (700)")
        db.execute("CREATE TABLE t_hi PARTITION OF t FOR VALUES FROM (700) TO (3000)")
    else:
        db.execute("CREATE TABLE t (id int PRIMARY KEY, pad text)")
    db.execute("INSERT INTO t SELECT g, repeat('x', 200) FROM generate_series(1, 2000) g")
    from laredo_source_pg import PostgresSourceOptions
    from laredo_spark.pg import read_slice

    opts = PostgresSourceOptions(connection=db.dsn, slot_name=db.slot_name)
    with ExportedSnapshot(opts, db.slot_name, temporary=True) as snap:
        db.execute("DELETE FROM t WHERE id <= 500")  # after the snapshot: still visible
        with db.connect() as conn:
            slices = ctid_slices(conn, TableIdentifier("public", "t"), 4)
            small = ctid_slices(conn, TableIdentifier("public", "t"), 1, max_pages=10)
        assert len(slices) == 4 and slices[0][0] is None and slices[-1][1] is None
        # capped slice size wins over the partition count (the largest partition's pages)
        assert len(small) >= (4 if partitioned else 6)
        plan = {
            "snapshot": snap.snapshot_name,
            "schema": "public",
            "table": "t",
            "kinds": {"id": "int"},
        }
        ids = [
            v
            for lo, hi in slices
            for b in read_slice(plan, opts, lo, hi)
            for v in b.column(0).to_pylist()
        ]
    assert sorted(ids) == list(range(1, 2001))


def test_spark_baseline_rejects_an_ephemeral_source(
    spark: Any, pg_database: Any, tmp_path: Any
) -> None:
    pipeline = laredo.Pipeline("pg", USERS, IndexedTarget())
    with pytest.raises(laredo.ConfigError, match="stateful"):
        spark_baseline(
            spark,
            {"connection": pg_database.dsn, "slot_name": pg_database.slot_name},
            [pipeline],
            snapshot_store=LocalSnapshotStore(tmp_path),
        )
