"""A Spark baseline holds its slot's advisory-lock lease (the one ``laredo serve`` holds while
it streams) for the whole run: a second driver resuming the same chunked run, or one started
while a server streams from the slot, is refused at once with an error naming the slot, before
anything is read, written, dropped or discarded; the lease goes when the run ends or fails.
The guard comes before Spark is touched, so only the last test (two real overlapping
``laredo spark baseline`` commands) starts Spark."""

from __future__ import annotations

import os
import subprocess
import threading
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import laredo
import pytest
from laredo.errors import ConfigError, SourceError
from laredo.snapshots.local import LocalSnapshotStore
from laredo.testing import wait_until
from laredo.types import SourceConfig, TableIdentifier
from laredo_source_pg import ExportedSnapshot, PostgresSource, PostgresSourceOptions
from laredo_source_pg.catalog import Connections
from laredo_source_pg.slot import Lease
from laredo_spark import spark_baseline
from laredo_spark.pg.chunks import TableChunks
from laredo_spark.pg.progress import ChunkRun, ProgressFiles
from laredo_target_memory import IndexedTarget

from ._support import pg_source
from .test_serve_restore import LAREDO, accounts_config

pytestmark = pytest.mark.integration

ITEMS = TableIdentifier("public", "items")


def lease_key(opts: PostgresSourceOptions) -> int:
    return Lease(Connections(opts), opts, threading.Event()).key


def slot_state(db: Any) -> Any:
    return db.execute(
        "SELECT slot_name, confirmed_flush_lsn::text, active_pid FROM pg_replication_slots"
    )


@pytest.fixture
def interrupted(pg_database: Any, tmp_path: Path) -> tuple[Any, LocalSnapshotStore, ChunkRun]:
    """A chunked run of ``items`` interrupted after its first chunk: the slot at the run's
    position and the run record in a local snapshot store, as a killed driver leaves them."""
    db = pg_database
    db.execute("CREATE TABLE items (id bigint PRIMARY KEY, v text)")
    db.execute("INSERT INTO items SELECT g, 'v' || g FROM generate_series(1, 300) g")
    opts = PostgresSourceOptions(connection=db.dsn, slot_mode="stateful", slot_name=db.slot_name)
    with ExportedSnapshot(opts, db.slot_name) as snap:
        position, point = snap.position, snap.consistent_point
    store = LocalSnapshotStore(tmp_path / "snaps")
    plan = TableChunks(("id",), ("bigint",), (("100",), ("200",)))
    run = ChunkRun("spark-x", db.slot_name, position, point, "UTC", "f1", {str(ITEMS): plan})
    run = run.finished("pipeline-0000", 0, {"parts": 1})
    ProgressFiles(store, "pg", db.slot_name).save(run)
    return db, store, run


@pytest.fixture(params=["laredo-serve", "second-driver"])
def holder(request: pytest.FixtureRequest, interrupted: Any) -> Iterator[str]:
    """Another process's hold on the slot's lease: a stateful ``PostgresSource`` with its
    lease on after ``init`` (what ``laredo serve`` holds while it streams), or a plain session
    advisory lock on the lease's key (another driver), from its own connection."""
    db = interrupted[0]
    if request.param == "laredo-serve":
        src = PostgresSource(**{k: v for k, v in pg_source(db).items() if k != "type"})
        src.init(SourceConfig([ITEMS]))
        assert src.holds_lease
        try:
            yield request.param
        finally:
            src.close()
        return
    opts = PostgresSourceOptions(connection=db.dsn, slot_mode="stateful", slot_name=db.slot_name)
    with db.connect() as conn:
        assert conn.execute("SELECT pg_try_advisory_lock(%s)", (lease_key(opts),)).fetchone()[0]
        yield request.param


def test_a_second_driver_is_refused_before_anything_is_touched(
    interrupted: Any, holder: str
) -> None:
    db, store, run = interrupted
    slots = slot_state(db)
    publications = db.execute("SELECT pubname FROM pg_publication ORDER BY 1")
    pipeline = laredo.Pipeline("pg", ITEMS, IndexedTarget())
    chunked = pg_source(db, baseline={"mode": "chunked", "chunk_rows": 100})
    for cfg in (chunked, pg_source(db)):  # the resumable baseline, then the one-pass one
        with pytest.raises(SourceError) as info:
            spark_baseline(None, cfg, [pipeline], snapshot_store=store)  # no Spark: never reached
        text = str(info.value)
        assert f"another laredo process holds the lease of replication slot {db.slot_name!r}" in (
            text
        ), text
        assert "wait for it to finish, or stop it" in text
        assert ProgressFiles(store, "pg", db.slot_name).load() == run  # nothing discarded
        assert store.list() == []
        assert slot_state(db) == slots  # the slot neither dropped nor moved
        assert db.execute("SELECT pubname FROM pg_publication ORDER BY 1") == publications


