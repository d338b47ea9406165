from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import laredo
import pytest
from laredo.deadletter import (
    DeadLetterError,
    LocalDeadLetterStore,
    MemoryDeadLetterStore,
    count_dead_letters,
)
from laredo.testing.deadletter_conformance import DeadLetterStoreConformance, dead_letter_changes
from laredo.types import ChangeAction, ChangeEvent, ErrorInfo

T = laredo.Table("public", "users")
PID = "pg:public.users:indexed-memory"
TS = datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)


def _changes() -> list[ChangeEvent]:
    return dead_letter_changes()


class TestMemoryDeadLetterStore(DeadLetterStoreConformance):
    @pytest.fixture
    def store(self) -> Any:
        return laredo.dead_letter_store("memory")


class TestLocalDeadLetterStore(DeadLetterStoreConformance):
    persistent = True

    @pytest.fixture
    def store(self, tmp_path: Path) -> Any:
        return laredo.dead_letter_store("local", path=str(tmp_path / "dl"))

    @pytest.fixture
    def reopen(self, tmp_path: Path) -> Callable[[], Any]:
        return lambda: laredo.dead_letter_store("local", path=str(tmp_path / "dl"))


def test_local_file_layout_and_persistence(tmp_path: Path) -> None:
    store = LocalDeadLetterStore(tmp_path)
    store.write("pg:public.users:http/sync", _changes()[0], ErrorInfo("bad", "TargetError"))
    files = [p.name for p in tmp_path.iterdir()]
    assert files == ["pg%3Apublic.users%3Ahttp%2Fsync.jsonl"]
    line = (tmp_path / files[0]).read_text()
    assert line.endswith("\n") and line.count("\n") == 1
    entry = json.loads(line)
    assert entry["pipeline_id"] == "pg:public.users:http/sync"
    assert entry["change"]["action"] == "INSERT"
    assert entry["error"] == {"message": "bad", "error_type": "TargetError"}
    again = LocalDeadLetterStore(tmp_path, parse_position=lambda s: s.upper())
    assert again.pipelines() == ["pg:public.users:http/sync"]
    assert again.read("pg:public.users:http/sync")[0].change == ChangeEvent(
        **{**_fields(_changes()[0]), "position": "0/10"}
    )


def test_local_torn_last_line_is_ignored_and_not_glued(tmp_path: Path) -> None:
    store = LocalDeadLetterStore(tmp_path)
    store.write(PID, _changes()[0], ErrorInfo("a"))
    path = store.path_for(PID)
    with open(path, "ab") as f:
        f.write(b'{"pipeline_id": "pg:pub')  # a crash mid-write
    assert len(store.read(PID)) == 1 == store.count(PID)
    store.write(PID, _changes()[2], ErrorInfo("b"))
    assert [d.error.message for d in store.read(PID)] == ["a", "b"]


def test_local_corrupt_entry_names_file_and_entry(tmp_path: Path) -> None:
    store = LocalDeadLetterStore(tmp_path)
    store.write(PID, _changes()[0], ErrorInfo("a"))
    path = store.path_for(PID)
    path.write_text(path.read_text() + "{not json}\n")
    with pytest.raises(DeadLetterError) as err:
        store.read(PID)
    assert str(path) in str(err.value) and "entry 2" in str(err.value)


def test_memory_store_keeps_position_objects() -> None:
    store = MemoryDeadLetterStore()
    ch = ChangeEvent(T, ChangeAction.INSERT, 12345, None, {"id": 1})
    store.write(PID, ch, ErrorInfo("x"), position="0/3039")
    got = store.read(PID)[0]
    assert got.change.position == 12345 and got.position == "0/3039"


def _fields(obj: Any) -> dict[str, Any]:
    return {f: getattr(obj, f) for f in obj.__dataclass_fields__}


def test_local_count_reads_no_entry(tmp_path: Path) -> None:
    """``count`` counts lines: an entry it cannot decode still counts (``read`` refuses it)."""
    store = LocalDeadLetterStore(tmp_path)
    store.write(PID, _changes()[0], ErrorInfo("a"))
    with open(store.path_for(PID), "ab") as f:
        f.write(b"not json\n")
    with pytest.raises(DeadLetterError, match="entry 2"):
        store.read(PID)
    assert store.count(PID) == 2
    assert count_dead_letters(store, PID) == 2
