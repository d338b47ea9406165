"""A resumable Spark baseline's run record is read back from a store, so it is trusted for
nothing: a record over its size bound is never read, a deeply nested or garbage one is a
clear error naming where it lies, never quoted, and a damaged record makes the run start over
with a WARNING (as a changed configuration does). No Spark session is started."""

from __future__ import annotations

import dataclasses
import json
import logging
from pathlib import Path

import pytest
from laredo.errors import ConfigError, SnapshotError
from laredo.snapshots.local import LocalSnapshotStore
from laredo.snapshots.parquet import ParquetSerializer
from laredo.types import TableIdentifier
from laredo_spark.delta_baseline import (
    SPARK_PLAN,
    SPARK_RUN,
    DeltaChunkSink,
    _Location,
    plan_digest,
    recorded_run,
)
from laredo_spark.pg.baseline import SnapshotPartsSink
from laredo_spark.pg.chunks import TableChunks
from laredo_spark.pg.progress import (
    MAX_RUN_RECORD,
    ChunkRun,
    ProgressFiles,
    decode_run,
    encode_run,
)

PLAN = TableChunks(("id",), ("bigint",), (("10",), ("20",)))
MARK = "CONTENT-NEVER-LOGGED"


def make_run(**tables: TableChunks) -> ChunkRun:
    return ChunkRun("spark-x", "s", "0/16B3748", 1, "UTC", "f1", tables or {"public.t": PLAN})


