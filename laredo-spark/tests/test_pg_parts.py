"""Executors write the baseline's parts; the driver only plans and commits.

A task that fails after its part is durable is retried without a duplicate row; no row
reaches the driver's Python process; bad input fails clearly and lists no snapshot; parts
go to S3 and are read back by Spark (one partition per part) and by the engine.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import laredo
import pytest
from laredo.errors import SnapshotError, SourceError
from laredo.snapshots.jsonl import JsonlSerializer
from laredo.snapshots.layout import ManifestSnapshotStore
from laredo.snapshots.local import LocalSnapshotStore
from laredo.snapshots.parquet import ParquetSerializer
from laredo.types import TableIdentifier
from laredo_spark import spark_baseline
from laredo_target_memory import IndexedTarget
from pyspark import TaskContext, cloudpickle

pytestmark = [pytest.mark.spark, pytest.mark.integration]

# the stores below travel to the executors by value (this module is not importable there)
cloudpickle.register_pickle_by_value(sys.modules[__name__])

ITEMS = TableIdentifier("public", "items")


def make_items(db: Any, n: int) -> None:
    db.execute(
        "CREATE TABLE items (id int PRIMARY KEY, sku text, price numeric, at timestamptz, "
        "day date, doc jsonb)"
    )
    db.execute(
        "INSERT INTO items SELECT g, 'sku-' || g, g / 8.0, "
        "timestamptz '2026-01-01 00:00:00+00' + g * interval '1 second', "
        "date '2026-01-01' + g %% 30, jsonb_build_object('g', g) FROM generate_series(1, %s) g",
        (n,),
    )


def source_config(db: Any, dsn: str | None = None) -> dict[str, Any]:
    return {
        "connection": dsn or db.dsn,
        "slot_mode": "stateful",
        "slot_name": db.slot_name,
        "publication": {"create": True},
    }


def table_rows(db: Any) -> dict[int, dict[str, Any]]:
    with db.connect() as conn:
        cur = conn.execute("SELECT * FROM items")
        names = [d.name for d in cur.description]
        return {r[0]: dict(zip(names, r, strict=True)) for r in cur.fetchall()}


class FlakyStore(LocalSnapshotStore):
    """Fails partition 1's first attempt right after its part is written and durable."""

    def __init__(self, path: Path, marker: Path) -> None:
        super().__init__(path, fsync=False)
        self.marker = marker

    def write_part_batches(self, *args: Any, **kwargs: Any) -> Any:
        part = super().write_part_batches(*args, **kwargs)
        ctx = TaskContext.get()
        if ctx is not None and ctx.partitionId() == 1 and ctx.attemptNumber() == 0:
            self.marker.write_text(part.path)
            raise RuntimeError("injected: the task dies after writing its part")
        return part


