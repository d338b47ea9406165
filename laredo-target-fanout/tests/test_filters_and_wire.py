"""Subscription filter semantics and the hand-built wire format."""

from __future__ import annotations

from decimal import Decimal

import laredo
import pytest
from laredo.types import ChangeAction
from laredo_target_fanout import _wire
from laredo_target_fanout._filters import Predicate, compile_filters, normalize_filters
from laredo_target_fanout._proto import replication_pb2 as pb
from laredo_target_fanout.journal import JournalEntry
from laredo_target_fanout.positions import PositionCodec


def match(filters: object, row: dict[str, object] | None) -> bool:
    m = compile_filters(normalize_filters(filters))
    assert m is not None
    return m(row)


def test_equals_prefix_in_are_anded() -> None:
    f = [{"field": "team", "in": [1, 2]}, {"field": "name", "prefix": "us"}]
    assert match(f, {"team": 1, "name": "user"})
    assert not match(f, {"team": 3, "name": "user"})
    assert not match(f, {"team": 1, "name": "admin"})


def test_numbers_compare_by_value_and_null_or_missing_never_matches() -> None:
    assert match({"field": "n", "equals": 42}, {"n": 42.0})
    assert match({"field": "n", "equals": 42}, {"n": Decimal("42.00")})
    assert match({"field": "n", "equals": Decimal("0.1")}, {"n": 0.1})
    assert not match({"field": "n", "equals": True}, {"n": 1})  # bools are not numbers
    assert not match({"field": "n", "equals": None}, {"n": None})
    assert not match({"field": "n", "equals": 1}, {"m": 1})
    assert not match({"field": "n", "prefix": "1"}, {"n": 12})  # prefix: strings only
    assert not match({"field": "n", "equals": 1}, None)


def test_bad_filters_list_every_problem() -> None:
    with pytest.raises(laredo.ConfigError) as ei:
        normalize_filters(
            [{"field": "", "equals": 1}, {"field": "a", "prefix": 3}, {"field": "b"}, "x"]
        )
    assert len(ei.value.problems) == 4
    assert compile_filters([]) is None
    assert normalize_filters([Predicate("a", "in", (1, 2))])[0].op == "in"


def test_hand_built_messages_parse_as_protobuf() -> None:
    entry = pb.JournalEntry(sequence=2**40, action=pb.ACTION_UPDATE, new_values=b"{}")
    chunk = _wire.field_bytes(_wire.BATCH_ENTRIES, entry.SerializeToString())
    msg = pb.SyncResponse.FromString(_wire.journal_message(7, 2**40, [chunk, chunk]))
    assert msg.journal.after_sequence == 7 and msg.journal.through_sequence == 2**40
    assert [e.sequence for e in msg.journal.entries] == [2**40, 2**40]
    rows = pb.SyncResponse.FromString(_wire.snapshot_rows_message([b'{"a":1}', b"{}"]))
    assert list(rows.snapshot_rows.rows) == [b'{"a":1}', b"{}"]
    assert _wire.varint(300) == b"\xac\x02"
    assert pb.SyncResponse.FromString(_wire.journal_message(0, 0, [])).WhichOneof("msg") == (
        "journal"
    )


def test_hand_built_entries_equal_protobuf_serialisation() -> None:
    codec = PositionCodec()
    for action, old, new in [
        (ChangeAction.INSERT, None, {"id": 1, "v": Decimal("1.5")}),
        (ChangeAction.UPDATE, {"id": 1}, {"id": 1, "v": "x"}),
        (ChangeAction.DELETE, {"id": 1, "v": "x"}, None),
        (ChangeAction.TRUNCATE, None, None),
    ]:
        e = JournalEntry(5, action, 123, old, new, 1_700_000_000.25)
        want = _wire.field_bytes(
            _wire.BATCH_ENTRIES, _wire.entry_to_pb(e, codec).SerializeToString()
        )
        assert _wire.entry_chunk(e, codec) == want
        assert e.wire == want  # cached on the entry, shared by every client


def test_filters_round_trip_through_the_request_encoding() -> None:
    preds = normalize_filters(
        [
            {"field": "team", "in": [1, Decimal("2.5")]},
            {"field": "name", "prefix": "us"},
            {"field": "id", "equals": 7},
        ]
    )
    assert _wire.predicates_from_pb(_wire.predicates_to_pb(preds)) == preds


def test_one_mode_table_both_ways() -> None:
    assert set(_wire.MODE_TO_PB) == set(laredo.SyncMode)
    for mode, value in _wire.MODE_TO_PB.items():
        assert _wire.MODE_FROM_PB[value] is mode
