"""IndexedTarget: keys, indexes, copies, listeners, snapshots, schema changes, bad input."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import pytest
from laredo import (
    ChangeAction,
    ChangeEvent,
    ColumnDefinition,
    ConfigError,
    Index,
    SchemaChangeAction,
    Table,
    TargetError,
)
from laredo.errors import BatchApplyError
from laredo.types import TableSnapshotInfo
from laredo_target_memory import IndexedTarget

pytestmark = pytest.mark.usefixtures("each_storage")  # every storage of IndexedTarget

T = Table("public", "users")
COLS = [
    ColumnDefinition("id", "int8", 1, False, True, 1),
    ColumnDefinition("email", "text", 2),
    ColumnDefinition("team", "int4", 3),
    ColumnDefinition("name", "text", 4),
    ColumnDefinition("bio", "text", 5),
]


def user(i: int, **kw: Any) -> dict[str, Any]:
    row = {"id": i, "email": f"u{i}@x.io", "team": i % 3, "name": f"User {i}", "bio": "b" * 10}
    row.update(kw)
    return row


def make(n: int = 0, **opts: Any) -> IndexedTarget:
    opts.setdefault("lookup_fields", ["email"])
    opts.setdefault(
        "indexes", [Index("by_team", ["team"]), Index("by_name", ["name"], unique=True)]
    )
    t = IndexedTarget(**opts)
    t.on_init(T, COLS)
    t.on_baseline_rows(T, [user(i) for i in range(n)])
    t.on_baseline_complete(T)
    return t


def ev(
    action: ChangeAction, new: Any = None, old: Any = None, pos: int = 0, **kw: Any
) -> ChangeEvent:
    return ChangeEvent(T, action, pos, datetime.now(UTC), new_values=new, old_values=old, **kw)


def index_state(t: IndexedTarget) -> dict[str, dict[Any, Any]]:
    """Every index's contents, to compare against a target rebuilt from its rows."""
    out: dict[str, dict[Any, Any]] = {}
    for idx in t._indexes:
        out[idx.name] = {
            k: (sorted(v) if isinstance(v, dict | list) else v) for k, v in idx.map.items()
        }
    return out


def assert_indexes_consistent(t: IndexedTarget) -> None:
    fresh = IndexedTarget(lookup_fields=list(t.lookup_fields), indexes=list(t.indexes))
    fresh.on_init(T, COLS)
    fresh.on_baseline_rows(T, t.all())
    assert index_state(t) == index_state(fresh)


# -------------------------------------------------------------------------------- keys and reads
def test_get_by_primary_key_and_miss() -> None:
    t = make(5)
    assert t.get(3) == user(3)
    assert t.get(42) is None
    assert t.count() == 5
    assert t.key_fields == ("id",)


def test_composite_primary_key_in_key_ordinal_order() -> None:
    cols = [
        ColumnDefinition("id", "int8", 1, False, True, 2),
        ColumnDefinition("tenant", "text", 2, False, True, 1),
        ColumnDefinition("v", "text", 3),
    ]
    t = IndexedTarget()
    t.on_init(T, cols)
    t.on_insert(T, {"id": 1, "tenant": "a", "v": "x"})
    t.on_insert(T, {"id": 1, "tenant": "b", "v": "y"})
    assert t.key_fields == ("tenant", "id")
    assert t.get("b", 1) == {"id": 1, "tenant": "b", "v": "y"}
    assert t.get(1, "b") is None
    assert [k for k, _ in t.items()] == [("a", 1), ("b", 1)]
    with pytest.raises(ValueError, match=r"get\(\) takes 2 value"):
        t.get(1)


def test_no_primary_key_falls_back_to_lookup_fields() -> None:
    cols = [ColumnDefinition("code", "text", 1), ColumnDefinition("v", "int4", 2)]
    t = IndexedTarget(lookup_fields=["code"])
    t.on_init(T, cols)
    t.on_insert(T, {"code": "A", "v": 1})
    t.on_insert(T, {"code": "A", "v": 2})
    assert t.count() == 1
    assert t.get("A") == t.lookup("A") == {"code": "A", "v": 2}


