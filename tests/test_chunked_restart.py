"""A transaction cut mid-way by a stream error is applied in full after the engine restarts
the stream (the engine skips re-delivered changes only up to the last *complete* transaction).

Sources that pass a big transaction on before its commit (PostgreSQL does, in chunks with
``complete=False``) can fail between two chunks; the re-delivered transaction must not be
skipped as if it had been applied.
"""

from __future__ import annotations

from typing import Any

import laredo
from laredo.contracts import ChangeHandler
from laredo.errors import TransientError
from laredo.testing import TestSource, columns, wait_until
from laredo_target_memory import IndexedTarget

USERS = laredo.Table("public", "users")


class CutSource(TestSource):
    """Its first ``stream()`` commits a 5-row transaction, passes on its first 2 changes as an
    incomplete chunk, then fails transiently; later calls stream normally."""

    def __init__(self) -> None:
        super().__init__({USERS: columns("id", "name")}, supports_resume=True)
        self.cut = True

    def stream(self, from_position: Any, handler: ChangeHandler) -> None:
        if self.cut:
            self.cut = False
            self.stream_calls += 1
            self.transaction(
                [("INSERT", USERS, {"id": i, "name": f"n{i}"}, None) for i in range(5)]
            )
            handler.on_changes(self._log[-1][:2], complete=False)
            raise TransientError("connection lost mid-transaction")
        super().stream(from_position, handler)


def test_a_transaction_cut_between_chunks_is_applied_whole_after_the_restart() -> None:
    src = CutSource()
    target = IndexedTarget()
    eng = laredo.Engine(sources={"pg": src}, pipelines=[laredo.Pipeline("pg", USERS, target)])
    eng.start()
    try:
        assert eng.await_ready(10)
        assert wait_until(lambda: src.stream_calls >= 2), "the stream was not restarted"
        assert eng.wait_for("pg", "1", timeout=10)
        assert sorted(r["id"] for r in target.all()) == [0, 1, 2, 3, 4]
    finally:
        eng.stop()
