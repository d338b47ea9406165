"""The resumable (``baseline.mode = chunked``) Spark baseline: a run that dies after some
chunks is resumed by the next run with the same configuration, which reads only the
unfinished chunks (PostgreSQL's own table counters) at a new snapshot, and the output restored
by the engine and streamed on from the slot's position ends equal to the table."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import laredo
import pytest
from laredo.snapshots.local import LocalSnapshotStore
from laredo.testing import free_port, wait_until
from laredo.types import TableIdentifier
from laredo_spark import spark_baseline
from laredo_spark.pg.baseline import SnapshotPartsSink
from laredo_spark.pg.progress import ProgressFiles
from laredo_target_memory import IndexedTarget

from ._support import DriverLost, lose_driver_after_two_waves, pg_rows, pg_source
from .test_serve_restore import LAREDO, accounts_config, serve_equals_table

pytestmark = [pytest.mark.spark, pytest.mark.integration, pytest.mark.xdist_group("jvm")]

ACCOUNTS = TableIdentifier("public", "accounts")
ROWS = 4000
CHUNK_ROWS = 400  # 10 chunks


def make_regional_accounts(db: Any) -> None:
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
    return pg_rows(db, "accounts", key=2)


def source_config(db: Any) -> dict[str, Any]:
    return pg_source(db, baseline={"mode": "chunked", "chunk_rows": CHUNK_ROWS})


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


class CountingTarget(IndexedTarget):
    """Counts the rows it was restored with and the rows a baseline gave it."""

    restored = 0
    baselined = 0

    def restore_snapshot(self, info: Any, rows: Any) -> None:
        super().restore_snapshot(info, rows)
        self.restored = self.count()

    def on_baseline_row(self, table: Any, row: Any) -> None:
        self.baselined += 1
        super().on_baseline_row(table, row)


def test_chunked_spark_baseline_resumes_after_a_lost_driver(
    spark: Any, pg_database: Any, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = pg_database
    make_regional_accounts(db)
    cfg = source_config(db)
    store = LocalSnapshotStore(tmp_path / "snaps")
    waves = lose_driver_after_two_waves(monkeypatch, SnapshotPartsSink)
    target = CountingTarget()
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
        # restored from the snapshot, streaming from the slot's P0: no baseline
        assert target.restored == result.row_counts[pipeline.pipeline_id()]
        assert target.baselined == 0
        want = table_rows(db)

        def same() -> bool:
            got = {(r["region"], r["id"]): dict(r) for r in target.export_snapshot()}
            return got == want

        wait_until(same, 60, "target == SELECT *", interval=0.1)
    finally:
        eng.stop()


# -- kill -9 of a `laredo spark baseline` process, then the same command again ---------------

KILL_CHUNK_ROWS = 300  # make_accounts: 3000 rows, 10 chunks, 2 per Spark job (--partitions 2)
CHUNKED = f"baseline {{ mode = chunked, chunk_rows = {KILL_CHUNK_ROWS} }}"  # a source key


def paused_writer(db: Any, stop: Any, pause: Any, counter: list[int]) -> None:
    """Inserts, updates (key changes too) and deletes across every chunk until ``stop``;
    idle while ``pause`` is set (``counter[1]`` is 1 while idle, its table counters flushed)."""
    rnd = random.Random(11)
    n = 1_000_000
    with db.connect() as conn:
        while not stop.is_set():
            if pause.is_set():
                if counter[1] == 0:  # what it read is counted now, not within 10 s of idling
                    conn.execute("SELECT pg_stat_force_next_flush()")
                counter[1] = 1
                time.sleep(0.01)
                continue
            counter[1] = 0
            op, k = rnd.random(), rnd.randint(1, 3000)
            if op < 0.35:
                n += 1
                conn.execute("INSERT INTO accounts VALUES (%s, %s, 1.25, now())", (n, f"w{n}"))
            elif op < 0.75:
                conn.execute(
                    "UPDATE accounts SET balance = balance + 1, at = now() WHERE id = %s", (k,)
                )
            elif op < 0.85:
                n += 1
                conn.execute("UPDATE accounts SET id = %s WHERE id = %s", (n, k))
            else:
                conn.execute("DELETE FROM accounts WHERE id = %s", (k,))
            counter[0] += 1
            time.sleep(0.002)


def kill_after_a_wave(cmd: list[str], env: dict[str, str], progress: Any, log: Path) -> Any:
    """Start ``cmd`` (``laredo spark baseline``) and kill -9 its process group (the driver
    and its JVM) once its progress records 40 % of the chunks; the run it left behind."""
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=out, env=env, start_new_session=True)
        try:

            def some_done() -> bool:
                assert proc.poll() is None, log.read_text()[-4000:]
                run = progress.load()
                if run is None:
                    return False
                total = sum(t.count for t in run.tables.values())
                return bool(run.chunks_done() >= 0.4 * total)

            wait_until(some_done, 300, "40 % of the chunks", interval=0.02)
        finally:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    run = progress.load()
    assert run is not None
    return run


def id_ranges(plan: Any, chunks: list[int]) -> str:
    conds = []
    for c in chunks:
        lo, hi = plan.chunk(c)
        conds.append(
            "(true"
            + (f" AND id > {int(lo[0])}" if lo is not None else "")
            + (f" AND id <= {int(hi[0])}" if hi is not None else "")
            + ")"
        )
    return " OR ".join(conds)


def settled_rows_read(db: Any) -> int:
    """:func:`rows_read` once every session's counters are in. The sessions that read are
    gone (a session flushes its counters when it ends) or the paused writer, which flushed
    them when it paused, or the test's own shared session, flushed here: so unchanged for
    1.5 s suffices (an idle session would flush within 10 s)."""
    db.execute("SELECT pg_stat_force_next_flush()")  # the test's counting queries
    last, since = rows_read(db), time.monotonic()
    while time.monotonic() - since < 1.5:
        time.sleep(0.25)
        now = rows_read(db)
        if now != last:
            last, since = now, time.monotonic()
    return last


def others(db: Any) -> int:
    """Sessions on the database besides this one (client backends and walsenders)."""
    ((n,),) = db.execute(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
        "AND pid <> pg_backend_pid() AND backend_type IN ('client backend', 'walsender')"
    )
    return int(n)


class SnapshotOutput:
    """The baseline's output is a snapshot in a local store; `laredo serve` restores it."""

    def __init__(self, db: Any, snaps: Path) -> None:
        self.store = LocalSnapshotStore(snaps)
        self.progress = ProgressFiles(self.store, "pg", db.slot_name)

    def load(self) -> Any:
        return self.progress.load()

    def killed(self, run: Any) -> None:
        assert self.store.list() == []  # nothing committed

    def resumed(self, run: Any) -> None:
        (desc,) = self.store.list()
        assert desc.snapshot_id == run.output_id

    def serve(self, db: Any, config: Path, tmp_path: Path, **writer: Any) -> None:
        serve_equals_table(db, config, tmp_path, **writer)


