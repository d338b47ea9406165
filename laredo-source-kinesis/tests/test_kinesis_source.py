from __future__ import annotations

import datetime as dt
import itertools
from collections import defaultdict
from decimal import Decimal
from typing import Any

import pytest
from laredo.errors import SourceError
from laredo.testing import wait_until
from laredo.types import ChangeAction, OrderingGuarantee, SourceState, TableIdentifier
from laredo_snapshot_s3 import S3DeadLetterStore
from laredo_source_kinesis import KinesisPosition, encode_record
from laredo_source_kinesis.testing import (
    ORDERS,
    USERS,
    Collector,
    Runner,
    put,
    start,
    write_baseline,
)

pytestmark = pytest.mark.integration

T0 = dt.datetime(2026, 3, 1, 12, 0, tzinfo=dt.UTC)


def user(i: int, name: str = "") -> dict[str, Any]:
    return {
        "id": i,
        "name": name or f"user{i}",
        "balance": Decimal(f"{i}.25"),
        "seen": T0 + dt.timedelta(minutes=i),
    }


def test_baseline_then_stream_two_tables_on_two_shards(
    moto_server: Any,
    s3_bucket: str,
    make_kinesis_stream: Any,
    make_source: Any,
    runners: list[Runner],
) -> None:
    s3, kinesis = moto_server.client("s3"), moto_server.client("kinesis")
    write_baseline(
        s3,
        s3_bucket,
        "baseline/",
        {
            USERS: [user(1), user(2)],
            ORDERS: [{"order_id": "o1", "user_id": 1, "total": Decimal("9.99")}],
        },
    )
    stream = make_kinesis_stream(shards=2)
    source = make_source(stream)
    schemas = start(source, [USERS, ORDERS])
    assert [c.name for c in schemas[USERS]] == ["id", "name", "balance", "seen"]
    assert [c.name for c in schemas[USERS] if c.primary_key] == ["id"]
    assert source.validate_tables([USERS, ORDERS]) == []
    assert source.ordering_guarantee() is OrderingGuarantee.PER_PARTITION_ORDER

    baseline: dict[TableIdentifier, list[dict[str, Any]]] = defaultdict(list)
    pos = source.baseline([USERS, ORDERS], lambda t, r: baseline[t].append(r))
    assert baseline[USERS] == [user(1), user(2)]
    assert baseline[ORDERS] == [{"order_id": "o1", "user_id": 1, "total": Decimal("9.99")}]
    assert isinstance(pos, KinesisPosition) and pos.shards == {} and pos.baseline

    # Records for both tables, many partition keys (both shards), in per-key order.
    sent: dict[str, list[int]] = defaultdict(list)
    shards_used = set()
    for i in range(3, 23):
        key = f"user-{i % 5}"
        shard, _ = put(kinesis, stream, encode_record(USERS, "INSERT", new=user(i)), key)
        shards_used.add(shard)
        sent[key].append(i)
    put(
        kinesis,
        stream,
        encode_record(USERS, "UPDATE", new=user(1, "renamed"), key={"id": 1}),
        "user-1",
    )
    put(kinesis, stream, encode_record(USERS, "DELETE", key={"id": 2}), "user-2")
    put(
        kinesis,
        stream,
        encode_record(
            ORDERS, "INSERT", new={"order_id": "o2", "user_id": 3, "total": Decimal("1.00")}
        ),
        "o2",
    )
    assert len(shards_used) == 2, "the test needs records on both shards"

    handler = Collector()
    runners.append(Runner(source, pos, handler))
    events = handler.wait_events(23)
    assert len(events) == 23
    by_table: dict[TableIdentifier, list[Any]] = defaultdict(list)
    for e in events:
        by_table[e.table].append(e)
    assert len(by_table[ORDERS]) == 1 and by_table[ORDERS][0].new_values["total"] == Decimal("1.00")
    inserts = [e for e in by_table[USERS] if e.action is ChangeAction.INSERT]
    # same Python types as the baseline
    for e in inserts:
        i = e.new_values["id"]
        assert e.new_values == user(i)
        assert {k: type(v) for k, v in e.new_values.items()} == {
            k: type(v) for k, v in baseline[USERS][0].items()
        }
    # per partition key order
    got: dict[str, list[int]] = defaultdict(list)
    for e in inserts:
        got[f"user-{e.new_values['id'] % 5}"].append(e.new_values["id"])
    assert got == sent
    upd = next(e for e in events if e.action is ChangeAction.UPDATE)
    assert upd.new_values["name"] == "renamed" and upd.old_values == {"id": 1}
    dele = next(e for e in events if e.action is ChangeAction.DELETE)
    assert dele.old_values == {"id": 2} and dele.new_values is None
    # positions grow monotonically (each dominates its predecessor)
    for a, b in itertools.pairwise(events):
        assert source.compare_positions(a.position, b.position) <= 0
    assert source.compare_positions(events[0].position, events[-1].position) == -1
    assert len(events[-1].position.shards) == 2
    assert source.state() is SourceState.STREAMING
    assert runners[0].stop() is None
    assert source.stats()["events"] == 23 and source.stats()["bad_records"] == 0


