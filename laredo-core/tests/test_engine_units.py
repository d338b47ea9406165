"""Engine parts tested alone, without threads: the buffer, a pipeline worker, the startup
decision (with a fake snapshot coordinator)."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import laredo
import pytest
from laredo.engine.buffer import Batch, ChangeBuffer, ControlRequest, Heartbeat, SchemaItem, Skip
from laredo.engine.context import EngineContext, FailureScope, ObserverWants, SourceLink
from laredo.engine.pipeline_worker import PipelineWorker
from laredo.engine.snapshots import RestoreResult, TableRestore
from laredo.engine.startup import StartKind, plan_start
from laredo.testing import RecordingTarget, TestSource
from laredo.testing.source import columns
from laredo.types import BufferPolicy, ChangeAction, ChangeEvent, PipelineState

T = laredo.TableIdentifier("public", "users")
COLS = columns("id", "name", "active", types={"id": "int8", "active": "bool"})


def ev(pos: int, action: ChangeAction = ChangeAction.INSERT, **row: Any) -> ChangeEvent:
    if action is ChangeAction.DELETE:
        return ChangeEvent(T, action, pos, None, None, row)
    return ChangeEvent(T, action, pos, None, row)


# -- buffer ---------------------------------------------------------------------------------


def test_buffer_keeps_markers_in_order_and_coalesces_heartbeats() -> None:
    buf = ChangeBuffer(10)
    buf.put_batch([ev(1, id=1)])
    buf.put_heartbeat(2)
    buf.put_heartbeat(3)
    buf.put(Skip(3))
    buf.put_batch([ev(4, id=2), ev(4, id=3)], complete=False)
    assert buf.depth == 3
    got = [buf.get(0) for _ in range(4)]
    assert [type(g) for g in got] == [Batch, Heartbeat, Skip, Batch]
    assert isinstance(got[1], Heartbeat) and got[1].position == 3
    assert isinstance(got[3], Batch) and not got[3].complete
    assert buf.depth == 0 and buf.get(0) is None


def test_buffer_drop_oldest_trims_changes_but_never_markers() -> None:
    policies: list[str] = []
    buf = ChangeBuffer(3, BufferPolicy.DROP_OLDEST, policies.append)
    buf.put_batch([ev(1, id=1), ev(1, id=2)])
    buf.put(SchemaItem(T, COLS, COLS, 1))
    buf.put_batch([ev(2, id=3), ev(2, id=4)])
    assert policies == ["drop_oldest"] and buf.dropped == 1 and buf.depth == 3
    first = buf.get(0)
    assert isinstance(first, Batch) and [e.new_values["id"] for e in first.events] == [2]
    assert isinstance(buf.get(0), SchemaItem)


def test_buffer_error_policy_raises_a_laredo_error() -> None:
    buf = ChangeBuffer(1, BufferPolicy.ERROR)
    buf.put_batch([ev(1, id=1)])
    with pytest.raises(laredo.BufferOverflow, match="buffer_size"):
        buf.put_batch([ev(2, id=2)])


def test_buffer_block_policy_gives_up_when_stopped() -> None:
    buf = ChangeBuffer(1)
    buf.put_batch([ev(1, id=1)])
    stop = threading.Event()
    stop.set()
    buf.put_batch([ev(2, id=2)], stop)  # returns instead of waiting forever
    assert buf.depth == 1


def test_pause_holds_data_but_not_control() -> None:
    buf = ChangeBuffer(10)
    buf.put_batch([ev(1, id=1)])
    buf.set_paused(True)
    req = ControlRequest("call", payload=lambda: 1)
    buf.submit(req)
    assert buf.get(0) is req
    assert buf.get(0) is None  # the batch is held back while paused
    buf.close()
    assert isinstance(buf.get(0), Batch)  # closing drains what is queued
    assert buf.get(0) is None


# -- pipeline worker ------------------------------------------------------------------------


class Harness:
    """A worker wired to a source link and context that record what goes upward."""

    def __init__(
        self,
        target: Any = None,
        dead_letters: Any = None,
        source: TestSource | None = None,
        wants: ObserverWants | None = None,
        **pipeline: Any,
    ) -> None:
        self.source = source or TestSource()
        self.observer = laredo.RecordingObserver()
        self.escalations: list[tuple[FailureScope, str, str]] = []
        self.acks = 0
        self.ctx = EngineContext(
            observer=self.observer,
            dead_letters=dead_letters,
            snapshots=None,
            wants=wants or ObserverWants(),
            escalate=lambda scope, sid, msg: self.escalations.append((scope, sid, msg)),
            readiness_changed=lambda: None,
        )
        self.link = SourceLink("src", self.source, str, self._ack, False)
        self.target = target or RecordingTarget()
        self.target.on_init(T, COLS)
        cfg = laredo.Pipeline("src", T, self.target, retry_backoff=0.001, **pipeline)
        assert cfg.problems(0) == []
        self.worker = PipelineWorker(self.ctx, self.link, cfg)
        self.worker.state = PipelineState.STREAMING
        self.worker.ready = True

    def _ack(self) -> None:
        self.acks += 1


def test_worker_applies_in_order_and_moves_applied_only_at_transaction_end() -> None:
    h = Harness()
    w = h.worker
    w.handle(Batch([ev(5, id=1, name="a")], complete=False))
    assert h.target.get(1) is not None and w.applied is None  # half a transaction
    w.handle(Batch([ev(5, id=2, name="b")]))
    assert w.applied == 5 and w.confirmed() == 5
    w.handle(Heartbeat(9))
    assert w.applied == 9 and h.acks == 3  # every batch and heartbeat asks for an ACK attempt


def test_worker_skip_marker_drops_redelivered_changes() -> None:
    h = Harness()
    h.worker.handle(Skip(5))
    h.worker.handle(Batch([ev(4, id=1), ev(5, id=2), ev(6, id=3)]))
    assert [r["id"] for r in h.target.rows()] == [3]


def test_worker_filter_turns_leaving_updates_into_deletes() -> None:
    h = Harness(filters=[laredo.FieldEquals(field="active", value=True)])
    w = h.worker
    w.handle(Batch([ev(1, id=1, active=True), ev(1, id=2, active=False)]))
    assert [r["id"] for r in h.target.rows()] == [1] and w.expected_rows == 1
    w.handle(Batch([ev(2, ChangeAction.UPDATE, id=1, active=False)]))
    assert h.target.rows() == [] and w.expected_rows == 0


def test_worker_retries_then_applies() -> None:
    target = RecordingTarget()
    target.fail_times = 2
    h = Harness(target, max_retries=3)
    h.worker.handle(Batch([ev(1, id=1)]))
    assert target.get(1) is not None and h.worker.state is PipelineState.STREAMING
    assert h.observer.count("change_error") == 2  # the first failure and one failed retry


def test_worker_dead_letters_after_retries_then_isolates() -> None:
    target = RecordingTarget()
    target.fail_always = True
    store = laredo.MemoryDeadLetterStore()
    h = Harness(target, dead_letters=store, max_retries=2)
    h.worker.handle(Batch([ev(1, id=1)]))
    assert h.worker.state is PipelineState.ERROR and "failed after 2 retries" in str(h.worker.error)
    assert [d.change.new_values for d in store.read(h.worker.id)] == [{"id": 1}]
    assert h.worker.applied is None  # never acknowledged past a change it did not apply


def test_worker_dead_letter_policy_skips_and_goes_on() -> None:
    target = RecordingTarget()
    target.fail_when = lambda method, row: bool(row and row.get("id") == 1)
    store = laredo.MemoryDeadLetterStore()
    h = Harness(target, dead_letters=store, max_retries=1, error_policy="dead_letter")
    h.worker.handle(Batch([ev(1, id=1), ev(1, id=2)]))
    assert [r["id"] for r in target.rows()] == [2] and h.worker.applied == 1
    assert len(store.read(h.worker.id)) == 1 and h.worker.state is PipelineState.STREAMING


def test_terminal_errors_are_not_retried() -> None:
    class Rejecting(RecordingTarget):
        def on_insert(self, table: Any, row: Any) -> None:
            raise laredo.InvalidChangeError("never")

    h = Harness(Rejecting(), max_retries=5)
    h.worker.handle(Batch([ev(1, id=1)]))
    assert h.worker.state is PipelineState.ERROR
    assert "not retried (terminal error)" in str(h.worker.error)
    assert h.observer.count("change_error") == 1


@pytest.mark.parametrize(
    ("policy", "scope"), [("stop_source", FailureScope.SOURCE), ("stop_all", FailureScope.ALL)]
)
def test_error_policies_escalate_beyond_the_pipeline(policy: str, scope: FailureScope) -> None:
    target = RecordingTarget()
    target.fail_always = True
    h = Harness(target, max_retries=0, error_policy=policy)
    h.worker.handle(Batch([ev(1, id=1)]))
    assert [(s, sid) for s, sid, _ in h.escalations] == [(scope, "src")]


def test_confirmed_for_a_volatile_target_waits_for_a_snapshot() -> None:
    h = Harness(RecordingTarget(durable=False))
    h.link = SourceLink("src", h.source, str, lambda: None, True)
    w = PipelineWorker(h.ctx, h.link, h.worker.cfg)
    w.handle(Batch([ev(3, id=1)]))
    assert w.applied == 3 and w.confirmed() is None
    w.snapshot_position = 3
    assert w.confirmed() == 3


class DeliveredOnly(RecordingTarget):
    """A buffering target like the HTTP one: durable only for changes it delivered (set by
    the test), never for the baseline; ``None`` before its first delivered change."""

    durable_at: Any = None

    def durable_position(self) -> Any:
        return self.durable_at


def test_confirmed_of_a_buffering_target_with_nothing_pending_follows_applied() -> None:
    h = Harness(DeliveredOnly(), filters=[laredo.FieldEquals(field="active", value=True)])
    w = h.worker
    w.complete_baseline(2, 0, 0.0)
    assert w.confirmed() == 2  # the baseline is durable once complete
    w.handle(Heartbeat(4))
    assert w.confirmed() == 4  # nothing handed over since: heartbeats carry the ACK
    w.handle(Batch([ev(5, id=1, active=False)]))
    assert h.target.rows() == [] and w.confirmed() == 5  # filtered out: nothing pending
    w.handle(Batch([ev(6, id=2, active=True)]))
    w.handle(Heartbeat(7))
    assert w.confirmed() is None  # handed over, not durable yet: never past it
    h.target.durable_at = 6
    assert w.confirmed() == 7


def test_confirmed_never_lies_inside_a_chunked_transaction() -> None:
    """Chunks of a large transaction carry a position inside it (101 here, the transaction
    ends at 200): a buffering target durable at 101 confirms only what came before (50)."""
    h = Harness(DeliveredOnly())
    w = h.worker
    w.complete_baseline(50, 0, 0.0)
    w.handle(Batch([ev(101, id=1), ev(101, id=2)], complete=False))
    w.handle(Batch([ev(200, id=3)]))
    h.target.durable_at = 101
    assert w.confirmed() == 50
    h.target.durable_at = 200
    assert w.confirmed() == 200
    w.handle(Batch([ev(301, id=4)], complete=False))  # the next chunked transaction
    w.handle(Batch([ev(400, id=5)]))
    h.target.durable_at = 301
    assert w.confirmed() == 200


class BatchOnlySource(TestSource):
    """Delivers its baseline only in lists (``baseline()`` must not be called)."""

    def baseline(self, tables: Sequence[laredo.TableIdentifier], row_callback: Any) -> int:
        raise AssertionError("the batch path was not taken")

    def baseline_batches(
        self, tables: Sequence[laredo.TableIdentifier], batch_callback: Any
    ) -> int:
        for t in tables:
            rows = [{"id": i, "name": f"n{i}", "active": True} for i in range(25_000)]
            for at in range(0, len(rows), 4_096):
                batch_callback(t, rows[at : at + 4_096])
        return 42


def test_reload_takes_the_batch_path_and_reports_progress() -> None:
    h = Harness(source=BatchOnlySource(), wants=ObserverWants(baseline_progress=True))
    h.target.on_insert(
        T, {"id": 99_999, "name": "stale", "active": False}
    )  # truncated by the reload
    h.worker.buffer.put_batch([ev(40, id=1, name="old")], threading.Event())
    assert h.worker.reload() == 42
    assert [a[2] for a in h.observer.of("baseline_row_loaded")] == [12_288, 20_480]
    assert h.observer.of("baseline_completed")[0][2] == 25_000
    assert h.target.count() == 25_000 and h.target.get(99_999) is None
    assert h.worker.state is PipelineState.STREAMING and h.worker.applied == 42
    h.worker.handle(h.worker.buffer.get(0))  # buffered before the reload's position: skipped
    assert h.target.get(1) == {"id": 1, "name": "n1", "active": True}


def test_a_reload_the_target_refuses_fails_the_pipeline_and_raises() -> None:
    h = Harness()
    h.target.fail_when = lambda method, row: method == "on_baseline_row"
    h.source.add_table(T, columns("id", "name", "active"), [{"id": 1, "name": "a", "active": True}])
    with pytest.raises(
        laredo.LaredoError, match=r"reload of public\.users failed: .*injected failure"
    ):
        h.worker.reload()
    assert h.worker.failed and "baseline load into target failed" in (h.worker.error or "")
    assert h.observer.of("baseline_completed") == []


# -- startup decision -----------------------------------------------------------------------


class FakeCoordinator:
    def __init__(self, result: RestoreResult | None) -> None:
        self.result = result
        self.calls: list[tuple[list[str], Any]] = []

    def restore(
        self, source_id: str, source: Any, pipes: Sequence[Any], not_before: Any
    ) -> RestoreResult | None:
        self.calls.append(([p.id for p in pipes], not_before))
        return self.result


def _source(resumable: bool, acked: int | None) -> TestSource:
    src = TestSource(supports_resume=resumable)
    if acked is not None:
        src.ack(acked)  # what a restart would find stored
    return src


def _workers(*durable: bool) -> list[PipelineWorker]:
    out = []
    for i, d in enumerate(durable):
        h = Harness(RecordingTarget(durable=d), id=f"p{i}")
        out.append(h.worker)
    return out


def test_startup_resumes_durable_targets_without_a_snapshot() -> None:
    coord = FakeCoordinator(None)
    plan = plan_start("src", _source(True, 7), _workers(True, True), coord)
    assert plan.kind is StartKind.RESUME and plan.position == 7 and coord.calls == []


def test_startup_restores_volatile_targets_at_or_after_the_ack_or_rebaselines() -> None:
    restored = RestoreResult("snap", 9, {"p1": TableRestore("p1", 9, 3)})
    coord = FakeCoordinator(restored)
    plan = plan_start("src", _source(True, 7), _workers(True, False), coord)
    assert plan.kind is StartKind.RESUME and plan.restored is restored
    assert coord.calls == [(["p1"], 7)]  # only the volatile pipeline, not before the ACK
    plan = plan_start("src", _source(True, 7), _workers(False), FakeCoordinator(None))
    assert plan.kind is StartKind.REBASELINE
    assert plan_start("src", _source(True, 7), _workers(False), None).kind is StartKind.REBASELINE


def test_startup_restores_a_snapshot_when_nothing_was_acknowledged() -> None:
    restored = RestoreResult("snap", 4, {"p0": TableRestore("p0", 4, 1)})
    plan = plan_start("src", _source(True, None), _workers(False), FakeCoordinator(restored))
    assert plan.kind is StartKind.RESTORE and plan.position == 4
    plan = plan_start("src", _source(False, None), _workers(True), FakeCoordinator(restored))
    assert plan.kind is StartKind.BASELINE  # a source that cannot resume always baselines
    plan = plan_start("src", _source(True, None), _workers(True), FakeCoordinator(None))
    assert plan.kind is StartKind.BASELINE
