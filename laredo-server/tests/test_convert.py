"""The Python -> wire mappings of services/convert.py (no server, no threads)."""

from __future__ import annotations

import datetime as dt
import json
from decimal import Decimal
from typing import Any

import laredo
import pytest
from laredo.serialization import object_hook
from laredo.testing import columns
from laredo.types import (
    ChangeAction,
    ChangeEvent,
    DeadLetter,
    ErrorInfo,
    PipelineState,
    SnapshotDescriptor,
    TableIdentifier,
    TableSnapshotInfo,
)
from laredo_server._proto.laredo_proto.v1 import oam_pb2 as oam
from laredo_server.services import convert
from laredo_server.state import (
    ChangesApplied,
    PipelineStateChanged,
    ServiceState,
    ServiceStateChanged,
    SnapshotActivity,
    SourceStateChanged,
)
from laredo_target_memory import IndexedTarget

USERS = TableIdentifier("public", "users")


def test_every_pipeline_state_has_its_own_wire_value() -> None:
    for state in PipelineState:
        assert oam.PipelineState.Name(convert.pipeline_state_pb(state)) == (
            f"PIPELINE_STATE_{state.name}"
        )
    assert convert.pipeline_state_pb(None) == oam.PIPELINE_STATE_UNSPECIFIED


def test_every_service_state_has_its_own_wire_value() -> None:
    for state in ServiceState:
        assert oam.ServiceState.Name(convert.service_state_pb(state)) == (
            f"SERVICE_STATE_{state.name}"
        )
    assert convert.service_state_pb(None) == oam.SERVICE_STATE_UNSPECIFIED


def test_ms() -> None:
    assert convert.ms(None) == 0
    assert convert.ms(1.2345) == 1234
    assert convert.ms(dt.datetime(1970, 1, 1, 0, 0, 2, tzinfo=dt.UTC)) == 2000


def test_table_id() -> None:
    assert convert.table_id("", "users") == USERS
    assert convert.table_id("", "crm.users") == TableIdentifier("crm", "users")
    assert convert.table_id("crm", "users") == TableIdentifier("crm", "users")
    with pytest.raises(ValueError, match="table is required"):
        convert.table_id("public", "")


@pytest.mark.parametrize(
    "key",
    [
        7,
        "a/b+c=",
        ("eu", 1),
        Decimal("9.50"),
        dt.datetime(2024, 5, 1, 12, 0, tzinfo=dt.UTC),
        None,
    ],
)
def test_page_token_round_trips_typed_keys(key: Any) -> None:
    token = convert.encode_page_token(key)
    assert "=" not in token
    assert convert.decode_page_token(token) == key


@pytest.mark.parametrize("token", ["%%%", "e30", "W10"])  # garbage, b64 of {} and of []
def test_page_token_not_made_here_is_invalid(token: str) -> None:
    with pytest.raises(ValueError, match="page_token"):
        convert.decode_page_token(token)


def test_sort_key_orders_mixed_keys() -> None:
    keys = ["b", 2, None, True, 1.5, dt.date(2024, 1, 1), "a"]
    assert sorted(keys, key=convert.sort_key) == [None, True, 1.5, 2, "a", "b", keys[5]]
    pairs = [("us", 1), ("eu", 2), ("eu", 1)]
    assert sorted(pairs, key=convert.sort_key) == [("eu", 1), ("eu", 2), ("us", 1)]


def test_row_pb_is_typed_json() -> None:
    assert convert.row_pb(None) is None
    pb = convert.row_pb({"id": 1, "total": Decimal("9.50")})
    assert json.loads(pb.json, object_hook=object_hook) == {"id": 1, "total": Decimal("9.50")}
    with pytest.raises(TypeError, match="cannot be encoded"):
        convert.row_pb({"x": object()})


def test_decode_json_value_falls_back_to_text() -> None:
    assert convert.decode_json_value("5") == 5
    assert convert.decode_json_value('"5"') == "5"
    assert convert.decode_json_value("u5@x") == "u5@x"


