"""The one representation of date/timestamp infinities and of values no Python type holds
(:mod:`laredo.types`), through every encoding core owns: ``laredo-json/1`` (snapshots, dead
letters, HTTP bodies, the fan-out wire), the fast row encoder, Parquet snapshots and raw
baseline batches."""

from __future__ import annotations

import io
import json
from datetime import UTC, date, datetime
from zoneinfo import ZoneInfo

import pytest
from laredo.batches import RAW_DAY_INFINITY, RAW_INFINITY, ChangeBatch, RowBatch
from laredo.deadletter import MemoryDeadLetterStore
from laredo.engine.unrepresentable import problem, split
from laredo.errors import DeadLetterReplayError
from laredo.serialization import (
    RowEncoder,
    decode_dead_letter,
    encode_dead_letter,
    encode_row,
    loads_row,
)
from laredo.snapshots.jsonl import JsonlSerializer
from laredo.snapshots.parquet import ParquetSerializer
from laredo.testing.recording import RecordingTarget
from laredo.types import (
    DATE_INFINITY,
    DATE_MINUS_INFINITY,
    TIMESTAMP_INFINITY,
    TIMESTAMP_MINUS_INFINITY,
    TIMESTAMPTZ_INFINITY,
    TIMESTAMPTZ_MINUS_INFINITY,
    ChangeAction,
    ChangeEvent,
    ColumnDefinition,
    DeadLetter,
    ErrorInfo,
    TableIdentifier,
    TableSnapshotInfo,
    Unrepresentable,
    unrepresentable_columns,
)

INFINITE = {
    "d": DATE_INFINITY,
    "ts": TIMESTAMP_INFINITY,
    "tz": TIMESTAMPTZ_INFINITY,
    "d0": DATE_MINUS_INFINITY,
    "ts0": TIMESTAMP_MINUS_INFINITY,
    "tz0": TIMESTAMPTZ_MINUS_INFINITY,
}


def test_the_infinities_are_the_extreme_values_utc_for_a_zoned_timestamp() -> None:
    assert (date.max, date.min) == (DATE_INFINITY, DATE_MINUS_INFINITY)
    assert (datetime.max, datetime.min) == (TIMESTAMP_INFINITY, TIMESTAMP_MINUS_INFINITY)
    assert datetime.max.replace(tzinfo=UTC) == TIMESTAMPTZ_INFINITY
    assert TIMESTAMPTZ_INFINITY.tzinfo is UTC and TIMESTAMPTZ_MINUS_INFINITY.tzinfo is UTC


def _same(a: dict[str, object], b: dict[str, object]) -> None:
    assert a == b
    assert {k: (type(v), getattr(v, "tzinfo", None)) for k, v in a.items()} == {
        k: (type(v), getattr(v, "tzinfo", None)) for k, v in b.items()
    }


def test_infinities_round_trip_through_laredo_json_and_the_fast_encoder() -> None:
    _same(loads_row(json.dumps(encode_row(INFINITE))), INFINITE)
    _same(loads_row(RowEncoder().dumps(INFINITE)), INFINITE)


def test_an_unrepresentable_marker_round_trips_and_names_its_columns() -> None:
    row = {"id": 1, "at": Unrepresentable("timestamp", "10000-01-01 00:00:00"), "v": None}
    assert unrepresentable_columns(row) == ["at"]
    assert unrepresentable_columns(None) == []
    assert loads_row(RowEncoder().dumps(row)) == row
    entry = DeadLetter(
        "p",
        ChangeEvent(TableIdentifier("public", "ev"), ChangeAction.INSERT, None, new_values=row),
        ErrorInfo("public.ev: row with key {'id': 1}: column 'at' ...", "Unrepresentable"),
        datetime(2026, 1, 1, tzinfo=UTC),
    )
    back = decode_dead_letter(encode_dead_letter(entry))
    assert back.change.new_values == row
    assert type(back.change.new_values["at"]) is Unrepresentable  # type: ignore[index]
    assert str(row["at"]) == "timestamp '10000-01-01 00:00:00'"


