"""The Kinesis source driven by ``laredo.Engine`` (baseline, stream, restart, snapshot restore)."""

from __future__ import annotations

import datetime as dt
from collections import Counter
from decimal import Decimal
from typing import Any

import laredo
import pytest
from laredo.snapshots.jsonl import JsonlSerializer
from laredo.testing import RecordingTarget, wait_until
from laredo_snapshot_s3 import S3SnapshotStore
from laredo_source_kinesis import encode_record
from laredo_source_kinesis.testing import ORDERS, USERS, put, write_baseline
from laredo_target_memory import IndexedTarget

pytestmark = pytest.mark.integration

T0 = dt.datetime(2026, 3, 1, 12, 0, tzinfo=dt.UTC)


def user(i: int, name: str = "") -> dict[str, Any]:
    return {"id": i, "name": name or f"u{i}", "balance": Decimal(f"{i}.5"), "seen": T0}


def test_engine_baseline_and_stream_into_indexed_targets(
    moto_server: Any, s3_bucket: str, make_kinesis_stream: Any, make_source: Any
) -> None:
    s3, kinesis = moto_server.client("s3"), moto_server.client("kinesis")
    write_baseline(
        s3,
        s3_bucket,
        "baseline/",
        {USERS: [user(1), user(2)], ORDERS: [{"order_id": "a", "user_id": 1, "total": Decimal(1)}]},
    )
    stream = make_kinesis_stream(shards=2)
    users, orders = IndexedTarget(), IndexedTarget()
    eng = laredo.Engine(
        sources={"k": make_source(stream)},
        pipelines=[laredo.Pipeline("k", USERS, users), laredo.Pipeline("k", ORDERS, orders)],
    )
    with eng:
        assert eng.await_ready(20)
        assert users.get(1) == user(1) and orders.count() == 1
        put(kinesis, stream, encode_record(USERS, "INSERT", new=user(3)), "u3")
        put(
            kinesis, stream, encode_record(USERS, "UPDATE", new=user(1, "one"), key={"id": 1}), "u1"
        )
        put(kinesis, stream, encode_record(USERS, "DELETE", key={"id": 2}), "u2")
        put(
            kinesis,
            stream,
            [
                encode_record(
                    ORDERS, "INSERT", new={"order_id": "b", "user_id": 3, "total": Decimal("2.50")}
                ),
                encode_record(ORDERS, "DELETE", key={"order_id": "a"}),
            ],
            "tx1",
        )
        wait_until(
            lambda: (
                users.get(3) is not None
                and users.get(2) is None
                and (users.get(1) or {}).get("name") == "one"
                and orders.get("a") is None
                and orders.get("b") is not None
            ),
            timeout=15,
            what="stream changes applied",
        )
        assert users.get(3) == user(3)  # same types as the baseline row (Decimal, datetime)
        assert orders.get("b") == {"order_id": "b", "user_id": 3, "total": Decimal("2.50")}


def test_engine_restart_with_checkpoints_nothing_lost_nothing_twice(
    moto_server: Any,
    s3_bucket: str,
    make_kinesis_stream: Any,
    make_source: Any,
    dynamodb_table_name: str,
) -> None:
    """Two tables on a 2-shard stream into durable targets: the engine ACKs what they applied,
    the source checkpoints it per shard, and a restart resumes after it."""
    s3, kinesis = moto_server.client("s3"), moto_server.client("kinesis")
    write_baseline(s3, s3_bucket, "baseline/", {USERS: [user(0)], ORDERS: []})
    stream = make_kinesis_stream(shards=2)
    ck = {"checkpoint_table": dynamodb_table_name, "create_checkpoint_table": True}
    users, orders = RecordingTarget(durable=True), RecordingTarget(durable=True)

    def produce(ids: range) -> None:
        for i in ids:
            put(kinesis, stream, encode_record(USERS, "INSERT", new=user(i)), f"k{i}")
            if i % 10 == 0:  # orders are rarer: their pipeline is often idle
                order = {"order_id": f"o{i}", "user_id": i, "total": Decimal(i)}
                put(kinesis, stream, encode_record(ORDERS, "INSERT", new=order), f"o{i}")

    def run(ids: range, users_total: int, orders_total: int) -> None:
        source = make_source(stream, **ck)
        eng = laredo.Engine(
            sources={"k": source},
            pipelines=[laredo.Pipeline("k", USERS, users), laredo.Pipeline("k", ORDERS, orders)],
        )
        eng.start()
        try:
            assert eng.await_ready(20)
            produce(ids)
            assert users.wait_for(lambda t: t.count() >= users_total, timeout=15)
            assert orders.wait_for(lambda t: t.count() >= orders_total, timeout=15)
        finally:
            eng.stop()

    run(range(1, 31), 31, 3)
    assert users.methods().count("on_baseline_complete") == 1
    acked = make_source(stream, **ck).last_acked_position()
    assert acked is not None and len(acked.shards) == 2
    produce(range(31, 41))  # written while nothing runs: the restart must pick them up
    run(range(41, 51), 51, 5)
    assert users.methods().count("on_baseline_complete") == 1  # resumed: no second baseline
    for target, expected in (
        (users, set(range(1, 51))),
        (orders, {"o10", "o20", "o30", "o40", "o50"}),
    ):
        key = "id" if target is users else "order_id"
        applied = Counter(c[2][key] for c in target.calls if c[0] == "on_insert")
        assert set(applied) == expected, "nothing lost"
        assert max(applied.values()) == 1, (
            f"applied twice: {[k for k, v in applied.items() if v > 1]}"
        )


