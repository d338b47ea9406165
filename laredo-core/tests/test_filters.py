from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

import laredo
import pytest
from laredo.filters import (
    CallableFilter,
    FieldEquals,
    FieldPrefix,
    FieldRegex,
    as_filter,
    filter_from_spec,
    spec_of,
)

T = laredo.Table("public", "users")


@pytest.mark.parametrize(
    ("value", "row_value", "match"),
    [
        ("active", "active", True),
        ("active", "inactive", False),
        (1, 1, True),
        (1, 1.0, True),
        (1.5, Decimal("1.5"), True),
        (1, "1", False),
        ("1", 1, False),
        (True, True, True),
        (True, 1, False),
        (1, True, False),
        (False, 0, False),
        ("x", None, False),
    ],
)
def test_field_equals(value: Any, row_value: Any, match: bool) -> None:
    assert FieldEquals("f", value).include(T, {"f": row_value}) is match


def test_missing_field_never_matches() -> None:
    for f in (FieldEquals("f", "a"), FieldPrefix("f", ""), FieldRegex("f", ".*")):
        assert f.include(T, {"other": "a"}) is False
        assert f.include(T, {"f": None}) is False


def test_field_prefix_and_regex() -> None:
    p = FieldPrefix("email", "admin@")
    assert p.include(T, {"email": "admin@x.com"})
    assert not p.include(T, {"email": "user@x.com"})
    assert not p.include(T, {"email": 12})
    r = FieldRegex("email", r"@example\.(com|org)$")
    assert r.include(T, {"email": "a@example.org"})
    assert not r.include(T, {"email": "a@example.net"})
    assert not r.include(T, {"email": b"a@example.org"})
    assert FieldRegex("s", "b").include(T, {"s": "abc"})  # search, not match
    assert not FieldRegex("s", "^b").include(T, {"s": "abc"})


def test_specs_are_plain_json_and_round_trip() -> None:
    filters = [FieldEquals("status", "active"), FieldPrefix("n", "ab"), FieldRegex("e", "^a+$")]
    for f in filters:
        spec = f.spec()
        assert json.loads(json.dumps(spec)) == spec
        assert filter_from_spec(spec) == f
        assert spec_of(f) == spec
    assert FieldEquals("a", 2).spec() == {"type": "field-equals", "field": "a", "value": 2}
    assert FieldRegex("a", "x") == FieldRegex("a", "x")
    assert hash(FieldRegex("a", "x")) == hash(FieldRegex("a", "x"))


@pytest.mark.parametrize(
    ("spec", "words"),
    [
        ({"type": "field-equals", "field": "a"}, "value"),
        ({"type": "field-equals", "field": "a", "value": None}, "value"),
        ({"type": "field-equals", "field": "a", "value": [1]}, "value"),
        ({"type": "field-prefix", "field": "a", "prefix": "x", "extra": 1}, "extra"),
        ({"type": "field-regex", "field": "a", "pattern": "("}, "invalid pattern"),
        ({"type": "nope"}, "installed types are"),
        ({"field": "a"}, "'type'"),
    ],
)
def test_bad_specs_name_the_problem(spec: dict[str, Any], words: str) -> None:
    with pytest.raises(laredo.ConfigError) as err:
        filter_from_spec(spec)
    assert words in str(err.value)


def test_constructor_validation() -> None:
    with pytest.raises(laredo.ConfigError, match="NULL never matches"):
        FieldEquals("a", None)  # type: ignore[arg-type]
    with pytest.raises(laredo.ConfigError, match="field"):
        FieldPrefix("", "x")


def test_as_filter_accepts_objects_callables_and_specs() -> None:
    f = FieldEquals("a", 1)
    assert as_filter(f) is f
    one = as_filter(lambda row: row["a"] > 1)
    assert isinstance(one, CallableFilter)
    assert one.include(T, {"a": 2}) and not one.include(T, {"a": 1})
    two = as_filter(lambda table, row: table.table == "users" and row["a"] == 1)
    assert two.include(T, {"a": 1})
    assert not two.include(laredo.Table("public", "other"), {"a": 1})
    assert spec_of(one) is None

    def with_default(row: dict[str, Any], flag: bool = True) -> bool:
        return flag

    assert as_filter(with_default).include(T, {})
    assert as_filter({"type": "field-prefix", "field": "n", "prefix": "a"}) == FieldPrefix("n", "a")
    with pytest.raises(TypeError, match="not a filter"):
        as_filter(42)
    with pytest.raises(TypeError, match=r"\(row\) or \(table, row\)"):
        as_filter(lambda a, b, c: True)


def test_registered_by_name() -> None:
    f = laredo.filter("field-regex", field="a", pattern="^x")
    assert f == FieldRegex("a", "^x")
    with pytest.raises(laredo.ConfigError) as err:
        laredo.filter("field-equals", field="a", value={"x": 1}, bogus=2)
    assert "bogus" in str(err.value) and "value" in str(err.value)
