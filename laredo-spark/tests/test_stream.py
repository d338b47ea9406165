"""A Laredo source as a Structured Streaming source; target and snapshot sinks, exactly once."""

from __future__ import annotations

import time
from decimal import Decimal
from typing import Any

import laredo
import pytest
from laredo.filters import FieldPrefix
from laredo.snapshots.local import LocalSnapshotStore
from laredo.testing import wait_until
from laredo.testing.source import columns
from laredo.types import TableIdentifier
from laredo_spark import SnapshotSink, TargetSink, stream_options
from laredo_spark.testing import ChangeFile, read_acks
from laredo_target_memory import IndexedTarget

pytestmark = pytest.mark.spark

USERS = TableIdentifier("public", "users")
COLS = {USERS: columns("id", "name", "n")}


class CountingTarget(IndexedTarget):
    """Counts inserts of keys already present: a replayed batch would show up here."""

    def __init__(self) -> None:
        super().__init__()
        self.duplicates = 0

    def on_insert(self, table: Any, row: Any) -> None:
        before = self.count()
        super().on_insert(table, row)
        if self.count() == before:
            self.duplicates += 1


class Boom(Exception):
    pass


def test_stream_to_target_and_snapshot_sinks_exactly_once_across_restart(
    spark: Any, tmp_path: Any
) -> None:
    cf = ChangeFile(tmp_path / "source")
    cf.define({"public.users": {"columns": ["id", "name", "n"], "pk": ["id"]}})
    expected: dict[int, dict[str, Any]] = {}

    def insert(i: int, name: str) -> None:
        row = {"id": i, "name": name, "n": Decimal(i) / 4}
        cf.transaction([("INSERT", "public.users", row, None)])
        if name.startswith("u"):
            expected[i] = row

    for i in range(1, 21):
        insert(i, f"u{i}" if i % 5 else f"x{i}")
    target = CountingTarget()
    pipeline = laredo.Pipeline("s", USERS, target, filters=[FieldPrefix("name", "u")])
    sink = TargetSink([pipeline], COLS, state_path=tmp_path / "sink-state.json")
    store = LocalSnapshotStore(tmp_path / "snaps", fsync=False)
    sinks = {"snap": SnapshotSink(store, COLS, source_id="s", pipelines=[pipeline])}
    fail_after_apply: list[int] = []

    def both(df: Any, batch_id: int) -> None:
        rows = df.collect()
        sink.apply(rows, batch_id)
        sinks["snap"].apply(rows, batch_id)
        if fail_after_apply and batch_id >= fail_after_apply[0]:
            fail_after_apply.clear()
            raise Boom("crash after the sinks applied, before Spark commits the batch")

    opts = stream_options(
        tables=[USERS],
        factory="laredo_spark.testing:file_test_source",
        factory_args=cf.args(),
        complete_after=0.3,
    )
    checkpoint = str(tmp_path / "checkpoint")

    def start() -> Any:
        df = spark.readStream.format("laredo").options(**opts).load()
        return (
            df.writeStream.foreachBatch(both)
            .option("checkpointLocation", checkpoint)
            .trigger(processingTime="300 milliseconds")
            .start()
        )

    q = start()
    try:
        wait_until(
            lambda: target.count() == 16, 90, what="20 inserts, 16 pass the filter", interval=0.1
        )
        # commit(end) comes one batch late: while idle, the last batch is not acknowledged
        time.sleep(1.0)
        assert not read_acks(cf.dir) or max(read_acks(cf.dir)) < 20
        cf.transaction(
            [
                ("UPDATE", "public.users", {"id": 1, "name": "x1", "n": Decimal(0)}, None),
                ("DELETE", "public.users", None, {"id": 2}),
            ]
        )
        expected.pop(1)
        expected.pop(2)
        wait_until(
            lambda: target.count() == 14,
            90,
            what="update leaving the filter + delete",
            interval=0.1,
        )
        # Spark acknowledges a batch when it plans the next one: give it one (filtered out)
        before = sink.log.batch_id
        insert(300, "x300")
        wait_until(lambda: sink.log.batch_id > before, 90, what="the next batch", interval=0.1)
        wait_until(
            lambda: bool(read_acks(cf.dir)) and max(read_acks(cf.dir)) >= 20,
            90,
            what="ack",
            interval=0.1,
        )
        # crash after the next batch was applied but before Spark committed it
        fail_after_apply.append(sink.log.batch_id + 1)
        insert(100, "u100")
        wait_until(
            lambda: q.exception() is not None or not q.isActive,
            90,
            what="query failure",
            interval=0.1,
        )
        assert 100 in {r["id"] for r in target.export_snapshot()}
    finally:
        q.stop()
    skipped = sink.batches_skipped
    failed_batch = sinks["snap"].batch_id
    # a fresh snapshot sink, as after a process restart: it reloads its newest snapshot
    sinks["snap"] = SnapshotSink(store, COLS, source_id="s", pipelines=[pipeline])
    q = start()  # restart from the checkpoint: the failed batch is replayed
    try:
        insert(101, "u101")
        insert(102, "x102")
        wait_until(lambda: target.count() == len(expected), 90, what="after restart", interval=0.1)
        q.processAllAvailable()
    finally:
        q.stop()
    assert sink.batches_skipped > skipped  # the replay was recognised and skipped
    assert sinks["snap"].batch_id > failed_batch
    assert target.duplicates == 0
    got = {r["id"]: r for r in target.export_snapshot()}
    assert got == expected
    newest = store.list()[0]
    meta, data = store.load(newest.snapshot_id)
    assert {r["id"]: r for r in data[USERS]} == expected
    assert meta.source_positions == {"s": str(cf.count)}
    acks = read_acks(cf.dir)
    assert acks == sorted(acks) and max(acks) <= cf.count