def test_no_primary_key_and_no_lookup_fields_is_a_clear_error() -> None:
    cols = [ColumnDefinition("code", "text", 1)]
    with pytest.raises(ConfigError, match=r"public\.users.*no primary key; set lookup_fields"):
        IndexedTarget().on_init(T, cols)


def test_init_rejects_unknown_lookup_and_index_fields_listing_all() -> None:
    t = IndexedTarget(lookup_fields=["mail"], indexes=[Index("i", ["team", "nope"])])
    with pytest.raises(ConfigError) as info:
        t.on_init(T, COLS)
    problems = info.value.problems
    assert len(problems) == 2
    assert "lookup field 'mail'" in problems[0] and "public.users" in problems[0]
    assert "index 'i' field 'nope'" in problems[1]
    assert "columns: id, email" in problems[1]


def test_constructor_rejects_bad_definitions_listing_all() -> None:
    with pytest.raises(ConfigError) as info:
        IndexedTarget(
            lookup_fields=["a", "a"],
            indexes=[
                Index("x", ["a"]),
                Index("x", ["b"]),
                {"name": "y"},
                {"name": "lookup", "fields": "a"},
            ],
        )
    text = str(info.value)
    assert len(info.value.problems) == 4, text
    assert "listed twice" in text and "'x' is used twice" in text
    assert "indexes[2] (y).fields" in text and "reserved" in text


def test_lookup_by_unique_lookup_fields() -> None:
    t = make(4)
    assert t.lookup("u2@x.io") == user(2)
    assert t.lookup("nobody@x.io") is None
    with pytest.raises(ValueError, match="lookup"):
        t.lookup("a", "b")


def test_lookup_without_lookup_fields_uses_the_key() -> None:
    t = make(3, lookup_fields=[])
    assert t.lookup(1) == user(1)


def test_lookup_fields_equal_to_key_need_no_extra_index() -> None:
    t = make(3, lookup_fields=["id"], indexes=[])
    assert t._lookup_index is None
    assert t.lookup(2) == user(2)
    assert t.lookup_all("lookup", 2) == [user(2)]
    assert t.lookup_all("lookup", 99) == []


def test_lookup_all_non_unique_and_unique() -> None:
    t = make(9)
    team1 = t.lookup_all("by_team", 1)
    assert [r["id"] for r in team1] == [1, 4, 7]
    assert t.lookup_all("by_team", 5) == []
    assert t.lookup_all("by_name", "User 3") == [user(3)]
    assert t.lookup_by("by_name", "User 3") == user(3)
    assert t.lookup_by("by_team", 9) is None
    assert t.lookup_all("lookup", "u5@x.io") == [user(5)]
    with pytest.raises(LookupError, match=r"no index 'nope' \(indexes: lookup, by_team, by_name\)"):
        t.lookup_all("nope", 1)


def test_composite_secondary_index_and_missing_fields_index_as_none() -> None:
    t = make(0, indexes=[Index("team_name", ["team", "name"])])
    t.on_insert(T, user(1))
    t.on_insert(T, {"id": 2, "email": "e2", "team": 1})  # no name column (a transform dropped it)
    assert [r["id"] for r in t.lookup_all("team_name", 1, "User 1")] == [1]
    assert [r["id"] for r in t.lookup_all("team_name", 1, None)] == [2]


def test_reads_return_copies_or_read_only_views() -> None:
    t = make(3)
    point = (t.get(1), t.lookup("u1@x.io"), t.lookup_all("by_team", 1)[0])
    for row in point:
        assert row is not None
        if type(row) is not dict:  # packed/compact storage: a read-only view
            with pytest.raises(TypeError):
                row["name"] = "hacked"  # type: ignore[index]
        mine = dict(row)
        mine["name"] = "hacked"
        mine["new"] = 1
        assert row == user(1)
    for row in (t.all()[1], t.export_snapshot()[1], dict(t.items())[1], *point):
        assert row is not None
        row = dict(row)
        row["name"] = "hacked"
        row["new"] = 1
    assert t.get(1) == user(1)
    assert t.lookup_all("by_name", "hacked") == []


