"""``grpc.linger``: how a live stream batches changes (driven on a fake clock, no sleeps)."""

from __future__ import annotations

import time
from typing import Any

import laredo
import pytest
from laredo.testing.source import columns
from laredo.types import ChangeAction, ChangeEvent
from laredo_target_fanout import service
from laredo_target_fanout._proto import replication_pb2 as pb
from laredo_target_fanout.target import FanOutTarget

T = laredo.Table("public", "users")


class FakeTime:
    """Stands in for the ``time`` module inside ``service``: ``sleep`` records and advances."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.sleeps: list[float] = []

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds

    def time(self) -> float:
        return time.time()


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> FakeTime:
    fake = FakeTime()
    monkeypatch.setattr(service, "time", fake)
    return fake


def insert(t: FanOutTarget, i: int) -> None:
    t.apply_changes(
        T, [ChangeEvent(T, ChangeAction.INSERT, i, new_values={"id": i, "name": "x", "team": 0})]
    )


def sequences(msg: Any) -> list[int]:
    resp = pb.SyncResponse.FromString(msg)
    assert resp.WhichOneof("msg") == "journal"
    return [e.sequence for e in resp.journal.entries]


def test_linger_counts_from_the_previous_read_and_an_idle_stream_sends_at_once(
    clock: FakeTime,
) -> None:
    t = FanOutTarget(
        serve=False,
        grpc={"port": 0, "linger": 0.02, "drain_timeout": 0},
        heartbeat_interval=60,
    )
    t.on_init(T, columns("id", "name", "team"))
    t.set_change_position(0)
    t.on_baseline_complete(T)
    session, _hs, _snap = t.open_session(
        "c1",
        peer="peer",
        last_sequence=0,
        journal_id="",
        last_position="",
        last_snapshot_id="",
        matcher=None,
    )
    tail = service._Servicer(service._Registry())._tail(t, session, 2)  # max_batch 2
    try:
        insert(t, 1)
        assert sequences(next(tail)) == [1]
        assert clock.sleeps == []  # first change: nothing to wait for

        clock.now += 0.015  # sending that message took 15 ms (GIL / gRPC queueing)
        for i in (2, 3, 4):
            insert(t, i)
        assert sequences(next(tail)) == [2, 3]
        # only the rest of the 20 ms linger: the send time is part of it, not added to it
        assert clock.sleeps == [pytest.approx(0.005)]

        assert sequences(next(tail)) == [4]
        assert len(clock.sleeps) == 1  # the previous read was a full batch: no linger

        clock.now += 0.5  # idle for longer than the linger
        insert(t, 5)
        assert sequences(next(tail)) == [5]
        assert len(clock.sleeps) == 1  # an idle stream sends at once
    finally:
        tail.close()
        t.on_close(T)