@pytest.mark.integration
def test_postgres_baseline_then_stream_into_a_snapshot_sink(
    spark: Any, pg_database: Any, tmp_path: Any
) -> None:
    import threading

    from laredo_spark import spark_baseline

    db = pg_database
    db.execute("CREATE TABLE items (id int PRIMARY KEY, v int, price numeric)")
    db.execute("INSERT INTO items SELECT g, 0, g / 8.0 FROM generate_series(1, 300) g")
    items = TableIdentifier("public", "items")
    cfg = {
        "connection": db.dsn,
        "slot_mode": "stateful",
        "slot_name": db.slot_name,
        "publication": {"create": True},
        "status_interval": 0.2,
    }
    store = LocalSnapshotStore(tmp_path / "snaps", fsync=False)
    res = spark_baseline(
        spark, cfg, [laredo.Pipeline("pg", items, IndexedTarget())], snapshot_store=store
    )
    meta, _ = store.load(res.snapshot_id)
    cols = {items: list(meta.tables[0].columns)}
    sink = SnapshotSink(store, cols, source_id="pg", seed_snapshot=res.snapshot_id)
    stop = threading.Event()

    def writer() -> None:
        n = 1000
        with db.connect() as conn:
            while not stop.is_set():
                n += 1
                conn.execute("INSERT INTO items VALUES (%s, 1, 2.5)", (n,))
                conn.execute("UPDATE items SET v = v + 1 WHERE id = %s", (n % 50 + 1,))
                conn.execute("DELETE FROM items WHERE id = %s", (n - 5,))
                time.sleep(0.01)

    opts = stream_options(
        tables=[items],
        source_type="postgresql",
        source_config=cfg,
        starting_position=res.position,
        complete_after=0.3,
    )
    w = threading.Thread(target=writer)
    w.start()
    q = (
        spark.readStream.format("laredo")
        .options(**opts)
        .load()
        .writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .trigger(processingTime="300 milliseconds")
        .start()
    )
    try:
        wait_until(lambda: sink.batch_id >= 2, 90, what="a few micro-batches", interval=0.1)
        stop.set()
        w.join()

        def db_rows() -> dict[Any, Any]:
            with db.connect() as conn:
                cur = conn.execute("SELECT id, v, price FROM items")
                return {(r[0],): {"id": r[0], "v": r[1], "price": r[2]} for r in cur.fetchall()}

        want = db_rows()

        def state() -> dict[Any, Any]:
            try:
                return {(r["id"],): r for r in sink.rows(items)}
            except laredo.SnapshotError:  # pruned while being read: look again
                return {}

        try:
            wait_until(lambda: state() == want, 60, what="sink state == SELECT *", interval=0.1)
        except AssertionError:
            got = state()
            extra = sorted(set(got) - set(want))[:5]
            missing = sorted(set(want) - set(got))[:5]
            differ = [(k, got[k], want[k]) for k in want if k in got and got[k] != want[k]][:3]
            raise AssertionError(
                f"{len(got)} vs {len(want)}; extra {extra} missing {missing} differ {differ} "
                f"pos {sink.position} batch {sink.batch_id} active {q.isActive} "
                f"error {str(q.exception())[:500] if q.exception() else None}"
            ) from None
    finally:
        stop.set()
        w.join()
        q.stop()
    confirmed = db.scalar(
        "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = %s",
        (db.slot_name,),
    )
    from laredo_source_pg.lsn import parse_lsn

    # acknowledged only what Spark committed (one batch late), never beyond the sink's state
    assert parse_lsn(res.position) <= parse_lsn(confirmed) <= parse_lsn(str(sink.position))


