"""The typed change frame (Delta CDF shape) of ``spark.readStream.format("laredo")`` on a real
PostgreSQL stream: native types, change types, order, maxRowsPerTrigger, AvailableNow, lag."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import pytest
from laredo.errors import ConfigError, SourceError
from laredo.types import ChangeAction, ChangeEvent, ColumnDefinition, TableIdentifier
from laredo_spark import stream_options
from laredo_spark.streaming.cdf import cdf_kinds, cdf_rows

T = TableIdentifier("public", "t")
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _micros(d: datetime) -> int:
    delta = d - EPOCH
    return (delta.days * 86400 + delta.seconds) * 1_000_000 + delta.microseconds


def _prepare(db: Any, ddl: str) -> dict[str, Any]:
    """The table, its publication and a stateful slot created before any change."""
    db.execute(ddl)
    db.execute(f"CREATE PUBLICATION {db.publication} FOR TABLE t")
    db.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (db.slot_name,))
    return {
        "connection": db.dsn,
        "slot_mode": "stateful",
        "slot_name": db.slot_name,
        "status_interval": 0.2,
        "heartbeat_interval": 0.2,
    }


def _run_available_now(spark: Any, opts: dict[str, str], ckpt: str) -> tuple[Any, list[Any]]:
    """Runs a Trigger.AvailableNow query to its end; (query, [(batch id, rows)])."""
    batches: list[Any] = []

    def collect(df: Any, batch_id: int) -> None:
        try:
            rows = df.selectExpr(
                "*", "unix_micros(ts) AS ts_us", "CAST(ts AS STRING) AS ts_text"
            ).collect()
            batches.append((batch_id, rows))
        except Exception as exc:  # keep the Py4J message short
            raise RuntimeError(str(exc)[:300]) from None

    q = (
        spark.readStream.format("laredo")
        .options(**opts)
        .load()
        .writeStream.foreachBatch(collect)
        .option("checkpointLocation", ckpt)
        .trigger(availableNow=True)
        .start()
    )
    assert q.awaitTermination(180), "the AvailableNow query did not end by itself"
    if q.exception() is not None:
        raise AssertionError(str(q.exception())[:1000])
    return q, batches


@pytest.mark.spark
@pytest.mark.integration
def test_typed_frame_native_types_change_types_and_order(
    spark: Any, pg_database: Any, tmp_path: Any
) -> None:
    db = pg_database
    cfg = _prepare(
        db, "CREATE TABLE t (id int PRIMARY KEY, n numeric, s text, ts timestamptz, b bool)"
    )
    with db.connect() as conn, conn.transaction():
        conn.execute(
            "INSERT INTO t VALUES (1, 12.50, 'one', '2024-05-01 10:00:00.123456+02', true)"
        )
        conn.execute("INSERT INTO t VALUES (2, NULL, NULL, NULL, NULL)")
        conn.execute("INSERT INTO t VALUES (3, -1e-3, 'three', 'infinity', false)")
    with db.connect() as conn, conn.transaction():
        conn.execute("UPDATE t SET s = 'uno', n = n + 1 WHERE id = 1")
        conn.execute("DELETE FROM t WHERE id = 2")
    db.execute("UPDATE t SET id = 30 WHERE id = 3")
    db.execute("TRUNCATE t")
    opts = stream_options(table=T, source_type="postgresql", source_config=cfg, complete_after=0.3)
    frame = spark.readStream.format("laredo").options(**opts).load()
    types = {f.name: f.dataType.simpleString() for f in frame.schema.fields}
    assert types == {
        "id": "bigint",
        "n": "string",  # numeric: exact decimal text (laredo_spark.kinds)
        "s": "string",
        "ts": "timestamp",
        "b": "boolean",
        "_change_type": "string",
        "_commit_position": "string",
        "_commit_version": "bigint",
        "_commit_timestamp": "timestamp",
        "_seq": "bigint",
        "_unchanged_toast": "array<string>",
    }
    _q, batches = _run_available_now(spark, opts, str(tmp_path / "ckpt"))
    rows = [r for _b, rs in batches for r in rs]
    rows.sort(key=lambda r: (r["_commit_version"], r["_seq"], r["_change_type"]))
    got = [
        (r["_change_type"], r["id"], r["n"], r["s"], r["ts_us"], r["b"], r["_seq"]) for r in rows
    ]
    ts1 = _micros(datetime(2024, 5, 1, 8, 0, 0, 123456, tzinfo=UTC))
    ts_max = _micros(datetime.max.replace(tzinfo=UTC))
    assert got == [
        ("insert", 1, "12.50", "one", ts1, True, 0),
        ("insert", 2, None, None, None, None, 1),
        ("insert", 3, "-0.001", "three", ts_max, False, 2),
        ("update_postimage", 1, "13.50", "uno", ts1, True, 0),
        ("update_preimage", 1, None, None, None, None, 0),  # REPLICA IDENTITY DEFAULT: key only
        ("delete", 2, None, None, None, None, 1),
        ("update_postimage", 30, "-0.001", "three", ts_max, False, 0),
        ("update_preimage", 3, None, None, None, None, 0),  # the old key
        ("truncate", None, None, None, None, None, 0),
    ]
    inf = next(r for r in rows if r["id"] == 3)
    assert inf["ts_text"] == "9999-12-31 23:59:59.999999"  # datetime.max (docs/values.md)
    # one commit per transaction: position text, LSN and timestamp agree, in commit order
    commits = sorted({(r["_commit_version"], r["_commit_position"]) for r in rows})
    assert len(commits) == 4
    from laredo_source_pg.lsn import format_lsn

    assert [p for _v, p in commits] == [format_lsn(v) for v, _p in commits]
    assert all(r["_commit_timestamp"] is not None for r in rows)
    assert all(r["_unchanged_toast"] == [] or r["_unchanged_toast"] is None for r in rows)


@pytest.mark.spark
@pytest.mark.integration
def test_max_rows_per_trigger_bounds_batches_available_now_ends_and_lag_is_reported(
    spark: Any, pg_database: Any, tmp_path: Any
) -> None:
    db = pg_database
    cfg = _prepare(db, "CREATE TABLE t (id int PRIMARY KEY, ts timestamptz)")
    with db.connect() as conn:
        for txn in range(10):
            with conn.transaction():
                for i in range(3):
                    conn.execute("INSERT INTO t VALUES (%s, now())", (txn * 3 + i,))
    opts = stream_options(
        table="public.t",
        source_type="postgresql",
        source_config=cfg,
        complete_after=0.3,
        max_rows_per_trigger=7,
    )
    q, batches = _run_available_now(spark, opts, str(tmp_path / "ckpt"))
    sizes = [len(rs) for _b, rs in batches if rs]
    # whole transactions of 3 rows, at most 7 rows per batch: 6, 6, 6, 6, 6
    assert sizes == [6, 6, 6, 6, 6], sizes
    ids = [r["id"] for _b, rs in batches for r in sorted(rs, key=lambda r: r["_seq"])]
    assert sorted(ids) == list(range(30))
    # every batch's rows come in position order: the batches follow each other
    versions = [max(r["_commit_version"] for r in rs) for _b, rs in batches if rs]
    assert versions == sorted(versions)
    # reportLatestOffset: the first batch already saw the newest position (the lag)
    progress = [p for p in q.recentProgress if p.numInputRows]
    first = progress[0].sources[0]
    assert first.latestOffset is not None
    assert first.latestOffset != first.endOffset
    assert progress[-1].sources[0].latestOffset == progress[-1].sources[0].endOffset


def _ev(action: ChangeAction, pos: int, new: Any = None, old: Any = None, toast: Any = ()) -> Any:
    return (
        str(pos),
        action.name,
        ChangeEvent(T, action, pos, None, new, old, unchanged_toast=frozenset(toast)),
    )


def test_cdf_rows_fill_unchanged_toast_from_a_full_preimage_and_name_the_rest() -> None:
    cols = [
        ColumnDefinition("id", "int4", 1, primary_key=True, primary_key_ordinal=1, type_oid=23),
        ColumnDefinition("doc", "text", 2, type_oid=25),
        ColumnDefinition("n", "numeric", 3, type_oid=1700),
    ]
    kinds = cdf_kinds("public.t", cols)
    full = {"id": 1, "doc": "big", "n": Decimal("1.0")}
    rows = cdf_rows(
        "public.t",
        kinds,
        ["id"],
        [
            _ev(ChangeAction.UPDATE, 5, {"id": 1, "n": Decimal(2)}, full, {"doc"}),
            _ev(ChangeAction.UPDATE, 5, {"id": 1, "n": Decimal(3)}, None, {"doc"}),
        ],
        lambda p: p,
    )
    # (id, doc, n, _change_type, _commit_position, _commit_version, _commit_ts, _seq, toast)
    assert rows == [
        (1, "big", "1.0", "update_preimage", "5", 5, None, 0, None),
        (1, "big", "2", "update_postimage", "5", 5, None, 0, []),
        (1, None, None, "update_preimage", "5", 5, None, 1, None),
        (1, None, "3", "update_postimage", "5", 5, None, 1, ["doc"]),
    ]
    with pytest.raises(SourceError, match=r"column n of public\.t at position 7"):
        cdf_rows("public.t", kinds, ["id"], [_ev(ChangeAction.INSERT, 7, {"n": 1.5})], str)


def test_options_name_one_frame_and_a_valid_row_bound() -> None:
    with pytest.raises(ConfigError, match="exactly one of table"):
        stream_options(table=T, tables=[T], source_type="postgresql")
    with pytest.raises(ConfigError, match="exactly one of table"):
        stream_options(source_type="postgresql")
    from laredo_spark.streaming.reader import LaredoStreamReader

    bad = stream_options(table=T, source_type="postgresql", max_rows_per_trigger=-1)
    with pytest.raises(ConfigError, match=r"maxRowsPerTrigger must be an integer >= 0"):
        LaredoStreamReader(bad)
    with pytest.raises(SourceError, match="named like the change frame's own columns"):
        cdf_kinds("public.t", [ColumnDefinition("_seq", "int8", 1)])


@pytest.mark.spark
@pytest.mark.integration
def test_a_column_added_while_streaming_fails_the_query_naming_the_fix(
    spark: Any, pg_database: Any, tmp_path: Any
) -> None:
    db = pg_database
    cfg = _prepare(db, "CREATE TABLE t (id int PRIMARY KEY, s text)")
    db.execute("INSERT INTO t VALUES (1, 'a')")
    opts = stream_options(table=T, source_type="postgresql", source_config=cfg, complete_after=0.3)
    seen: list[int] = []

    def collect(df: Any, batch_id: int) -> None:
        rows = df.collect()
        seen.extend(r["id"] for r in rows)

    q = (
        spark.readStream.format("laredo")
        .options(**opts)
        .load()
        .writeStream.foreachBatch(collect)
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .trigger(processingTime="300 milliseconds")
        .start()
    )
    try:
        from laredo.testing import wait_until

        wait_until(lambda: seen == [1], 120, what="the first row", interval=0.1)
        db.execute("ALTER TABLE t ADD COLUMN x int")
        db.execute("INSERT INTO t VALUES (2, 'b', 7)")
        with pytest.raises(Exception, match="restart the query"):
            q.awaitTermination(120)
        assert seen == [1]  # the row with the new column never went out without it
    finally:
        q.stop()
