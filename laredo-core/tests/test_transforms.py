from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import laredo
import pytest
from laredo.filters import spec_of
from laredo.transforms import (
    AddTimestamp,
    CallableTransform,
    DropFields,
    RenameFields,
    as_transform,
    transform_from_spec,
)

T = laredo.Table("public", "users")
NOW = datetime(2026, 3, 4, 5, 6, 7, 891000, tzinfo=UTC)


def test_drop_fields_returns_a_new_row() -> None:
    row = {"id": 1, "password": "x", "email": "e"}
    out = DropFields(["password", "missing"]).transform(T, row)
    assert out == {"id": 1, "email": "e"}
    assert row == {"id": 1, "password": "x", "email": "e"}
    assert DropFields("password").fields == ("password",)


def test_rename_fields_all_at_once() -> None:
    row = {"a": 1, "b": 2, "c": 3}
    assert RenameFields({"a": "b", "b": "a"}).transform(T, row) == {"a": 2, "b": 1, "c": 3}
    assert RenameFields({"a": "c"}).transform(T, row) == {"b": 2, "c": 1}
    assert RenameFields({"zz": "y"}).transform(T, row) == row
    assert row == {"a": 1, "b": 2, "c": 3}
    with pytest.raises(laredo.ConfigError, match="same new name"):
        RenameFields({"a": "x", "b": "x"})


@pytest.mark.parametrize(
    ("fmt", "expected"),
    [
        ("datetime", NOW),
        ("iso", "2026-03-04T05:06:07.891000+00:00"),
        ("epoch_millis", 1772600767891),
    ],
)
def test_add_timestamp(fmt: str, expected: Any) -> None:
    t = AddTimestamp("seen", fmt, clock=lambda: NOW)  # type: ignore[arg-type]
    row = {"id": 1}
    out = t.transform(T, row)
    assert out == {"id": 1, "seen": expected}
    assert type(out["seen"]) is type(expected)
    assert row == {"id": 1}


def test_add_timestamp_default_is_aware_utc_now() -> None:
    before = datetime.now(UTC)
    out = AddTimestamp().transform(T, {})
    assert before <= out["processed_at"] <= datetime.now(UTC)
    assert out["processed_at"].tzinfo is UTC


def test_specs_are_plain_json_and_round_trip() -> None:
    for t in (DropFields(["a", "b"]), RenameFields({"a": "b"}), AddTimestamp("ts", "iso")):
        spec = t.spec()
        assert json.loads(json.dumps(spec)) == spec
        assert transform_from_spec(spec) == t
        assert spec_of(t) == spec
    assert AddTimestamp().spec() == {
        "type": "add-timestamp",
        "field": "processed_at",
        "format": "datetime",
    }
    assert RenameFields({"a": "b"}).spec() == {"type": "rename-fields", "mapping": {"a": "b"}}


@pytest.mark.parametrize(
    ("spec", "words"),
    [
        ({"type": "drop-fields"}, "fields"),
        ({"type": "drop-fields", "fields": [1]}, "fields"),
        ({"type": "rename-fields", "mapping": {"a": 1}}, "mapping"),
        ({"type": "add-timestamp", "format": "unix"}, "format"),
        ({"type": "add-timestamp", "clock": "x"}, "clock"),
        ({"type": "upper-case"}, "installed types are"),
    ],
)
def test_bad_specs_name_the_problem(spec: dict[str, Any], words: str) -> None:
    with pytest.raises(laredo.ConfigError) as err:
        transform_from_spec(spec)
    assert words in str(err.value)


def test_as_transform() -> None:
    d = DropFields(["a"])
    assert as_transform(d) is d
    one = as_transform(lambda row: {**row, "x": 1})
    assert isinstance(one, CallableTransform)
    assert one.transform(T, {}) == {"x": 1}
    drop = as_transform(lambda table, row: None if row.get("skip") else row)
    assert drop.transform(T, {"skip": True}) is None
    assert drop.transform(T, {"a": 1}) == {"a": 1}
    assert as_transform({"type": "drop-fields", "fields": ["a"]}) == d
    with pytest.raises(TypeError, match="not a transform"):
        as_transform("drop")


def test_registered_by_name() -> None:
    assert laredo.transform("drop-fields", fields=["a"]) == DropFields(["a"])
    assert laredo.transform("rename-fields", mapping={"a": "b"}) == RenameFields({"a": "b"})
    assert laredo.transform("add-timestamp", field="t").field == "t"