def test_engine_restores_from_s3_snapshot_then_resumes_stream(
    moto_server: Any,
    s3_bucket: str,
    make_kinesis_stream: Any,
    make_source: Any,
    dynamodb_table_name: str,
) -> None:
    """In-memory targets are not durable: the engine acknowledges them only up to a snapshot,
    and a restart restores that S3 snapshot and streams from its position."""
    s3, kinesis = moto_server.client("s3"), moto_server.client("kinesis")
    write_baseline(s3, s3_bucket, "baseline/", {USERS: [user(1), user(2)]})
    stream = make_kinesis_stream(shards=1)
    ck = {"checkpoint_table": dynamodb_table_name, "create_checkpoint_table": True}
    store = S3SnapshotStore(s3_bucket, "snapshots", endpoint_url=moto_server.endpoint_url)

    def engine(target: IndexedTarget) -> Any:
        return laredo.Engine(
            sources={"k": make_source(stream, **ck)},
            pipelines=[laredo.Pipeline("k", USERS, target)],
            snapshot_store=store,
            snapshot_serializer=JsonlSerializer(),
        )

    t1 = IndexedTarget()
    with engine(t1) as eng:
        assert eng.await_ready(20)
        put(kinesis, stream, encode_record(USERS, "INSERT", new=user(3)), "a")
        wait_until(lambda: t1.get(3) is not None, what="insert 3")
        snap = eng.create_snapshot({"why": "test"})
    assert [d.snapshot_id for d in store.list()] == [snap]
    put(kinesis, stream, encode_record(USERS, "DELETE", key={"id": 1}), "a")
    put(kinesis, stream, encode_record(USERS, "INSERT", new=user(4)), "a")

    t2 = IndexedTarget()
    with engine(t2) as eng2:
        assert eng2.await_ready(20)
        wait_until(lambda: t2.get(4) is not None and t2.get(1) is None, what="restored + streamed")
        assert sorted(r["id"] for r in t2.export_snapshot()) == [2, 3, 4]
        assert t2.get(2) == user(2)


def test_engine_dead_letter_store_receives_bad_records(
    moto_server: Any, s3_bucket: str, make_kinesis_stream: Any, make_source: Any
) -> None:
    from laredo.deadletter import MemoryDeadLetterStore

    s3, kinesis = moto_server.client("s3"), moto_server.client("kinesis")
    write_baseline(s3, s3_bucket, "baseline/", {USERS: [user(1)]})
    stream = make_kinesis_stream(shards=1)
    dl = MemoryDeadLetterStore()
    users = IndexedTarget()
    eng = laredo.Engine(
        sources={"k": make_source(stream)},  # no store given to the source itself
        pipelines=[laredo.Pipeline("k", USERS, users)],
        dead_letter_store=dl,
    )
    with eng:
        assert eng.await_ready(20)
        put(kinesis, stream, b"{not json", "a")
        put(kinesis, stream, encode_record(USERS, "INSERT", new=user(2)), "a")
        wait_until(lambda: users.get(2) is not None, timeout=15, what="stream continues")
        wait_until(lambda: len(dl.read(f"kinesis:{stream}")) == 1, what="dead letter")
        assert "malformed JSON" in dl.read(f"kinesis:{stream}")[0].error.message
