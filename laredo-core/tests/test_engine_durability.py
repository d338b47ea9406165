"""The engine's durability edges: batch targets, buffering targets and the ACK, dead letters,
stream errors and reconnects, partial transactions, refused resets."""

from __future__ import annotations

import time

import laredo
import pytest
from laredo import ChangeAction, PipelineState, Table
from laredo.testing import PerChangeTarget, RecordingTarget, TestSource, columns
from laredo.testing import wait_until as wait

USERS = Table("public", "users")


def test_batch_target_fast_path_and_partial_failure(make_source, run) -> None:
    from laredo.errors import BatchApplyError

    class Batchy(PerChangeTarget):
        def __init__(self) -> None:
            super().__init__()
            self.batches: list[int] = []
            self.fail_at: int | None = None

        def apply_changes(self, table, events):  # type: ignore[no-untyped-def]
            for i, ev in enumerate(events):
                if (
                    self.fail_at is not None
                    and ev.new_values
                    and ev.new_values["id"] == self.fail_at
                ):
                    self.fail_at = None
                    raise BatchApplyError(i)
                self.on_insert(table, ev.new_values)
            self.batches.append(len(events))

    src = make_source()
    t = Batchy()
    eng = run(src, [laredo.Pipeline("s", USERS, t, retry_backoff=0.001)])
    assert eng.await_ready(5)
    t.fail_at = 102
    src.transaction(
        [("INSERT", USERS, {"id": i, "name": "", "email": ""}, None) for i in range(100, 105)]
    )
    assert wait(lambda: t.count() == 7)
    ids = [c[2]["id"] for c in t.calls if c[0] == "on_insert"]
    assert ids == [100, 101, 102, 103, 104]  # no duplicate, no gap, in order
    src.transaction(
        [("INSERT", USERS, {"id": i, "name": "", "email": ""}, None) for i in range(200, 210)]
    )
    assert wait(lambda: t.batches and t.batches[-1] == 10)
    eng.stop()


class BufferingTarget(RecordingTarget):
    """Applies changes into a pending buffer; ``flush()`` makes them durable."""

    def __init__(self) -> None:
        super().__init__()
        self.pending: list[object] = []
        self.durable_at: object = None
        self.flushes = 0

    def set_change_position(self, position):  # type: ignore[no-untyped-def]
        super().set_change_position(position)
        self.pending.append(position)

    def durable_position(self):  # type: ignore[no-untyped-def]
        return self.durable_at

    def on_baseline_complete(self, table):  # type: ignore[no-untyped-def]
        super().on_baseline_complete(table)
        self.flush()  # like the HTTP target: the baseline is durable once "complete" is sent

    def flush(self) -> None:
        if self.pending:
            self.durable_at = self.pending[-1]
            self.pending.clear()
        self.flushes += 1


def test_ack_follows_durable_position_of_buffering_targets(make_source, run) -> None:
    src = make_source()
    t = BufferingTarget()
    eng = run(src, [laredo.Pipeline("s", USERS, t)])
    assert eng.await_ready(5)
    base = src.position
    assert wait(lambda: src.acked == base)  # baseline complete: nothing buffered yet
    p1 = src.insert(USERS, {"id": 3, "name": "c", "email": ""})
    assert wait(lambda: t.get(3) is not None)
    time.sleep(0.2)
    assert src.acked == base  # applied but not durable: never acknowledged
    t.flush()
    assert wait(lambda: src.acked == p1)
    hb = src.heartbeat()  # idle WAL beyond: everything durable, so the ack moves on
    assert wait(lambda: src.acked == hb)
    p2 = src.insert(USERS, {"id": 4, "name": "d", "email": ""})
    assert wait(lambda: t.get(4) is not None)
    eng.stop()  # stop flushes buffering targets, then acknowledges
    assert t.flushes >= 2 and src.acked == p2


