"""Conformance suite for ``SyncTarget`` implementations.

Subclass it in your plugin's tests and provide the ``make_target`` fixture: a callable
``make_target(table, columns) -> target`` returning a fresh, not yet initialised target for that
table (the suite calls ``on_init`` itself)::

    class TestMyTarget(TargetConformance):
        @pytest.fixture
        def make_target(self):
            return lambda table, columns: MyTarget(...)

The suite observes the target's state through ``export_snapshot()``. A target that cannot export
its state (e.g. one that forwards to a remote system) overrides ``rows_of(target)`` to read it
back from wherever it went, or sets ``supports_export = False`` to skip the state checks.
``supports_restore = False`` skips the export/restore round trips. The engine's door
(``apply``/``load``, :class:`laredo.contracts.TargetDoor`) and the deprecated fast paths
(``apply_changes``, ``on_baseline_rows``) are exercised when the target has them.

The table has a one-column integer primary key ``id`` and columns of every value type rows
carry (Decimal, tz-aware datetime, UUID, bytes, JSON dict/list, None).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any, ClassVar

import pytest

from laredo.contracts import BaselineBatchTarget, BatchTarget, TargetDoor
from laredo.testing.guard import ConformanceSuite
from laredo.types import (
    ChangeAction,
    ChangeEvent,
    ColumnDefinition,
    Row,
    SchemaChangeAction,
    SchemaChangeResponse,
    TableIdentifier,
    TableSnapshotInfo,
)

__all__ = ["COLUMNS", "TABLE", "MakeTarget", "TargetConformance", "conformance_row"]

TABLE = TableIdentifier("public", "conformance_items")
COLUMNS: tuple[ColumnDefinition, ...] = (
    ColumnDefinition("id", "int8", 1, False, True, 1, 20),
    ColumnDefinition("name", "text", 2, True, False, 0, 25),
    ColumnDefinition("price", "numeric", 3, True, False, 0, 1700),
    ColumnDefinition("created", "timestamptz", 4, True, False, 0, 1184),
    ColumnDefinition("uid", "uuid", 5, True, False, 0, 2950),
    ColumnDefinition("blob", "bytea", 6, True, False, 0, 17),
    ColumnDefinition("doc", "jsonb", 7, True, False, 0, 3802),
    ColumnDefinition("tags", "jsonb", 8, True, False, 0, 3802),
    ColumnDefinition("note", "text", 9, True, False, 0, 25),
    ColumnDefinition("day", "date", 10, True, False, 0, 1082),
)

MakeTarget = Callable[[TableIdentifier, list[ColumnDefinition]], Any]

_T0 = datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)


def conformance_row(i: int, **changes: Any) -> Row:
    """Row ``i`` of the conformance table, with ``changes`` applied."""
    row: Row = {
        "id": i,
        "name": f"item-{i}",
        "price": Decimal("19.99") + i,
        "created": _T0 + timedelta(minutes=i),
        "uid": uuid.UUID(int=1000 + i),
        "blob": bytes([0, 1, 255, i % 256]),
        "doc": {"n": i, "nested": {"list": [1, "two", None, 3.5]}},
        "tags": ["a", f"t{i}"],
        "note": None if i % 2 else f"note {i}",
        "day": date(2026, 1, 1) + timedelta(days=i),
    }
    row.update(changes)
    return row


def _by_id(rows: Sequence[Row]) -> dict[Any, Row]:
    out: dict[Any, Row] = {}
    for r in rows:
        assert "id" in r, f"exported row has no 'id': {r!r}"
        assert r["id"] not in out, f"two exported rows share id {r['id']!r}"
        out[r["id"]] = r
    return out


def _assert_same_typed(actual: Row, expected: Row) -> None:
    """Equal values *and* identical Python types, column by column."""
    assert set(actual) == set(expected), (
        f"columns differ: missing {sorted(set(expected) - set(actual))}, "
        f"unexpected {sorted(set(actual) - set(expected))}"
    )
    for k, v in expected.items():
        got = actual[k]
        assert type(got) is type(v), (
            f"column {k!r}: type {type(got).__name__} != {type(v).__name__}"
        )
        assert got == v, f"column {k!r}: {got!r} != {v!r}"
        if isinstance(v, datetime):
            assert got.utcoffset() == v.utcoffset(), f"column {k!r}: time zone lost"


def _ev(
    action: ChangeAction, pos: int, new: Row | None = None, old: Row | None = None
) -> ChangeEvent:
    return ChangeEvent(TABLE, action, pos, _T0, new_values=new, old_values=old)


class TargetConformance(ConformanceSuite):
    """Base class of the target conformance tests (no ``Test`` prefix: not collected itself)."""

    supports_export: ClassVar[bool] = True
    """``export_snapshot()`` (or ``rows_of``) reflects the applied state."""
    supports_restore: ClassVar[bool] = True
    """``restore_snapshot()`` replaces the state with the given rows."""

    table: ClassVar[TableIdentifier] = TABLE
    columns: ClassVar[tuple[ColumnDefinition, ...]] = COLUMNS

    # ------------------------------------------------------------------ hooks
    @pytest.fixture
    def make_target(self) -> MakeTarget:
        """Provide in the subclass: ``(table, columns) -> fresh target``."""
        raise NotImplementedError(
            "subclass TargetConformance and provide a `make_target` fixture returning "
            "a callable (table, columns) -> target"
        )

    def rows_of(self, target: Any) -> list[Row]:
        """The target's current rows; override for targets that cannot export their state."""
        return list(target.export_snapshot())

    def flush(self, target: Any) -> None:
        """Called before reading state; override for targets that buffer (default: no-op)."""
        flush = getattr(target, "flush", None)
        if callable(flush):
            flush()

    # ------------------------------------------------------------------ helpers
    def new_target(self, make_target: MakeTarget) -> Any:
        target = make_target(self.table, list(self.columns))
        target.on_init(self.table, list(self.columns))
        return target

    def loaded(self, make_target: MakeTarget, n: int = 3) -> Any:
        target = self.new_target(make_target)
        for i in range(n):
            target.on_baseline_row(self.table, conformance_row(i))
        target.on_baseline_complete(self.table)
        return target

    def state(self, target: Any) -> dict[Any, Row]:
        if not self.supports_export:
            pytest.skip("target does not expose its state (supports_export = False)")
        self.flush(target)
        return _by_id(self.rows_of(target))

    # ------------------------------------------------------------------ tests
    def test_on_init_accepts_columns(self, make_target: MakeTarget) -> None:
        target = self.new_target(make_target)
        assert self.state(target) == {}

    def test_baseline_rows_then_complete(self, make_target: MakeTarget) -> None:
        target = self.loaded(make_target, 5)
        state = self.state(target)
        assert sorted(state) == [0, 1, 2, 3, 4]
        for i in range(5):
            _assert_same_typed(state[i], conformance_row(i))

    def test_baseline_batch_fast_path_equals_per_row(self, make_target: MakeTarget) -> None:
        target = self.new_target(make_target)
        if not isinstance(target, BaselineBatchTarget):
            pytest.skip("target has no on_baseline_rows fast path")
        target = self.new_target(make_target)  # typed Any again for the calls below
        target.on_baseline_rows(self.table, [conformance_row(i) for i in range(4)])
        target.on_baseline_complete(self.table)
        assert self.state(target) == self.state(self.loaded(make_target, 4))

    def test_insert_is_visible(self, make_target: MakeTarget) -> None:
        target = self.loaded(make_target)
        target.on_insert(self.table, conformance_row(10))
        state = self.state(target)
        assert sorted(state) == [0, 1, 2, 10]
        _assert_same_typed(state[10], conformance_row(10))

    def test_update_replaces_row(self, make_target: MakeTarget) -> None:
        target = self.loaded(make_target)
        new = conformance_row(1, name="renamed", price=Decimal("0.01"), tags=[])
        target.on_update(self.table, new, {"id": 1})
        state = self.state(target)
        _assert_same_typed(state[1], new)
        _assert_same_typed(state[0], conformance_row(0))
        assert len(state) == 3

    def test_update_without_identity_uses_new_key(self, make_target: MakeTarget) -> None:
        target = self.loaded(make_target)
        new = conformance_row(2, name="no identity")
        target.on_update(self.table, new, None)
        state = self.state(target)
        assert len(state) == 3
        _assert_same_typed(state[2], new)

    def test_update_with_missing_columns_keeps_stored_values(self, make_target: MakeTarget) -> None:
        target = self.loaded(make_target)
        # An unchanged TOAST value (doc, blob) is not sent: the stored values must survive.
        partial = {
            k: v for k, v in conformance_row(1, name="partial").items() if k not in ("doc", "blob")
        }
        target.on_update(self.table, partial, {"id": 1})
        state = self.state(target)
        _assert_same_typed(state[1], conformance_row(1, name="partial"))

    def test_update_changing_key_moves_row(self, make_target: MakeTarget) -> None:
        target = self.loaded(make_target)
        moved = conformance_row(20, name="moved")
        target.on_update(self.table, moved, {"id": 2})
        state = self.state(target)
        assert sorted(state) == [0, 1, 20]
        _assert_same_typed(state[20], moved)

    def test_delete_removes_row(self, make_target: MakeTarget) -> None:
        target = self.loaded(make_target)
        target.on_delete(self.table, {"id": 1})
        assert sorted(self.state(target)) == [0, 2]

    def test_delete_with_full_old_row(self, make_target: MakeTarget) -> None:
        target = self.loaded(make_target)
        target.on_delete(self.table, conformance_row(0))
        assert sorted(self.state(target)) == [1, 2]

    def test_delete_of_missing_row_is_noop(self, make_target: MakeTarget) -> None:
        target = self.loaded(make_target)
        before = self.state(target)
        target.on_delete(self.table, {"id": 999})
        assert self.state(target) == before

    def test_truncate_clears_rows(self, make_target: MakeTarget) -> None:
        target = self.loaded(make_target)
        target.on_truncate(self.table)
        assert self.state(target) == {}
        target.on_insert(self.table, conformance_row(7))
        assert sorted(self.state(target)) == [7]

    def test_export_restore_round_trip_preserves_values_and_types(
        self, make_target: MakeTarget
    ) -> None:
        if not self.supports_restore:
            pytest.skip("target does not restore snapshots (supports_restore = False)")
        source = self.loaded(make_target, 4)
        source.on_update(self.table, conformance_row(3, note="edited", doc={"x": [1, 2]}), None)
        exported = self.rows_of(source)
        info = TableSnapshotInfo(self.table, len(exported), self.columns)
        restored = self.new_target(make_target)
        restored.on_insert(self.table, conformance_row(99))  # stale: must not survive
        restored.restore_snapshot(info, iter(exported))
        got, want = self.state(restored), self.state(source)
        assert sorted(got) == sorted(want) == [0, 1, 2, 3]
        for k in want:
            _assert_same_typed(got[k], want[k])
        # The restored target keeps working.
        restored.on_delete(self.table, {"id": 0})
        restored.on_insert(self.table, conformance_row(5))
        assert sorted(self.state(restored)) == [1, 2, 3, 5]

    def test_exported_rows_are_not_live(self, make_target: MakeTarget) -> None:
        target = self.loaded(make_target)
        exported = self.rows_of(target)
        for r in exported:
            r["name"] = "mutated by the caller"
        assert all(r["name"] != "mutated by the caller" for r in self.state(target).values())

    def test_the_door_equals_per_call_methods(self, make_target: MakeTarget) -> None:
        door = self.new_target(make_target)
        if not isinstance(door, TargetDoor):
            pytest.skip("target has no apply/load (the deprecated per-change protocol)")
        target: Any = door
        target.load(self.table, [conformance_row(i) for i in range(2)])
        target.load(self.table, [conformance_row(i) for i in range(2, 4)])
        target.on_baseline_complete(self.table)
        events = _mixed_events()
        for i in range(0, len(events), 3):  # transactions of up to 3 changes, each complete
            door.apply(self.table, events[i : i + 3], True)
        self._assert_per_call(make_target, target, events)

    def test_apply_changes_equals_per_call_methods(self, make_target: MakeTarget) -> None:
        batch_target = self.loaded(make_target, 4)
        if not isinstance(batch_target, BatchTarget):
            pytest.skip("target has no apply_changes fast path")
        events = _mixed_events()
        batch_target.apply_changes(self.table, events)
        self._assert_per_call(make_target, batch_target, events)

    def _assert_per_call(self, make_target: MakeTarget, target: Any, events: Any) -> None:
        """``target`` (4 rows, then ``events``) equals the per-call methods' result."""
        per_call = self.loaded(make_target, 4)
        for ev in events:
            if ev.action is ChangeAction.INSERT:
                per_call.on_insert(self.table, ev.new_values)
            elif ev.action is ChangeAction.UPDATE:
                per_call.on_update(self.table, ev.new_values, ev.old_values)
            elif ev.action is ChangeAction.DELETE:
                per_call.on_delete(self.table, ev.old_values)
            else:
                per_call.on_truncate(self.table)
        got, want = self.state(target), self.state(per_call)
        assert sorted(got) == sorted(want) == [3, 40]
        for k in want:
            _assert_same_typed(got[k], want[k])

    def test_schema_change_returns_a_response(self, make_target: MakeTarget) -> None:
        target = self.loaded(make_target)
        added = (*self.columns, ColumnDefinition("extra", "text", len(self.columns) + 1))
        response = target.on_schema_change(self.table, list(self.columns), list(added))
        assert isinstance(response, SchemaChangeResponse)
        assert isinstance(response.action, SchemaChangeAction)

    def test_is_durable_returns_bool(self, make_target: MakeTarget) -> None:
        target = self.loaded(make_target)
        assert isinstance(target.is_durable(), bool)
        assert isinstance(target.supports_consistent_snapshot(), bool)

    def test_on_close_ok(self, make_target: MakeTarget) -> None:
        target = self.loaded(make_target)
        target.on_insert(self.table, conformance_row(8))
        target.on_close(self.table)


