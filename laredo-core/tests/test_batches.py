"""``laredo.batches``: rows and changes as value tuples, read as dicts and events."""

from __future__ import annotations

import pickle
from decimal import Decimal

from laredo.batches import UNCHANGED, ChangeBatch, RowBatch, row_maker
from laredo.types import ChangeAction, ChangeEvent, TableIdentifier

T = TableIdentifier("public", "t")


def test_row_batch_reads_as_row_dicts() -> None:
    rows = RowBatch(("id", "price"), [(1, "1.50"), (2, None)], frozenset({1}))
    assert list(rows) == [{"id": 1, "price": Decimal("1.50")}, {"id": 2, "price": None}]
    assert rows[1] == {"id": 2, "price": None}
    assert rows[0] is not rows[0]  # a new dict per access
    assert list(rows[1:]) == [{"id": 2, "price": None}]
    assert len(rows) == 2
    assert list(pickle.loads(pickle.dumps(rows))) == list(rows)


def test_row_maker_short_tuples() -> None:
    assert row_maker(("a", "b"))((1,)) == {"a": 1}
    assert row_maker(("a", "b"), frozenset({1}))((1, "2")) == {"a": 1, "b": Decimal("2")}


def test_change_batch_reads_as_events() -> None:
    ops = [
        (ChangeAction.INSERT, (1, "x"), None, None),
        (ChangeAction.UPDATE, (1, UNCHANGED), {"id": 0}, frozenset({"v"})),
        (ChangeAction.DELETE, None, {"id": 1}, None),
        (ChangeAction.TRUNCATE, None, None, None),
    ]
    batch = ChangeBatch(T, ("id", "v"), ops, 42, xid=7)
    events = list(batch)
    assert events[0] == ChangeEvent(T, ChangeAction.INSERT, 42, None, {"id": 1, "v": "x"}, xid=7)
    assert events[1].new_values == {"id": 1} and events[1].unchanged_toast == {"v"}
    assert events[1].old_values == {"id": 0}
    assert events[2].old_values == {"id": 1} and events[2].new_values is None
    assert events[3].action is ChangeAction.TRUNCATE
    assert batch[0] is batch[0]  # built once
    assert len(batch[1:]) == 3 and batch[1:].position == 42
    assert pickle.loads(pickle.dumps(batch)) == events
    assert repr(UNCHANGED) == "UNCHANGED"