def test_restart_resumes_after_last_ack_per_shard(  # noqa: PLR0917 - fixtures
    moto_server: Any,
    s3_bucket: str,
    make_kinesis_stream: Any,
    make_source: Any,
    runners: list[Runner],
    dynamodb_table_name: str,
) -> None:
    s3, kinesis = moto_server.client("s3"), moto_server.client("kinesis")
    write_baseline(s3, s3_bucket, "baseline/", {USERS: []})
    stream = make_kinesis_stream(shards=2)
    opts = {"checkpoint_table": dynamodb_table_name, "create_checkpoint_table": True}

    first = make_source(stream, **opts)
    start(first, [USERS])
    assert first.supports_resume() and first.last_acked_position() is None
    pos = first.baseline([USERS], lambda t, r: None)
    for i in range(40):
        put(kinesis, stream, encode_record(USERS, "INSERT", new={"id": i}), f"k{i}")
    h1 = Collector()
    r1 = Runner(first, pos, h1)
    runners.append(r1)
    events = h1.wait_events(40)
    # Acknowledge up to the 25th event only (as an engine would once targets made it durable).
    acked = events[24].position
    first.ack(events[10].position)
    first.ack(acked)
    assert r1.stop() is None
    first.close()

    items = moto_server.client("dynamodb").scan(TableName=dynamodb_table_name)["Items"]
    assert {i["shard_id"]["S"] for i in items} == set(acked.shards) | {"#baseline"}

    for i in range(40, 50):
        put(kinesis, stream, encode_record(USERS, "INSERT", new={"id": i}), f"k{i}")

    second = make_source(stream, **opts)
    start(second, [USERS])
    resume = second.last_acked_position()
    assert resume == acked
    h2 = Collector()
    runners.append(Runner(second, resume, h2))
    delivered_before = {e.new_values["id"] for e in events[:25]}
    expected = set(range(50)) - delivered_before
    h2.wait(lambda c: {e.new_values["id"] for e in c.events} >= expected)
    got = [e.new_values["id"] for e in h2.events]
    assert sorted(got) == sorted(expected), "nothing lost, nothing twice"
    assert len(got) == len(set(got))


