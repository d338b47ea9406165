"""``Engine.verify``: a pipeline's target compared with its source key by key at one position,
while writers keep changing the table: a faithful replica matches, one made to differ lists
exactly the keys that differ."""

from __future__ import annotations

import threading
from typing import Any

import laredo
import pytest
from laredo.engine.buffer import Batch, Heartbeat
from laredo.testing import RecordingTarget, TestSource
from laredo.types import ChangeAction, ChangeEvent

from .conftest import USERS


class Writers:
    """Inserts, updates and deletes on users until stopped."""

    def __init__(self, src: TestSource) -> None:
        self.src, self.stop = src, threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self) -> None:
        n = 1000
        while not self.stop.is_set():
            self.src.insert(USERS, {"id": n, "name": "w", "email": f"{n}@x"})
            if n % 3 == 0:
                self.src.update(USERS, {"id": n - 1, "name": "u", "email": "u@x"}, {"id": n - 1})
            if n % 5 == 0:
                self.src.delete(USERS, {"id": n - 2})
            n += 1
            self.stop.wait(0.001)

    def __enter__(self) -> Writers:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join()


@pytest.fixture
def running(make_source: Any, run: Any) -> Any:
    src = make_source(heartbeat_interval=0.05)
    src.batch_size = 1  # one position per transaction, as PostgreSQL gives
    t = RecordingTarget()
    eng = run(src, [laredo.Pipeline("s", USERS, t, id="users")])
    assert eng.await_ready(5)
    yield src, t, eng
    eng.stop()


def test_a_faithful_replica_matches_while_writers_run(running: Any) -> None:
    src, _t, eng = running
    with Writers(src):
        for _ in range(5):
            result = eng.verify("users", timeout=10)
            assert result.match, result.summary()
            assert result.source_rows == result.target_rows > 2
    assert "match" in result.summary() and result.pipeline_id == "users"


def test_a_replica_made_to_differ_lists_the_keys(running: Any) -> None:
    src, t, eng = running
    src.insert(USERS, {"id": 7, "name": "g", "email": "g@x"})
    end = src.heartbeat()
    assert eng.wait_for("s", end, timeout=5)

    def diverge() -> None:  # behind the engine's back, on the worker thread (one writer)
        t.on_delete(USERS, {"id": 1})
        t.on_update(USERS, {"id": 2, "name": "BOB", "email": "b@x"}, {"id": 2})
        t.on_insert(USERS, {"id": 99, "name": "ghost", "email": "z@x"})

    eng.call_in_pipeline("users", diverge, timeout=5)
    with Writers(src):
        result = eng.verify("users", timeout=10)
    assert not result.match
    assert (result.missing, result.different, result.extra) == (("1",), ("2",), ("99",))
    assert (result.missing_count, result.different_count, result.extra_count) == (1, 1, 1)
    assert result.source_rows == result.target_rows  # a count alone would not see it
    text = result.summary()
    assert "MISMATCH" in text and "1 missing from the target (1)" in text


def test_verify_refuses_a_paused_pipeline(running: Any) -> None:
    _src, _t, eng = running
    eng.pause("s")
    with pytest.raises(laredo.EngineStateError, match="resume"):
        eng.verify("users", timeout=5)
    eng.resume("s")
    assert eng.verify("users", timeout=10).match


def test_the_comparison_runs_exactly_at_the_position(running: Any) -> None:
    """The worker runs the comparison just before the first item past the position, and
    reports no moment at all for a batch holding changes on both sides of it."""
    _src, _t, eng = running
    worker = eng._worker("users")  # the worker's own facility, driven on its own thread

    def change(position: int, key: int) -> ChangeEvent:
        row = {"id": key, "name": "x", "email": "x@x"}
        return ChangeEvent(USERS, ChangeAction.INSERT, position, new_values=row)

    def run(build: Any) -> list[str]:
        return eng.call_in_pipeline("users", lambda: probe_with(build), timeout=5)

    def probe_with(build: Any) -> list[str]:
        hits: list[str] = []
        at = worker.applied + 10
        assert worker.at_position(at, lambda: hits.append("work"), lambda: hits.append("missed"))
        for item in build(at):
            worker.handle(item)
            hits.append("item")
        worker.cancel_at_position()
        return hits

    # changes up to the position, then one past it: compared before that one
    assert run(lambda at: [Batch([change(at - 1, 501)]), Batch([change(at + 1, 502)])]) == [
        "item",
        "work",
        "item",
    ]
    # a heartbeat at the position: everything up to it is applied
    assert run(lambda at: [Heartbeat(at)]) == ["work", "item"]
    # one batch on both sides of the position: no exact moment
    assert run(lambda at: [Batch([change(at, 503), change(at + 1, 504)])]) == ["missed", "item"]
