"""Conformance suite for ``DeadLetterStore`` implementations.

Subclass it in your plugin's tests and provide the ``store`` fixture (a fresh, empty store)::

    class TestMyStore(DeadLetterStoreConformance):
        @pytest.fixture
        def store(self, tmp_path):
            return MyDeadLetterStore(tmp_path)

Set ``persistent = True`` and provide ``reopen`` (a fixture returning a callable that opens a new
store instance over the same storage) when entries must survive the process.

The suite checks what the engine and the ``laredo dead-letters`` commands rely on: entries read
back oldest first with their Python value types, error and position; ``limit``; replay applies
oldest first through the target's per-change methods and removes what it applied; a replay that
fails keeps the failed entry and every later one; purge; pipelines are independent; concurrent
writers lose nothing; a store's ``count`` (:class:`laredo.contracts.CountsDeadLetters`, optional)
agrees with ``read``.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest

from ..contracts import CountsDeadLetters
from ..deadletter import count_dead_letters
from ..errors import DeadLetterReplayError
from ..types import ChangeAction, ChangeEvent, ErrorInfo, TableIdentifier
from .guard import ConformanceSuite
from .recording import RecordingTarget

__all__ = ["DeadLetterStoreConformance", "dead_letter_changes"]

T = TableIdentifier("public", "users")
PID = "pg:public.users:indexed-memory"
TS = datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)


def dead_letter_changes() -> list[ChangeEvent]:
    """Six changes of every action, with typed values, at positions ``0/10`` ... ``0/60``."""
    row = {
        "id": 1,
        "price": Decimal("9.90"),
        "at": TS,
        "uid": uuid.UUID(int=5),
        "raw": b"\x00\x01",
        "doc": {"a": [1, 2]},
        "dur": timedelta(seconds=3),
    }
    return [
        ChangeEvent(T, ChangeAction.INSERT, "0/10", TS, row),
        ChangeEvent(T, ChangeAction.UPDATE, "0/20", TS, {**row, "price": Decimal("1")}, {"id": 1}),
        ChangeEvent(T, ChangeAction.INSERT, "0/30", TS, {"id": 2}),
        ChangeEvent(T, ChangeAction.DELETE, "0/40", TS, None, {"id": 2}),
        ChangeEvent(T, ChangeAction.TRUNCATE, "0/50", TS),
        ChangeEvent(T, ChangeAction.INSERT, "0/60", TS, {"id": 3}),
    ]


class DeadLetterStoreConformance(ConformanceSuite):
    """Base class (not collected itself); see the module docstring."""

    persistent = False

    @pytest.fixture
    def store(self) -> Any:
        raise NotImplementedError(
            "subclass DeadLetterStoreConformance and provide a `store` fixture (a fresh store)"
        )

    @pytest.fixture
    def reopen(self) -> Callable[[], Any]:
        raise NotImplementedError("persistent stores provide a `reopen` fixture")

    def test_write_read_keeps_order_types_errors_and_positions(self, store: Any) -> None:
        changes = dead_letter_changes()
        for i, ch in enumerate(changes):
            store.write(PID, ch, ErrorInfo(f"boom {i}", "TargetError"), position=str(ch.position))
        got = store.read(PID)
        assert [d.change for d in got] == changes
        values = got[0].change.new_values
        assert values is not None and values["price"] == Decimal("9.90")
        assert str(values["price"]) == "9.90" and type(values["uid"]) is uuid.UUID
        assert values["at"].tzinfo is not None and values["raw"] == b"\x00\x01"
        assert [d.error.message for d in got] == [f"boom {i}" for i in range(6)]
        assert all(d.error.error_type == "TargetError" for d in got)
        assert all(d.pipeline_id == PID and d.written_at.tzinfo is not None for d in got)
        assert [d.position for d in got] == ["0/10", "0/20", "0/30", "0/40", "0/50", "0/60"]
        assert [d.change.position for d in store.read(PID, limit=2)] == ["0/10", "0/20"]
        assert store.read("other") == []
        assert store.pipelines() == [PID]

    def test_replay_applies_oldest_first_and_removes(self, store: Any) -> None:
        for ch in dead_letter_changes():
            store.write(PID, ch, ErrorInfo("x"))
        target = RecordingTarget(key_fields=["id"])
        assert store.replay(PID, target) == 6
        assert target.methods() == [
            "on_insert",
            "on_update",
            "on_insert",
            "on_delete",
            "on_truncate",
            "on_insert",
        ]
        assert target.rows() == [{"id": 3}]
        assert store.read(PID) == [] and store.pipelines() == []
        assert store.replay(PID, target) == 0

    def test_replay_stops_at_a_failure_and_keeps_the_rest(self, store: Any) -> None:
        for ch in dead_letter_changes():
            store.write(PID, ch, ErrorInfo("x"))
        target = RecordingTarget(key_fields=["id"])
        target.fail_when = lambda method, row: method == "on_delete"
        with pytest.raises(DeadLetterReplayError) as err:
            store.replay(PID, target)
        assert err.value.replayed == 3
        assert "entry 4" in str(err.value) and PID in str(err.value)
        assert [d.change.position for d in store.read(PID)] == ["0/40", "0/50", "0/60"]
        target.fail_when = None
        assert store.replay(PID, target) == 3
        assert store.read(PID) == []

    def test_purge_touches_one_pipeline(self, store: Any) -> None:
        for ch in dead_letter_changes()[:3]:
            store.write(PID, ch, ErrorInfo("x"))
        store.write("other", dead_letter_changes()[0], ErrorInfo("y"))
        assert store.purge(PID) == 3
        assert store.purge(PID) == 0
        assert store.pipelines() == ["other"]
        assert len(store.read("other")) == 1

    def test_count_agrees_with_read(self, store: Any) -> None:
        """The status backlog counts through ``count`` when the store has it."""
        assert count_dead_letters(store, PID) == 0
        for ch in dead_letter_changes()[:4]:
            store.write(PID, ch, ErrorInfo("x"))
        store.write("other", dead_letter_changes()[0], ErrorInfo("y"))
        counted = store.count if isinstance(store, CountsDeadLetters) else None
        for pid, n in ((PID, 4), ("other", 1), ("absent", 0)):
            assert count_dead_letters(store, pid) == n == len(store.read(pid))
            assert counted is None or counted(pid) == n
        store.replay(PID, RecordingTarget())
        store.purge("other")
        assert count_dead_letters(store, PID) == 0 == count_dead_letters(store, "other")

    def test_concurrent_writes_lose_nothing(self, store: Any) -> None:
        def writer(n: int) -> None:
            for i in range(25):
                ch = ChangeEvent(T, ChangeAction.INSERT, f"{n}/{i}", None, {"id": i})
                store.write(PID, ch, ErrorInfo("x"), position=f"{n}/{i}")

        threads = [threading.Thread(target=writer, args=(n,)) for n in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        got = store.read(PID)
        assert len(got) == 100
        for n in range(4):
            mine = [d.position for d in got if str(d.position).startswith(f"{n}/")]
            assert mine == [f"{n}/{i}" for i in range(25)]

    def test_entries_survive_a_new_store_instance(self, store: Any, request: Any) -> None:
        if not self.persistent:
            pytest.skip("store is not persistent (persistent = False)")
        reopen = request.getfixturevalue("reopen")
        store.write(PID, dead_letter_changes()[0], ErrorInfo("kept", "TargetError"), "0/10")
        again = reopen()
        got = again.read(PID)
        assert [(d.error.message, d.position) for d in got] == [("kept", "0/10")]
        assert got[0].change == dead_letter_changes()[0]