def kill_resume_serve(
    db: Any,
    config: Path,
    output: Any,
    tmp_path: Path,
    *,
    args: list[str],
    env: dict[str, str],
    killed_gone: Callable[[], bool] = lambda: True,
) -> None:
    """With writers running: kill -9 a `laredo spark baseline` at 40 % of its chunks, run it
    again (writers paused while it reads, so PostgreSQL's counters show exactly what it
    read): it reads only the unfinished chunks; then `laredo serve` takes the ``output``
    (:class:`SnapshotOutput`, or a Delta table) and streams from the slot, and ends with
    exactly the table's rows."""
    cmd = [LAREDO, "spark", "baseline", "--config", str(config), "--partitions", "2", *args]
    stop, pause = threading.Event(), threading.Event()
    counter = [0, 0]
    w = threading.Thread(target=paused_writer, args=(db, stop, pause, counter))
    w.start()
    try:
        wait_until(lambda: counter[0] > 50, 60, what="the writer", interval=0.1)
        run = kill_after_a_wave(cmd, env, output, tmp_path / "killed.log")
        (plan,) = run.tables.values()
        assert plan.count >= 10
        assert run.chunks_done() < plan.count, "killed too late: the run had finished"
        output.killed(run)
        writes = counter[0]
        wait_until(lambda: counter[0] > writes + 100, 60, "writes after the kill", interval=0.1)
        pause.set()
        wait_until(lambda: counter[1] == 1, 30, "the writer paused", interval=0.01)
        # a standalone cluster's executors outlive the killed driver for a while, and may
        # still open a session and read: they must be gone before the counters are read
        wait_until(killed_gone, 60, "the killed run's executors ended", interval=0.2)
        left = [c for c in range(plan.count) if c not in run.done["pipeline-0000"]]
        ((want,),) = db.execute(f"SELECT count(*) FROM accounts WHERE {id_ranges(plan, left)}")
        done = sorted(run.done["pipeline-0000"])
        ((kept,),) = db.execute(f"SELECT count(*) FROM accounts WHERE {id_ranges(plan, done)}")
        ((total,),) = db.execute("SELECT count(*) FROM accounts")
        smallest = min(
            db.execute(f"SELECT count(*) FROM accounts WHERE {id_ranges(plan, [c])}")[0][0]
            for c in done
        )
        # the killed run's sessions are gone (their counters flushed), the writer's is idle
        wait_until(lambda: others(db) <= 1, 60, "the killed run's sessions ended", interval=0.1)
        before = settled_rows_read(db)
        out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300, check=False)
        wait_until(lambda: others(db) <= 1, 60, "the run's sessions ended", interval=0.1)
        read = settled_rows_read(db) - before
        pause.clear()
        assert out.returncode == 0, out.stderr[-4000:]
        assert f"chunks read {len(left)} of {plan.count}" in out.stdout, out.stdout
        assert "resuming" in out.stderr
        # Only the unfinished chunks' rows were read, none of a finished chunk. PostgreSQL's
        # counters may show a few rows more than the chunks hold (the planner can probe the
        # key index's ends to estimate a range, more so with the writer's dead tuples there;
        # CI saw +4 and +6 on the standalone cluster): fewer than any finished chunk holds.
        assert 0 <= read - want < min(smallest, 64), (read, want, smallest)
        assert want + kept == total and kept > 0
        # (new keys land in the last, open-ended chunk: the writer's inserts are all re-read)
        print(f"resumed run read {read} of {total} rows ({len(left)}/{plan.count} chunks)")
        output.resumed(run)
        output.serve(db, config, tmp_path, counter=counter, stop=stop, w=w)
    finally:
        stop.set()
        w.join()