def test_the_lease_is_released_when_the_run_fails(pg_database: Any, tmp_path: Path) -> None:
    """A run that fails after taking the lease (here: a table without a key to chunk by,
    refused after the lease was taken) leaves it free for the next one."""
    db = pg_database
    db.execute("CREATE TABLE loose (n int)")
    db.execute("ALTER TABLE loose REPLICA IDENTITY FULL")
    cfg = pg_source(db, baseline={"mode": "chunked", "chunk_rows": 100})
    pipeline = laredo.Pipeline("pg", TableIdentifier("public", "loose"), IndexedTarget())
    store = LocalSnapshotStore(tmp_path)
    opts = PostgresSourceOptions(connection=db.dsn, slot_mode="stateful", slot_name=db.slot_name)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always", ResourceWarning)
        for _ in range(2):  # the second run finds the lease free again
            with pytest.raises(ConfigError, match=r"public\.loose has no primary key"):
                spark_baseline(None, cfg, [pipeline], snapshot_store=store)
    # closed, not dropped with a live session left to the garbage collector
    leaked = [str(w.message) for w in seen if issubclass(w.category, ResourceWarning)]
    assert not [m for m in leaked if "connection" in m], leaked
    with db.connect() as conn:
        assert conn.execute("SELECT pg_try_advisory_lock(%s)", (lease_key(opts),)).fetchone()[0]


def test_a_source_object_with_its_lease_on_does_not_wait_for_the_driver(
    pg_database: Any, tmp_path: Path
) -> None:
    """A ``PostgresSource`` given as the source, its own lease on (the default), would take
    the lease in ``init`` while the driver holds it: the driver runs a copy with it off."""
    db = pg_database
    db.execute("CREATE TABLE loose (n int)")
    db.execute("ALTER TABLE loose REPLICA IDENTITY FULL")
    cfg = {k: v for k, v in pg_source(db).items() if k != "type"}
    src = PostgresSource(**cfg, lease_timeout=1, baseline={"mode": "chunked", "chunk_rows": 10})
    pipeline = laredo.Pipeline("pg", TableIdentifier("public", "loose"), IndexedTarget())
    with pytest.raises(ConfigError, match=r"public\.loose has no primary key"):
        spark_baseline(None, src, [pipeline], snapshot_store=LocalSnapshotStore(tmp_path))
    assert src.options.lease  # the caller's source is left as it was


@pytest.mark.spark
@pytest.mark.xdist_group("jvm")
def test_two_overlapping_laredo_spark_baselines(pg_database: Any, tmp_path: Path) -> None:
    """Two real ``laredo spark baseline`` runs of one chunked configuration at once: while
    the first holds the lease (kept in its ``init`` by a table lock the test holds), the
    second exits with the error naming the slot, creating and writing nothing; the first,
    let go, then finishes and commits its snapshot."""
    db = pg_database
    chunked = "baseline { mode = chunked, chunk_rows = 300 }"
    config, snaps = accounts_config(db, tmp_path, provider=chunked)
    store = LocalSnapshotStore(snaps)
    cmd = [LAREDO, "spark", "baseline", "--config", str(config), "--partitions", "2"]
    cmd += ["--master", "local[2]"]
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"}
    advisory = (
        "SELECT count(*) FROM pg_locks l JOIN pg_database d ON d.oid = l.database "
        "WHERE l.locktype = 'advisory' AND l.granted AND d.datname = current_database()"
    )
    waiting = "SELECT count(*) FROM pg_locks WHERE relation = 'accounts'::regclass AND NOT granted"
    log = tmp_path / "first.log"
    with db.connect() as blocker, open(log, "wb") as out:
        blocker.execute("BEGIN")
        blocker.execute("LOCK TABLE accounts IN ACCESS EXCLUSIVE MODE")  # the first waits
        first = subprocess.Popen(cmd, stdout=out, stderr=out, env=env, start_new_session=True)
        try:

            def first_waits() -> bool:
                assert first.poll() is None, log.read_text()[-4000:]
                return bool(db.scalar(waiting) > 0)

            wait_until(first_waits, 240, "the first run waiting for the table", interval=0.1)
            assert db.scalar(advisory) == 1  # the first run holds its slot's lease
            second = subprocess.run(
                cmd, capture_output=True, text=True, env=env, timeout=200, check=False
            )
            assert second.returncode != 0, second.stdout
            want = f"another laredo process holds the lease of replication slot {db.slot_name!r}"
            assert want in second.stderr, second.stderr[-4000:]
            assert "wait for it to finish, or stop it" in second.stderr
            assert db.scalar("SELECT count(*) FROM pg_replication_slots") == 0
            assert store.list() == [] and ProgressFiles(store, "pg", db.slot_name).load() is None
            blocker.execute("ROLLBACK")
            assert first.wait(300) == 0, log.read_text()[-4000:]
        finally:
            if first.poll() is None:
                first.kill()
                first.wait()
    (desc,) = store.list()
    assert "chunks read 10 of 10" in log.read_text(), log.read_text()[-4000:]
    assert desc.snapshot_id
    assert db.scalar(advisory) == 0  # the first run's lease went with it
