"""The resumable Spark baseline's record and its resume check, without Spark: a torn write
of the record leaves the previous one, and a run is resumed only from its own untouched
slot with the same configuration."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from laredo.snapshots.local import LocalSnapshotStore
from laredo_source_pg import ExportedSnapshot, PostgresSourceOptions
from laredo_spark.pg.chunked import _stale
from laredo_spark.pg.chunks import TableChunks
from laredo_spark.pg.progress import ChunkRun, ProgressFiles

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
