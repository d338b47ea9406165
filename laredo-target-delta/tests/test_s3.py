"""The delta target, read_as_of and the delta source on S3 (a moto server), and an unreachable
object store: errors name the uri and never show the credentials."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from laredo.errors import TargetError
from laredo.types import SourceConfig
from laredo_target_delta import (
    DeltaSource,
    DeltaSourceOptions,
    DeltaTarget,
    DeltaTargetOptions,
    rows_as_of,
)

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


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def moto_process() -> Iterator[str]:
    """A moto server in its own process: delta-rs may hold the GIL while it waits for S3, so an
    in-process (threaded) moto server could not answer it."""
    port = _free_port()
    proc = subprocess.Popen(
        [str(Path(sys.executable).parent / "moto_server"), "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    endpoint = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        try:
            urllib.request.urlopen(f"{endpoint}/moto-api/", timeout=1).close()
            break
        except OSError:
            assert time.monotonic() < deadline and proc.poll() is None, "moto_server did not start"
            time.sleep(0.1)
    try:
        yield endpoint
    finally:
        proc.terminate()
        proc.wait(10)


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
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed once we leave: nothing listens there
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
