"""PostgreSQL -> engine -> IndexedTarget: read-your-writes with ``Engine.wait_for`` and huge
transactions applied while they are received.

``wait_for(source, pg_current_wal_lsn())`` read after a commit returns once every pipeline of
the source applied that commit; an idle source advances through heartbeats (the server's
position, asked for right after changes and every ``heartbeat_interval``).
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import laredo
import psycopg
import pytest
from laredo.types import TableIdentifier
from laredo_source_pg import PostgresSource
from laredo_source_pg.lsn import format_lsn, parse_lsn
from laredo_source_pg.pytest_plugin import PgTestDb
from laredo_target_memory import IndexedTarget

pytestmark = pytest.mark.integration
USERS = laredo.Table("public", "users")


def _engine(db: PgTestDb, target: IndexedTarget, **kw: Any) -> tuple[laredo.Engine, PostgresSource]:
    src = PostgresSource(
        db.dsn,
        slot_name=db.slot_name,
        publication={"create": True},
        status_interval=1.0,
        **kw.pop("source", {}),
    )
    eng = laredo.Engine(sources={"pg": src}, pipelines=[laredo.Pipeline("pg", USERS, target)], **kw)
    eng.start()
    assert eng.await_ready(60)
    return eng, src


def _lsn(conn: psycopg.Connection[Any]) -> str:
    row = conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()
    assert row is not None
    return str(row[0])


def test_every_write_is_visible_after_wait_for(pg_database: PgTestDb) -> None:
    db = pg_database
    db.execute("CREATE TABLE users (id int PRIMARY KEY, name text, n int)")
    db.execute("CREATE TABLE other (id int)")  # not published: WAL that no pipeline receives
    target = IndexedTarget()
    eng, _src = _engine(db, target)
    expected: dict[int, dict[str, Any] | None] = {}
    try:
        with db.connect() as conn:
            for i in range(200):
                key = i % 40
                if expected.get(key) is None:
                    row = {"id": key, "name": f"n{i}", "n": i}
                    conn.execute("INSERT INTO users VALUES (%s, %s, %s)", (key, row["name"], i))
                elif i % 7 == 0:
                    row = None
                    conn.execute("DELETE FROM users WHERE id = %s", (key,))
                else:
                    row = {"id": key, "name": f"u{i}", "n": i}
                    conn.execute(
                        "UPDATE users SET name = %s, n = %s WHERE id = %s", (row["name"], i, key)
                    )
                if i % 10 == 0:
                    conn.execute("INSERT INTO other VALUES (%s)", (i,))
                expected[key] = row
                assert eng.wait_for("pg", _lsn(conn), timeout=30), f"write {i}"
                assert target.get(key) == row, f"write {i} not visible"
    finally:
        eng.stop()


def test_idle_wait_for_answers_promptly_and_times_out_without_raising(
    pg_database: PgTestDb,
) -> None:
    db = pg_database
    db.execute("CREATE TABLE users (id int PRIMARY KEY)")
    db.execute("CREATE TABLE other (id int)")
    target = IndexedTarget()
    eng, _src = _engine(db, target)
    try:
        with db.connect() as conn:
            conn.execute("INSERT INTO users VALUES (1)")
            assert eng.wait_for("pg", _lsn(conn), timeout=30)
            time.sleep(1.5)  # idle
            conn.execute("INSERT INTO other SELECT generate_series(1, 100)")  # not ours
            for _ in range(3):
                lsn = _lsn(conn)
                t0 = time.monotonic()
                assert eng.wait_for("pg", lsn, timeout=10)
                assert time.monotonic() - t0 < 5  # heartbeats: about heartbeat_interval
                assert asyncio.run(eng.await_for("pg", parse_lsn(lsn), 10))
            ahead = format_lsn(parse_lsn(_lsn(conn)) + 10**9)
            t0 = time.monotonic()
            assert eng.wait_for("pg", ahead, timeout=0.3) is False
            assert time.monotonic() - t0 < 5
        with pytest.raises(ValueError, match=r"expected a PostgreSQL LSN 'X/Y'"):
            eng.wait_for("pg", "yesterday", timeout=1)
        with pytest.raises(KeyError, match="pg"):
            eng.wait_for("nope", "0/0", timeout=1)
    finally:
        eng.stop()


def test_wait_for_advances_while_deliveries_wait_for_a_snapshot(
    pg_database: PgTestDb, tmp_path: Path
) -> None:
    """A memory target acknowledges only at snapshots (stateful source + snapshot store): the
    delivered changes stay unacknowledged, and heartbeats still carry wait_for forward."""
    db = pg_database
    db.execute("CREATE TABLE users (id int PRIMARY KEY)")
    db.execute("CREATE TABLE other (id int)")
    target = IndexedTarget()
    eng, src = _engine(
        db,
        target,
        source={"slot_mode": "stateful", "lease": False},
        snapshot_store=laredo.snapshot_store("local", path=str(tmp_path)),
    )
    try:
        with db.connect() as conn:
            conn.execute("INSERT INTO users VALUES (1)")
            assert eng.wait_for("pg", _lsn(conn), timeout=30)
            conn.execute("INSERT INTO other VALUES (1)")
            assert eng.wait_for("pg", _lsn(conn), timeout=30)
        assert target.get(1) == {"id": 1}
        assert src._run.acked < src._run.delivered  # nothing acknowledged without a snapshot
    finally:
        eng.stop()


class _ApplyLog(IndexedTarget):
    """Records, for every batch applied, whether the source was still inside the transaction."""

    def __init__(self) -> None:
        super().__init__()
        self.source: PostgresSource | None = None
        self.calls: list[tuple[int, bool]] = []

    def apply_changes(self, table: TableIdentifier, events: Any) -> None:
        super().apply_changes(table, events)
        assert self.source is not None
        decoder = self.source._replication.decoder
        self.calls.append((len(events), decoder is not None and decoder.tx is not None))


def test_a_huge_transaction_is_applied_while_it_is_received(pg_database: PgTestDb) -> None:
    db = pg_database
    db.execute("CREATE TABLE users (id int PRIMARY KEY, pad text)")
    target = _ApplyLog()
    src = PostgresSource(
        db.dsn, slot_name=db.slot_name, publication={"create": True}, batch_size=1000
    )
    target.source = src
    eng = laredo.Engine(
        sources={"pg": src},
        pipelines=[laredo.Pipeline("pg", USERS, target, buffer_size=2000)],
    )
    eng.start()
    try:
        assert eng.await_ready(60)
        n = 100_000
        with db.connect() as conn:
            conn.execute(
                "INSERT INTO users SELECT g, repeat('x', 100) FROM generate_series(1, %s) g", (n,)
            )
            assert eng.wait_for("pg", _lsn(conn), timeout=120)
        assert target.count() == n
        assert max(size for size, _ in target.calls) <= 1000
        # most of it was applied before the source had read the commit
        assert sum(size for size, mid in target.calls if mid) > n // 2
        first = next(iter(target.all()))
        assert isinstance(first["pad"], str)
    finally:
        eng.stop()


def test_chunks_of_a_huge_transaction_never_move_the_applied_position(
    pg_database: PgTestDb,
) -> None:
    db = pg_database
    db.execute("CREATE TABLE users (id int PRIMARY KEY)")
    seen: list[tuple[int, str | None]] = []  # (position of the batch, applied position then)
    engines: list[laredo.Engine] = []

    class Watch(IndexedTarget):
        def apply_changes(self, table: TableIdentifier, events: Any) -> None:
            super().apply_changes(table, events)
            seen.append((events[-1].position, engines[0].pipelines()[0].applied_position))

    target = Watch()
    eng, _src = _engine(db, target, source={"batch_size": 500})
    engines.append(eng)
    try:
        with db.connect() as conn:
            start = parse_lsn(_lsn(conn))
            conn.execute("INSERT INTO users SELECT generate_series(1, 5000)")
            lsn = _lsn(conn)
            assert eng.wait_for("pg", lsn, timeout=60)
        assert target.count() == 5000
        positions = sorted({p for p, _ in seen})
        # early chunks inside the transaction, the last at its commit end
        assert len(positions) == 2 and start < positions[0] < positions[1] <= parse_lsn(lsn)
        # while its chunks were applied, the applied position stayed before the transaction
        assert all(a is not None and parse_lsn(a) < positions[0] for _, a in seen)
    finally:
        eng.stop()