def huge_run() -> ChunkRun:
    """A well-formed run whose record is over the bound (a plan of too many wide keys)."""
    width = 1000
    bounds = tuple((MARK + str(i).rjust(width, "0"),) for i in range(MAX_RUN_RECORD // width))
    return make_run(**{"public.t": TableChunks(("id",), ("text",), bounds)})


def nested(depth: int) -> str:
    return '{"version":1,"output_id":' + "[" * depth + "]" * depth + "}"


def write(files: ProgressFiles, n: int, body: bytes) -> None:
    with files.files.open_write(files.id, f"_spark/progress-{n:06d}.json") as out:
        out.write(body)


def test_a_record_over_the_bound_is_refused_on_write_and_on_read() -> None:
    run = huge_run()
    with pytest.raises(ConfigError, match=r"chunk_rows") as info:
        encode_run(run, "spark baseline")
    assert MARK not in str(info.value)
    body = json.dumps(run.to_json(), separators=(",", ":"))
    assert len(body) > MAX_RUN_RECORD
    with pytest.raises(SnapshotError, match=r"over the .* damaged") as err:
        decode_run(body, "table v7")
    assert "table v7" in str(err.value) and MARK not in str(err.value)


@pytest.mark.parametrize(
    ("record", "why"),
    [
        (nested(200_000), "nested too deep"),
        (b"\xff\x00\x13garbage " + MARK.encode(), "unreadable"),
        ('{"version": 1, "output_id": "' + MARK + '"}', "missing 'tables'"),
        (
            json.dumps({**make_run().to_json(), "consistent_point": MARK}),
            "consistent_point is not a non-negative integer",
        ),
        (  # a plan whose bounds are not lists of key values (once read as characters)
            json.dumps(
                {**make_run().to_json(), "tables": {"t": {**PLAN.to_json(), "bounds": [MARK]}}}
            ),
            "bound is not a list of strings",
        ),
        (json.dumps({**make_run().to_json(), "done": {"pipeline-0000": {MARK: 1}}}), "finished"),
    ],
    ids=["deeply-nested", "garbage", "missing-field", "wrong-type", "bad-plan", "bad-chunk"],
)
def test_a_damaged_record_is_a_clear_error_that_never_quotes_it(
    record: str | bytes, why: str
) -> None:
    with pytest.raises(SnapshotError) as info:
        decode_run(record, "progress-000002.json in /store")
    text = str(info.value)
    assert why in text and "progress-000002.json in /store" in text
    assert MARK not in text and len(text) < 400


def test_progress_files_skip_a_damaged_record_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Each damaged newest record is skipped (never read when over the bound) and the
    previous one counts; with none left the run starts over."""
    store = LocalSnapshotStore(tmp_path)
    files = ProgressFiles(store, "pg", "s")
    good = make_run().finished("pipeline-0000", 0, {"parts": 1})
    files.save(good)
    huge = json.dumps(huge_run().to_json(), separators=(",", ":")).encode()
    for n, body in enumerate([nested(200_000).encode(), b"\xff" + MARK.encode(), huge], 2):
        write(files, n, body)
        with caplog.at_level(logging.WARNING, logger="laredo_spark.pg.progress"):
            caplog.clear()
            assert files.load() == good
        assert f"progress-{n:06d}.json of {files.id} in {tmp_path}" in caplog.text
        assert MARK not in caplog.text
    assert "not read" in caplog.text  # the last one: refused by its size on the store
    store.files.remove_staged(files.id, ["_spark/progress-000001.json"])
    assert files.load() is None  # nothing readable left: a fresh run


def test_a_run_too_big_to_record_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    store = LocalSnapshotStore(tmp_path)
    files = ProgressFiles(store, "pg", "s")
    with pytest.raises(ConfigError, match=r"raise baseline\.chunk_rows"):
        files.save(huge_run())
    assert store.files.staged_paths(files.id) == []


def test_finished_chunks_outside_the_plan_do_not_fit_it() -> None:
    run = make_run().finished("pipeline-0000", 2, 5)
    assert run.misfit(["public.t"]) is None
    assert "do not fit" in str(run.finished("pipeline-0000", 3, 5).misfit(["public.t"]))
    assert "do not fit" in str(run.misfit(["public.other"]))
    assert "do not fit" in str(run.misfit([]))


def test_a_snapshot_run_whose_parts_are_malformed_starts_over(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = LocalSnapshotStore(tmp_path)
    sink = SnapshotPartsSink(store, ParquetSerializer(), "spark-y", {})
    files = ProgressFiles(store, "pg", "s")
    files.save(make_run().finished("pipeline-0000", 0, {"kind": 7, "parts": MARK}))
    with caplog.at_level(logging.WARNING, logger="laredo_spark.pg.baseline"):
        assert sink.load_run("pg", "s") is None
    assert "malformed" in caplog.text and "starting over" in caplog.text
    assert MARK not in caplog.text
    assert files.load() is None  # the damaged record is gone: the fresh run's is the only one
    files.save(dataclasses.replace(make_run(), output_id="../" + MARK))  # not a snapshot id
    with caplog.at_level(logging.WARNING, logger="laredo_spark.pg.baseline"):
        assert sink.load_run("pg", "s") is None
    assert files.load() is None and sink.snapshot_id == "spark-y"


@pytest.mark.parametrize(
    "record",
    [nested(200_000), MARK, json.dumps(make_run().finished("pipeline-0000", 0, MARK).to_json())],
)
def test_a_delta_table_whose_run_record_is_damaged_starts_over(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, record: str
) -> None:
    """The newest commit of a Delta table records the run (``laredo.spark_run``): a damaged
    one is no run (a WARNING names the table's version), a sound one is read back."""
    pa = pytest.importorskip("pyarrow")
    deltalake = pytest.importorskip("deltalake")
    uri = str(tmp_path / "t")
    table = pa.table({"id": pa.array([1], pa.int64())})
    sound = encode_run(make_run().finished("pipeline-0000", 0, 1), "t").decode()
    for text in (sound, record):
        deltalake.write_deltalake(
            uri,
            table,
            mode="append",
            commit_properties=deltalake.CommitProperties(custom_metadata={SPARK_RUN: text}),
        )
    sink = DeltaChunkSink({"p": _Location(uri)}, order=["p"])
    sink.tables["p"] = TableIdentifier("public", "t")
    with caplog.at_level(logging.WARNING, logger="laredo_spark.delta_baseline"):
        assert sink._recorded("p", "s") is None
    assert f"{uri} version 1 ({SPARK_RUN})" in caplog.text and "starts over" in caplog.text
    assert MARK not in caplog.text
    deltalake.write_deltalake(
        uri,
        table,
        mode="append",
        commit_properties=deltalake.CommitProperties(custom_metadata={SPARK_RUN: sound}),
    )
    assert sink._recorded("p", "s") == make_run().finished("pipeline-0000", 0, 1)


def test_a_wave_commit_finds_the_plan_and_earlier_chunks_in_the_run_s_commits(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Only the run's first commit holds the plan; each wave's commit records its own chunks
    and the plan's digest, and the run is read back whole. A digest no commit holds is a
    damaged record: that table starts over, with a WARNING."""
    pa = pytest.importorskip("pyarrow")
    deltalake = pytest.importorskip("deltalake")
    uri = str(tmp_path / "t")
    table = pa.table({"id": pa.array([1], pa.int64())})
    run = make_run().finished("pipeline-0000", 0, 7).finished("pipeline-0000", 1, 8)

    def commit(record: ChunkRun, digest: str = plan_digest(run), at: str = uri) -> None:
        meta = {SPARK_RUN: encode_run(record, "t").decode(), SPARK_PLAN: digest}
        deltalake.write_deltalake(
            at,
            table,
            mode="append",
            commit_properties=deltalake.CommitProperties(custom_metadata=meta),
        )

    def wave(chunk: int, rows: int) -> ChunkRun:
        return dataclasses.replace(make_run(), tables={}).finished("pipeline-0000", chunk, rows)

    commit(dataclasses.replace(make_run(), output_id="an-older-run"))
    commit(make_run())  # this run's first commit: the plan, no chunk yet
    commit(wave(0, 7))
    commit(wave(1, 8))
    assert recorded_run(uri) == run
    commit(wave(2, 9), "a digest of no plan")
    with pytest.raises(SnapshotError, match=r"version 4 .*its plan\) is in no earlier"):
        recorded_run(uri)
    sink = DeltaChunkSink({"p": _Location(uri)}, order=["p"])
    with caplog.at_level(logging.WARNING, logger="laredo_spark.delta_baseline"):
        assert sink._recorded("p", "s") is None
    assert "starts over" in caplog.text
    # a wave whose run's first commit is gone: an older run's chunks and plan are not taken
    other = str(tmp_path / "other")
    older = dataclasses.replace(make_run(), output_id="an-older-run")
    commit(older, at=other)
    commit(dataclasses.replace(older, tables={}).finished("pipeline-0000", 1, 5), at=other)
    commit(wave(0, 7), at=other)
    with pytest.raises(SnapshotError, match=r"version 2 .*is in no earlier"):
        recorded_run(other)
    # nor a first commit whose plan is not the one its digest names (a damaged record)
    forged = str(tmp_path / "forged")
    commit(make_run(**{"public.t": TableChunks(("id",), ("bigint",), ())}), at=forged)
    commit(wave(0, 7), at=forged)
    with pytest.raises(SnapshotError, match=r"version 1 .*is in no earlier"):
        recorded_run(forged)
