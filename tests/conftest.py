"""Shared fixtures of the repository-level tests: ``churn``, writers that change a PostgreSQL
table while a baseline reads it."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import laredo
import pytest
from laredo_source_pg.pytest_plugin import PgTestDb


class Churn:
    """``writers`` threads, each on its own connection with ``random.Random(i)``, repeating
    until stopped: draw a key with ``key(rnd)``, pick one of ``statements`` uniformly (repeat a
    statement to weight it) and run it in its own transaction with the parameters ``k`` (the
    key) and ``seed`` (the writer's number), then sleep ``pause`` seconds. ``counts[i]`` is the
    number of transactions writer ``i`` committed."""

    def __init__(
        self,
        db: PgTestDb,
        writers: int,
        key: Callable[[random.Random], Any],
        statements: Sequence[str],
        pause: float = 0.0,
    ) -> None:
        self.db, self.key, self.statements, self.pause = db, key, tuple(statements), pause
        self.counts = [0] * writers
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._write, args=(i,)) for i in range(writers)]

    def _write(self, seed: int) -> None:
        rnd = random.Random(seed)
        with self.db.connect() as conn:
            while not self._stop.is_set():
                k = self.key(rnd)
                sql = self.statements[rnd.randrange(len(self.statements))]
                with conn.transaction():
                    conn.execute(sql, {"k": k, "seed": seed})
                self.counts[seed] += 1
                if self.pause:
                    time.sleep(self.pause)

    def start(self) -> Churn:
        for t in self._threads:
            t.start()
        return self

    def stop(self) -> None:
        """Stop the writers and wait for them (idempotent)."""
        self._stop.set()
        for t in self._threads:
            if t.is_alive():
                t.join()

    def settle(self, eng: laredo.Engine, source_id: str = "pg", timeout: float = 60) -> None:
        """Stop the writers, then wait until ``eng`` has applied everything they committed."""
        self.stop()
        lsn = str(self.db.scalar("SELECT pg_current_wal_lsn()::text"))
        assert eng.wait_for(source_id, lsn, timeout=timeout), f"{source_id} did not reach {lsn}"


@pytest.fixture
def churn(pg_database: PgTestDb) -> Iterator[Callable[..., Churn]]:
    """Build :class:`Churn` writers on ``pg_database`` (not started); all stop at teardown."""
    made: list[Churn] = []

    def make(
        writers: int,
        key: Callable[[random.Random], Any],
        statements: Sequence[str],
        pause: float = 0.0,
    ) -> Churn:
        made.append(Churn(pg_database, writers, key, statements, pause))
        return made[-1]

    yield make
    for c in made:
        c.stop()
