"""FileSink: Parquet and JSONL files per micro-batch, exactly once across a checkpoint restart."""

from __future__ import annotations

import os
from decimal import Decimal
from typing import Any

import pyarrow.parquet as parquet_files
import pytest
from laredo.testing import wait_until
from laredo.types import TableIdentifier
from laredo_spark import FileSink, stream_options
from laredo_spark.frame import decode_json
from laredo_spark.testing import ChangeFile

pytestmark = pytest.mark.spark

USERS = TableIdentifier("public", "users")


class Boom(Exception):
    pass


def test_file_sinks_write_each_batch_once_across_a_restart(spark: Any, tmp_path: Any) -> None:
    cf = ChangeFile(tmp_path / "source")
    cf.define(
        {
            "public.users": {"columns": ["id", "name", "n"], "pk": ["id"]},
            "public.other": {"columns": ["id"], "pk": ["id"]},
        }
    )

    def insert(i: int) -> None:
        cf.transaction(
            [("INSERT", "public.users", {"id": i, "name": f"u{i}", "n": Decimal(i) / 4}, None)]
        )

    parquet = FileSink(tmp_path / "pq", "parquet")
    jsonl = FileSink(tmp_path / "js", "jsonl", tables=[USERS])
    fail_on_position: list[str] = []
    seen: list[int] = []

    def both(df: Any, batch_id: int) -> None:
        parquet(df, batch_id)
        jsonl(df, batch_id)
        seen.append(batch_id)
        if fail_on_position:
            positions_here = {r[0] for r in df.select("position").collect()}
            if fail_on_position[0] in positions_here:
                fail_on_position.clear()
                raise Boom("crash after the files were written, before Spark commits the batch")

    opts = stream_options(
        tables=[USERS, TableIdentifier("public", "other")],
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

    def positions(sink: FileSink) -> list[str]:
        # read by pyarrow, not by a Spark job: polling with Spark jobs every 0.1 s competed with
        # the streaming query for the local session's cores (the test took 80 s)
        out: list[str] = []
        for d in sink.complete_batches():
            try:
                out += parquet_files.read_table(d, columns=["position"])["position"].to_pylist()
            except Exception:  # a replayed batch being rewritten right now: poll again
                return []
        return out

    for i in range(1, 11):
        insert(i)
    q = start()
    try:
        wait_until(lambda: len(positions(parquet)) == 10, 90, what="10 rows", interval=0.1)
        fail_on_position.append("11")  # the batch carrying the next insert fails
        insert(11)
        cf.transaction([("INSERT", "public.other", {"id": 1}, None)])
        wait_until(
            lambda: q.exception() is not None or not q.isActive,
            90,
            what="query failure",
            interval=0.1,
        )
        failed = seen[-1]
        # the failed batch's files are on disk, but Spark never committed it
        assert os.path.exists(parquet.batch_path(failed))
    finally:
        q.stop()
    q = start()  # restart: Spark replays the uncommitted batch with the same id
    try:
        insert(12)
        wait_until(lambda: len(positions(parquet)) >= 13, 90, what="after restart", interval=0.1)
        q.processAllAvailable()
    finally:
        q.stop()
    assert seen.count(failed) == 2  # the batch really was replayed
    pq = spark.read.parquet(str(tmp_path / "pq"))
    assert "batch" in pq.columns
    got = pq.collect()
    assert sorted(int(r["position"]) for r in got) == list(range(1, 14))  # no loss, no duplicate
    js = spark.read.json(str(tmp_path / "js")).collect()
    # position 12 is public.other's insert: filtered out of the JSONL sink
    assert sorted(int(r["position"]) for r in js) == [*range(1, 12), 13]
    users = {decode_json(r["new_values"])["id"]: decode_json(r["new_values"]) for r in js}
    assert users[12] == {"id": 12, "name": "u12", "n": Decimal(3)}


def test_file_sink_rejects_an_unknown_format(tmp_path: Any) -> None:
    with pytest.raises(Exception, match=r"format 'csv' is not supported"):
        FileSink(tmp_path, "csv")
