"""The ``laredo_moto`` pytest plugin other packages rely on."""

from __future__ import annotations

import os
import re
from typing import Any

import pytest

pytestmark = pytest.mark.integration


def test_environment_is_fake_and_isolated(moto_server: Any) -> None:
    assert moto_server.endpoint_url.startswith("http://127.0.0.1:")
    assert os.environ["AWS_ACCESS_KEY_ID"] == "testing"
    assert os.environ["AWS_EC2_METADATA_DISABLED"] == "true"
    assert os.environ["AWS_SHARED_CREDENTIALS_FILE"] == os.devnull
    assert "AWS_PROFILE" not in os.environ
    assert moto_server.client("sts").get_caller_identity()["Account"]


def test_names_are_unique_and_valid(aws_name: Any) -> None:
    names = {aws_name("bucket") for _ in range(50)}
    assert len(names) == 50
    assert all(re.fullmatch(r"[a-z0-9][a-z0-9-]{1,61}[a-z0-9]", n) for n in names)


def test_bucket_and_stream_fixtures(
    moto_server: Any, s3_bucket: str, make_kinesis_stream: Any
) -> None:
    s3 = moto_server.client("s3")
    s3.put_object(Bucket=s3_bucket, Key="a", Body=b"1")
    assert s3.get_object(Bucket=s3_bucket, Key="a")["Body"].read() == b"1"
    kinesis = moto_server.client("kinesis")
    name = make_kinesis_stream(shards=3)
    summary = kinesis.describe_stream_summary(StreamName=name)["StreamDescriptionSummary"]
    assert summary["StreamStatus"] == "ACTIVE" and summary["OpenShardCount"] == 3


def test_resharding_behaves_like_aws(moto_server: Any, make_kinesis_stream: Any) -> None:
    kinesis = moto_server.client("kinesis")
    name = make_kinesis_stream(shards=1)
    seqs = [
        kinesis.put_record(StreamName=name, Data=b"x", PartitionKey=f"k{i}")["SequenceNumber"]
        for i in range(4)
    ]
    (parent,) = [s["ShardId"] for s in kinesis.list_shards(StreamName=name)["Shards"]]
    kinesis.split_shard(StreamName=name, ShardToSplit=parent, NewStartingHashKey=str(2**127))
    after = {s["ShardId"]: s for s in kinesis.list_shards(StreamName=name)["Shards"]}
    # the parent keeps its records and sequence numbers, and is closed at the last one
    assert after[parent]["SequenceNumberRange"]["EndingSequenceNumber"] == seqs[-1]
    it = kinesis.get_shard_iterator(
        StreamName=name, ShardId=parent, ShardIteratorType="TRIM_HORIZON"
    )
    got = kinesis.get_records(ShardIterator=it["ShardIterator"])["Records"]
    assert [r["SequenceNumber"] for r in got] == seqs
    # new records go to the open children only
    shards = {
        kinesis.put_record(StreamName=name, Data=b"y", PartitionKey=f"n{i}")["ShardId"]
        for i in range(20)
    }
    assert parent not in shards and len(shards) == 2
