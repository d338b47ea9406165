from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterable, Iterator
from decimal import Decimal
from typing import IO, Any

import laredo
import pytest
from laredo.errors import ConfigError, SnapshotError
from laredo.snapshots.jsonl import JsonlSerializer
from laredo.types import ColumnDefinition, Row, SnapshotMetadata, TableIdentifier, TableSnapshotInfo
from laredo_snapshot_s3 import S3SnapshotStore, SnapshotNotFoundError
from laredo_snapshot_s3._s3io import MIN_PART_SIZE, S3UploadWriter

pytestmark = pytest.mark.integration

USERS = TableIdentifier("public", "users")
ORDERS = TableIdentifier("shop", "orders")


def meta(sid: str, created: dt.datetime, *tables: TableIdentifier, **user: Any) -> SnapshotMetadata:
    return SnapshotMetadata(
        snapshot_id=sid,
        created_at=created,
        source_positions={"pg": "0/16B6C50"},
        tables=tuple(
            TableSnapshotInfo(
                t, 0, columns=(ColumnDefinition("id", "int8", 1, False, True, 1),), position="p"
            )
            for t in tables
        ),
        user_meta=dict(user),
    )


T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


@pytest.fixture
def store(moto_server: Any, s3_bucket: str) -> S3SnapshotStore:
    return S3SnapshotStore(s3_bucket, prefix="snaps/", endpoint_url=moto_server.endpoint_url)


def typed_rows(n: int) -> list[Row]:
    return [
        {
            "id": i,
            "name": f"user {i}",
            "balance": Decimal(f"{i}.50"),
            "seen": T0 + dt.timedelta(seconds=i),
            "uid": uuid.UUID(int=i),
            "blob": bytes([i % 256]),
            "score": i / 4,
            "tags": ["a", "b"],
            "none": None,
        }
        for i in range(n)
    ]


def test_save_load_roundtrip_keeps_types_and_layout(
    store: S3SnapshotStore, moto_server: Any
) -> None:
    rows = typed_rows(50)
    desc = store.save(
        "snap-1",
        meta("ignored", T0, USERS, ORDERS, who="me"),
        {USERS: rows, ORDERS: []},
        JsonlSerializer(),
    )
    assert desc.snapshot_id == "snap-1"
    assert desc.format == "jsonl"
    assert desc.size_bytes > 0
    assert {t.table: t.row_count for t in desc.tables} == {USERS: 50, ORDERS: 0}
    keys = sorted(
        o["Key"] for o in moto_server.client("s3").list_objects_v2(Bucket=store.bucket)["Contents"]
    )
    assert keys == [
        "snaps/snap-1/metadata.json",
        "snaps/snap-1/public.users/part-00000.jsonl",
        "snaps/snap-1/shop.orders/part-00000.jsonl",
    ]
    m, tables = store.load("snap-1", JsonlSerializer())
    assert m.user_meta == {"who": "me"}
    assert m.source_positions == {"pg": "0/16B6C50"}
    assert list(tables[USERS]) == rows
    assert list(tables[ORDERS]) == []
    d2 = store.describe("snap-1")
    assert d2.size_bytes == desc.size_bytes
    assert d2.tables == desc.tables


def test_list_newest_first_filter_prune_delete(store: S3SnapshotStore) -> None:
    ser = JsonlSerializer()
    for i, tables in enumerate([(USERS,), (USERS, ORDERS), (ORDERS,), (USERS,)]):
        store.save(
            f"s{i}",
            meta(f"s{i}", T0 + dt.timedelta(hours=i), *tables),
            {t: [{"id": 1}] for t in tables},
            ser,
        )
    assert [d.snapshot_id for d in store.list()] == ["s3", "s2", "s1", "s0"]
    assert [d.snapshot_id for d in store.list(USERS)] == ["s3", "s1", "s0"]
    assert [d.snapshot_id for d in store.list(ORDERS)] == ["s2", "s1"]
    assert store.prune(2, USERS) == ["s0"]
    assert [d.snapshot_id for d in store.list()] == ["s3", "s2", "s1"]
    assert store.prune(1) == ["s2", "s1"]
    store.delete("s3")
    assert store.list() == []
    with pytest.raises(SnapshotNotFoundError):
        store.delete("s3")
    with pytest.raises(SnapshotNotFoundError):
        store.describe("s3")
    with pytest.raises(LookupError, match="snapshot 's3' not found in s3://"):
        store.load("s3", ser)