def test_resharding_parents_drained_before_children(
    moto_server: Any,
    s3_bucket: str,
    make_kinesis_stream: Any,
    make_source: Any,
    runners: list[Runner],
) -> None:
    s3, kinesis = moto_server.client("s3"), moto_server.client("kinesis")
    write_baseline(s3, s3_bucket, "baseline/", {USERS: []})
    stream = make_kinesis_stream(shards=1)
    for i in range(20):
        put(kinesis, stream, encode_record(USERS, "INSERT", new={"id": i, "gen": 0}), f"k{i % 4}")
    parent = kinesis.list_shards(StreamName=stream)["Shards"][0]["ShardId"]
    kinesis.split_shard(StreamName=stream, ShardToSplit=parent, NewStartingHashKey=str(2**127))
    children = [
        s["ShardId"]
        for s in kinesis.list_shards(StreamName=stream)["Shards"]
        if s.get("ParentShardId") == parent
    ]
    assert len(children) == 2
    child_shards = set()
    for i in range(20, 40):
        shard, _ = put(
            kinesis, stream, encode_record(USERS, "INSERT", new={"id": i, "gen": 1}), f"k{i % 4}"
        )
        child_shards.add(shard)
    assert parent not in child_shards  # new records go to the children, as on AWS
    # merge the two children back: their records stay, new ones go to the grandchild
    kinesis.merge_shards(
        StreamName=stream, ShardToMerge=children[0], AdjacentShardToMerge=children[1]
    )
    for i in range(40, 50):
        shard, _ = put(
            kinesis, stream, encode_record(USERS, "INSERT", new={"id": i, "gen": 2}), f"k{i % 4}"
        )
        assert shard not in child_shards | {parent}

    source = make_source(stream)
    start(source, [USERS])
    handler = Collector()
    runners.append(Runner(source, KinesisPosition(), handler))
    events = handler.wait_events(50)
    ids = [e.new_values["id"] for e in events]
    assert sorted(ids) == list(range(50)) and len(ids) == 50
    gens = [e.new_values["gen"] for e in events]
    assert gens == sorted(gens), "a parent is drained before its children start"
    per_key: dict[int, list[int]] = defaultdict(list)
    for i in ids:
        per_key[i % 4].append(i)
    assert all(v == sorted(v) for v in per_key.values())
    assert set(events[-1].position.shards) >= {parent}
    runners[-1].stop()

    # Resume from the last position: closed shards yield nothing again, only new records come.
    for i in range(50, 55):
        put(kinesis, stream, encode_record(USERS, "INSERT", new={"id": i, "gen": 2}), f"k{i % 4}")
    again = make_source(stream)
    start(again, [USERS])
    h2 = Collector()
    runners.append(Runner(again, again.position_from_string(str(events[-1].position)), h2))
    h2.wait(lambda c: len(c.events) >= 5)
    wait_until(lambda: again.stats()["records"] >= 5, what="records counted")
    assert [e.new_values["id"] for e in h2.events] == [50, 51, 52, 53, 54]
    runners[-1].stop()
    assert [e.new_values["id"] for e in h2.events] == [50, 51, 52, 53, 54]


def test_bad_records_go_to_dead_letters_and_stream_continues(
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
    put(kinesis, stream, b"{this is not json", "a")
    put(kinesis, stream, encode_record("public.nope", "INSERT", new={"id": 1}), "a")
    put(kinesis, stream, encode_record(USERS, "DELETE"), "a")
    put(kinesis, stream, encode_record(USERS, "INSERT", new={"name": "no id"}), "a")
    put(
        kinesis, stream, encode_record(ORDERS, "INSERT", new={"order_id": "x"}), "a"
    )  # known, not configured
    put(kinesis, stream, encode_record(USERS, "INSERT", new={"id": 2}), "a")

    source = make_source(stream, dead_letter_store=dlq)
    start(source, [USERS])
    handler = Collector()
    runners.append(Runner(source, KinesisPosition(), handler))
    events = handler.wait_events(2)
    assert [e.new_values["id"] for e in events] == [1, 2]
    wait_until(lambda: len(dlq.read(f"kinesis:{stream}")) == 4, what="4 dead letters")
    letters = dlq.read(f"kinesis:{stream}")
    reasons = [d.error.message for d in letters]
    assert "malformed JSON" in reasons[0]
    assert "unknown table 'public.nope'" in reasons[1]
    assert "missing key: DELETE of public.users has neither 'key' nor 'old'" in reasons[2]
    assert "missing key: INSERT of public.users lacks primary-key column(s) id" in reasons[3]
    assert all(f"stream {stream}" in r and "sequence" in r for r in reasons)
    assert letters[0].change.new_values["data"] == "{this is not json"
    assert letters[1].change.table == TableIdentifier("public", "nope")
    assert all(d.error.error_type == "BadRecord" for d in letters)
    assert source.position_from_string(letters[0].position).shards  # where the bad record was
    stats = source.stats()
    assert stats["bad_records"] == 4 and stats["skipped"] == 1 and stats["events"] == 2
    # the position moved past the bad records: an ack there will not replay them
    assert events[-1].position.shards == {next(iter(events[-1].position.shards)): "7"}


class FlakyKinesis:
    """A real Kinesis client whose GetRecords fails on purpose now and then."""

    def __init__(self, client: Any, plan: list[str]) -> None:
        self._client = client
        self.plan = list(plan)
        self.calls = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)

    def get_records(self, **kwargs: Any) -> Any:
        from botocore.exceptions import ClientError

        self.calls += 1
        if self.plan:
            code = self.plan.pop(0)
            if code != "ok":
                raise ClientError(
                    {"Error": {"Code": code, "Message": f"injected {code}"}}, "GetRecords"
                )
        return self._client.get_records(**kwargs)