def forbid_driver_rows(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make every way rows could reach (or be written by) this Python process fail."""
    from pyspark.rdd import RDD
    from pyspark.sql import DataFrame
    from pyspark.sql.classic.dataframe import DataFrame as ClassicDataFrame

    def forbidden(*_a: Any, **_k: Any) -> Any:
        raise AssertionError("rows reached the driver's Python process")

    for cls in (DataFrame, ClassicDataFrame):
        for name in ("collect", "toLocalIterator", "toPandas", "toArrow", "take", "tail"):
            if hasattr(cls, name):
                monkeypatch.setattr(cls, name, forbidden)
    for name in ("collect", "toLocalIterator", "take"):
        monkeypatch.setattr(RDD, name, forbidden)
    for ser in (ParquetSerializer, JsonlSerializer):
        monkeypatch.setattr(ser, "write", forbidden)
        monkeypatch.setattr(ser, "write_batches", forbidden)
    monkeypatch.setattr(ManifestSnapshotStore, "write_part", forbidden)
    monkeypatch.setattr(ManifestSnapshotStore, "write_part_batches", forbidden)


def test_retried_task_leaves_no_duplicate_and_no_row_passes_the_driver(
    spark: Any, pg_database: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = pg_database
    make_items(db, 4000)
    marker = tmp_path / "injected"
    store = FlakyStore(tmp_path / "snaps", marker)
    pipe = laredo.Pipeline("pg", ITEMS, IndexedTarget())
    forbid_driver_rows(monkeypatch)
    res = spark_baseline(
        spark, source_config(db), [pipe], snapshot_store=store, partitions=3, max_slice_pages=20
    )
    monkeypatch.undo()
    assert marker.exists(), "the failure was not injected"
    want = table_rows(db)
    meta, data = store.load(res.snapshot_id)
    got = list(data[ITEMS])
    assert len(got) == len(want) == 4000  # no duplicate, no loss
    assert {r["id"]: r for r in got} == want
    # the value types the local engine produces (psycopg's), zone included
    row, ref = next(r for r in got if r["id"] == 7), want[7]
    assert [type(v) for v in row.values()] == [type(v) for v in ref.values()]
    assert row["at"].tzinfo == ref["at"].tzinfo
    manifest = store.manifest(res.snapshot_id)
    (artifact,) = manifest.artifacts
    assert len(artifact.parts) >= 3 and {p.format for p in artifact.parts} == {"parquet"}
    folder = tmp_path / "snaps" / res.snapshot_id
    on_disk = sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())
    assert on_disk == sorted(["metadata.json", *(p.path for p in artifact.parts)])
    assert marker.read_text() not in on_disk  # the failed attempt's part was removed
    assert meta.tables[0].row_count == 4000


class BlindStore(LocalSnapshotStore):
    """Writable here; on the executors it points under a regular file."""

    def __init__(self, path: Path, blocked: Path) -> None:
        super().__init__(path, fsync=False)
        self.blocked = blocked

    def __reduce__(self) -> Any:
        return (LocalSnapshotStore, (self.blocked, False))


def test_bad_input_fails_clearly_and_lists_no_snapshot(
    spark: Any, pg_database: Any, tmp_path: Path
) -> None:
    db = pg_database
    make_items(db, 500)
    pipe = laredo.Pipeline("pg", ITEMS, IndexedTarget())
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")

    # a store the executors cannot write: the error names where they tried
    store = BlindStore(tmp_path / "snaps", blocker / "snaps")
    with pytest.raises(SnapshotError, match=r"cannot write part .* to .*a-file/snaps"):
        spark_baseline(spark, source_config(db), [pipe], snapshot_store=store, partitions=2)
    assert store.list() == [] and list((tmp_path / "snaps").iterdir()) == []
    assert db.scalar("SELECT count(*) FROM pg_replication_slots") == 0  # dropped again

    # ... and one the driver cannot write: refused before a slot is created
    with pytest.raises(SnapshotError, match=r"a-file/snaps"):
        spark_baseline(
            spark, source_config(db), [pipe], snapshot_store=LocalSnapshotStore(blocker / "snaps")
        )

    # PostgreSQL refusing the executors (the role loses LOGIN once the slot exists)
    role = f"r_{db.slot_name}"
    db.execute(f"CREATE ROLE {role} LOGIN REPLICATION")
    db.execute(f"ALTER TABLE items OWNER TO {role}")
    db.execute(f"GRANT CREATE ON DATABASE {db.dbname} TO {role}")

    class LockOut(laredo.NullObserver):
        def on_baseline_started(self, *_a: Any) -> None:
            db.execute(f"ALTER ROLE {role} NOLOGIN")

    store = LocalSnapshotStore(tmp_path / "snaps2", fsync=False)
    with pytest.raises(SourceError, match=r"cannot connect to PostgreSQL at 127\.0\.0\.1:\d+/"):
        spark_baseline(
            spark,
            source_config(db, db.dsn_for(user=role)),
            [pipe],
            snapshot_store=store,
            observer=LockOut(),
        )
    assert store.list() == [] and list((tmp_path / "snaps2").iterdir()) == []
    db.execute(
        "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = %s",
        (db.slot_name,),
    )


def test_parts_on_s3_read_back_by_spark_and_the_engine(
    spark: Any, pg_database: Any, moto_server: Any, s3_bucket: str
) -> None:
    from laredo_snapshot_s3 import S3SnapshotStore

    db = pg_database
    make_items(db, 3000)
    store = S3SnapshotStore(s3_bucket, prefix="snaps", endpoint_url=moto_server.endpoint_url)
    pipe = laredo.Pipeline("pg", ITEMS, IndexedTarget())
    res = spark_baseline(
        spark, source_config(db), [pipe], snapshot_store=store, partitions=2, max_slice_pages=15
    )
    parts = store.manifest(res.snapshot_id).artifacts[0].parts
    assert len(parts) >= 3
    want = table_rows(db)
    _meta, data = store.load(res.snapshot_id)
    assert {r["id"]: r for r in data[ITEMS]} == want
    config = {"bucket": s3_bucket, "prefix": "snaps", "endpoint_url": moto_server.endpoint_url}
    df = (
        spark.read.format("laredo-snapshot")
        .option("store", "s3")
        .option("store_config", json.dumps(config))
        .option("table", "public.items")
        .option(
            "kinds",
            json.dumps({"id": "int", "price": "decimal", "at": "timestamptz", "doc": "json"}),
        )
        .load()
    )
    assert df.rdd.getNumPartitions() == len(parts)  # one Spark partition per part
    got = {r["id"]: r for r in df.collect()}
    assert len(got) == 3000
    assert got[8]["price"] == "1.00000000000000000000"
    assert got[8]["at"].astimezone(want[8]["at"].tzinfo) == want[8]["at"]
    assert json.loads(got[8]["doc"]) == {"$type": "json", "value": {"g": 8}}
