"""A chunked baseline that resumes after kill -9 (issue 32, item 2), against a real PostgreSQL.

The engine runs in a child process with a durable target that keeps its rows and the chunked
baseline's progress (a :class:`laredo.ProgressTarget`): a SQLite test target, and the shipped
``delta`` target on local disk (the record in the Delta commit that holds the chunk's rows);
writers change the table the whole time. The child is killed (SIGKILL) after ~40 % of the
chunks; the restart continues after the last chunk the target holds — PostgreSQL's own counters
show it re-reads at most 70 % of the table — and the target ends equal to PostgreSQL.

Size: ``LAREDO_RESUME_ROWS`` (default 20000) and ``LAREDO_RESUME_CHUNK`` (default 500), e.g.
``LAREDO_RESUME_ROWS=1000000 LAREDO_RESUME_CHUNK=10000`` for the 1M-row proof."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import laredo
import psycopg
import pytest
from laredo.base import RowTarget
from laredo.testing import Churn, wait_until
from laredo.types import (
    ChangeAction,
    ChangeEvent,
    ColumnDefinition,
    Row,
    SchemaChangeResponse,
    TableIdentifier,
)
from laredo_source_pg import PostgresSource
from laredo_source_pg.pytest_plugin import PgTestDb
from laredo_target_delta import (
    ArchiveError,
    DeltaTarget,
    DeltaTargetOptions,
    history,
    progress_of,
    rows_as_of,
)

pytestmark = pytest.mark.integration
ITEMS = laredo.Table("public", "items")
N = int(os.environ.get("LAREDO_RESUME_ROWS", "20000"))
CHUNK = int(os.environ.get("LAREDO_RESUME_CHUNK", "500"))
WAIT = 120 + N / 2000  # seconds: a 1M-row run takes minutes


class SqliteTarget(RowTarget):
    """A durable test target: every ``apply`` is one SQLite commit; the progress record is
    committed after the chunk rows it follows (never before them)."""

    def __init__(self, path: str, pace: float = 0.0) -> None:
        self.pace = pace  # seconds per progress record: lets the test kill at ~40 %
        self.db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("CREATE TABLE IF NOT EXISTS rows (id INTEGER PRIMARY KEY, row TEXT)")
        self.db.execute("CREATE TABLE IF NOT EXISTS progress (tbl TEXT PRIMARY KEY, rec TEXT)")

    # -- the door ----------------------------------------------------------------------------
    def apply(
        self, table: TableIdentifier, changes: Sequence[ChangeEvent], complete: bool = True
    ) -> None:
        db = self.db
        db.execute("BEGIN")
        for ev in changes:
            if ev.action is ChangeAction.TRUNCATE:
                db.execute("DELETE FROM rows")
                continue
            old, new = ev.old_values, ev.new_values
            if old is not None and (new is None or old["id"] != new["id"]):
                db.execute("DELETE FROM rows WHERE id = ?", (old["id"],))
            if new is not None and ev.action is not ChangeAction.DELETE:
                self._upsert(new)
        db.execute("COMMIT")

    def load(self, table: TableIdentifier, rows: Sequence[Row]) -> None:
        self.db.execute("BEGIN")
        for r in rows:
            self._upsert(r)
        self.db.execute("COMMIT")

    def _upsert(self, row: Row) -> None:
        self.db.execute(
            "INSERT OR REPLACE INTO rows VALUES (?, ?)", (row["id"], json.dumps(dict(row)))
        )

    # -- ProgressTarget ----------------------------------------------------------------------
    def save_progress(self, table: TableIdentifier, record: str | None) -> None:
        if record is None:
            self.db.execute("DELETE FROM progress WHERE tbl = ?", (str(table),))
        else:
            self.db.execute("INSERT OR REPLACE INTO progress VALUES (?, ?)", (str(table), record))
        if self.pace:
            time.sleep(self.pace)

    def load_progress(self, table: TableIdentifier) -> str | None:
        row = self.db.execute("SELECT rec FROM progress WHERE tbl = ?", (str(table),)).fetchone()
        return None if row is None else str(row[0])

    # -- lifecycle ---------------------------------------------------------------------------
    def on_init(self, table: TableIdentifier, columns: Sequence[ColumnDefinition]) -> None:
        pass

    def on_baseline_complete(self, table: TableIdentifier) -> None:
        pass

    def on_truncate(self, table: TableIdentifier) -> None:
        self.db.execute("DELETE FROM rows")

    def on_schema_change(
        self,
        table: TableIdentifier,
        old_columns: Sequence[ColumnDefinition],
        new_columns: Sequence[ColumnDefinition],
    ) -> SchemaChangeResponse:
        return SchemaChangeResponse()

    def is_durable(self) -> bool:
        return True

    def count(self) -> int:
        return int(self.db.execute("SELECT count(*) FROM rows").fetchone()[0])

    def on_close(self, table: TableIdentifier) -> None:
        pass

    def export_snapshot(self) -> list[Row]:
        return [json.loads(r) for (r,) in self.db.execute("SELECT row FROM rows")]

    def restore_snapshot(self, info: Any, rows: Any) -> None:
        raise NotImplementedError

    def supports_consistent_snapshot(self) -> bool:
        return False


class PacedDelta(DeltaTarget):
    """The shipped ``delta`` target, slowed per progress record so the test can kill it at
    ~40 % (the record is committed with the chunk's rows by the target itself)."""

    pace = 0.0

    def save_progress(self, table: TableIdentifier, record: str | None) -> None:
        super().save_progress(table, record)
        time.sleep(self.pace)


def engine_for(dsn: str, slot: str, path: str, kind: str, pace: float = 0.0) -> laredo.Engine:
    src = PostgresSource(
        dsn,
        slot_name=slot,
        slot_mode="stateful",
        publication={"create": True},
        baseline={"mode": "chunked", "chunk_rows": CHUNK},
    )
    target: Any
    if kind == "delta":
        target = PacedDelta(DeltaTargetOptions(uri=path, flush_rows=CHUNK, flush_interval=0.2))
        target.pace = pace
    else:
        target = SqliteTarget(path, pace)
    return laredo.Engine(sources={"pg": src}, pipelines=[laredo.Pipeline("pg", ITEMS, target)])


def _child() -> None:  # python test_pg_backfill_resume.py DSN SLOT PATH KIND
    dsn, slot, path, kind = sys.argv[1:5]
    pace = float(os.environ.get("LAREDO_RESUME_PACE", "0.05"))
    engine_for(dsn, slot, path, kind, pace).start()
    time.sleep(3600)


# random single-row writes on items, one every 2 ms per writer
WRITES = (
    "INSERT INTO items VALUES (%(k)s, %(seed)s, 'ins') ON CONFLICT (id) DO UPDATE "
    "SET v = items.v + 1",
    "UPDATE items SET v = v + 1, note = 'upd' WHERE id = %(k)s",
    "DELETE FROM items WHERE id = %(k)s",
    # a key change, into a range read later (or already)
    f"UPDATE items SET id = %(k)s + {N} WHERE id = %(k)s AND NOT EXISTS "
    f"(SELECT 1 FROM items WHERE id = %(k)s + {N})",
)


def _confirmed(db: PgTestDb) -> str | None:
    rows = db.execute(
        "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = %s",
        (db.slot_name,),
    )
    return str(rows[0][0]) if rows and rows[0][0] else None


def _pg_rows(db: PgTestDb) -> dict[int, dict[str, Any]]:
    with db.connect() as conn, conn.cursor(row_factory=psycopg.rows.dict_row) as cur:
        return {r["id"]: dict(r) for r in cur.execute("SELECT * FROM items")}


def _record(path: Path, kind: str) -> str | None:
    """The progress record the target holds durably (None: none)."""
    if kind == "delta":
        try:
            return progress_of(history(str(path)))
        except ArchiveError:
            return None  # no table yet
    try:
        with sqlite3.connect(path, timeout=5) as db:
            row = db.execute("SELECT rec FROM progress").fetchone()
    except sqlite3.OperationalError:
        return None
    return None if row is None else str(row[0])


def _progress(path: Path, kind: str) -> int:
    """The last key the target holds as done (0: none yet)."""
    record = _record(path, kind)
    key = None if record is None else json.loads(record)["last_key"]
    return 0 if key is None else int(key[0])


def _target_rows(path: Path, kind: str) -> dict[int, dict[str, Any]]:
    if kind == "delta":
        rows = rows_as_of(str(path), "FFFFFFFF/FFFFFFFF")[0]
    else:
        rows = SqliteTarget(str(path)).export_snapshot()
    by_id = {r["id"]: r for r in rows}
    assert len(by_id) == len(rows), "a key is in the target twice"
    return by_id


@pytest.fixture
def child_env() -> Iterator[dict[str, str]]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).parent), *sys.path])
    yield env


