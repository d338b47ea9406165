"""The engine with the HTTP sync target: it never acknowledges a change the receiver lacks."""

from __future__ import annotations

import threading
from typing import Any

import laredo
import pytest
from laredo.deadletter import MemoryDeadLetterStore
from laredo.testing import RecordingTarget
from laredo.testing.source import TestSource, columns
from laredo_target_http import HttpSyncTarget

T = laredo.Table("public", "users")


class AckAudit(laredo.NullObserver):
    """At every ACK, checks the receiver already holds every change at or before it."""

    def __init__(self, receiver: Any, source: TestSource) -> None:
        self.receiver = receiver
        self.source = source
        self.violations: list[str] = []
        self.acks: list[int] = []
        self._lock = threading.Lock()

    def on_ack_advanced(self, source_id: str, position: Any) -> None:
        got = {int(c["position"]) for c in self.receiver.changes()}
        want = {int(p) for p in self.source._log_end if p <= position and self._has_rows(p)}
        missing = sorted(want - got)
        with self._lock:
            self.acks.append(int(position))
            if missing:
                self.violations.append(f"ack {position} but receiver lacks {missing[:5]}")

    def _has_rows(self, position: int) -> bool:
        idx = self.source._log_end.index(position)
        return bool(self.source._log[idx])


@pytest.fixture
def source() -> TestSource:
    src = TestSource(supports_resume=True)
    src.add_table(T, columns("id", "name"), rows=[{"id": i, "name": f"r{i}"} for i in range(3)])
    return src


def test_engine_never_acks_beyond_the_receiver(
    receiver: Any, source: TestSource, wait_for: Any
) -> None:
    target = HttpSyncTarget(
        receiver.url,
        batch_size=4,
        flush_interval="20ms",
        retry_count=10_000,  # ride out the outage below by blocking, not by failing
        retry_backoff="5ms",
        retry_backoff_max="20ms",
    )
    audit = AckAudit(receiver, source)
    eng = laredo.Engine(
        sources={"src": source},
        pipelines=[laredo.Pipeline("src", T, target)],
        observers=[audit],
    )
    eng.start()
    try:
        assert eng.await_ready(30)
        paths = [r.path for r in receiver.ok_requests()]
        assert paths == ["/baseline/start", "/baseline/batch", "/baseline/complete"]

        for i in range(10, 40):
            source.insert(T, {"id": i, "name": "n"})
        wait_for(lambda: len(receiver.changes()) == 30, what="30 changes delivered")
        # The engine says each transaction ended: the last one is acknowledged once delivered,
        # with no later position needed.
        wait_for(lambda: source.acks and source.acks[-1] == source.position, what="ack")

        receiver.default = receiver.reply(503)  # the receiver goes down
        outage_start = source.position
        for i in range(40, 50):
            source.update(T, {"id": i % 13, "name": "down"})
        wait_for(lambda: len(receiver.all_requests()) > 40, what="failing retries")
        assert max(source.acks) <= outage_start
        assert target.durable_position() is not None
        assert target.durable_position() <= outage_start

        receiver.default = receiver.reply(200)  # back up: the blocked batches go through
        wait_for(lambda: len(receiver.changes()) == 40, what="all 40 changes")
        source.insert(T, {"id": 999, "name": "last"})
        wait_for(lambda: source.acks[-1] == source.position, what="ack after recovery")
    finally:
        eng.stop()
    assert audit.violations == []
    got = [(c["action"], int(c["position"])) for c in receiver.changes()]
    assert [p for _, p in got] == sorted(p for _, p in got)
    assert len(got) == 41


def test_terminal_4xx_dead_letters_and_isolates(
    receiver: Any, source: TestSource, wait_for: Any
) -> None:
    target = HttpSyncTarget(receiver.url, batch_size=1, flush_interval=0, retry_count=0)
    dead = MemoryDeadLetterStore()
    eng = laredo.Engine(
        sources={"src": source},
        pipelines=[
            laredo.Pipeline(
                "src", T, target, error_policy="isolate", max_retries=1, retry_backoff=0.01
            )
        ],
        dead_letter_store=dead,
    )
    eng.start()
    try:
        assert eng.await_ready(30)
        baseline_pos = source.position
        receiver.default = receiver.reply(422)
        pos = source.insert(T, {"id": 77, "name": "rejected"})
        wait_for(lambda: eng.pipelines()[0].state is laredo.PipelineState.ERROR, what="ERROR")
        (letter,) = dead.read(eng.pipelines()[0].id)
        assert letter.change.position == pos
        assert "HTTP 422" in letter.error.message
        assert all(a <= baseline_pos for a in source.acks)
        assert target.durable_position() is None
    finally:
        eng.stop()


def test_an_idle_http_pipeline_does_not_hold_the_ack_back(
    receiver: Any, source: TestSource, wait_for: Any
) -> None:
    """The HTTP target of ``T`` gets a baseline and then no change (its table is idle, or its
    filter drops every change): it has nothing pending, so the ACK follows the other tables."""
    other = laredo.Table("public", "other")
    source.add_table(other, columns("id", "name"), rows=[])
    target = HttpSyncTarget(receiver.url, batch_size=1, flush_interval=0, retry_count=0)
    only_x = laredo.FieldEquals(field="name", value="x")
    eng = laredo.Engine(
        sources={"src": source},
        pipelines=[
            laredo.Pipeline("src", T, target, filters=[only_x]),
            laredo.Pipeline("src", other, RecordingTarget()),
        ],
    )
    eng.start()
    try:
        assert eng.await_ready(30)
        p = source.insert(other, {"id": 1, "name": "a"})
        wait_for(lambda: source.acked == p, what="the ack past a change of the other table")
        p = source.insert(T, {"id": 50, "name": "dropped by the filter"})
        wait_for(lambda: source.acked == p, what="the ack past a filtered change")
        hb = source.heartbeat()
        wait_for(lambda: source.acked == hb, what="the ack at a heartbeat")
        assert target.durable_position() is None  # it never delivered a change
        assert not receiver.all_requests("/changes")
    finally:
        eng.stop()
