"""The resumable Spark baseline's record and its resume check, without Spark: a torn write
of the record leaves the previous one, and a run is resumed only from its own untouched
slot with the same configuration."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import laredo
import pytest
from laredo.errors import ConfigError
from laredo.snapshots.local import LocalSnapshotStore
from laredo.types import SourceConfig, TableIdentifier
from laredo_source_pg import ExportedSnapshot, PostgresSourceOptions
from laredo_spark import spark_baseline
from laredo_spark.kinds import kind_of_column
from laredo_spark.pg.chunked import _keys, _stale
from laredo_spark.pg.chunks import TableChunks, check_keys, plan_chunks
from laredo_spark.pg.driver import source_from
from laredo_spark.pg.progress import ChunkRun, ProgressFiles
from laredo_spark.pg.slices import read_chunk
from laredo_target_memory import IndexedTarget

PLAN = TableChunks(("region", "id"), ("text", "bigint"), (("eu", "10"), ("us'east", "20")))


def make_run(position: str = "0/16B3748", slot: str = "s") -> ChunkRun:
    return ChunkRun("spark-x", slot, position, 1, "UTC", "f1", {"public.t": PLAN})


def test_a_torn_progress_write_leaves_the_previous_record(tmp_path: Path) -> None:
    store = LocalSnapshotStore(tmp_path)
    files = ProgressFiles(store, "pg", "s")
    assert files.load() is None
    one = make_run().finished("pipeline-0000", 0, {"parts": 1})
    files.save(one)
    two = one.finished("pipeline-0000", 2, {"parts": 2})
    files.save(two)
    assert files.load() == two
    assert store.files.staged_paths(files.id) == ["_spark/progress-000002.json"]  # older gone
    # a driver killed while writing record 3 leaves it torn: record 2 still counts
    with store.files.open_write(files.id, "_spark/progress-000003.json") as out:
        out.write(b'{"version": 1, "output_id": "spa')
    assert files.load() == two
    assert two.chunks_done() == 2 and PLAN.count == 3
    assert PLAN.chunk(0) == (None, ("eu", "10")) and PLAN.chunk(2) == (("us'east", "20"), None)
    files.clear()
    assert files.load() is None


@pytest.mark.integration
def test_a_run_resumes_only_from_its_own_untouched_slot(pg_database: Any) -> None:
    db = pg_database
    opts = PostgresSourceOptions(connection=db.dsn, slot_mode="stateful", slot_name=db.slot_name)
    with ExportedSnapshot(opts, db.slot_name) as snap:
        position = snap.position
    run = make_run(position, db.slot_name)
    assert _stale(run, "f1", opts, db.slot_name) is None
    assert "configuration" in str(_stale(run, "f2", opts, db.slot_name))
    db.execute("CREATE TABLE t (id int PRIMARY KEY)")
    db.execute("INSERT INTO t VALUES (1)")
    db.execute("SELECT pg_replication_slot_advance(%s, pg_current_wal_lsn())", (db.slot_name,))
    assert "moved from" in str(_stale(run, "f1", opts, db.slot_name))
    db.execute("SELECT pg_drop_replication_slot(%s)", (db.slot_name,))
    assert "is gone" in str(_stale(run, "f1", opts, db.slot_name))


@pytest.mark.integration
def test_chunks_follow_the_replica_identity_index_of_a_table_without_primary_key(
    pg_database: Any, tmp_path: Path
) -> None:
    """The PostgreSQL source's own chunk key (``chunk_key``) cuts the chunks: a table without
    a primary key is cut by its ``REPLICA IDENTITY USING INDEX`` columns, and the chunks the
    tasks read (``read_chunk``, here in-process) hold every row once; a table with neither is
    refused before Spark or the slot is touched, naming it and the fixes."""
    db = pg_database
    db.execute("CREATE TABLE codes (code text NOT NULL, n int)")
    db.execute("CREATE UNIQUE INDEX codes_code ON codes (code)")
    db.execute("ALTER TABLE codes REPLICA IDENTITY USING INDEX codes_code")
    db.execute("INSERT INTO codes SELECT 'c' || g, g FROM generate_series(1, 250) g")
    db.execute("CREATE TABLE loose (n int)")
    db.execute("ALTER TABLE loose REPLICA IDENTITY FULL")  # streams, but has no key to cut by
    codes, loose = TableIdentifier("public", "codes"), TableIdentifier("public", "loose")
    cfg = {"connection": db.dsn, "slot_mode": "stateful", "slot_name": db.slot_name}
    src = source_from({**cfg, "publication": {"create": True}}, "spark baseline")
    columns = src.init(SourceConfig([codes, loose]))
    keys = _keys(src, [codes, loose])
    assert keys == {codes: ["code"], loose: None}
    with pytest.raises(ConfigError, match=r"public\.loose has no primary key nor replica"):
        check_keys(keys)
    # the driver refuses it before Spark (none given here) or the slot is touched
    store = LocalSnapshotStore(tmp_path)
    pipeline = laredo.Pipeline("pg", loose, IndexedTarget())
    chunked = {**cfg, "publication": {"create": True}, "baseline": {"mode": "chunked"}}
    with pytest.raises(ConfigError, match=r"public\.loose has no primary key nor replica"):
        spark_baseline(None, chunked, [pipeline], snapshot_store=store)
    assert db.scalar("SELECT count(*) FROM pg_replication_slots") == 0
    with ExportedSnapshot(src.options, db.slot_name) as snap:
        plans, zone = plan_chunks(src.options, snap.snapshot_name, {codes: ["code"]}, 100)
        plan = plans[codes]
        assert (plan.key, plan.types, plan.count) == (("code",), ("text",), 3)
        spec = {
            "snapshot": snap.snapshot_name,
            "schema": "public",
            "table": "codes",
            "kinds": {c.name: kind_of_column(c, zone) for c in columns[codes]},
            "key": list(plan.key),
            "key_types": list(plan.types),
        }
        read: list[str] = []
        for i in range(plan.count):
            for batch in read_chunk(spec, src.options, *plan.chunk(i)):
                read.extend(batch.column("code").to_pylist())
    assert sorted(read) == sorted(f"c{g}" for g in range(1, 251))  # every row, once


def test_chunk_rows_is_checked_before_anything_runs() -> None:
    """``--chunk-rows`` (``run_spark(chunk_rows=)``): an integer >= 0, named in the error."""
    from laredo_spark.runner import run_spark

    with pytest.raises(ConfigError, match=r"chunk_rows must be an integer >= 0 \(got -1"):
        run_spark({}, chunk_rows=-1)


def test_delta_tables_record_the_run_and_each_its_own_chunks(tmp_path: Path) -> None:
    """The Delta sink's record, without Spark: the plan is an empty version of each table
    ("begun"), each wave a commit with that table's finished chunks and the engine's record
    (last key done, ``""`` when finished); the next run merges the tables' records into one
    run, or finds none when every table finished it, or when the slot is another."""
    pytest.importorskip("laredo_target_delta")
    from laredo.testing import columns
    from laredo_spark.delta_baseline import DeltaChunkSink, _location
    from laredo_target_delta import DeltaTarget, DeltaTargetOptions, history

    a, b = TableIdentifier("public", "a"), TableIdentifier("public", "b")
    pipes = [
        laredo.Pipeline("pg", t, DeltaTarget(DeltaTargetOptions(uri=str(tmp_path / t.table))))
        for t in (a, b)
    ]
    cols = tuple(columns("id", "name", types={"id": "bigint"}))
    plan = TableChunks(("id",), ("bigint",), (("10",), ("20",)))  # 3 chunks
    run = ChunkRun(
        "spark-delta-x", "s", "0/16B3748", 1, "UTC", "f1", {"public.a": plan, "public.b": plan}
    )

    def sink() -> DeltaChunkSink:
        out = DeltaChunkSink({p.pipeline_id(): _location(p) for p in pipes})
        out.check(pipes, "pg")
        return out

    first = sink()
    assert first.load_run("pg", "s") is None  # no table yet
    first.begin_run(run, {a: cols, b: cols})
    for t in (a, b):
        (c,) = history(str(tmp_path / t.table))
        assert (c.kind, c.position, c.progress) == ("baseline", "0/16B3748", '{"last_key":null}')
    # table a: all 3 chunks in two waves; table b: chunk 0
    run = run.finished("pipeline-0000", 0, 5).finished("pipeline-0000", 1, 7)
    first.commit_run(0, run, [], cols, [0, 1])
    assert history(str(tmp_path / "a"))[-1].progress == '{"last_key":[20]}'
    run = run.finished("pipeline-0000", 2, 1)
    first.commit_run(0, run, [], cols, [2])
    assert history(str(tmp_path / "a"))[-1].progress == ""  # finished
    run = run.finished("pipeline-0001", 0, 3)
    first.commit_run(1, run, [], cols, [0])
    assert history(str(tmp_path / "b"))[-1].progress == '{"last_key":[10]}'

    resumed = sink().load_run("pg", "s")
    assert resumed is not None and resumed.output_id == "spark-delta-x"
    assert resumed.done == {"pipeline-0000": {0: 5, 1: 7, 2: 1}, "pipeline-0001": {0: 3}}
    assert sink().load_run("pg", "another-slot") is None
    done = sink()
    done.load_run("pg", "s")
    run = run.finished("pipeline-0001", 1, 1).finished("pipeline-0001", 2, 1)
    done.commit_run(1, run, [], cols, [1, 2])
    assert sink().load_run("pg", "s") is None  # every table finished it
