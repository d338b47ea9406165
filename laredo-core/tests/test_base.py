"""The one door into a target (``apply``/``load``), its helper bases and the deprecation path.

Engine-level tests run the real engine over a ``TestSource``; the buffering tests drive a
:class:`laredo.base.BufferingTarget` whose ``write`` records what it was given."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import laredo
import pytest
from laredo import ChangeAction, ChangeEvent, Table
from laredo.base import BufferingTarget, RowTarget, WriteBatch, door_of
from laredo.deprecation import TargetProtocolDeprecationWarning
from laredo.errors import BatchApplyError
from laredo.testing import PerChangeTarget
from laredo.testing import wait_until as wait
from laredo.types import Position, Row, TableIdentifier

USERS = Table("public", "users")


def ins(pos: int, key: int) -> ChangeEvent:
    return ChangeEvent(USERS, ChangeAction.INSERT, pos, new_values={"id": key})


# -- the deprecation path ------------------------------------------------------------------------


class OldStyleTarget(PerChangeTarget):
    """Written against the per-change protocol: no ``apply``/``load``."""


def test_a_per_change_target_warns_once_and_keeps_working(make_source, run) -> None:
    src = make_source()
    a, b = OldStyleTarget(), OldStyleTarget()
    with pytest.warns(TargetProtocolDeprecationWarning, match="OldStyleTarget") as caught:
        eng = run(src, [laredo.Pipeline("s", USERS, a), laredo.Pipeline("s", USERS, b, id="b")])
    try:
        assert len([w for w in caught if "OldStyleTarget" in str(w.message)]) == 1
        assert "laredo.base.RowTarget" in str(caught[0].message)
        assert eng.await_ready(5)
        src.insert(USERS, {"id": 7, "name": "g", "email": ""})
        for t in (a, b):
            assert wait(lambda t=t: t.get(7) is not None)
            assert {r["id"] for r in t.rows()} == {1, 2, 7}  # baseline rows and the change
    finally:
        eng.stop()


def test_door_of_a_target_with_the_door_is_the_target() -> None:
    class Door(RowTarget):
        pass

    t = Door()
    assert door_of(t) is t


# -- RowTarget ---------------------------------------------------------------------------------


class Rows(RowTarget):
    def __init__(self, fail_on: int | None = None) -> None:
        self.rows: dict[int, Row] = {}
        self.order: list[int] = []
        self.fail_on = fail_on

    def on_init(self, table: TableIdentifier, columns: Sequence[Any]) -> None:
        pass

    def on_baseline_row(self, table: TableIdentifier, row: Row) -> None:
        self.rows[row["id"]] = row

    def on_baseline_complete(self, table: TableIdentifier) -> None:
        pass

    def on_insert(self, table: TableIdentifier, row: Row) -> None:
        if row["id"] == self.fail_on:
            self.fail_on = None  # fails once
            raise RuntimeError("injected")
        self.rows[row["id"]] = row
        self.order.append(row["id"])

    def on_update(self, table: TableIdentifier, row: Row, identity: Row | None) -> None:
        self.rows[row["id"]] = row

    def on_delete(self, table: TableIdentifier, identity: Row) -> None:
        self.rows.pop(identity["id"], None)

    def on_truncate(self, table: TableIdentifier) -> None:
        self.rows.clear()

    def is_durable(self) -> bool:
        return False

    def on_schema_change(self, table: Any, old: Any, new: Any) -> laredo.SchemaChangeResponse:
        return laredo.SchemaChangeResponse()

    def export_snapshot(self) -> list[Row]:
        return list(self.rows.values())

    def restore_snapshot(self, info: Any, rows: Any) -> None:
        pass

    def supports_consistent_snapshot(self) -> bool:
        return False

    def on_close(self, table: TableIdentifier) -> None:
        pass


def test_row_target_names_the_failed_change() -> None:
    t = Rows(fail_on=3)
    with pytest.raises(BatchApplyError) as info:
        t.apply(USERS, [ins(1, 1), ins(1, 2), ins(1, 3), ins(1, 4)])
    assert info.value.index == 2 and t.order == [1, 2]


def test_row_target_through_the_engine_retries_from_the_failed_change(make_source, run) -> None:
    src = make_source()
    t = Rows(fail_on=102)
    eng = run(src, [laredo.Pipeline("s", USERS, t, retry_backoff=0.001)])
    try:
        assert eng.await_ready(5)
        assert set(t.rows) == {1, 2}
        src.transaction(
            [("INSERT", USERS, {"id": i, "name": "", "email": ""}, None) for i in range(100, 105)]
        )
        assert wait(lambda: len(t.order) == 5)
        assert t.order == [100, 101, 102, 103, 104]  # no duplicate, no gap, in order
    finally:
        eng.stop()


# -- BufferingTarget ----------------------------------------------------------------------------


class Log(BufferingTarget, Rows):
    """Records every ``write``; ``failing`` makes writes raise."""

    def __init__(self, **kw: Any) -> None:
        Rows.__init__(self)
        BufferingTarget.__init__(self, **kw)
        self.writes: list[WriteBatch] = []
        self.failing = False
        self.written = threading.Event()

    def on_init(self, table: TableIdentifier, columns: Sequence[Any]) -> None:
        self.buffer_table = table

    def is_durable(self) -> bool:
        return True

    def load(self, table: TableIdentifier, rows: Sequence[Row]) -> None:
        for r in rows:
            self.rows[r["id"]] = r

    def write(self, batch: WriteBatch) -> Position | None:
        if self.failing:
            raise RuntimeError("write refused")
        self.writes.append(batch)
        self.written.set()
        return batch.committed

    def on_close(self, table: TableIdentifier) -> None:
        self.close_buffer()


def _log(**kw: Any) -> Log:
    kw.setdefault("flush_rows", 2)
    kw.setdefault("flush_interval", 0)
    t = Log(**kw)
    t.on_init(USERS, [])
    return t


def test_only_whole_transactions_are_written() -> None:
    t = _log()
    t.write_on_caller = True  # a write that is due happens inside apply: no race to wait for
    try:
        t.apply(USERS, [ins(10, 1), ins(10, 2), ins(10, 3)], complete=False)  # a chunk
        assert t.writes == [] and t.durable_position() is None
        t.apply(USERS, [], complete=True)  # the engine: the transaction ended
        (w,) = t.writes
        assert [e.new_values["id"] for e in w.changes] == [1, 2, 3]
        assert (w.committed, w.partial) == (10, False)
        assert t.durable_position() == 10
    finally:
        t.on_close(USERS)


def test_a_partial_flush_becomes_durable_when_its_transaction_ends() -> None:
    t = _log(flush_rows=100)
    try:
        t.apply(USERS, [ins(10, 1), ins(20, 2)], complete=False)  # 10 ended: 20 followed it
        t.flush()
        assert [(w.committed, w.partial) for w in t.writes] == [(10, True)]
        assert t.durable_position() == 10  # 20 was written but may get more changes
        t.apply(USERS, [], complete=True)
        assert t.durable_position() == 20 and len(t.writes) == 1  # no second write
    finally:
        t.on_close(USERS)


def test_a_failed_write_is_raised_by_the_next_call_which_buffers_nothing() -> None:
    t = _log(flush_rows=1, backoff=0.01, max_backoff=0.05)
    try:
        t.failing = True
        t.apply(USERS, [ins(10, 1), ins(11, 2)])
        assert wait(lambda: t._error is not None, what="the flusher's failed write")
        with pytest.raises(RuntimeError, match="write refused"):
            t.apply(USERS, [ins(12, 3)])
        assert t.pending_changes() == 2 and t.durable_position() is None
        t.failing = False
        t.apply(USERS, [ins(12, 3)])  # the engine retries the call
        assert wait(lambda: t.durable_position() == 12, what="all written")
        ids = [e.new_values["id"] for w in t.writes for e in w.changes]
        assert ids == [1, 2, 3]
    finally:
        t.on_close(USERS)


def test_resume_skips_what_is_already_durable() -> None:
    t = _log()
    try:
        t.resume_after(11)
        assert t.durable_position() == 11
        t.apply(USERS, [ins(10, 1), ins(11, 2), ins(12, 3), ins(13, 4)])
        assert wait(lambda: t.durable_position() == 13, what="the new changes written")
        assert [e.new_values["id"] for w in t.writes for e in w.changes] == [3, 4]
    finally:
        t.on_close(USERS)


def test_an_idle_transaction_is_durable_within_the_flush_interval(make_source, run) -> None:
    """Nothing follows the last transaction (no change, no heartbeat): it is written and
    acknowledged anyway, because the engine tells the target the transaction ended."""
    src = make_source()
    t = Log(flush_rows=1000, flush_interval=0.2)
    eng = run(src, [laredo.Pipeline("s", USERS, t)])
    try:
        assert eng.await_ready(5)
        pos = src.insert(USERS, {"id": 9, "name": "idle", "email": ""})
        assert wait(lambda: t.durable_position() == pos, timeout=0.2 + 3, what="durable")
        assert wait(lambda: src.acked == pos, timeout=3, what="acknowledged")
    finally:
        eng.stop()


# -- BufferingTarget: chunked-baseline progress --------------------------------------------------


def test_a_progress_record_is_written_with_the_rows_before_it_never_ahead_of_them() -> None:
    t = _log(flush_rows=100)
    try:
        t.apply(USERS, [ins(10, 1), ins(10, 2)])  # chunk 1
        t.queue_progress("k2")
        t.apply(USERS, [ins(11, 3)])  # chunk 2, its record not handed over yet
        t.flush()
        (w,) = t.writes
        assert [e.new_values["id"] for e in w.changes] == [1, 2, 3]
        assert w.progress == "k2" and t.durable_progress() == "k2"
        t.max_write = 1  # chunk 3's record rides with its last row only
        t.apply(USERS, [ins(12, 4), ins(12, 5)])
        t.queue_progress("k5")
        t.flush()
        assert [(len(w.changes), w.progress) for w in t.writes[1:]] == [(1, "k2"), (1, "k5")]
    finally:
        t.on_close(USERS)


def test_with_nothing_buffered_a_progress_record_is_written_alone_on_time() -> None:
    t = _log(flush_rows=100, flush_interval=0.05)
    try:
        t.resume_after(7)
        t.queue_progress(None)  # the baseline finished: forget the record
        assert wait(lambda: bool(t.writes), what="the progress-only write")
        (w,) = t.writes
        assert (list(w.changes), w.progress, w.committed, w.partial) == ([], "", 7, False)
        assert t.durable_progress() is None and t.durable_position() == 7
        t.apply(USERS, [ins(8, 1)])
        t.flush()
        assert t.writes[-1].progress is None  # no baseline runs: nothing recorded
    finally:
        t.on_close(USERS)


def test_a_restored_progress_record_re_applies_redelivered_changes() -> None:
    """A resumed chunked baseline's rows may come at positions before the last write's: they
    are applied, not skipped as already durable."""
    t = _log()
    try:
        t.resume_after(11)
        t.restore_progress("k9")
        t.apply(USERS, [ins(10, 1), ins(11, 2)])
        t.flush()
        assert [e.new_values["id"] for w in t.writes for e in w.changes] == [1, 2]
        assert t.writes[-1].progress == "k9"  # carried by every write while it runs
    finally:
        t.on_close(USERS)


def test_a_progress_record_queued_during_a_write_is_written_next() -> None:
    t = _log(flush_rows=100)
    inside, release = threading.Event(), threading.Event()
    plain = t.write

    def slow(batch: WriteBatch) -> Position | None:
        inside.set()
        assert release.wait(10)
        return plain(batch)

    t.write = slow  # type: ignore[method-assign]
    try:
        t.apply(USERS, [ins(10, 1)])
        t.queue_progress("k1")
        flusher = threading.Thread(target=t.flush)
        flusher.start()
        assert inside.wait(10)
        t.queue_progress(None)  # the end, while "k1" is being written (nothing new buffered)
        release.set()
        flusher.join(10)
        t.flush()
        assert [w.progress for w in t.writes] == ["k1", ""]
        assert t.durable_progress() is None
    finally:
        release.set()
        t.on_close(USERS)