def test_malformed_unrepresentable_payloads_are_value_errors() -> None:
    for payload in ('"x"', "[1, 2]", '["a"]', '["a", "b", "c"]'):
        with pytest.raises(ValueError, match="unrepresentable"):
            loads_row('{"v": {"$type": "unrepresentable", "value": ' + payload + "}}")


def test_raw_baseline_infinities_read_as_the_text_paths_values() -> None:
    """A binary baseline hands infinities over as PostgreSQL's raw sentinels; the row dicts hold
    exactly what the text path and the stream load."""
    paris = ZoneInfo("Europe/Paris")
    batch = RowBatch(
        ("d", "ts", "tz", "d0", "ts0", "tz0"),
        [
            (
                RAW_DAY_INFINITY,
                RAW_INFINITY,
                RAW_INFINITY,
                -RAW_DAY_INFINITY - 1,
                -RAW_INFINITY - 1,
                -RAW_INFINITY - 1,
            )
        ],
        stamps=((1, None), (2, paris), (4, None), (5, paris)),
        days=frozenset({0, 3}),
        scalar=True,
    )
    _same(batch[0], INFINITE)


@pytest.mark.parametrize("serializer", [JsonlSerializer, ParquetSerializer])
def test_infinities_survive_a_snapshot_write_and_read(serializer: type) -> None:
    rows = [{"id": 1, **INFINITE}, {"id": 2, **dict.fromkeys(INFINITE)}]
    ser = serializer()
    out = io.BytesIO()
    ser.write(TableSnapshotInfo(TableIdentifier("public", "t"), len(rows)), rows, out)
    out.seek(0)
    _info, back = ser.read(out)
    got = list(back)
    assert got == rows
    _same(got[0], rows[0])


def test_replaying_a_dead_letter_with_an_unrepresentable_value_is_refused() -> None:
    table = TableIdentifier("public", "ev")
    good = ChangeEvent(table, ChangeAction.INSERT, 1, new_values={"id": 1, "at": None})
    bad = ChangeEvent(
        table,
        ChangeAction.INSERT,
        2,
        new_values={"id": 2, "at": Unrepresentable("timestamp", "10000-01-01 00:00:00")},
    )
    store = MemoryDeadLetterStore()
    for ev in (good, bad):
        store.write("p", ev, ErrorInfo("x"))
    target = RecordingTarget()
    with pytest.raises(DeadLetterReplayError, match="'at' hold values Python cannot represent"):
        store.replay("p", target)
    assert [r for _k, r in target.items()] == [good.new_values]
    assert len(store.read("p")) == 1  # the refused entry is kept


def test_split_leaves_out_every_change_holding_a_marker_and_problem_names_it() -> None:
    table = TableIdentifier("public", "ev")
    bc = Unrepresentable("date", "0044-03-15 BC")
    ops = [
        (ChangeAction.INSERT, (1, date(2020, 1, 1)), None, None),
        (ChangeAction.INSERT, (2, bc), None, None),
        (ChangeAction.UPDATE, (3, date(2020, 1, 1)), {"id": 3, "d": bc}, None),
        (ChangeAction.DELETE, None, {"id": 4, "d": bc}, None),
        (ChangeAction.TRUNCATE, None, None, None),
    ]
    batch = ChangeBatch(table, ("id", "d"), ops, 99, unrepresentable=True)
    rest, bad = split(batch)
    assert rest.ops == [ops[0], ops[4]] and rest.position == 99 and not rest.unrepresentable
    assert [(e.action, e.position) for e in bad] == [
        (ChangeAction.INSERT, 99),
        (ChangeAction.UPDATE, 99),
        (ChangeAction.DELETE, 99),
    ]
    columns = [ColumnDefinition("id", primary_key=True), ColumnDefinition("d")]
    messages = [problem(table, e, columns) for e in bad]
    assert messages[0].startswith("public.ev: row with key {'id': 2}: column 'd' holds date")
    assert "'0044-03-15 BC'" in messages[0] and "INSERT was not applied" in messages[0]
    assert "{'id': 3}: column 'd' holds date '0044-03-15 BC'" in messages[1]
    assert "{'id': 4}: column 'd' holds" in messages[2] and "DELETE" in messages[2]