def test_throttling_and_expired_iterators_are_retried(
    moto_server: Any,
    s3_bucket: str,
    make_kinesis_stream: Any,
    make_source: Any,
    runners: list[Runner],
) -> None:
    s3, kinesis = moto_server.client("s3"), moto_server.client("kinesis")
    write_baseline(s3, s3_bucket, "baseline/", {USERS: []})
    stream = make_kinesis_stream(shards=1)
    for i in range(5):
        put(kinesis, stream, encode_record(USERS, "INSERT", new={"id": i}), "a")
    flaky = FlakyKinesis(
        kinesis,
        [
            "ProvisionedThroughputExceededException",
            "ThrottlingException",
            "ok",
            "ExpiredIteratorException",
            "ok",
        ],
    )
    source = make_source(stream, kinesis_client=flaky, batch_size=2)
    start(source, [USERS])
    handler = Collector()
    runners.append(Runner(source, KinesisPosition(), handler))
    events = handler.wait_events(5)
    assert [e.new_values["id"] for e in events] == [0, 1, 2, 3, 4]
    stats = source.stats()
    assert stats["retries"] >= 2 and stats["expired_iterators"] == 1


def test_shard_error_surfaces_as_source_error(
    moto_server: Any, s3_bucket: str, make_kinesis_stream: Any, make_source: Any
) -> None:
    s3, kinesis = moto_server.client("s3"), moto_server.client("kinesis")
    write_baseline(s3, s3_bucket, "baseline/", {USERS: []})
    stream = make_kinesis_stream(shards=2)
    # one shard keeps failing with a terminal error; throttling outlives the retries
    for plan in (["AccessDeniedException"], ["ProvisionedThroughputExceededException"] * 50):
        source = make_source(stream, kinesis_client=FlakyKinesis(kinesis, plan), max_retries=3)
        start(source, [USERS])
        runner = Runner(source, KinesisPosition(), Collector())
        err = runner.join(timeout=10)
        assert isinstance(err, SourceError), err
        assert plan[0] in str(err)
        assert source.state() is SourceState.ERROR


def test_validation_reports_missing_tables_and_stream(
    moto_server: Any, s3_bucket: str, make_kinesis_stream: Any, make_source: Any
) -> None:
    s3 = moto_server.client("s3")
    write_baseline(s3, s3_bucket, "baseline/", {USERS: []})
    stream = make_kinesis_stream(shards=1)
    source = make_source(stream)
    nope = TableIdentifier("public", "nope")
    start(source, [USERS, ORDERS, nope])
    problems = {(str(p.table), p.code) for p in source.validate_tables([USERS, ORDERS, nope])}
    assert problems == {("shop.orders", "NO_BASELINE"), ("public.nope", "TABLE_NOT_FOUND")}
    missing = make_source("laredo-no-such-stream")
    start(missing, [USERS])
    codes = [p.code for p in missing.validate_tables([USERS])]
    assert codes == ["STREAM_NOT_FOUND"]