def test_view_is_a_snapshot_of_the_row() -> None:
    t = make(3)
    before = t.get(1)
    t.on_update(T, {**user(1), "name": "later"}, None)
    assert before == user(1)
    assert t.get(1) == {**user(1), "name": "later"}
    assert dict(before or {}) == user(1)


def test_rows_handed_in_are_copied() -> None:
    t = make(0)
    row = user(1)
    t.on_insert(T, row)
    row["name"] = "changed after insert"
    assert t.get(1) == user(1)


def test_values_keep_python_types() -> None:
    t = IndexedTarget()
    cols = [ColumnDefinition("id", "uuid", 1, False, True, 1), ColumnDefinition("v", "numeric", 2)]
    t.on_init(T, cols)
    k = uuid.uuid4()
    t.on_insert(T, {"id": k, "v": Decimal("1.10")})
    got = t.get(k)
    assert got is not None and type(got["v"]) is Decimal and got["v"] == Decimal("1.10")


# -------------------------------------------------------------------------------- writes
def test_insert_over_existing_key_replaces_and_cleans_indexes() -> None:
    t = make(3)
    t.on_insert(T, user(1, email="new@x.io", team=2, name="Renamed"))
    assert t.count() == 3
    assert t.lookup("u1@x.io") is None
    assert t.lookup("new@x.io")["id"] == 1  # type: ignore[index]
    assert [r["id"] for r in t.lookup_all("by_team", 1)] == []
    assert_indexes_consistent(t)


def test_update_maintains_indexes_and_count() -> None:
    t = make(6)
    t.on_update(T, user(1, email="moved@x.io", team=2), {"id": 1})
    assert t.count() == 6
    assert t.lookup("u1@x.io") is None
    assert t.lookup("moved@x.io") == user(1, email="moved@x.io", team=2)
    assert [r["id"] for r in t.lookup_all("by_team", 1)] == [4]
    assert sorted(r["id"] for r in t.lookup_all("by_team", 2)) == [1, 2, 5]
    assert_indexes_consistent(t)


def test_update_with_absent_columns_keeps_stored_values() -> None:
    t = make(2)
    t.on_update(T, {"id": 1, "name": "N"}, None)
    assert t.get(1) == user(1, name="N")
    assert t.lookup_by("by_name", "N")["id"] == 1  # type: ignore[index]
    assert_indexes_consistent(t)


def test_update_listing_unchanged_toast_keeps_stored_values() -> None:
    t = make(2)
    new = {"id": 1, "email": "u1@x.io", "team": 1, "name": "N", "bio": None}
    t.apply_changes(T, [ev(ChangeAction.UPDATE, new, unchanged_toast=frozenset({"bio"}))])
    assert t.get(1) == user(1, name="N")


def test_update_of_missing_row_upserts() -> None:
    t = make(1)
    t.on_update(T, user(5), {"id": 5})
    assert t.get(5) == user(5)


def test_update_that_changes_the_key_moves_the_row() -> None:
    t = make(3)
    t.on_update(T, {"id": 10, "name": "Ten"}, {"id": 1})
    assert t.get(1) is None
    assert t.get(10) == user(1, id=10, name="Ten")  # unsent columns carried over
    assert t.count() == 3
    assert t.lookup("u1@x.io")["id"] == 10  # type: ignore[index]
    assert_indexes_consistent(t)


def test_update_moving_onto_an_existing_key_replaces_it() -> None:
    t = make(3)
    t.on_update(T, user(2, name="From one", email="one@x"), {"id": 1})
    assert t.count() == 2
    assert t.get(2)["name"] == "From one"  # type: ignore[index]
    assert t.lookup("u2@x.io") is None
    assert_indexes_consistent(t)


