"""pytest plugin ``laredo_moto``: a moto server on 127.0.0.1 for tests that talk to AWS.

Installed with ``laredo-snapshot-s3`` (entry point ``pytest11``), so any package's tests can use
it; ``pip install 'laredo-snapshot-s3[testing]'`` brings ``moto[server]``. Importing this module
is cheap: moto and boto3 are imported only when a fixture runs.

Fixtures
--------
``moto_server`` (session)
    One ``ThreadedMotoServer(ip_address="127.0.0.1", port=0)`` for the whole session. While it
    runs, the process environment holds fake credentials (``testing``/``testing``), region
    ``us-east-1``, ``AWS_EC2_METADATA_DISABLED=true`` (botocore never probes 169.254.169.254) and
    ``AWS_CONFIG_FILE``/``AWS_SHARED_CREDENTIALS_FILE`` pointing at ``os.devnull``, so a developer's
    real profile can never be used. Code under test reaches the server exactly as it would reach
    AWS, through boto3 with ``endpoint_url=moto_server.endpoint_url``. ``moto_server.client("s3")``
    builds a client; ``moto_server.boto_kwargs`` is ``{"endpoint_url": ..., "region_name": ...}``.
``moto_process`` (module)
    The endpoint URL of a ``moto_server`` in its own process, on a free port of 127.0.0.1, for
    code that may hold the GIL while it waits for S3 (delta-rs): an in-process (threaded) moto
    server could not answer it. The process environment is not changed: pass credentials
    explicitly. Terminated at the end of the module.
``aws_name``
    ``aws_name("bucket")`` returns a name unique to this test and call (lowercase, valid for S3
    buckets, Kinesis streams and DynamoDB tables).
``s3_bucket``
    A fresh bucket (unique name); every object version and the bucket are deleted afterwards.
``make_kinesis_stream``
    ``make_kinesis_stream(shards=2)`` creates an ACTIVE stream with a unique name and returns the
    name; streams are deleted afterwards.
``dynamodb_table_name``
    A unique DynamoDB table name; the table is deleted afterwards if the test created it.

moto's Kinesis resharding differs from AWS (a closed parent shard keeps receiving records, and
``SplitShard`` renumbers the parent's records). The server started here patches moto in-process
so that, as on AWS, a split or merge closes the parents (their records and sequence numbers
stay) and new records go to the open children only. moto still never ends a closed shard's
iterator: consumers must detect the end by the parent's ``EndingSequenceNumber``.

Outside pytest (benchmarks, scripts) use :func:`moto_server_running`.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

REGION = "us-east-1"
FAKE_ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": REGION,
    "AWS_REGION": REGION,
    "AWS_EC2_METADATA_DISABLED": "true",
    "AWS_CONFIG_FILE": os.devnull,
    "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
}
UNSET_ENV = ("AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN", "AWS_PROFILE", "AWS_DEFAULT_PROFILE")


@dataclass(frozen=True, slots=True)
class MotoServer:
    """A running moto server: where it listens and how to reach it with boto3."""

    endpoint_url: str
    region: str = REGION

    @property
    def boto_kwargs(self) -> dict[str, Any]:
        return {"endpoint_url": self.endpoint_url, "region_name": self.region}

    def client(self, service: str) -> Any:
        import boto3  # noqa: PLC0415 - lazy: test helper; boto3 on first use

        return boto3.client(service, **self.boto_kwargs)


def _patch_moto_kinesis_resharding() -> None:
    """Make moto's resharding behave like AWS (see the module docstring). Idempotent."""
    from moto.kinesis import models  # noqa: PLC0415 - lazy: moto is a test-only dependency

    m: Any = models

    stream_cls: Any = models.Stream
    if getattr(stream_cls, "_laredo_patched", False):
        return
    original_split = stream_cls.split_shard

    def get_shard_for_key(self: Any, partition_key: str, explicit_hash_key: str) -> Any:
        if not isinstance(partition_key, str) or len(partition_key) > 256:
            raise m.InvalidArgumentError("partition_key")
        if explicit_hash_key:
            int_key = int(explicit_hash_key)
            if int_key >= 2**128:
                raise m.InvalidArgumentError("explicit_hash_key")
        else:
            int_key = int(m.md5_hash(partition_key.encode("utf-8")).hexdigest(), 16)
        for shard in self.shards.values():
            if shard.is_open and shard.starting_hash <= int_key <= shard.ending_hash:
                return shard
        return None

    def split_shard(self: Any, shard_to_split: str, new_starting_hash_key: str) -> None:
        shard = self.shards[shard_to_split]
        kept = shard.records
        shard.records = {}  # moto would re-put (and renumber) these: keep them instead
        try:
            original_split(self, shard_to_split, new_starting_hash_key)
        finally:
            shard.records = kept
        # original_split re-put nothing (records were empty); nothing to undo

    def merge_shards(self: Any, shard_to_merge: str, adjacent_shard_to_merge: str) -> None:
        s1 = self.shards[shard_to_merge]
        s2 = self.shards[adjacent_shard_to_merge]
        if s1.ending_hash + 1 == s2.starting_hash:
            low, high = s1, s2
        elif s2.ending_hash + 1 == s1.starting_hash:
            low, high = s2, s1
        else:
            raise m.InvalidArgumentError(adjacent_shard_to_merge)
        if not (s1.is_open and s2.is_open):
            raise m.InvalidArgumentError(shard_to_merge)
        last_id = max(s._shard_id for s in self.shards.values())
        child = m.Shard(
            last_id + 1,
            starting_hash=low.starting_hash,
            ending_hash=high.ending_hash,
            parent=s1.shard_id,
            adjacent_parent=s2.shard_id,
        )
        self.shards[child.shard_id] = child
        s1.is_open = False
        s2.is_open = False

    stream_cls.get_shard_for_key = get_shard_for_key
    stream_cls.split_shard = split_shard
    stream_cls.merge_shards = merge_shards
    stream_cls._laredo_patched = True