def _mixed_events() -> list[ChangeEvent]:
    """Inserts, updates (one moving its key), deletes (one of an absent key) and a TRUNCATE,
    one position each: applied to rows 0..3 they leave rows 3 and 40."""
    return [
        _ev(ChangeAction.INSERT, 1, new=conformance_row(10)),
        _ev(ChangeAction.UPDATE, 2, new=conformance_row(1, name="u1"), old={"id": 1}),
        _ev(ChangeAction.DELETE, 3, old={"id": 2}),
        _ev(ChangeAction.UPDATE, 4, new=conformance_row(10, name="u10")),
        _ev(ChangeAction.INSERT, 5, new=conformance_row(2, name="back")),
        _ev(ChangeAction.DELETE, 6, old={"id": 10}),
        _ev(ChangeAction.TRUNCATE, 7),
        _ev(ChangeAction.INSERT, 8, new=conformance_row(3, name="after truncate")),
        _ev(ChangeAction.INSERT, 9, new=conformance_row(4)),
        _ev(ChangeAction.UPDATE, 10, new=conformance_row(40, name="moved"), old={"id": 4}),
        _ev(ChangeAction.DELETE, 11, old={"id": 12345}),
        _ev(ChangeAction.INSERT, 12, new=conformance_row(50)),
        _ev(ChangeAction.DELETE, 13, old={"id": 50}),
    ]