def test_dead_letter_policy_continues(make_source, run) -> None:
    from laredo.deadletter import MemoryDeadLetterStore

    src = make_source()
    t = RecordingTarget()
    t.fail_when = lambda method, row: bool(row and row.get("id") == 13)
    dl = MemoryDeadLetterStore()
    eng = run(
        src,
        [
            laredo.Pipeline(
                "s", USERS, t, error_policy="dead_letter", max_retries=1, retry_backoff=0.001
            )
        ],
        dead_letter_store=dl,
    )
    assert eng.await_ready(5)
    src.insert(USERS, {"id": 13, "name": "bad", "email": ""})
    p = src.insert(USERS, {"id": 14, "name": "ok", "email": ""})
    assert wait(lambda: t.get(14) is not None and src.acked == p)
    assert eng.pipelines()[0].state is PipelineState.STREAMING
    assert [d.change.new_values["id"] for d in dl.read(eng.pipelines()[0].id)] == [13]
    eng.stop()
    with pytest.raises(laredo.ConfigError, match="dead_letter_store"):
        laredo.Engine(
            sources={"s": src},
            pipelines=[laredo.Pipeline("s", USERS, t, error_policy="dead_letter")],
        )


def test_transient_stream_error_restarts_without_loss_or_duplicates(
    obs: laredo.RecordingObserver, make_source, run
) -> None:
    src = make_source(supports_resume=True)
    t = RecordingTarget()
    eng = run(src, [laredo.Pipeline("s", USERS, t)], observers=[obs])
    assert eng.await_ready(5)
    for i in range(100, 110):
        src.insert(USERS, {"id": i, "name": "", "email": ""})
    assert wait(lambda: t.count() == 12)
    src.fail_stream(laredo.TransientError("connection reset"))
    for i in range(110, 120):
        src.insert(USERS, {"id": i, "name": "", "email": ""})
    assert wait(lambda: t.count() == 22)
    assert src.stream_calls >= 2
    ids = [c[2]["id"] for c in t.calls if c[0] == "on_insert"]
    assert ids == list(range(100, 120))  # nothing lost, nothing applied twice
    assert eng.pipelines()[0].state is PipelineState.STREAMING
    eng.stop()


def test_terminal_stream_error_fails_pipelines(
    obs: laredo.RecordingObserver, make_source, run
) -> None:
    src = make_source(supports_resume=True)
    eng = run(src, [laredo.Pipeline("s", USERS, RecordingTarget())], observers=[obs])
    assert eng.await_ready(5)
    src.fail_stream(laredo.SourceError("permission denied for replication"))
    assert wait(lambda: eng.pipelines()[0].state is PipelineState.ERROR)
    assert "permission denied" in (eng.pipelines()[0].error or "")
    eng.stop()


def test_pipeline_aware_targets_are_bound_before_init(make_source, run) -> None:
    class Aware(RecordingTarget):
        ctx = None

        def bind_pipeline(self, context):  # type: ignore[no-untyped-def]
            assert not self.calls  # before on_init
            self.ctx = context

    src = make_source()
    t = Aware()
    eng = run(src, [laredo.Pipeline("s", USERS, t)])
    assert eng.await_ready(5)
    assert t.ctx is not None and t.ctx.pipeline_id == eng.pipelines()[0].id
    assert t.ctx.position_to_string(7) == "7" and t.ctx.table == USERS
    eng.stop()


def test_partial_chunks_do_not_advance_ack_until_the_transaction_completes(
    make_source, run
) -> None:
    src = make_source()
    t = RecordingTarget()
    eng = run(src, [laredo.Pipeline("s", USERS, t)])
    assert eng.await_ready(5)
    base = src.position
    assert wait(lambda: src.acked == base)
    srt = eng._readers["s"]
    pos = base + 1
    chunk = [
        laredo.ChangeEvent(
            USERS, ChangeAction.INSERT, pos, new_values={"id": 50 + i, "name": "", "email": ""}
        )
        for i in range(3)
    ]
    srt.on_changes(chunk[:2], complete=False)
    assert wait(lambda: t.get(51) is not None)
    time.sleep(0.1)
    assert src.acked == base  # half a transaction applied: not acknowledged
    srt.on_changes(chunk[2:])
    assert wait(lambda: src.acked == pos)
    eng.stop()