@pytest.mark.parametrize("kind", ["sqlite", "delta"])
def test_chunked_baseline_resumes_after_kill_9_and_ends_equal(
    pg_database: PgTestDb, tmp_path: Path, child_env: dict[str, str], kind: str
) -> None:
    db = pg_database
    db.execute("CREATE TABLE items (id int PRIMARY KEY, v int NOT NULL, note text)")
    db.execute(f"INSERT INTO items SELECT g, 0, 'seed' FROM generate_series(1, {N}) g")
    path = tmp_path / ("delta" if kind == "delta" else "target.sqlite")
    writers = Churn(db, 3, lambda rnd: rnd.randrange(1, N + 1), WRITES, pause=0.002).start()
    child = subprocess.Popen(
        [sys.executable, __file__, db.dsn, db.slot_name, str(path), kind], env=child_env
    )
    eng: laredo.Engine | None = None
    try:
        seen: list[str] = []  # the slot's confirmed position when it appeared

        def forty_percent() -> bool:
            assert child.poll() is None, "the engine process ended on its own"
            if not seen and (pos := _confirmed(db)):
                seen.append(pos)
            return _progress(path, kind) >= 0.4 * N

        wait_until(forty_percent, WAIT, "40 % of the chunked baseline durable", interval=0.01)
        created = seen[0] if seen else None
        os.kill(child.pid, signal.SIGKILL)
        child.wait(30)
        # nothing was acknowledged while the baseline ran (the writers moved the stream on)
        assert created is not None and _confirmed(db) == created
        done = _progress(path, kind)
        assert 0.4 * N <= done < 0.6 * N, done  # killed mid-way, with its progress durable
        time.sleep(0.3)  # the writers go on while nothing runs
        writers.stop()
        before = db.rows_read("items")
        eng = engine_for(db.dsn, db.slot_name, str(path), kind)
        eng.start()
        assert eng.await_ready(WAIT)
        writers.settle(eng)  # stopped already: everything they wrote applied
        eng.stop()
        eng = None
        reread = db.rows_read("items") - before  # before our own read of the table below
        expected = _pg_rows(db)
        got = _target_rows(path, kind)
        assert got == expected
        assert _record(path, kind) is None  # finished: forgotten
    finally:
        writers.stop()
        if child.poll() is None:
            child.kill()
            child.wait(30)
        if eng is not None:
            eng.stop()
    assert sum(writers.counts) > 50, writers.counts  # the writers ran during the first run
    # the restart read only the rest of the table (plus a chunk of overlap at most)
    assert reread <= 0.7 * N, (reread, done)
    print(
        f"{kind}: killed after key {done} of {N}; the restart read {reread} tuples "
        f"({reread / N:.0%}), the target equals PostgreSQL ({len(expected)} rows)"
    )


if __name__ == "__main__":
    _child()
