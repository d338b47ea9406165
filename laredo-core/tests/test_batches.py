"""``laredo.batches``: rows and changes as value tuples, read as dicts and events."""

from __future__ import annotations

import pickle
from datetime import UTC, date, datetime
from decimal import Decimal
from zoneinfo import ZoneInfo

import pytest
from laredo.batches import (
    STAMP_EPOCH,
    STAMP_EPOCH_US,
    UNCHANGED,
    ChangeBatch,
    RowBatch,
    day_value,
    row_maker,
    stamp_value,
)
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


def test_stamp_epoch_in_unix_microseconds() -> None:
    assert int(STAMP_EPOCH.replace(tzinfo=UTC).timestamp()) * 1_000_000 == STAMP_EPOCH_US
    assert stamp_value(-STAMP_EPOCH_US, UTC) == datetime(1970, 1, 1, tzinfo=UTC)


def test_row_maker_short_tuples() -> None:
    assert row_maker(("a", "b"))((1,)) == {"a": 1}
    assert row_maker(("a", "b"), frozenset({1}))((1, "2")) == {"a": 1, "b": Decimal("2")}


def test_raw_stamps_and_days_read_as_datetimes_and_dates() -> None:
    ny = ZoneInfo("America/New_York")
    rows = RowBatch(
        ("id", "at", "local", "day"),
        [(1, 0, 86_400_000_001, -1), (2, None, None, None)],
        stamps=((1, ny), (2, None)),
        days=frozenset({3}),
        scalar=True,
    )
    first = rows[0]
    assert first["at"] == datetime(2000, 1, 1, tzinfo=UTC) and first["at"].tzinfo is ny
    assert first["local"] == datetime(2000, 1, 2, 0, 0, 0, 1) and first["local"].tzinfo is None
    assert first["day"] == date(1999, 12, 31)
    assert rows[1] == {"id": 2, "at": None, "local": None, "day": None}
    assert rows.raw == frozenset({1, 2, 3})
    again = pickle.loads(pickle.dumps(rows))
    assert list(again) == list(rows) and again.scalar and again.stamps == rows.stamps
    assert rows[1:].stamps == rows.stamps and list(rows[1:]) == [rows[1]]
    # a short tuple converts what it holds
    assert row_maker(rows.names, frozenset(), rows.stamps, rows.days)((1, 0)) == {
        "id": 1,
        "at": first["at"],
    }
    # the UTC zone is kept as given, and a fold is what astimezone() gives
    assert stamp_value(0, UTC).tzinfo is UTC
    fold = stamp_value(783_930_600_000_000, ny)  # 2024-11-03 06:30 UTC: 01:30 EST, 2nd time
    assert (fold.hour, fold.minute, fold.fold) == (1, 30, 1)
    assert day_value(0) == date(2000, 1, 1)
    # PostgreSQL's infinities are the extreme values (laredo.types), UTC for a zoned one
    assert stamp_value(2**63 - 1, None) == datetime.max
    assert stamp_value(-(2**63), ny) == datetime.min.replace(tzinfo=UTC)
    assert stamp_value(2**63 - 1, ny).tzinfo is UTC
    assert (day_value(2**31 - 1), day_value(-(2**31))) == (date.max, date.min)
    # any other value outside years 1 to 9999 still raises
    with pytest.raises(OverflowError):
        stamp_value(2**63 - 2, None)
    with pytest.raises(OverflowError):
        stamp_value(-(2**62), ny)
    with pytest.raises(OverflowError):
        day_value(-(2**31) + 1)


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


def test_a_chunk_of_rows_reads_as_inserts_built_only_when_asked() -> None:
    ny = ZoneInfo("America/New_York")
    rows = RowBatch(
        ("id", "at", "day", "price"),
        [(1, 0, -1, "1.50"), (2, None, None, None)],
        frozenset({3}),
        stamps=((1, ny),),
        days=frozenset({2}),
        scalar=True,
    )
    batch = ChangeBatch.of_rows(T, rows, 9)
    assert batch.rows is rows and len(batch) == 2 and batch.names == rows.names
    assert batch._ops is None  # nothing built yet (a target may store ``rows`` as they are)
    assert [ev.new_values for ev in batch] == list(rows)
    assert all(ev.action is ChangeAction.INSERT and ev.position == 9 for ev in batch)
    assert batch.ops[0][1] == (
        1,
        datetime(2000, 1, 1, tzinfo=UTC),
        date(1999, 12, 31),
        Decimal("1.50"),
    )
    assert batch.ops[0][1][1].tzinfo is ny
    part = ChangeBatch.of_rows(T, rows, 9)[1:]
    assert part.rows is not None and list(part.rows) == [rows[1]] and part.position == 9
    assert rows.tuples() == [tuple(r.values()) for r in rows]
    plain = RowBatch(("id",), [(1,), (2,)])
    assert plain.tuples() is plain.values  # nothing raw: the tuples themselves
    assert pickle.loads(pickle.dumps(batch)) == list(batch)
    with pytest.raises(ValueError, match="ops or rows"):
        ChangeBatch(T, ("id",), None, 1)
