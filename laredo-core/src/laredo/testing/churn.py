"""``Churn``: writers that change a table of a live database while a baseline reads it, then
wait until an engine has applied everything they wrote."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol

__all__ = ["Churn"]


class ChurnDatabase(Protocol):
    """What ``Churn`` needs of a database (``laredo_source_pg``'s ``PgTestDb`` has it)."""

    def connect(self) -> Any:
        """A new autocommit connection, usable as a context manager."""
        ...

    def scalar(self, sql: str) -> Any:
        """The first column of the first row of ``sql``."""
        ...


class PositionWaiter(Protocol):
    """An engine, as far as ``Churn.settle`` waits on it."""

    def wait_for(self, source_id: str, position: Any, timeout: float = ...) -> bool: ...


class Churn:
    """``writers`` threads, each on its own connection with ``random.Random(i)``, repeating
    until stopped: draw a key with ``key(rnd)``, pick one of ``statements`` uniformly (repeat a
    statement to weight it), run it in a transaction of its own with the parameters ``k`` (the
    key) and ``seed`` (the writer's number), then sleep ``pause`` seconds.

    ``counts[i]`` is the number of transactions writer ``i`` committed; a writer that fails
    stops, its error kept in ``errors`` and raised by :meth:`settle`. Call :meth:`stop` in a
    ``finally`` (it is idempotent)."""

    def __init__(
        self,
        db: ChurnDatabase,
        writers: int,
        key: Callable[[random.Random], Any],
        statements: Sequence[str],
        *,
        pause: float = 0.0,
    ) -> None:
        self.db, self.key, self.statements, self.pause = db, key, tuple(statements), pause
        self.counts = [0] * writers
        self.errors: list[BaseException] = []
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._write, args=(i,), name=f"churn-{i}", daemon=True)
            for i in range(writers)
        ]

    def _write(self, seed: int) -> None:
        rnd = random.Random(seed)
        try:
            with self.db.connect() as conn:
                while not self._stop.is_set():
                    k = self.key(rnd)
                    sql = self.statements[rnd.randrange(len(self.statements))]
                    with conn.transaction():
                        conn.execute(sql, {"k": k, "seed": seed})
                    self.counts[seed] += 1
                    if self.pause:
                        time.sleep(self.pause)
        except BaseException as exc:  # raised by settle(), in the test's thread
            self.errors.append(exc)

    def start(self) -> Churn:
        for t in self._threads:
            t.start()
        return self

    def stop(self) -> None:
        """Stop the writers and wait for them."""
        self._stop.set()
        for t in self._threads:
            if t.is_alive():
                t.join()

    def settle(self, eng: PositionWaiter, source_id: str = "pg", timeout: float = 60.0) -> None:
        """Stop the writers, then wait until ``eng`` has applied everything they committed
        (up to the database's current WAL position); raise a writer's error, if any."""
        self.stop()
        if self.errors:
            raise self.errors[0]
        lsn = str(self.db.scalar("SELECT pg_current_wal_lsn()::text"))
        assert eng.wait_for(source_id, lsn, timeout=timeout), f"{source_id} did not reach {lsn}"