def test_delete_removes_from_every_index_and_missing_is_noop() -> None:
    t = make(6)
    t.on_delete(T, {"id": 4})
    t.on_delete(T, {"id": 400})
    assert t.count() == 5
    assert t.lookup("u4@x.io") is None
    assert [r["id"] for r in t.lookup_all("by_team", 1)] == [1]  # the others stay
    assert t.lookup_all("by_name", "User 4") == []
    assert_indexes_consistent(t)


def test_truncate_clears_rows_and_indexes() -> None:
    t = make(5)
    t.on_truncate(T)
    assert t.count() == 0 and t.all() == []
    assert t.lookup("u1@x.io") is None and t.lookup_all("by_team", 1) == []
    t.on_insert(T, user(1))
    assert t.lookup_all("by_team", 1) == [user(1)]


def test_unique_index_tolerates_transient_duplicates() -> None:
    # Two rows swap their unique name inside one transaction.
    t = make(2)
    t.apply_changes(
        T,
        [
            ev(ChangeAction.UPDATE, user(0, name="User 1")),
            ev(ChangeAction.UPDATE, user(1, name="User 0")),
        ],
    )
    assert t.lookup_by("by_name", "User 1")["id"] == 0  # type: ignore[index]
    assert t.lookup_by("by_name", "User 0")["id"] == 1  # type: ignore[index]
    # Duplicates in a unique index: deleting one keeps the other findable.
    t.on_insert(T, user(5, name="dup"))
    t.on_insert(T, user(6, name="dup"))
    assert t.lookup_by("by_name", "dup")["id"] == 6  # type: ignore[index]
    assert sorted(r["id"] for r in t.lookup_all("by_name", "dup")) == [5, 6]
    t.on_delete(T, {"id": 6})
    assert t.lookup_by("by_name", "dup")["id"] == 5  # type: ignore[index]
    assert_indexes_consistent(t)


def test_row_missing_its_key_is_a_clear_target_error() -> None:
    t = make(1)
    with pytest.raises(TargetError, match=r"public\.users: INSERT row is missing key field 'id'"):
        t.on_insert(T, {"email": "x"})
    with pytest.raises(TargetError, match=r"DELETE identity is missing key field 'id'"):
        t.on_delete(T, {"email": "x"})
    with pytest.raises(TargetError, match=r"UPDATE row is missing key field 'id'"):
        t.on_update(T, {"email": "x"}, None)
    assert t.count() == 1


def test_unhashable_index_value_is_rejected_without_partial_state() -> None:
    t = make(1)
    with pytest.raises(TargetError, match=r"index 'by_name'.*not hashable"):
        t.on_insert(T, user(2, name={"json": 1}))
    assert t.get(2) is None
    assert_indexes_consistent(t)
    with pytest.raises(TargetError, match="not hashable"):
        t.on_update(T, user(0, name=["x"], team=2, email="changed@x"), None)
    assert t.get(0) == user(0)
    assert_indexes_consistent(t)


def test_apply_changes_mixed_batch_and_position() -> None:
    t = make(3)
    t.apply_changes(
        T,
        [
            ev(ChangeAction.INSERT, user(3), pos=11),
            ev(ChangeAction.UPDATE, user(0, team=2), {"id": 0}, pos=12),
            ev(ChangeAction.DELETE, None, {"id": 1}, pos=13),
            ev(ChangeAction.SCHEMA_CHANGE, pos=14),
        ],
    )
    assert sorted(r["id"] for r in t.all()) == [0, 2, 3]
    assert t.position == 14
    assert_indexes_consistent(t)
    t.set_change_position(20)
    assert t.position == 20


def test_apply_changes_failure_reports_the_index() -> None:
    t = make(0)
    with pytest.raises(BatchApplyError) as info:
        t.apply_changes(
            T,
            [
                ev(ChangeAction.INSERT, user(1), pos=1),
                ev(ChangeAction.INSERT, {"email": "nokey"}, pos=2),
                ev(ChangeAction.INSERT, user(3), pos=3),
            ],
        )
    assert info.value.index == 1
    assert isinstance(info.value.__cause__, TargetError)
    assert "missing key field 'id'" in str(info.value)
    assert [r["id"] for r in t.all()] == [1]  # events before the bad one stay applied
    assert t.position == 1


