"""Poison records against moto (issue 21, M2 and L12): a record that cannot be decoded, however
it fails, is a bad record for the dead letters and the source keeps going; a dead letter that
cannot be written stops the source instead of skipping the record."""

from __future__ import annotations

from typing import Any

import pytest
from laredo.errors import SourceError
from laredo.testing import wait_until
from laredo.types import SourceState
from laredo_snapshot_s3 import S3DeadLetterStore
from laredo_source_kinesis import KinesisPosition, encode_record
from laredo_source_kinesis.records import BadRecord, parse_record
from laredo_source_kinesis.testing import (
    USERS,
    Collector,
    Runner,
    put,
    start,
    write_baseline,
)

pytestmark = pytest.mark.integration

DEEP = b"[" * 200_000  # fits in one Kinesis record; json.loads raises RecursionError


@pytest.mark.parametrize(
    "data",
    [
        DEEP,
        b'{"table": "public.users", "action": "INSERT", "new": ' + b"[" * 50_000 + b"}",
        b'{"table": "public.users", "action": "INSERT", "new": {"id": '
        b'{"$type": "decimal", "value": "1e100000000"}}}',
    ],
    ids=["deep-array", "deep-value", "huge-decimal"],
)
def test_parse_record_raises_only_bad_record(data: bytes) -> None:
    with pytest.raises(BadRecord):
        parse_record(data, {USERS: ["id"]})


def test_deeply_nested_record_is_dead_lettered_and_the_stream_continues(
    moto_server: Any,
    s3_bucket: str,
    make_kinesis_stream: Any,
    make_source: Any,
    runners: list[Runner],
) -> None:
    s3, kinesis = moto_server.client("s3"), moto_server.client("kinesis")
    write_baseline(s3, s3_bucket, "baseline/", {USERS: []})
    stream = make_kinesis_stream(shards=1)
    dlq = S3DeadLetterStore(s3_bucket, "dlq", endpoint_url=moto_server.endpoint_url)
    put(kinesis, stream, encode_record(USERS, "INSERT", new={"id": 1}), "a")
    put(kinesis, stream, DEEP, "a")
    put(kinesis, stream, encode_record(USERS, "INSERT", new={"id": 2}), "a")

    source = make_source(stream, dead_letter_store=dlq)
    start(source, [USERS])
    handler = Collector()
    runners.append(Runner(source, KinesisPosition(), handler))
    events = handler.wait_events(2)
    assert [e.new_values["id"] for e in events] == [1, 2]
    wait_until(lambda: len(dlq.read(f"kinesis:{stream}")) == 1, what="the dead letter")
    (letter,) = dlq.read(f"kinesis:{stream}")
    assert "nested too deeply" in letter.error.message
    assert letter.change.new_values["data"] == DEEP.decode()
    assert source.state() is not SourceState.ERROR
    assert source.stats()["bad_records"] == 1


def test_a_dead_letter_that_cannot_be_written_stops_the_source_unacknowledged(
    moto_server: Any, s3_bucket: str, make_kinesis_stream: Any, make_source: Any
) -> None:
    s3, kinesis = moto_server.client("s3"), moto_server.client("kinesis")
    write_baseline(s3, s3_bucket, "baseline/", {USERS: []})
    stream = make_kinesis_stream(shards=1)
    # a real store whose bucket does not exist: every write fails
    dlq = S3DeadLetterStore("no-such-bucket-l12", "dlq", endpoint_url=moto_server.endpoint_url)
    put(kinesis, stream, encode_record(USERS, "INSERT", new={"id": 1}), "a")
    put(kinesis, stream, b"{not json", "a")
    put(kinesis, stream, encode_record(USERS, "INSERT", new={"id": 2}), "a")
    source = make_source(stream, dead_letter_store=dlq)
    start(source, [USERS])
    handler = Collector()
    runner = Runner(source, KinesisPosition(), handler)
    err = runner.join(timeout=20)
    assert isinstance(err, SourceError), err
    assert "dead letters failed" in str(err)
    # nothing after the bad record was delivered, so no acknowledgement can pass it
    assert all(e.new_values["id"] != 2 for e in handler.events)
