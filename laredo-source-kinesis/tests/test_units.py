from __future__ import annotations

import datetime as dt
import uuid
from decimal import Decimal

import laredo
import pytest
from laredo.errors import ConfigError
from laredo.types import ChangeAction, TableIdentifier
from laredo_source_kinesis import BadRecord, KinesisPosition, compare_positions, encode_record
from laredo_source_kinesis.records import dumps_record, parse_record

USERS = TableIdentifier("public", "users")
KEYS = {USERS: ["id"]}


def test_position_text_roundtrip_and_errors() -> None:
    p = KinesisPosition(
        {"shardId-1": "49590338271490256608559692538361571095921575989136588898", "shardId-0": "7"},
        "abc",
        12,
    )
    text = p.to_string()
    assert text == str(p)
    assert KinesisPosition.parse(text) == p
    assert text.index("shardId-0") < text.index("shardId-1")  # stable, key-sorted
    assert KinesisPosition.parse('{"shards":{}}') == KinesisPosition()
    for bad in [
        "nope",
        "[]",
        '{"shards":{"s":"x1"}}',
        '{"shards":{"s":5}}',
        '{"shards":{},"baseline_sequence":"1"}',
    ]:
        with pytest.raises(ConfigError, match="invalid Kinesis position"):
            KinesisPosition.parse(bad)


def test_compare_is_per_shard_with_integer_sequences() -> None:
    a = KinesisPosition({"s0": "9"})
    b = KinesisPosition({"s0": "10"})  # 10 > 9 as integers, not as strings
    assert compare_positions(a, b) == -1
    assert compare_positions(b, a) == 1
    assert compare_positions(a, KinesisPosition({"s0": "9"})) == 0
    # a shard absent means "nothing read yet": before any sequence
    assert (
        compare_positions(KinesisPosition({"s0": "9"}), KinesisPosition({"s0": "9", "s1": "1"}))
        == -1
    )
    assert compare_positions(KinesisPosition(), a) == -1
    # each ahead on a different shard: deterministic and antisymmetric
    x = KinesisPosition({"s0": "5", "s1": "1"})
    y = KinesisPosition({"s0": "4", "s1": "2"})
    assert compare_positions(x, y) == -compare_positions(y, x) != 0
    assert hash(KinesisPosition({"a": "1"})) == hash(KinesisPosition({"a": "1"}))


def test_record_parsing_typed_values_and_aliases() -> None:
    seen = dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.UTC)
    doc = encode_record(
        USERS,
        ChangeAction.UPDATE,
        new={"id": 1, "bal": Decimal("1.50"), "seen": seen, "u": uuid.UUID(int=3)},
        key={"id": 1},
        seq=7,
        ts=seen,
    )
    (ch,) = parse_record(dumps_record(doc), KEYS)
    assert ch.table == USERS and ch.action is ChangeAction.UPDATE
    assert ch.new_values == {"id": 1, "bal": Decimal("1.50"), "seen": seen, "u": uuid.UUID(int=3)}
    assert ch.old_values == {"id": 1}
    assert ch.seq == 7 and ch.timestamp == seen
    # upstream Go field names: row / identity
    (go,) = parse_record(b'{"table":"public.users","action":"DELETE","identity":{"id":2}}', KEYS)
    assert go.action is ChangeAction.DELETE and go.old_values == {"id": 2}
    # a JSON array is one transaction: several changes in order
    many = parse_record(
        dumps_record([encode_record(USERS, "INSERT", new={"id": i}) for i in range(3)]), KEYS
    )
    assert [c.new_values for c in many] == [{"id": 0}, {"id": 1}, {"id": 2}]
    (trunc,) = parse_record(b'{"table":"public.users","action":"truncate"}', KEYS)
    assert trunc.action is ChangeAction.TRUNCATE


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"{not json", "malformed JSON"),
        (b"\xff\xfe", "not UTF-8|malformed JSON"),
        (b"[]", "empty JSON array"),
        (b"42", "must be a JSON object"),
        (b'{"action":"INSERT","new":{"id":1}}', "missing 'table'"),
        (b'{"table":"users","action":"INSERT","new":{"id":1}}', "has no schema"),
        (b'{"table":"public.users","action":"UPSERT","new":{"id":1}}', "unknown action 'UPSERT'"),
        (b'{"table":"public.users","action":"INSERT"}', "has no 'new' row"),
        (
            b'{"table":"public.users","action":"INSERT","new":{"name":"x"}}',
            "missing key: INSERT of public.users lacks primary-key column\\(s\\) id",
        ),
        (
            b'{"table":"public.users","action":"DELETE"}',
            "missing key: DELETE of public.users has neither 'key' nor 'old'",
        ),
        (b'{"table":"public.users","action":"DELETE","key":{"x":1}}', "missing key: DELETE"),
        (
            b'{"table":"public.users","action":"INSERT","new":{"id":{"$t":"decimal","v":"zz"}}}',
            "bad value in 'new'",
        ),
        (
            b'{"table":"public.users","action":"INSERT","new":{"id":1},"seq":"7"}',
            "'seq' .* must be an integer",
        ),
        (b'{"table":"public.users","action":"INSERT","new":[1]}', "must be a JSON object"),
    ],
)
def test_bad_records_have_clear_reasons(data: bytes, reason: str) -> None:
    with pytest.raises(BadRecord, match=reason):
        parse_record(data, KEYS)


def test_plugin_registration_and_option_validation() -> None:
    src = laredo.source("kinesis", stream_name="s", baseline_bucket="b", region="us-east-1")
    assert type(src).__name__ == "KinesisSource"
    assert src.supports_resume() is False
    alias = laredo.source("s3-kinesis", stream_name="s", baseline_bucket="b", checkpoint_table="ck")
    assert alias.supports_resume() is True
    with pytest.raises(ConfigError) as err:
        laredo.source("kinesis", stream="s", baseline_bucket="b", batch_size=0)
    text = str(err.value)
    assert "stream_name" in text and "stream: unknown option" in text and "batch_size" in text
    timed = laredo.source(
        "kinesis", stream_name="s", baseline_bucket="b", poll_interval="250ms", backoff_max="1m"
    )
    assert (timed.poll_interval, timed.backoff_max) == (0.25, 60.0)  # laredo.units durations
    with pytest.raises(ConfigError, match=r"heartbeat_interval.*invalid duration"):
        laredo.source("kinesis", stream_name="s", baseline_bucket="b", heartbeat_interval="soon")


def test_plugin_import_is_cheap() -> None:
    import subprocess
    import sys

    code = (
        "import sys, laredo_source_kinesis._plugin, laredo_source_kinesis;"
        "assert 'boto3' not in sys.modules and 'botocore' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