def test_duplicate_and_invalid_ids_are_rejected(store: S3SnapshotStore) -> None:
    store.save("dup", meta("dup", T0, USERS), {USERS: [{"id": 1}]}, JsonlSerializer())
    with pytest.raises(SnapshotError, match="already exists"):
        store.save("dup", meta("dup", T0, USERS), {USERS: []}, JsonlSerializer())
    with pytest.raises(SnapshotError, match="invalid snapshot id"):
        store.save("a/b", meta("a/b", T0, USERS), {USERS: []}, JsonlSerializer())


class FailingSerializer(JsonlSerializer):
    """Writes a real table, then fails in the middle of the second one."""

    def write(self, info: TableSnapshotInfo, rows: Iterable[Row], out: IO[bytes]) -> int:
        if info.table == ORDERS:
            out.write(b'{"partial": true}\n')
            raise RuntimeError("disk on fire")
        return super().write(info, rows, out)


def test_failed_save_is_never_listed_and_leaves_nothing(
    store: S3SnapshotStore, moto_server: Any
) -> None:
    with pytest.raises(SnapshotError, match="disk on fire"):
        store.save(
            "broken",
            meta("broken", T0, USERS, ORDERS),
            {USERS: [{"id": 1}], ORDERS: [{"id": 2}]},
            FailingSerializer(),
        )
    assert store.list() == []
    with pytest.raises(SnapshotNotFoundError):
        store.describe("broken")
    listing = moto_server.client("s3").list_objects_v2(Bucket=store.bucket)
    assert listing.get("Contents", []) == []


def test_table_objects_without_metadata_are_ignored(
    store: S3SnapshotStore, moto_server: Any
) -> None:
    """A crash between the table uploads and metadata.json leaves orphans nobody lists."""
    s3 = moto_server.client("s3")
    s3.put_object(Bucket=store.bucket, Key="snaps/crashed/public.users.jsonl", Body=b"{}\n")
    store.save("ok", meta("ok", T0, USERS), {USERS: [{"id": 1}]}, JsonlSerializer())
    s3.put_object(Bucket=store.bucket, Key="snaps/garbled/metadata.json", Body=b"{not json")
    assert [d.snapshot_id for d in store.list()] == ["ok"]
    with pytest.raises(SnapshotNotFoundError):
        store.describe("crashed")