def test_baseline_formats_parts_and_source_sequence_alignment(
    moto_server: Any,
    s3_bucket: str,
    make_kinesis_stream: Any,
    make_source: Any,
    runners: list[Runner],
) -> None:
    """jsonl.gz + parquet parts, and stream records already in the baseline (seq <= the
    manifest's source_sequence) are skipped."""
    import gzip
    import io
    import json

    pq = pytest.importorskip("pyarrow.parquet")
    import pyarrow as pa
    from laredo import serialization

    s3, kinesis = moto_server.client("s3"), moto_server.client("kinesis")
    manifest = {
        "tables": {
            "public.users": {
                "columns": [
                    {"name": "id", "type": "int8", "primary_key": True},
                    {"name": "amount", "type": "numeric"},
                ]
            }
        },
        "source_sequence": 100,
    }
    s3.put_object(Bucket=s3_bucket, Key="baseline/manifest.json", Body=json.dumps(manifest))
    part1 = "".join(
        serialization.dumps_row({"id": i, "amount": Decimal(f"{i}.1")}) + "\n\n" for i in range(3)
    )
    s3.put_object(
        Bucket=s3_bucket,
        Key="baseline/public.users/part-0.jsonl.gz",
        Body=gzip.compress(part1.encode()),
    )
    table = pa.table({"id": [3, 4], "amount": [Decimal("3.1"), Decimal("4.1")]})
    buf = io.BytesIO()
    pq.write_table(table, buf)
    s3.put_object(Bucket=s3_bucket, Key="baseline/public.users/part-1.parquet", Body=buf.getvalue())
    s3.put_object(Bucket=s3_bucket, Key="baseline/public.users/ignored.txt", Body=b"x")
    stream = make_kinesis_stream(shards=1)
    put(
        kinesis,
        stream,
        encode_record(USERS, "INSERT", new={"id": 4, "amount": Decimal("4.1")}, seq=99),
        "a",
    )
    put(
        kinesis,
        stream,
        encode_record(USERS, "UPDATE", new={"id": 4, "amount": Decimal("4.2")}, seq=100),
        "a",
    )
    put(
        kinesis,
        stream,
        encode_record(USERS, "INSERT", new={"id": 5, "amount": Decimal("5.1")}, seq=101),
        "a",
    )

    source = make_source(stream)
    start(source, [USERS])
    assert source.validate_tables([USERS]) == []
    rows: list[dict[str, Any]] = []
    pos = source.baseline([USERS], lambda t, r: rows.append(r))
    assert rows == [{"id": i, "amount": Decimal(f"{i}.1")} for i in range(5)]
    assert pos.baseline_sequence == 100
    # text round trip keeps the alignment
    pos = source.position_from_string(source.position_to_string(pos))
    handler = Collector()
    runners.append(Runner(source, pos, handler))
    handler.wait(lambda c: source.stats()["records"] == 3)
    assert [e.new_values for e in handler.events] == [{"id": 5, "amount": Decimal("5.1")}]
    assert handler.events[0].xid == 101
    assert source.stats()["skipped"] == 2


def test_pause_resume_and_reset_source(  # noqa: PLR0917 - fixtures
    moto_server: Any,
    s3_bucket: str,
    make_kinesis_stream: Any,
    make_source: Any,
    runners: list[Runner],
    dynamodb_table_name: str,
) -> None:
    s3, kinesis = moto_server.client("s3"), moto_server.client("kinesis")
    write_baseline(s3, s3_bucket, "baseline/", {USERS: []})
    stream = make_kinesis_stream(shards=1)
    source = make_source(stream, checkpoint_table=dynamodb_table_name, create_checkpoint_table=True)
    start(source, [USERS])
    handler = Collector()
    runners.append(Runner(source, source.baseline([USERS], lambda t, r: None), handler))
    put(kinesis, stream, encode_record(USERS, "INSERT", new={"id": 1}), "a")
    handler.wait_events(1)
    source.pause()
    assert source.state() is SourceState.PAUSED
    wait_until(lambda: source.stats()["paused_readers"] == 1, what="the shard reader to park")
    reads = source.stats()["records"]
    put(kinesis, stream, encode_record(USERS, "INSERT", new={"id": 2}), "a")
    # the parked reader cannot fetch until resume, so the count cannot move
    assert source.stats()["records"] == reads and len(handler.events) == 1
    source.resume()
    events = handler.wait_events(2)
    source.ack(events[-1].position)
    assert source.last_acked_position() == events[-1].position
    source.reset_source()
    assert source.last_acked_position() is None
