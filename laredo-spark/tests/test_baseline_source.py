"""``laredo-baseline``: S3 baselines of the kinesis source as DataFrames (moto server)."""

from __future__ import annotations

import gzip
import io
import json
import uuid
from datetime import UTC, date, datetime
from decimal import Decimal
from typing import Any

import pytest
from laredo.serialization import dumps_row
from laredo.snapshots.jsonl import JsonlSerializer
from laredo.snapshots.local import LocalSnapshotStore
from laredo.testing.source import columns
from laredo.types import SnapshotMetadata, TableIdentifier, TableSnapshotInfo
from laredo_spark.frame import decode_json

pytestmark = [pytest.mark.spark, pytest.mark.integration]

USERS = TableIdentifier("public", "users")


def make_rows(n: int) -> list[dict[str, Any]]:
    return [
        {
            "id": i,
            "name": f"user-{i}" if i % 7 else None,
            "score": Decimal(i) / 8,
            "at": datetime(2026, 1, 1, 12, i % 60, tzinfo=UTC),
            "ref": uuid.UUID(int=i),
            "tags": {"k": [i, "x"]},
            "day": date(2026, 1, 1 + i % 28),
            "ok": i % 2 == 0,
        }
        for i in range(1, n + 1)
    ]


def jsonl(rows: list[dict[str, Any]]) -> bytes:
    return "".join(dumps_row(r) + "\n" for r in rows).encode()


def read(spark: Any, moto_server: Any, bucket: str, **opts: str) -> Any:
    reader = (
        spark.read.format("laredo-baseline")
        .option("bucket", bucket)
        .option("endpoint_url", moto_server.endpoint_url)
        .option("region", moto_server.region)
        .option("aws_access_key_id", "testing")
        .option("aws_secret_access_key", "testing")
    )
    for k, v in opts.items():
        reader = reader.option(k, v)
    return reader.load()


def test_baseline_and_snapshot_readers_agree_in_byte_range_splits(
    spark: Any, moto_server: Any, s3_bucket: str, tmp_path: Any
) -> None:
    rows = make_rows(80)
    s3 = moto_server.client("s3")
    body = jsonl(rows[:50]) + b"\n" + jsonl(rows[50:])  # a blank line is skipped
    s3.put_object(Bucket=s3_bucket, Key="base/public.users.jsonl", Body=body)

    # the same rows as a Laredo snapshot, read by laredo-snapshot
    store = LocalSnapshotStore(tmp_path / "snaps", fsync=False)
    meta = SnapshotMetadata(
        "s1",
        datetime.now(UTC),
        {},
        (TableSnapshotInfo(USERS, len(rows), columns=columns(*rows[0], pk=["id"])),),
        "jsonl",
    )
    store.save("s1", meta, {USERS: rows}, JsonlSerializer())
    snap = (
        spark.read.format("laredo-snapshot")
        .option("store", "local")
        .option("store_config", json.dumps({"path": str(tmp_path / "snaps")}))
        .option("table", "public.users")
        .option("split_bytes", "5000")
        .load()
    )
    assert snap.rdd.getNumPartitions() >= 3  # byte ranges of the local JSONL table file
    # 5000-byte ranges: many tasks, lines crossing every boundary
    df = read(
        spark, moto_server, s3_bucket, prefix="base/", table="public.users", split_bytes="5000"
    )
    assert df.rdd.getNumPartitions() >= 3
    assert df.columns == snap.columns == list(rows[0])
    got = sorted(df.collect(), key=lambda r: json.loads(r["id"]))
    want = sorted(snap.collect(), key=lambda r: json.loads(r["id"]))
    assert [tuple(r) for r in got] == [tuple(r) for r in want]
    # and the typed values decode back exactly (no loss, no duplicate across ranges)
    decoded = [{k: decode_json(v) for k, v in r.asDict().items()} for r in got]
    assert decoded == rows


def test_parts_gzip_parquet_manifest_kinds(spark: Any, moto_server: Any, s3_bucket: str) -> None:
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    rows = make_rows(90)
    s3 = moto_server.client("s3")
    s3.put_object(Bucket=s3_bucket, Key="public.users/a.jsonl", Body=jsonl(rows[:30]))
    s3.put_object(
        Bucket=s3_bucket, Key="public.users/b.jsonl.gz", Body=gzip.compress(jsonl(rows[30:60]))
    )
    plain = [{"id": r["id"], "name": r["name"], "ok": r["ok"]} for r in rows[60:]]
    buf = io.BytesIO()
    pq.write_table(pa.Table.from_pylist(plain), buf)
    s3.put_object(Bucket=s3_bucket, Key="public.users/c.parquet", Body=buf.getvalue())
    s3.put_object(Bucket=s3_bucket, Key="public.users/notes.txt", Body=b"ignored")
    manifest = {
        "tables": {
            "public.users": {
                "columns": [
                    {"name": "id", "type": "int8", "primary_key": True},
                    {"name": "name", "type": "text"},
                    {"name": "ok", "type": "bool"},
                    {"name": "score", "type": "numeric"},
                ]
            }
        }
    }
    s3.put_object(Bucket=s3_bucket, Key="manifest.json", Body=json.dumps(manifest).encode())

    df = read(spark, moto_server, s3_bucket, table="public.users", kinds="declared")
    assert df.rdd.getNumPartitions() == 3  # one task per object
    assert [(f.name, f.dataType.simpleString()) for f in df.schema.fields] == [
        ("id", "bigint"),
        ("name", "string"),
        ("ok", "boolean"),
        ("score", "string"),
    ]
    got = {r["id"]: r for r in df.collect()}
    assert sorted(got) == list(range(1, 91))
    assert got[8]["score"] == '{"$type":"decimal","value":"1"}'
    assert decode_json(got[9]["score"]) == Decimal("1.125")
    assert got[72]["score"] is None and got[72]["ok"] is True and got[72]["name"] == "user-72"
    assert got[7]["name"] is None

    # a value that does not fit the declared kind: a clear error naming the column
    s3.put_object(Bucket=s3_bucket, Key="public.users/d.jsonl", Body=b'{"id": "x"}\n')
    with pytest.raises(Exception, match=r"column 'id' has str value"):
        read(spark, moto_server, s3_bucket, table="public.users", kinds="declared").collect()


def test_missing_table_and_options_fail_clearly(
    spark: Any, moto_server: Any, s3_bucket: str
) -> None:
    with pytest.raises(Exception, match=r"no baseline object for public.orders"):
        _ = read(spark, moto_server, s3_bucket, table="public.orders").schema
    with pytest.raises(Exception, match=r"option 'table' is required"):
        _ = read(spark, moto_server, s3_bucket).schema