def test_indexes_pb_of_an_indexed_target_and_of_a_plain_object() -> None:
    target = IndexedTarget(lookup_fields=["email"], indexes=[laredo.Index("by_team", ["team"])])
    got = [(i.name, list(i.fields), i.unique) for i in convert.indexes_pb(target)]
    assert got == [("lookup", ["email"], True), ("by_team", ["team"], False)]
    assert convert.indexes_pb(IndexedTarget()) == []
    assert convert.indexes_pb(object()) == []


def test_column_and_snapshot_pb() -> None:
    cols = columns("region", "id", pk=("region", "id"))
    desc = SnapshotDescriptor(
        snapshot_id="snap-1",
        created_at=dt.datetime(2024, 1, 1, tzinfo=dt.UTC),
        format="jsonl",
        tables=(TableSnapshotInfo(USERS, 3, tuple(cols), "indexed-memory", (), "0/10", "u"),),
        size_bytes=99,
        source_positions={"src": "0/10"},
        user_meta={"at": Decimal("1.5")},
    )
    pb = convert.snapshot_pb(desc)
    assert pb.snapshot_id == "snap-1" and pb.size_bytes == 99 and pb.format == "jsonl"
    assert pb.created_at == 1704067200000
    t = pb.tables[0]
    assert (t.schema, t.table, t.row_count, t.position, t.pipeline_id) == (
        "public",
        "users",
        3,
        "0/10",
        "u",
    )
    assert [(c.column_name, c.is_primary_key, c.primary_key_ordinal) for c in t.columns] == [
        ("region", True, 1),
        ("id", True, 2),
    ]
    assert dict(pb.source_positions) == {"src": "0/10"}
    assert '"decimal"' in pb.user_meta_json


def test_dead_letter_pb() -> None:
    change = ChangeEvent(USERS, ChangeAction.UPDATE, 5, new_values={"id": 1})
    d = DeadLetter(
        "users",
        change,
        ErrorInfo("boom", "TargetError"),
        dt.datetime(1970, 1, 1, 0, 0, 1, tzinfo=dt.UTC),
        position="5",
    )
    pb = convert.dead_letter_pb(d)
    assert (pb.pipeline_id, pb.table, pb.action, pb.position, pb.error, pb.error_type) == (
        "users",
        "users",
        "UPDATE",
        "5",
        "boom",
        "TargetError",
    )
    assert pb.written_at == 1000 and '"id": 1' in pb.change_json


def test_status_events_map_to_their_oneof() -> None:
    cases = [
        (
            PipelineStateChanged(1.0, "users", None, PipelineState.ERROR, "bad"),
            "pipeline_state_change",
            {"old_state": 0, "new_state": oam.PIPELINE_STATE_ERROR, "error": "bad"},
        ),
        (
            ServiceStateChanged(1.0, ServiceState.STARTING, ServiceState.STREAMING),
            "service_state_change",
            {
                "old_state": oam.SERVICE_STATE_STARTING,
                "new_state": oam.SERVICE_STATE_STREAMING,
            },
        ),
        (
            ChangesApplied(1.0, "users", USERS, 3),
            "row_change",
            {"schema": "public", "table": "users", "action": "BATCH", "count": 3},
        ),
        (
            SourceStateChanged(1.0, "src", "ACK", position="0/1"),
            "source_state_change",
            {"source_id": "src", "state": "ACK", "position": "0/1"},
        ),
        (
            SnapshotActivity(1.0, "snap-1", "completed", rows=7),
            "snapshot_event",
            {"snapshot_id": "snap-1", "event": "completed", "rows": 7},
        ),
    ]
    for ev, kind, fields in cases:
        pb = convert.status_event_pb(ev, dropped_before=2)
        assert pb.WhichOneof("event") == kind
        assert pb.timestamp == 1000 and pb.dropped_before == 2
        body = getattr(pb, kind)
        assert {k: getattr(body, k) for k in fields} == fields