@contextlib.contextmanager
def moto_server_running(patch_env: bool = True) -> Iterator[MotoServer]:
    """Start a moto server on 127.0.0.1 (random port); stop it on exit.

    With ``patch_env`` the fake-credential environment (see the module docstring) is set for
    the duration and restored afterwards.
    """
    try:
        from moto.server import ThreadedMotoServer  # noqa: PLC0415 - lazy: test-only dependency
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError(
            "the laredo_moto fixtures need moto: pip install 'laredo-snapshot-s3[testing]'"
        ) from exc
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    saved = {k: os.environ.get(k) for k in (*FAKE_ENV, *UNSET_ENV)}
    if patch_env:
        for key in UNSET_ENV:
            os.environ.pop(key, None)
        os.environ.update(FAKE_ENV)
    _patch_moto_kinesis_resharding()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        yield MotoServer(endpoint_url=f"http://{host}:{port}")
    finally:
        server.stop()
        if patch_env:
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value


@pytest.fixture(scope="session")
def moto_server() -> Iterator[MotoServer]:
    """One moto server for the session, with fake AWS credentials in the environment."""
    with moto_server_running() as server:
        yield server


_counter = 0


@pytest.fixture(scope="module")
def moto_process() -> Iterator[str]:
    from laredo.testing import free_port, wait_until  # noqa: PLC0415 - lazy: test helper

    port = free_port()
    proc = subprocess.Popen(
        [str(Path(sys.executable).parent / "moto_server"), "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    endpoint = f"http://127.0.0.1:{port}"

    def answers() -> bool:
        assert proc.poll() is None, f"moto_server exited with {proc.returncode}"
        try:
            urllib.request.urlopen(f"{endpoint}/moto-api/", timeout=1).close()
        except OSError:
            return False
        return True

    try:
        wait_until(answers, 30, "moto_server to answer", interval=0.1)
        yield endpoint
    finally:
        proc.terminate()
        proc.wait(10)


@pytest.fixture
def aws_name(request: pytest.FixtureRequest) -> Callable[[str], str]:
    """``aws_name("bucket")`` -> a unique lowercase name for this test (<= 63 characters)."""
    slug = re.sub(r"[^a-z0-9]+", "-", request.node.name.lower()).strip("-")[:24].strip("-")

    def make(kind: str = "r") -> str:
        global _counter
        _counter += 1
        kind_slug = re.sub(r"[^a-z0-9]+", "-", kind.lower()).strip("-")[:8] or "r"
        return f"laredo-{kind_slug}-{slug}-{_counter}-{uuid.uuid4().hex[:8]}"[:63].strip("-")

    return make


def _empty_bucket(s3: Any, bucket: str) -> None:
    paginator = s3.get_paginator("list_object_versions")
    for page in paginator.paginate(Bucket=bucket):
        items = [
            {"Key": v["Key"], "VersionId": v["VersionId"]}
            for v in [*page.get("Versions", []), *page.get("DeleteMarkers", [])]
        ]
        for i in range(0, len(items), 1000):
            s3.delete_objects(Bucket=bucket, Delete={"Objects": items[i : i + 1000]})
    for upload in s3.list_multipart_uploads(Bucket=bucket).get("Uploads", []):
        s3.abort_multipart_upload(Bucket=bucket, Key=upload["Key"], UploadId=upload["UploadId"])


@pytest.fixture
def s3_bucket(moto_server: MotoServer, aws_name: Callable[[str], str]) -> Iterator[str]:
    """A fresh, empty bucket; emptied and deleted after the test."""
    s3 = moto_server.client("s3")
    name = aws_name("bucket")
    s3.create_bucket(Bucket=name)
    yield name
    _empty_bucket(s3, name)
    s3.delete_bucket(Bucket=name)


def wait_stream_active(kinesis: Any, name: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        status = kinesis.describe_stream_summary(StreamName=name)["StreamDescriptionSummary"][
            "StreamStatus"
        ]
        if status == "ACTIVE":
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"Kinesis stream {name} is still {status} after {timeout}s")
        time.sleep(0.01)


@pytest.fixture
def make_kinesis_stream(
    moto_server: MotoServer, aws_name: Callable[[str], str]
) -> Iterator[Callable[..., str]]:
    """``make_kinesis_stream(shards=1)`` -> name of a new ACTIVE stream, deleted afterwards."""
    kinesis = moto_server.client("kinesis")
    created: list[str] = []

    def make(shards: int = 1) -> str:
        name = aws_name("stream")
        kinesis.create_stream(StreamName=name, ShardCount=shards)
        created.append(name)
        wait_stream_active(kinesis, name)
        return name

    yield make
    for name in created:
        with contextlib.suppress(kinesis.exceptions.ResourceNotFoundException):
            kinesis.delete_stream(StreamName=name, EnforceConsumerDeletion=True)


@pytest.fixture
def dynamodb_table_name(moto_server: MotoServer, aws_name: Callable[[str], str]) -> Iterator[str]:
    """A unique DynamoDB table name; the table is deleted afterwards if it exists."""
    name = aws_name("ddb")
    yield name
    ddb = moto_server.client("dynamodb")
    with contextlib.suppress(ddb.exceptions.ResourceNotFoundException):
        ddb.delete_table(TableName=name)
