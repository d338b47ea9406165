"""A pipeline's end, written once (``membership.retire``: engine stop and pipeline removal):
drain, flush, acknowledge while every target is still open, close; a worker that does not drain
by the deadline is abandoned and what it holds is never acknowledged."""

from __future__ import annotations

import threading
from typing import Any

import laredo
import pytest
from laredo import PipelineState, Table
from laredo.testing import RecordingTarget
from laredo.testing import wait_until as wait

USERS = Table("public", "users")


class ForgetsWhenClosed(RecordingTarget):
    """Buffers changes until ``flush()``; once closed its durable position is gone (like a
    target whose client is closed), so only an ACK taken before ``on_close`` sees it."""

    def __init__(self) -> None:
        super().__init__()
        self.flushed_to: Any = None

    def flush(self) -> None:
        self.flushed_to = self.position

    def durable_position(self) -> Any:
        if self.closed:
            raise RuntimeError("durable_position() of a closed target")
        return self.flushed_to


def test_stop_acknowledges_the_final_flush_before_closing_targets(make_source, run) -> None:
    src = make_source()
    t = ForgetsWhenClosed()
    eng = run(src, [laredo.Pipeline("s", USERS, t)])
    assert eng.await_ready(5)
    p = src.insert(USERS, {"id": 3, "name": "c", "email": ""})
    assert wait(lambda: t.get(3) is not None)
    assert src.acked != p  # applied, not flushed: not acknowledged
    eng.stop()
    assert src.acked == p and t.closed
    assert eng.pipelines()[0].state is PipelineState.STOPPED


def test_removing_a_pipeline_drains_flushes_and_closes_it(make_source, run) -> None:
    src = make_source()
    t = ForgetsWhenClosed()
    other = RecordingTarget()
    eng = run(
        src, [laredo.Pipeline("s", USERS, t, id="a"), laredo.Pipeline("s", USERS, other, id="b")]
    )
    try:
        assert eng.await_ready(5)
        src.insert(USERS, {"id": 3, "name": "c", "email": ""})
        assert wait(lambda: t.get(3) is not None)
        eng.remove_pipeline("a", timeout=5)
        assert t.closed and t.flushed_to == t.position and t.methods()[-1] == "on_close"
        assert [p.id for p in eng.pipelines()] == ["b"]
    finally:
        eng.stop()


def test_a_worker_that_does_not_drain_in_time_is_abandoned_unacknowledged(
    make_source, run, caplog: pytest.LogCaptureFixture
) -> None:
    entered, release = threading.Event(), threading.Event()

    class Stuck(RecordingTarget):
        def on_insert(self, table: Any, row: Any) -> None:
            if row["id"] == 99:
                entered.set()
                release.wait(10)
            super().on_insert(table, row)

    src = make_source()
    eng = run(src, [laredo.Pipeline("s", USERS, Stuck())])
    try:
        assert eng.await_ready(5)
        p = src.insert(USERS, {"id": 3, "name": "c", "email": ""})
        assert wait(lambda: src.acked == p)
        src.insert(USERS, {"id": 99, "name": "stuck", "email": ""})
        assert entered.wait(5)
        with caplog.at_level("WARNING"):
            eng.stop(timeout=0.2)
        assert "did not drain in time" in caplog.text
        assert src.acked == p  # the change still being applied is not acknowledged
    finally:
        release.set()