def test_source_reconnects_become_observer_events(
    obs: laredo.RecordingObserver, make_source, run
) -> None:
    src = make_source()
    eng = run(src, [laredo.Pipeline("s", USERS, RecordingTarget())], observers=[obs])
    assert eng.await_ready(5)
    assert wait(lambda: src.state() is laredo.SourceState.STREAMING)
    time.sleep(0.1)
    src._state = laredo.SourceState.RECONNECTING
    assert obs.wait_for("source_disconnected", 1, 5)
    src._state = laredo.SourceState.STREAMING
    assert obs.wait_for("source_connected", 2, 5)
    eng.stop()


class _ForeignPublicationSource(TestSource):
    """Refuses ``drop_publication`` before changing anything (as the pg source does for a
    publication Laredo did not create); a plain reset ends the stream like a dropped slot."""

    __test__ = False

    def reset_source(self, drop_publication: bool = False) -> None:
        if drop_publication:
            raise laredo.ConfigError("publication 'p': not dropped, Laredo did not create it")
        self.stop_stream()


def test_a_refused_reset_leaves_the_stream_alone(obs: laredo.RecordingObserver, run) -> None:
    src = _ForeignPublicationSource()
    src.add_table(USERS, columns("id", "name", "email"), [{"id": 1, "name": "a", "email": ""}])
    t = RecordingTarget()
    eng = run(src, [laredo.Pipeline("s", USERS, t)], observers=[obs])
    assert eng.await_ready(5)
    with pytest.raises(laredo.ConfigError, match="not dropped"):
        eng.reset_source("s", drop_publication=True)
    src.insert(USERS, {"id": 2, "name": "b", "email": ""})
    assert wait(lambda: t.get(2) is not None)
    # no re-baseline is left pending: a stream that ends now ends, it does not re-baseline
    src.stop_stream()
    time.sleep(0.3)
    assert obs.count("rebaseline_triggered") == 0
    eng.stop()
    # a reset that goes through re-baselines in place
    src2 = _ForeignPublicationSource()
    src2.add_table(USERS, columns("id", "name", "email"), [{"id": 1, "name": "a", "email": ""}])
    obs2 = laredo.RecordingObserver()
    eng2 = run(src2, [laredo.Pipeline("s", USERS, RecordingTarget())], observers=[obs2])
    assert eng2.await_ready(5)
    assert eng2.reset_source("s") is True
    assert obs2.wait_for("rebaseline_triggered", 1, 5)
    eng2.stop()


class _StubbornSource(TestSource):
    """A source whose pause()/resume() fail (a network error, say)."""

    def pause(self) -> None:
        raise OSError("connection reset while pausing")

    def resume(self) -> None:
        raise OSError("connection reset while resuming")


def test_a_source_that_cannot_pause_is_logged_and_its_buffers_still_pause(
    run, caplog: pytest.LogCaptureFixture
) -> None:
    src = _StubbornSource()
    src.add_table(USERS, columns("id", "name", "email"), [{"id": 1, "name": "a", "email": ""}])
    t = RecordingTarget()
    eng = run(src, [laredo.Pipeline("s", USERS, t)])
    try:
        assert eng.await_ready(5)
        with caplog.at_level("WARNING", logger="laredo.engine.engine"):
            eng.pause("s")
        assert "source s: pause() failed (OSError: connection reset while pausing)" in caplog.text
        assert eng.pipelines()[0].state is PipelineState.PAUSED
        p = src.insert(USERS, {"id": 2, "name": "b", "email": ""})
        time.sleep(0.1)
        assert t.get(2) is None  # held by the paused buffer, not lost
        with caplog.at_level("WARNING", logger="laredo.engine.engine"):
            eng.resume("s")
        assert "source s: resume() failed" in caplog.text
        assert wait(lambda: t.get(2) is not None and src.acked == p)
    finally:
        eng.stop()
