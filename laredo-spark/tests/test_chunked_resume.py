"""The resumable (``baseline.mode = chunked``) Spark baseline: a run that dies after some
chunks is resumed by the next run with the same configuration, which reads only the
unfinished chunks (PostgreSQL's own table counters) at a new snapshot, and the output restored
by the engine and streamed on from the slot's position ends equal to the table."""

from __future__ import annotations

from typing import Any

import laredo
import pytest
from laredo.snapshots.local import LocalSnapshotStore
from laredo.testing import wait_until
from laredo.types import TableIdentifier
from laredo_spark import spark_baseline
from laredo_spark.pg.baseline import SnapshotPartsSink
from laredo_spark.pg.progress import ProgressFiles
from laredo_target_memory import IndexedTarget

pytestmark = [pytest.mark.spark, pytest.mark.integration, pytest.mark.xdist_group("jvm")]

ACCOUNTS = TableIdentifier("public", "accounts")
ROWS = 4000
CHUNK_ROWS = 400  # 10 chunks


def make_accounts(db: Any) -> None:
    db.execute(
        "CREATE TABLE accounts (region text, id bigint, name text, balance numeric(12,2), "
        "at timestamptz, PRIMARY KEY (region, id))"
    )
    db.execute(
        "INSERT INTO accounts SELECT CASE WHEN g %% 2 = 0 THEN 'eu west' ELSE 'us''east' END, "
        "g, 'a' || g, g * 1.5, now() FROM generate_series(1, %s) g",
        (ROWS,),
    )


def rows_read(db: Any) -> int:
    """Live rows PostgreSQL has read from ``accounts`` so far (sequential + index scans)."""
    with db.connect() as conn:
        conn.execute("SELECT pg_stat_force_next_flush()")
        row = conn.execute(
            "SELECT coalesce(seq_tup_read, 0) + coalesce(idx_tup_fetch, 0) "
            "FROM pg_stat_user_tables WHERE relname = 'accounts'"
        ).fetchone()
    return int(row[0])


def table_rows(db: Any) -> dict[Any, dict[str, Any]]:
    with db.connect() as conn:
        cur = conn.execute("SELECT * FROM accounts")
        names = [d.name for d in cur.description]
        return {(r[0], r[1]): dict(zip(names, r, strict=True)) for r in cur.fetchall()}


def source_config(db: Any) -> dict[str, Any]:
    return {
        "type": "postgresql",
        "connection": db.dsn,
        "slot_mode": "stateful",
        "slot_name": db.slot_name,
        "publication": {"create": True},
        "status_interval": 0.2,
        "baseline": {"mode": "chunked", "chunk_rows": CHUNK_ROWS},
    }


def in_range(lo: Any, hi: Any) -> str:
    """SQL: ``(region, id)`` in the chunk ``(lo, hi]``."""

    def key(b: Any) -> str:
        return "('" + b[0].replace("'", "''") + f"', {int(b[1])})"

    conds = ["true"]
    if lo is not None:
        conds.append(f"(region, id) > {key(lo)}")
    if hi is not None:
        conds.append(f"(region, id) <= {key(hi)}")
    return "(" + " AND ".join(conds) + ")"


class DriverLost(Exception):
    pass


def test_chunked_spark_baseline_resumes_after_a_lost_driver(
    spark: Any, pg_database: Any, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = pg_database
    make_accounts(db)
    cfg = source_config(db)
    store = LocalSnapshotStore(tmp_path / "snaps")
    write = SnapshotPartsSink.write_chunks
    waves: list[int] = []

    def dies_after_two_waves(self: Any, spark: Any, job: Any, chunks: Any, run: Any) -> Any:
        if len(waves) == 2:  # the driver is lost between two waves
            raise DriverLost
        waves.append(len(chunks))
        return write(self, spark, job, chunks, run)

    monkeypatch.setattr(SnapshotPartsSink, "write_chunks", dies_after_two_waves)
    target = IndexedTarget()
    pipeline = laredo.Pipeline("pg", ACCOUNTS, target)
    with pytest.raises(DriverLost):
        spark_baseline(spark, cfg, [pipeline], snapshot_store=store, partitions=2)
    monkeypatch.undo()
    assert waves == [2, 2]
    assert store.list() == []  # nothing committed
    run = ProgressFiles(store, "pg", db.slot_name).load()
    assert run is not None and run.chunks_done() == 4
    (plan,) = run.tables.values()
    assert plan.count == ROWS // CHUNK_ROWS
    # the slot survives, still at the run's position
    (slot,) = db.execute(
        "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = %s",
        (db.slot_name,),
    )
    assert slot[0] == run.position

    # meanwhile: changes in finished and unfinished key ranges, a key change across them
    db.execute("UPDATE accounts SET balance = -1 WHERE id % 7 = 0")
    db.execute("DELETE FROM accounts WHERE id % 11 = 0")
    db.execute("INSERT INTO accounts VALUES ('eu west', 100001, 'new', 5, now())")
    db.execute("UPDATE accounts SET region = 'zz', id = 200002 WHERE id = 2")
    db.execute("UPDATE accounts SET region = 'eu west', id = 2 WHERE id = 3999")
    # rows in the unfinished chunks now: what the resumed run must read, and no more
    unfinished = [c for c in range(plan.count) if c not in run.done["pipeline-0000"]]
    conds = [in_range(*plan.chunk(c)) for c in unfinished]
    ((want_read,),) = db.execute(f"SELECT count(*) FROM accounts WHERE {' OR '.join(conds)}")

    before = rows_read(db)
    result = spark_baseline(spark, cfg, [pipeline], snapshot_store=store, partitions=2)
    read = rows_read(db) - before
    assert result.chunks == (len(unfinished), plan.count)
    assert result.snapshot_id == run.output_id
    assert result.position == run.position
    assert read == want_read, (read, want_read)
    assert read < 0.7 * ROWS
    assert ProgressFiles(store, "pg", db.slot_name).load() is None  # done: record removed
    (desc,) = store.list()
    assert desc.snapshot_id == result.snapshot_id

    # the engine restores the snapshot (rows at two snapshots) and streams from the slot
    db.execute("UPDATE accounts SET name = 'after' WHERE id % 13 = 0")
    src = laredo.source("postgresql", **{k: v for k, v in cfg.items() if k != "type"})
    eng = laredo.Engine(sources={"pg": src}, pipelines=[pipeline], snapshot_store=store)
    eng.start()
    try:
        assert eng.await_ready(60)
        want = table_rows(db)

        def same() -> bool:
            got = {(r["region"], r["id"]): dict(r) for r in target.export_snapshot()}
            return got == want

        wait_until(same, 60, "target == SELECT *", interval=0.1)
    finally:
        eng.stop()
