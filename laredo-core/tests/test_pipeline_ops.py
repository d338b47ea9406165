"""Per-change semantics (laredo.pipeline_ops), without threads or an engine."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import laredo
import pytest
from laredo.pipeline_ops import Chain, apply_change, deliver_baseline, ttl_from_field
from laredo.testing import RecordingTarget
from laredo.types import ChangeAction, ChangeEvent

T = laredo.TableIdentifier("public", "users")
NOW = datetime(2026, 1, 1, tzinfo=UTC)


def ev(
    action: ChangeAction, new: dict[str, Any] | None = None, old: dict[str, Any] | None = None
) -> ChangeEvent:
    return ChangeEvent(T, action, 7, None, new, old)


ACTIVE = laredo.FieldEquals(field="active", value=True)
RENAME = laredo.RenameFields(mapping={"id": "user_id"})


def test_plain_chain_passes_everything() -> None:
    chain = Chain(T)
    assert chain.plain
    events = [ev(ChangeAction.INSERT, {"id": 1}), ev(ChangeAction.DELETE, old={"id": 1})]
    prepared = chain.prepare(events)
    assert prepared.events == events and prepared.delta == 0


def test_update_leaving_the_filter_becomes_delete_of_the_transformed_identity() -> None:
    chain = Chain(T, (ACTIVE,), (RENAME,))
    prepared = chain.prepare(
        [
            ev(ChangeAction.INSERT, {"id": 1, "active": True}),
            ev(ChangeAction.INSERT, {"id": 2, "active": False}),
            ev(ChangeAction.UPDATE, {"id": 1, "active": False}, {"id": 1}),
        ]
    )
    kinds = [(e.action, e.new_values, e.old_values) for e in prepared.events]
    assert kinds == [
        (ChangeAction.INSERT, {"user_id": 1, "active": True}, None),
        (ChangeAction.DELETE, None, {"user_id": 1}),
    ]
    assert prepared.delta == 0  # +1 insert, -1 for the update that left the filter


def test_update_without_old_row_uses_the_new_row_as_identity() -> None:
    chain = Chain(T, (ACTIVE,), (RENAME,))
    out = chain.prepare([ev(ChangeAction.UPDATE, {"id": 3, "active": False})]).events
    assert out[0].action is ChangeAction.DELETE and out[0].old_values == {
        "user_id": 3,
        "active": False,
    }


def test_delete_identity_and_update_old_go_through_transforms() -> None:
    chain = Chain(T, (), (RENAME,))
    out = chain.prepare(
        [ev(ChangeAction.UPDATE, {"id": 4}, {"id": 4}), ev(ChangeAction.DELETE, old={"id": 4})]
    ).events
    assert out[0].new_values == {"user_id": 4} and out[0].old_values == {"user_id": 4}
    assert out[1].old_values == {"user_id": 4}


def test_truncate_resets_the_row_count() -> None:
    chain = Chain(T, (ACTIVE,))
    prepared = chain.prepare(
        [
            ev(ChangeAction.INSERT, {"id": 1, "active": True}),
            ChangeEvent(T, ChangeAction.TRUNCATE, 7, None),
            ev(ChangeAction.INSERT, {"id": 2, "active": True}),
        ]
    )
    assert prepared.reset and prepared.delta == 1
    assert prepared.count_after(40) == 1


def test_ttl_drops_expired_inserts_and_turns_updates_into_deletes() -> None:
    chain = Chain(T, ttl=ttl_from_field("expires"))
    past, future = NOW - timedelta(seconds=1), NOW + timedelta(days=1)
    out = chain.prepare(
        [
            ev(ChangeAction.INSERT, {"id": 1, "expires": past}),
            ev(ChangeAction.INSERT, {"id": 2, "expires": future.isoformat()}),
            ev(ChangeAction.UPDATE, {"id": 2, "expires": NOW}, {"id": 2}),
        ],
        NOW,
    ).events
    assert [(e.action, (e.new_values or e.old_values)["id"]) for e in out] == [
        (ChangeAction.INSERT, 2),
        (ChangeAction.DELETE, 2),
    ]
    assert chain.baseline_rows([{"id": 1, "expires": past}, {"id": 5}], NOW) == [{"id": 5}]


def test_a_failing_ttl_function_keeps_the_row() -> None:
    def boom(row: dict[str, Any]) -> datetime | None:
        raise RuntimeError("bad ttl")

    assert not Chain(T, ttl=boom).expired({"id": 1}, NOW)


def test_apply_change_calls_the_per_change_methods() -> None:
    target = RecordingTarget()
    target.on_init(T, [laredo.ColumnDefinition("id", "int8", primary_key=True)])
    apply_change(target, T, ev(ChangeAction.INSERT, {"id": 1, "v": "a"}))
    apply_change(target, T, ev(ChangeAction.UPDATE, {"id": 1, "v": "b"}, {"id": 1}))
    assert target.rows() == [{"id": 1, "v": "b"}]
    apply_change(target, T, ev(ChangeAction.DELETE, old={"id": 1}))
    assert target.rows() == []
    with pytest.raises(laredo.InvalidChangeError, match="DELETE without old values"):
        apply_change(target, T, ev(ChangeAction.DELETE))
    with pytest.raises(laredo.InvalidChangeError, match="INSERT without new values"):
        apply_change(target, T, ev(ChangeAction.INSERT))


def test_deliver_baseline_batches_when_the_target_can() -> None:
    calls: list[Any] = []

    class Batch:
        def on_baseline_rows(self, table: Any, rows: Any) -> None:
            calls.append(("rows", len(rows)))

        def on_baseline_row(self, table: Any, row: Any) -> None:
            calls.append("row")

    class Single:
        def on_baseline_row(self, table: Any, row: Any) -> None:
            calls.append("row")

    assert deliver_baseline(Batch(), T, [{"id": 1}, {"id": 2}]) == 2
    assert deliver_baseline(Single(), T, [{"id": 1}, {"id": 2}]) == 2
    assert calls == [("rows", 2), "row", "row"]
