"""The delta target, read_as_of and the delta source on S3 (a moto server), and an unreachable
object store: errors name the uri and never show the credentials."""

from __future__ import annotations

import io
import json
import time
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import typer
from laredo.errors import SourceError, TargetError
from laredo.serialization import loads_row
from laredo.testing import free_port
from laredo.types import SourceConfig
from laredo_target_delta import (
    ArchiveError,
    DeltaSource,
    DeltaSourceOptions,
    DeltaTarget,
    DeltaTargetOptions,
    history,
    read_as_of,
    rows_as_of,
)
from laredo_target_delta.cli import register
from typer.testing import CliRunner

from .conftest import COLUMNS, ITEMS, item

pytestmark = pytest.mark.integration

SECRET = "moto-secret-key-zz"


def _storage(endpoint: str) -> dict[str, str]:
    return {
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": SECRET,
        "AWS_REGION": "us-east-1",
        "AWS_ALLOW_HTTP": "true",
        "AWS_S3_ALLOW_UNSAFE_RENAME": "true",
    }


def test_target_source_and_as_of_on_s3(moto_process: str) -> None:
    import boto3

    storage = _storage(moto_process)
    bucket = "laredo-delta-test"
    boto3.client(
        "s3",
        endpoint_url=moto_process,
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key=SECRET,
    ).create_bucket(Bucket=bucket)
    uri = f"s3://{bucket}/lake/items"
    t = DeltaTarget(DeltaTargetOptions(uri=uri, storage_options=storage, flush_interval=0))
    t.on_init(ITEMS, COLUMNS)
    t.on_baseline_rows(ITEMS, [item(i) for i in range(3)])
    t.set_change_position(10)
    t.on_baseline_complete(ITEMS)
    t.set_change_position(20)
    t.on_insert(ITEMS, item(7))
    t.set_change_position(21)  # a heartbeat: 20 is complete
    t.flush()
    t.on_close(ITEMS)
    assert SECRET not in repr(t)

    rows, position, _ = rows_as_of(uri, "15", storage)
    assert position == "10" and sorted(r["id"] for r in rows) == [0, 1, 2]
    source = DeltaSource(DeltaSourceOptions(uri=uri, storage_options=storage))
    source.init(SourceConfig(tables=[ITEMS]))
    got: list[Any] = []
    assert source.baseline([ITEMS], lambda tb, r: got.append(r)) == 1
    assert sorted(r["id"] for r in got) == [0, 1, 2, 7]
    source.close()


def test_unreachable_object_store_names_the_uri_not_the_secret() -> None:
    port = free_port()  # nothing listens there
    storage = _storage(f"http://127.0.0.1:{port}")
    storage["timeout"] = "2s"
    storage["connect_timeout"] = "1s"
    t = DeltaTarget(
        DeltaTargetOptions(uri="s3://nowhere/items", storage_options=storage, flush_interval=0)
    )
    with pytest.raises(TargetError) as ei:
        t.on_init(ITEMS, COLUMNS)
        t.on_baseline_rows(ITEMS, [item(1)])
        t.set_change_position(10)
        t.on_baseline_complete(ITEMS)
    text = str(ei.value)
    assert "uri = 's3://nowhere/items'" in text and SECRET not in text and "***" in text
    assert t.durable_position() is None  # nothing committed, nothing acknowledged


def _s3(endpoint: str) -> Any:
    import boto3

    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key=SECRET,
    )


