"""``laredo.testing.Churn`` against a real PostgreSQL: the writers commit what their statements
say, and a writer's failure is raised by ``settle``, never lost in its thread."""

from __future__ import annotations

import psycopg
import pytest
from laredo.testing import Churn, wait_until
from laredo_source_pg.pytest_plugin import PgTestDb

pytestmark = pytest.mark.integration


class _Applied:
    """An engine whose every position is applied at once."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    def wait_for(self, source_id: str, position: str, timeout: float = 0) -> bool:
        self.asked.append(position)
        return True


def test_writers_commit_their_statements_and_settle_at_the_wal_end(pg_database: PgTestDb) -> None:
    db = pg_database
    db.execute("CREATE TABLE log (k int NOT NULL, w int NOT NULL)")
    writes = ("INSERT INTO log VALUES (%(k)s, %(seed)s)",)
    writers = Churn(db, 2, lambda rnd: rnd.randrange(1, 50), writes).start()
    eng = _Applied()
    try:
        wait_until(lambda: min(writers.counts) >= 5, 30, "five commits by each writer")
        during = db.scalar("SELECT pg_current_wal_lsn()::text")
        writers.settle(eng)
    finally:
        writers.stop()
    per_writer = dict(db.execute("SELECT w, count(*) FROM log GROUP BY w"))
    assert per_writer == {0: writers.counts[0], 1: writers.counts[1]}  # one row per commit
    assert db.scalar("SELECT min(k) >= 1 AND max(k) < 50 FROM log")  # keys from key(rnd)
    (asked,) = eng.asked  # once, at the WAL end after the last commit
    assert db.scalar("SELECT %s::pg_lsn >= %s::pg_lsn", (asked, during))


def test_a_failing_writer_is_raised_by_settle(pg_database: PgTestDb) -> None:
    writers = Churn(pg_database, 1, lambda rnd: 1, ("UPDATE missing SET v = %(k)s",)).start()
    try:
        wait_until(lambda: writers.errors, 30, "the writer's error")
        with pytest.raises(psycopg.errors.UndefinedTable, match="missing"):
            writers.settle(_Applied())
    finally:
        writers.stop()
    assert writers.counts == [0]