def test_baseline_complete_flag_and_durability() -> None:
    t = IndexedTarget()
    t.on_init(T, COLS)
    assert not t.baseline_complete
    t.on_baseline_row(T, user(1))
    t.on_baseline_complete(T)
    assert t.baseline_complete
    assert t.is_durable() is False
    assert t.supports_consistent_snapshot() is True
    t.on_close(T)
    assert t.get(1) == user(1)  # still readable after close


# -------------------------------------------------------------------------------- snapshots
def test_export_restore_round_trip_rebuilds_indexes() -> None:
    src = make(6)
    src.on_update(T, user(2, team=0), None)
    rows = src.export_snapshot()
    dst = make(0)
    dst.on_insert(T, user(100))
    dst.restore_snapshot(TableSnapshotInfo(T, len(rows), tuple(COLS)), iter(rows))
    assert dst.all() == src.all()
    assert dst.get(100) is None
    assert dst.lookup("u3@x.io") == user(3)
    assert [r["id"] for r in dst.lookup_all("by_team", 0)] == [0, 2, 3]
    assert_indexes_consistent(dst)


def test_restore_initialises_an_uninitialised_target() -> None:
    t = IndexedTarget(lookup_fields=["email"])
    t.restore_snapshot(TableSnapshotInfo(T, 2, tuple(COLS)), [user(1), user(2)])
    assert t.table == T and t.get(2) == user(2) and t.lookup("u1@x.io") == user(1)


def test_bad_snapshot_row_leaves_previous_state() -> None:
    t = make(3)
    with pytest.raises(TargetError, match=r"row 1 is missing key field 'id'"):
        t.restore_snapshot(TableSnapshotInfo(T, 2, tuple(COLS)), [user(7), {"email": "x"}])
    assert sorted(r["id"] for r in t.all()) == [0, 1, 2]
    assert_indexes_consistent(t)


def test_reinit_with_a_different_key_rekeys_rows() -> None:
    t = make(3, lookup_fields=["email"], indexes=[])
    cols_no_pk = [ColumnDefinition(c.name, c.type, c.ordinal_position) for c in COLS]
    t.on_init(T, cols_no_pk)  # the key falls back to email
    assert t.key_fields == ("email",)
    assert t.get("u1@x.io") == user(1)


# -------------------------------------------------------------------------------- schema changes
def test_schema_change_policy() -> None:
    t = make(1)
    added = [*COLS, ColumnDefinition("age", "int4", 6)]
    r = t.on_schema_change(T, COLS, added)
    assert r.action is SchemaChangeAction.CONTINUE and "age" in r.message
    assert [c.name for c in t.columns][-1] == "age"
    assert t.on_schema_change(T, COLS, list(COLS)).action is SchemaChangeAction.CONTINUE
    dropped = [c for c in COLS if c.name != "bio"]
    r = t.on_schema_change(T, COLS, dropped)
    assert r.action is SchemaChangeAction.RE_BASELINE and "'bio' was dropped" in r.message
    retyped = [ColumnDefinition("team", "text", 3) if c.name == "team" else c for c in COLS]
    r = t.on_schema_change(T, COLS, retyped)
    assert r.action is SchemaChangeAction.RE_BASELINE and "'team' changed type" in r.message
    rekeyed = [
        ColumnDefinition(
            c.name,
            c.type,
            c.ordinal_position,
            primary_key=c.name == "email",
            primary_key_ordinal=1 if c.name == "email" else 0,
        )
        for c in COLS
    ]
    r = t.on_schema_change(T, COLS, rekeyed)
    assert r.action is SchemaChangeAction.RE_BASELINE and "key changed" in r.message


