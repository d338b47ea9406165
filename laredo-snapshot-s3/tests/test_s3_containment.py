"""A snapshot manifest in S3 cannot point a part outside its snapshot's prefix (issue 21, M3),
against moto."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from typing import Any

import pytest
from laredo.errors import SnapshotError
from laredo.snapshots.jsonl import JsonlSerializer
from laredo.types import SnapshotMetadata, TableIdentifier, TableSnapshotInfo
from laredo_snapshot_s3 import S3SnapshotStore

pytestmark = pytest.mark.integration

USERS = TableIdentifier("public", "users")


@pytest.mark.parametrize(
    "path", ["../../secret/evil.jsonl", "/secret/evil.jsonl", "..\\..\\secret\\evil.jsonl"]
)
def test_a_part_outside_the_snapshot_prefix_is_rejected(
    moto_server: Any, s3_bucket: str, path: str
) -> None:
    s3 = moto_server.client("s3")
    store = S3SnapshotStore(s3_bucket, prefix="snaps/", endpoint_url=moto_server.endpoint_url)
    meta = SnapshotMetadata(
        "s1", dt.datetime(2026, 1, 1, tzinfo=dt.UTC), {}, (TableSnapshotInfo(USERS, 1),)
    )
    store.save("s1", meta, {USERS: [{"id": 1}]}, JsonlSerializer())
    key = "snaps/s1/metadata.json"
    doc = json.loads(s3.get_object(Bucket=s3_bucket, Key=key)["Body"].read())
    part = doc["artifacts"][0]["parts"][0]
    good = s3.get_object(Bucket=s3_bucket, Key=f"snaps/s1/{part['path']}")["Body"].read()
    evil = good.replace(b'"id":1', b'"id":666')
    s3.put_object(Bucket=s3_bucket, Key="secret/evil.jsonl", Body=evil)
    part.update(path=path, size_bytes=len(evil), sha256=hashlib.sha256(evil).hexdigest())
    s3.put_object(Bucket=s3_bucket, Key=key, Body=json.dumps(doc).encode())
    with pytest.raises(SnapshotError, match="leaves the snapshot"):
        _, tables = store.load("s1", JsonlSerializer())
        list(tables[USERS])
    with pytest.raises(SnapshotError):
        store.files.open_read("s1", path)