class CountingRows:
    """A sized iterable that records how many rows were pulled."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __iter__(self) -> Iterator[Row]:
        pad = "x" * 100
        for i in range(self.n):
            yield {"id": i, "pad": pad}


def test_large_table_goes_multipart_and_reads_back(moto_server: Any, s3_bucket: str) -> None:
    store = S3SnapshotStore(
        s3_bucket, prefix="big", endpoint_url=moto_server.endpoint_url, part_size=MIN_PART_SIZE
    )
    n = 110_000  # ~12.8 MB of JSONL: three parts of 5 MiB
    desc = store.save("big", meta("big", T0, USERS), {USERS: CountingRows(n)}, JsonlSerializer())
    head = moto_server.client("s3").head_object(
        Bucket=s3_bucket, Key="big/big/public.users/part-00000.jsonl"
    )
    assert head["ETag"].strip('"').endswith("-3"), head["ETag"]  # a 3-part multipart upload
    assert desc.size_bytes > 2 * MIN_PART_SIZE
    _, tables = store.load("big", JsonlSerializer())
    count = 0
    for i, row in enumerate(tables[USERS]):
        assert row["id"] == i
        count += 1
    assert count == n


def test_upload_writer_buffers_at_most_one_part(moto_server: Any, s3_bucket: str) -> None:
    s3 = moto_server.client("s3")
    w = S3UploadWriter(s3, s3_bucket, "w/obj", part_size=MIN_PART_SIZE)
    chunk = os.urandom(1024 * 1024 + 7)
    expected = bytearray()
    for _ in range(12):
        w.write(chunk)
        expected += chunk
        assert len(w._buf) < MIN_PART_SIZE
    assert w.multipart
    w.close()
    assert s3.get_object(Bucket=s3_bucket, Key="w/obj")["Body"].read() == bytes(expected)
    # A small object is a single PutObject; an aborted upload leaves nothing behind.
    with S3UploadWriter(s3, s3_bucket, "w/small", part_size=MIN_PART_SIZE) as small:
        small.write(b"hello")
    assert s3.get_object(Bucket=s3_bucket, Key="w/small")["Body"].read() == b"hello"
    aborted = S3UploadWriter(s3, s3_bucket, "w/aborted", part_size=MIN_PART_SIZE)
    aborted.write(os.urandom(MIN_PART_SIZE + 10))
    aborted.abort()
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket=s3_bucket)["Contents"]]
    assert "w/aborted" not in keys
    assert s3.list_multipart_uploads(Bucket=s3_bucket).get("Uploads", []) == []


def test_plugin_builds_store_and_validates_options(moto_server: Any, s3_bucket: str) -> None:
    store = laredo.snapshot_store("s3", bucket=s3_bucket, endpoint_url=moto_server.endpoint_url)
    assert isinstance(store, S3SnapshotStore)
    store.save("p", meta("p", T0, USERS), {USERS: [{"id": 1}]}, JsonlSerializer())
    assert [d.snapshot_id for d in store.list()] == ["p"]
    with pytest.raises(ConfigError) as err:
        laredo.snapshot_store("s3", bukket="x", part_size=1)
    text = str(err.value)
    assert "bukket" in text and "bucket" in text and "part_size" in text
    sized = laredo.snapshot_store(
        "s3", bucket=s3_bucket, endpoint_url=moto_server.endpoint_url, part_size="16MiB"
    )
    assert sized.part_size == 16 * 1024 * 1024  # laredo.units sizes


def test_missing_bucket_is_a_clear_error(moto_server: Any) -> None:
    store = S3SnapshotStore("no-such-bucket-laredo", endpoint_url=moto_server.endpoint_url)
    with pytest.raises(SnapshotError, match=r"no-such-bucket-laredo|NoSuchBucket"):
        store.save("x", meta("x", T0, USERS), {USERS: [{"id": 1}]}, JsonlSerializer())


def test_plugin_import_does_not_import_boto3() -> None:
    code = (
        "import sys, laredo_snapshot_s3._plugin, laredo_snapshot_s3, laredo_snapshot_s3.testing;"
        "assert 'boto3' not in sys.modules and 'botocore' not in sys.modules, 'boto imported';"
        "assert 'moto' not in sys.modules, 'moto imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_parquet_serializer_round_trip(store: S3SnapshotStore) -> None:
    """The columnar format needs random access on read; the S3 body stream must do."""
    pytest.importorskip("pyarrow")
    from laredo.snapshots.parquet import ParquetSerializer
    from laredo.testing.snapshot_conformance import typed_rows as all_types

    rows = all_types(30)
    store.save("pq", meta("pq", T0, USERS), {USERS: rows}, ParquetSerializer())
    assert store.describe("pq").format == "parquet"
    _, tables = store.load("pq", ParquetSerializer())
    got = list(tables[USERS])
    assert got == rows
    assert [type(v) for v in got[3].values()] == [type(v) for v in rows[3].values()]


def test_layout_1_snapshots_still_load(store: S3SnapshotStore, moto_server: Any) -> None:
    """A snapshot written by Laredo 0.1 (one object per table, ``files`` in the metadata)."""
    s3 = moto_server.client("s3")
    body = JsonlSerializer()
    import io

    buf = io.BytesIO()
    body.write(TableSnapshotInfo(USERS, 2, position="p"), [{"id": 1}, {"id": 2}], buf)
    data = buf.getvalue()
    s3.put_object(Bucket=store.bucket, Key="snaps/old/public.users.jsonl", Body=data)
    doc = {
        "snapshot_id": "old",
        "created_at": "2026-01-01T00:00:00+00:00",
        "format": "jsonl",
        "source_positions": {"pg": "0/1"},
        "tables": [
            {
                "table": {"schema": "public", "table": "users"},
                "row_count": 2,
                "position": "p",
                "columns": [],
            }
        ],
        "user_meta": {},
        "files": {"public.users": {"file": "public.users.jsonl", "size": len(data)}},
    }
    s3.put_object(Bucket=store.bucket, Key="snaps/old/metadata.json", Body=json.dumps(doc).encode())
    assert [d.snapshot_id for d in store.list()] == ["old"]
    _, tables = store.load("old", JsonlSerializer())
    assert list(tables[USERS]) == [{"id": 1}, {"id": 2}]


def test_parts_are_verified_while_streaming(store: S3SnapshotStore, moto_server: Any) -> None:
    store.save(
        "v", meta("v", T0, USERS), {USERS: [{"id": i} for i in range(20)]}, JsonlSerializer()
    )
    s3 = moto_server.client("s3")
    key = "snaps/v/public.users/part-00000.jsonl"
    data = s3.get_object(Bucket=store.bucket, Key=key)["Body"].read()
    s3.put_object(Bucket=store.bucket, Key=key, Body=data.replace(b'"id":7}', b'"id":8}'))
    _, tables = store.load("v", JsonlSerializer())  # same size: passes the upfront check
    with pytest.raises(SnapshotError, match="checksum mismatch"):
        list(tables[USERS])


def test_many_writers_one_commit_and_strays_removed(
    store: S3SnapshotStore, moto_server: Any
) -> None:
    """The multi-part protocol: parts from several writers; an unlisted attempt is removed."""
    from laredo.snapshots.manifest import TABLE, SnapshotArtifact

    ser = JsonlSerializer()
    info = TableSnapshotInfo(USERS, 0, position="p")
    a = store.write_part("mp", USERS, "part-00000-a", info, [{"id": 1}], serializer=ser)
    b = store.write_part("mp", USERS, "part-00001-a", info, [{"id": 2}, {"id": 3}], serializer=ser)
    store.write_part("mp", USERS, "part-00001-b", info, [{"id": 2}], serializer=ser)  # a retry
    assert store.list() == []  # staged parts are not a snapshot
    store.commit("mp", meta("mp", T0, USERS), [SnapshotArtifact(TABLE, USERS, (a, b))])
    _, tables = store.load("mp", ser)
    assert [r["id"] for r in tables[USERS]] == [1, 2, 3]
    keys = [
        o["Key"] for o in moto_server.client("s3").list_objects_v2(Bucket=store.bucket)["Contents"]
    ]
    assert not any(k.endswith("part-00001-b.jsonl") for k in keys)
    assert store.describe("mp").tables[0].row_count == 3


def test_a_pickled_store_writes_parts_and_records_artifacts(
    store: S3SnapshotStore, moto_server: Any
) -> None:
    """What Spark executors do: a pickled copy (its own client) writes parts from Arrow
    batches and records them; the original commits; batches read back verified."""
    import pickle

    pa = pytest.importorskip("pyarrow")
    from laredo.snapshots.manifest import TABLE, SnapshotArtifact
    from laredo.snapshots.parquet import ParquetSerializer

    copy = pickle.loads(pickle.dumps(store))
    assert copy.settings == store.settings and copy._client is not store._client
    info = TableSnapshotInfo(USERS, 0, position="p", pipeline_id="pid")
    parts = []
    for i in range(3):
        batch = pa.record_batch(
            [pa.array([i * 10 + j for j in range(10)]), pa.array([f"{i}.5"] * 10)],
            names=["id", "amount"],
        )
        parts.append(
            copy.write_part_batches(
                "pb",
                USERS,
                f"part-{i:05d}-1",
                info,
                [batch],
                serializer=ParquetSerializer(),
                encoded={"amount": "decimal"},
            )
        )
    copy.stage_artifact("pb", "t0", SnapshotArtifact(TABLE, USERS, tuple(parts), "pid", None, "p"))
    assert store.list() == []
    staged = store.staged_artifacts("pb")
    store.commit("pb", meta("pb", T0, USERS), list(staged.values()))
    _, tables = store.load("pb")
    got = list(tables[USERS])
    assert [r["id"] for r in got] == list(range(30))
    assert {type(r["amount"]) for r in got} == {Decimal}
    keys = [
        o["Key"] for o in moto_server.client("s3").list_objects_v2(Bucket=store.bucket)["Contents"]
    ]
    assert not any("_artifacts" in k for k in keys)
    read = store.read_part_batches("pb", USERS, parts[1])
    assert read is not None and read[0] == {"amount": "decimal"}
    assert [b.num_rows for b in read[1]] == [10]
    s3 = moto_server.client("s3")
    key = f"snaps/pb/{parts[1].path}"
    data = s3.get_object(Bucket=store.bucket, Key=key)["Body"].read()
    s3.put_object(Bucket=store.bucket, Key=key, Body=data[:-9] + b"x" + data[-8:])
    with pytest.raises(SnapshotError, match="checksum mismatch"):
        store.read_part_batches("pb", USERS, parts[1])