def test_changes_compaction_and_the_archive_cli_on_s3(moto_process: str) -> None:
    """Merge-on-read on S3: change rows, a compaction, point-in-time reads, the delta source
    and ``laredo archive``, with the secret in no output."""
    storage = _storage(moto_process)
    bucket = "laredo-delta-mor"
    _s3(moto_process).create_bucket(Bucket=bucket)
    uri = f"s3://{bucket}/lake/items"
    options = DeltaTargetOptions(
        uri=uri,
        storage_options=storage,
        flush_interval=0,
        maintenance={"compact_fraction": 0.5, "compact_min_rows": 1},
    )
    t = DeltaTarget(options)
    t.on_init(ITEMS, COLUMNS)
    t.on_baseline_rows(ITEMS, [item(i) for i in range(4)])
    t.set_change_position(10)
    t.on_baseline_complete(ITEMS)
    for position, (kind, row) in zip(
        (20, 30, 40), [("u", item(1, name="x")), ("d", {"id": 2}), ("i", item(9))], strict=True
    ):
        t.set_change_position(position)
        if kind == "u":
            t.on_update(ITEMS, row, None)
        elif kind == "d":
            t.on_delete(ITEMS, row)
        else:
            t.on_insert(ITEMS, row)
        t.set_change_position(position + 1)
        t.flush()
    t.on_close(ITEMS)

    kinds = [c.kind for c in history(uri, storage)]
    assert "compaction" in kinds and kinds.count("changes") == 3, kinds
    rows, at, _ = rows_as_of(uri, "25", storage)
    assert at == "20" and {r["id"]: r["name"] for r in rows} == {0: "n0", 1: "x", 2: "n2", 3: "n3"}
    rows, _, _ = rows_as_of(uri, "45", storage)
    assert sorted(r["id"] for r in rows) == [0, 1, 3, 9]
    source = DeltaSource(DeltaSourceOptions(uri=uri, storage_options=storage, as_of="35"))
    source.init(SourceConfig(tables=[ITEMS]))
    got: list[Any] = []
    source.baseline([ITEMS], lambda tb, r: got.append(r["id"]))
    assert sorted(got) == [0, 1, 3]
    source.close()

    app = typer.Typer()
    register(app)
    runner = CliRunner()
    opts = [arg for k, v in storage.items() for arg in ("--storage-option", f"{k}={v}")]
    res = runner.invoke(app, ["archive", "reconstruct", uri, "--as-of", "35", *opts])
    assert res.exit_code == 0, res.output
    assert sorted(loads_row(line)["id"] for line in res.stdout.splitlines()) == [0, 1, 3]
    res = runner.invoke(app, ["archive", "history", uri, "--json", *opts])
    assert res.exit_code == 0 and SECRET not in res.output
    assert [d["kind"] for d in json.loads(res.stdout)] == kinds
    res = runner.invoke(app, ["archive", "history", uri + "-nope", *opts])
    assert res.exit_code == 1 and SECRET not in res.output and "***" in res.output
    assert SECRET not in repr(options) and SECRET not in repr(source)


@pytest.mark.parametrize("where", ["other-bucket", "climbs-out", "sibling-prefix"])
def test_a_forged_s3_log_pointing_outside_the_table_is_refused(
    moto_process: str, where: str
) -> None:
    storage = _storage(moto_process)
    s3 = _s3(moto_process)
    bucket, other = f"laredo-forged-{where}", f"laredo-elsewhere-{where}"
    s3.create_bucket(Bucket=bucket)
    s3.create_bucket(Bucket=other)
    buf = io.BytesIO()
    pq.write_table(pa.table({"id": [666], "name": ["SECRET-OUTSIDE-TABLE"]}), buf)
    s3.put_object(Bucket=other, Key="x.parquet", Body=buf.getvalue())
    s3.put_object(Bucket=bucket, Key="lake/outside/x.parquet", Body=buf.getvalue())
    s3.put_object(Bucket=bucket, Key="lake/items2/x.parquet", Body=buf.getvalue())
    uri = f"s3://{bucket}/lake/items"
    t = DeltaTarget(DeltaTargetOptions(uri=uri, storage_options=storage, flush_interval=0))
    t.on_init(ITEMS, COLUMNS)
    t.on_baseline_rows(ITEMS, [item(1)])
    t.set_change_position(10)
    t.on_baseline_complete(ITEMS)
    t.on_close(ITEMS)
    path = {
        "other-bucket": f"s3://{other}/x.parquet",
        "climbs-out": "../outside/x.parquet",
        "sibling-prefix": f"s3://{bucket}/lake/items2/x.parquet",
    }[where]
    add = {"path": path, "size": len(buf.getvalue()), "partitionValues": {}}
    add.update({"modificationTime": int(time.time() * 1000), "dataChange": True})
    info = {"timestamp": int(time.time() * 1000), "operation": "WRITE"}
    info.update({"laredo.position": "50", "laredo.position_order": 50})
    body = json.dumps({"add": add}) + "\n" + json.dumps({"commitInfo": info}) + "\n"
    s3.put_object(Bucket=bucket, Key=f"lake/items/_delta_log/{1:020d}.json", Body=body)

    with pytest.raises(ArchiveError, match="refused") as ei:
        read_as_of(uri, "99", storage)
    assert SECRET not in str(ei.value)
    source = DeltaSource(DeltaSourceOptions(uri=uri, storage_options=storage))
    source.init(SourceConfig(tables=[ITEMS]))
    with pytest.raises(SourceError, match="refused"):
        source.baseline([ITEMS], lambda tb, r: None)