def test_kill_9_of_laredo_spark_baseline_then_the_same_command_resumes(
    pg_database: Any, tmp_path: Path
) -> None:
    db = pg_database
    # the template's free slot for extra source keys: provider
    config, snaps = accounts_config(db, tmp_path, provider=CHUNKED)
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"}
    output = SnapshotOutput(db, snaps)
    kill_resume_serve(db, config, output, tmp_path, args=["--master", "local[2]"], env=env)


def test_chunked_resume_on_a_standalone_cluster(pg_database: Any, tmp_path: Path) -> None:
    """The same on a real cluster (master + worker JVMs, executors in the worker)."""
    from laredo_spark.standalone import standalone_cluster

    db = pg_database
    with standalone_cluster(tmp_path / "cluster", env={**os.environ}) as cluster:
        config, snaps = accounts_config(
            db,
            tmp_path,
            provider=CHUNKED,
            master=f'master = "{cluster.master_url}"',
            conf=(
                "spark.cores.max = 2\n"
                "spark.driver.host = 127.0.0.1\n"
                f"spark.driver.port = {free_port()}\n"
                f"spark.blockManager.port = {free_port()}\n"
            ),
        )
        env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"}
        try:
            kill_resume_serve(
                db,
                config,
                SnapshotOutput(db, snaps),
                tmp_path,
                args=[],
                env=env,
                killed_gone=lambda: not cluster.status().get("activeapps"),
            )
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{cluster.log_tail()}") from None
    assert all(p.poll() is not None for p in cluster.processes)
    assert wait_until(lambda: not cluster.leftover_processes(), 10, what="no JVM left")
