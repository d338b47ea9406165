"""Spark baseline into a ``delta`` target: executors write the first version's files, the
driver commits them at the slot's position; the engine then streams on from the slot into the
same Delta table with no gap and no duplicate."""

from __future__ import annotations

import threading
import time
import uuid
from decimal import Decimal
from pathlib import Path
from typing import Any

import laredo
import pytest
from laredo.errors import TargetError
from laredo.testing import free_port, wait_until
from laredo.types import TableIdentifier

pytest.importorskip("laredo_target_delta")
from laredo_source_pg.source import PostgresSource
from laredo_spark.delta_baseline import spark_delta_baseline
from laredo_target_delta import DeltaTarget, DeltaTargetOptions, history, rows_as_of

from ._support import delta_rows, pg_rows

pytestmark = [pytest.mark.spark, pytest.mark.integration]

ITEMS = TableIdentifier("public", "items")


def test_spark_writes_the_first_version_and_the_engine_continues(
    spark: Any, pg_database: Any, tmp_path: Path
) -> None:
    db = pg_database
    db.execute(
        "CREATE TABLE items (id int PRIMARY KEY, sku text, price numeric, at timestamptz, "
        "doc jsonb)"
    )
    db.execute(
        "INSERT INTO items SELECT g, 'sku-' || g, g / 8.0, "
        "timestamptz '2026-01-01 00:00:00+00' + g * interval '1 second', "
        "jsonb_build_object('g', g) FROM generate_series(1, 300) g"
    )
    uri = str(tmp_path / "lake" / "items")
    cfg = {
        "connection": db.dsn,
        "slot_mode": "stateful",
        "slot_name": db.slot_name,
        "publication": {"create": True},
    }
    pipe = laredo.Pipeline("pg", ITEMS, DeltaTarget(DeltaTargetOptions(uri=uri)))
    stop = threading.Event()

    def write() -> None:  # concurrent writers during the Spark job
        with db.connect() as conn:
            i = 2000
            while not stop.is_set():
                conn.execute("INSERT INTO items VALUES (%s, 'during', 2.5, now(), '{}')", (i,))
                conn.execute("UPDATE items SET sku = %s WHERE id = %s", (f"u{i}", i % 300 + 1))
                i += 1
                time.sleep(0.01)

    writer = threading.Thread(target=write)
    writer.start()
    try:
        res = spark_delta_baseline(spark, cfg, [pipe], source_id="pg", partitions=3)
    finally:
        stop.set()
        writer.join()
    assert sum(res.row_counts.values()) >= 300
    commits = history(uri)
    assert [(c.kind, c.position) for c in commits] == [("baseline", res.position)]

    # changes after the baseline's snapshot: the engine streams them from the slot
    db.execute("UPDATE items SET sku = 'changed' WHERE id <= 10")
    db.execute("DELETE FROM items WHERE id > 290")
    db.execute("INSERT INTO items VALUES (1000, 'new', 1.5, now(), '{\"n\": 1}')")
    src = PostgresSource(**cfg, status_interval=0.2)
    target = DeltaTarget(DeltaTargetOptions(uri=uri, flush_interval="100ms"))
    eng = laredo.Engine(sources={"pg": src}, pipelines=[laredo.Pipeline("pg", ITEMS, target)])
    eng.start()
    try:
        assert eng.await_ready(60)
        wait_until(
            lambda: delta_rows(uri) == pg_rows(db, "items"), 60, "the Delta table", interval=0.2
        )
    finally:
        eng.stop()
    kinds = [c.kind for c in history(uri)]
    assert kinds.count("baseline") == 1  # resumed from the slot: no second baseline


SECRET = "moto-secret-key-spark"


