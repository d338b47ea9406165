from __future__ import annotations

import json
import threading
import uuid
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import laredo
import pytest
from laredo.deadletter import (
    DeadLetterError,
    DeadLetterReplayError,
    LocalDeadLetterStore,
    MemoryDeadLetterStore,
)
from laredo.testing import RecordingTarget
from laredo.types import ChangeAction, ChangeEvent, ErrorInfo

T = laredo.Table("public", "users")
PID = "pg:public.users:indexed-memory"
TS = datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)


def _changes() -> list[ChangeEvent]:
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


@pytest.fixture(params=["memory", "local"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    if request.param == "memory":
        return laredo.dead_letter_store("memory")
    return laredo.dead_letter_store("local", path=str(tmp_path / "dl"))


def test_write_read_keeps_order_and_types(store: Any) -> None:
    changes = _changes()
    for i, ch in enumerate(changes):
        store.write(PID, ch, ErrorInfo(f"boom {i}", "TargetError"))
    got = store.read(PID)
    assert [d.change for d in got] == changes
    assert got[0].change.new_values["price"] == Decimal("9.90")
    assert type(got[0].change.new_values["uid"]) is uuid.UUID
    assert got[0].change.new_values["at"].tzinfo == UTC
    assert [d.error.message for d in got] == [f"boom {i}" for i in range(6)]
    assert all(d.pipeline_id == PID and d.written_at.tzinfo is not None for d in got)
    assert [d.position for d in got] == ["0/10", "0/20", "0/30", "0/40", "0/50", "0/60"]
    assert [d.change.position for d in store.read(PID, limit=2)] == ["0/10", "0/20"]
    assert store.read("other") == []
    assert store.pipelines() == [PID]


def test_replay_applies_in_order_and_removes(store: Any) -> None:
    for ch in _changes():
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
    assert store.read(PID) == []
    assert store.pipelines() == []
    assert store.replay(PID, target) == 0


def test_replay_stops_at_a_failure_and_keeps_the_rest(store: Any) -> None:
    for ch in _changes():
        store.write(PID, ch, ErrorInfo("x"))
    target = RecordingTarget(key_fields=["id"])
    target.fail_when = lambda method, row: method == "on_delete"
    with pytest.raises(DeadLetterReplayError) as err:
        store.replay(PID, target)
    assert err.value.replayed == 3
    assert "entry 4" in str(err.value) and PID in str(err.value)
    left = store.read(PID)
    assert [d.change.position for d in left] == ["0/40", "0/50", "0/60"]
    target.fail_when = None
    assert store.replay(PID, target) == 3
    assert store.read(PID) == []


def test_purge(store: Any) -> None:
    for ch in _changes()[:3]:
        store.write(PID, ch, ErrorInfo("x"))
    store.write("other", _changes()[0], ErrorInfo("y"))
    assert store.purge(PID) == 3
    assert store.purge(PID) == 0
    assert store.pipelines() == ["other"]


def test_concurrent_writes_lose_nothing(store: Any) -> None:
    def writer(n: int) -> None:
        for i in range(50):
            store.write(
                PID,
                ChangeEvent(T, ChangeAction.INSERT, f"{n}/{i}", None, {"id": i}),
                ErrorInfo("x"),
            )

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    got = store.read(PID)
    assert len(got) == 200
    for n in range(4):
        mine = [d.change.position for d in got if d.change.position.startswith(f"{n}/")]
        assert mine == [f"{n}/{i}" for i in range(50)]


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
    assert len(store.read(PID)) == 1
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