# -------------------------------------------------------------------------------- bulk baseline
def test_baseline_chunk_with_duplicates_and_existing_keys_matches_per_row() -> None:
    rows = [user(1), user(2), user(1, name="again", team=2), user(3), user(2, email="e2")]
    bulk = make(0)
    bulk.on_insert(T, user(3, team=1, name="pre"))
    bulk.on_baseline_rows(T, rows)
    per_row = make(0)
    per_row.on_insert(T, user(3, team=1, name="pre"))
    for r in rows:
        per_row.on_baseline_row(T, r)
    assert bulk.all() == per_row.all()
    assert index_state(bulk) == index_state(per_row)
    assert_indexes_consistent(bulk)


def test_baseline_chunk_with_unhashable_index_value_keeps_the_rows_before_it() -> None:
    t = make(0)
    with pytest.raises(TargetError, match=r"index 'by_name'.*not hashable"):
        t.on_baseline_rows(T, [user(1), user(2), user(3, name=["bad"]), user(4)])
    assert sorted(r["id"] for r in t.all()) == [1, 2]
    assert_indexes_consistent(t)


def test_restore_with_unhashable_index_value_is_rejected_whole() -> None:
    t = make(2)
    info = TableSnapshotInfo(T, 2, tuple(COLS))
    with pytest.raises(TargetError, match=r"row 1: index 'by_name' value \['x'\] is not hashable"):
        t.restore_snapshot(info, [user(5), user(6, name=["x"])])
    assert sorted(r["id"] for r in t.all()) == [0, 1]
    assert_indexes_consistent(t)


def test_baseline_chunk_with_duplicate_unique_values_keeps_both() -> None:
    t = make(0)
    t.on_baseline_rows(T, [user(1, name="same"), user(2, name="same"), user(3)])
    assert sorted(r["id"] for r in t.lookup_all("by_name", "same")) == [1, 2]
    t.on_delete(T, {"id": 2})
    assert t.lookup_by("by_name", "same")["id"] == 1  # type: ignore[index]
    assert_indexes_consistent(t)


def test_reinit_with_a_key_some_rows_lack_fails_and_keeps_the_old_state() -> None:
    t = make(3, lookup_fields=[], indexes=[Index("by_team", ["team"])])
    t.on_insert(T, {"id": 9, "team": 1})  # has no email
    cols = [
        ColumnDefinition(
            c.name,
            c.type,
            c.ordinal_position,
            primary_key=c.name == "email",
            primary_key_ordinal=1 if c.name == "email" else 0,
        )
        for c in COLS
    ]
    with pytest.raises(TargetError, match="missing key field 'email'"):
        t.on_init(T, cols)
    assert t.key_fields == ("id",)
    assert t.get(9) == {"id": 9, "team": 1}
    assert [r["id"] for r in t.lookup_all("by_team", 1)] == [1, 9]
    assert_indexes_consistent(t)


def test_change_batch_goes_through_an_overridden_apply_changes() -> None:
    """A subclass that overrides ``apply_changes`` keeps seeing every change when the engine
    hands the target a ``ChangeBatch``; without an override the batch is stored from its
    tuples, with the same result."""
    from laredo.batches import ChangeBatch
    from laredo.types import ChangeAction

    seen: list[int] = []

    class Spy(IndexedTarget):
        def apply_changes(self, table: Any, events: Any) -> None:
            seen.append(len(events))
            super().apply_changes(table, events)

    names = ("id", "email", "team", "name", "bio")
    ops = [
        (ChangeAction.INSERT, tuple(user(1).values()), None, None),
        (ChangeAction.INSERT, tuple(user(2).values()), None, None),
        (ChangeAction.DELETE, None, {"id": 1}, None),
    ]
    plain = IndexedTarget()
    spy = Spy()
    for t in (plain, spy):
        t.on_init(T, COLS)
        t.apply_change_batch(T, ChangeBatch(T, names, list(ops), 10))
        assert t.all() == [user(2)]
        assert t.position == 10
    assert seen == [3]