def test_spark_writes_the_first_version_to_s3_and_the_engine_continues(
    spark: Any, pg_database: Any, moto_process: str, caplog: pytest.LogCaptureFixture
) -> None:
    import boto3

    storage = {
        "AWS_ENDPOINT_URL": moto_process,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": SECRET,
        "AWS_REGION": "us-east-1",
        "AWS_ALLOW_HTTP": "true",
        "AWS_S3_ALLOW_UNSAFE_RENAME": "true",
    }
    s3 = boto3.client(
        "s3",
        endpoint_url=moto_process,
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key=SECRET,
    )
    bucket = f"laredo-spark-delta-{uuid.uuid4().hex[:8]}"
    s3.create_bucket(Bucket=bucket)
    db = pg_database
    db.execute("CREATE TABLE items (id int PRIMARY KEY, sku text, price numeric(10,2))")
    db.execute("INSERT INTO items SELECT g, 'sku-' || g, g / 4.0 FROM generate_series(1, 500) g")
    uri = f"s3://{bucket}/lake/items"
    cfg = {
        "connection": db.dsn,
        "slot_mode": "stateful",
        "slot_name": db.slot_name,
        "publication": {"create": True},
    }
    options = DeltaTargetOptions(uri=uri, storage_options=storage)
    pipe = laredo.Pipeline("pg", ITEMS, DeltaTarget(options))
    caplog.set_level("DEBUG", logger="laredo_spark")
    caplog.set_level("DEBUG", logger="laredo_target_delta")
    res = spark_delta_baseline(spark, cfg, [pipe], source_id="pg", partitions=3)
    assert res.row_counts == {pipe.pipeline_id(): 500}
    assert SECRET not in caplog.text and SECRET not in repr(res)
    commits = history(uri, storage)
    assert [(c.kind, c.position) for c in commits] == [("baseline", res.position)]
    # the parts are objects in the bucket, beside the log; nothing was written locally
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket=bucket)["Contents"]]
    assert sum(k.endswith(".parquet") for k in keys) >= 2
    assert any("/_delta_log/" in k for k in keys)
    rows, _, _ = rows_as_of(uri, "FFFFFFFF/FFFFFFFF", storage)
    assert {r["id"]: r["price"] for r in rows} == {g: Decimal(g) / 4 for g in range(1, 501)}

    db.execute("UPDATE items SET sku = 'changed' WHERE id <= 10")
    db.execute("DELETE FROM items WHERE id > 490")
    db.execute("INSERT INTO items VALUES (1000, 'new', 1.5)")
    src = PostgresSource(**cfg, status_interval=0.2)
    target = DeltaTarget(DeltaTargetOptions(uri=uri, storage_options=storage, flush_interval=0.1))
    eng = laredo.Engine(sources={"pg": src}, pipelines=[laredo.Pipeline("pg", ITEMS, target)])
    eng.start()
    try:
        assert eng.await_ready(60)

        def converged() -> bool:
            return delta_rows(uri, storage=storage) == pg_rows(db, "items")

        wait_until(converged, 60, "the Delta table", interval=0.3)
    finally:
        eng.stop()
    assert [c.kind for c in history(uri, storage)].count("baseline") == 1


def test_an_unreachable_object_store_fails_before_the_slot_naming_the_uri(
    pg_database: Any,
) -> None:
    db = pg_database
    db.execute("CREATE TABLE items (id int PRIMARY KEY, sku text)")
    port = free_port()  # nothing listens there
    storage = {
        "AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}",
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": SECRET,
        "AWS_REGION": "us-east-1",
        "AWS_ALLOW_HTTP": "true",
        "timeout": "2s",
        "connect_timeout": "1s",
    }
    options = DeltaTargetOptions(uri="s3://nowhere/items", storage_options=storage)
    pipe = laredo.Pipeline("pg", ITEMS, DeltaTarget(options))
    cfg = {
        "connection": db.dsn,
        "slot_mode": "stateful",
        "slot_name": db.slot_name,
        "publication": {"create": True},
    }
    with pytest.raises(TargetError, match=r"uri = 's3://nowhere/items'") as info:
        spark_delta_baseline(None, cfg, [pipe], source_id="pg")  # no Spark job is started
    assert SECRET not in str(info.value)
    assert db.scalar("SELECT count(*) FROM pg_replication_slots") == 0


def test_the_delta_baseline_is_chosen_by_the_targets_capability(tmp_path: Path) -> None:
    """``writes_delta_baseline`` on the target, not its type or class name, picks the path."""
    from laredo.testing import RecordingTarget
    from laredo_spark.delta_baseline import is_delta_pipeline

    delta = DeltaTarget(DeltaTargetOptions(uri=str(tmp_path / "t")))
    assert is_delta_pipeline(laredo.Pipeline("pg", ITEMS, delta))

    class NamedLikeDelta(RecordingTarget):
        target_type = "delta"

    named = laredo.Pipeline("pg", ITEMS, NamedLikeDelta(), target_type="DeltaTarget")
    assert not is_delta_pipeline(named)