def test_snapshot_sink_folds_changes_like_the_engine(spark: Any, tmp_path: Any) -> None:
    """Key changes, unchanged TOAST, deletes, TRUNCATE, a filter (UPDATE leaving it is a
    DELETE) and a replayed batch; the rows are written by the executors (many parts)."""
    import json as _json

    from laredo.serialization import dumps_row
    from laredo_spark.stream import CHANGE_SCHEMA

    orders = TableIdentifier("public", "orders")
    cols = {USERS: columns("id", "name", "n", "big"), orders: columns("id", "v")}
    store = LocalSnapshotStore(tmp_path / "snaps", fsync=False)
    pipeline = laredo.Pipeline("s", USERS, IndexedTarget(), filters=[FieldPrefix("name", "u")])
    sink = SnapshotSink(store, cols, source_id="s", pipelines=[pipeline], keep=2)

    def batch(*changes: tuple[Any, ...]) -> Any:
        rows = [
            (
                str(pos),
                seq,
                str(table),
                action,
                0,
                None if new is None else dumps_row(new),
                None if old is None else dumps_row(old),
                _json.dumps(toast),
            )
            for seq, (pos, table, action, new, old, toast) in enumerate(changes)
        ]
        return spark.createDataFrame(rows, CHANGE_SCHEMA)

    users = [
        (1, USERS, "INSERT", {"id": i, "name": f"u{i}", "n": Decimal(i), "big": "B" * i}, None, [])
        for i in range(1, 2001)
    ]
    sink(batch(*users, (2, orders, "INSERT", {"id": 1, "v": 1}, None, [])), 0)
    assert len(store.manifest("spark-stream-000000000000").artifacts[0].parts) >= 1
    sink(
        batch(
            (3, USERS, "UPDATE", {"id": 5, "name": "u5b", "n": Decimal(50)}, None, ["big"]),
            (
                3,
                USERS,
                "UPDATE",
                {"id": 7000, "name": "u7", "n": Decimal(7), "big": "x"},
                {"id": 7},
                [],
            ),
            (3, USERS, "UPDATE", {"id": 8, "name": "x8", "n": Decimal(8), "big": "y"}, None, []),
            (4, USERS, "DELETE", None, {"id": 9}, []),
            (4, USERS, "INSERT", {"id": 9, "name": "u9again", "n": None, "big": None}, None, []),
            (5, orders, "INSERT", {"id": 2, "v": 2}, None, []),
            (5, orders, "TRUNCATE", None, None, []),
            (5, orders, "INSERT", {"id": 3, "v": 3}, None, []),
        ),
        1,
    )
    sink(batch((9, USERS, "DELETE", None, {"id": 1}, [])), 1)  # a replay: skipped
    expected = {r[3]["id"]: r[3] for r in users}
    expected[5] = {"big": "B" * 5, "id": 5, "name": "u5b", "n": Decimal(50)}
    expected[7000] = {"id": 7000, "name": "u7", "n": Decimal(7), "big": "x"}
    del expected[7], expected[8]
    expected[9] = {"id": 9, "name": "u9again", "n": None, "big": None}
    meta, data = store.load("spark-stream-000000000001")
    assert {r["id"]: r for r in data[USERS]} == expected
    assert list(data[orders]) == [{"id": 3, "v": 3}]
    assert meta.source_positions == {"s": "5"} and meta.user_meta["batch_id"] == 1
    assert sink.batch_id == 1 and sink.position == "5"
    # a fresh sink (a restarted driver) resumes from the newest snapshot
    again = SnapshotSink(store, cols, source_id="s", pipelines=[pipeline], keep=2)
    again(batch((9, USERS, "DELETE", None, {"id": 1}, [])), 1)
    assert again.batch_id == 1 and [d.snapshot_id for d in store.list()] == [
        "spark-stream-000000000001",
        "spark-stream-000000000000",
    ]


def test_snapshot_sink_keys_a_table_without_primary_key_by_every_column(
    spark: Any, tmp_path: Any
) -> None:
    """``laredo.types.row_key_columns``: no primary key, every column (REPLICA IDENTITY FULL:
    a DELETE carries the whole old row); two rows sharing their first column stay apart."""
    from laredo.serialization import dumps_row
    from laredo_spark.stream import CHANGE_SCHEMA

    log = TableIdentifier("public", "log")
    store = LocalSnapshotStore(tmp_path / "snaps", fsync=False)
    sink = SnapshotSink(store, {log: columns("day", "note", pk=())}, source_id="s")
    changes = [
        ("1", 0, str(log), "INSERT", 0, dumps_row({"day": 1, "note": n}), None, "[]")
        for n in ("a", "b", "c")
    ]
    changes.append(("2", 3, str(log), "DELETE", 0, None, dumps_row({"day": 1, "note": "b"}), "[]"))
    sink(spark.createDataFrame(changes, CHANGE_SCHEMA), 0)
    _, data = store.load("spark-stream-000000000000")
    assert sorted(r["note"] for r in data[log]) == ["a", "c"]
    assert sink.keys[log] == ["day", "note"]
