"""Filters and transforms on Spark give exactly the local runner's rows."""

from __future__ import annotations

import json
import sys
from datetime import UTC, date, datetime, timedelta, timezone
from decimal import Decimal
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from laredo.filters import FieldEquals, FieldPrefix, FieldRegex, filter_from_spec
from laredo.pipeline_ops import run_chain
from laredo.serialization import encode_value
from laredo.transforms import AddTimestamp, DropFields, RenameFields, transform_from_spec
from laredo.types import TableIdentifier
from laredo_spark import apply_chain, frame_from_rows
from laredo_spark.frame import infer_kinds

pytestmark = pytest.mark.spark

T = TableIdentifier("public", "t")
FIXED = datetime(2026, 11, 22, 1, 2, 3, 456789, tzinfo=UTC)
NAMES = ["id", "name", "score", "flag", "amount", "tag", "day"]


def canon(row: dict[str, Any]) -> str:
    return json.dumps({k: encode_value(v) for k, v in sorted(row.items())}, sort_keys=True)


def local(rows: list[dict[str, Any]], filters: list[Any], transforms: list[Any]) -> list[str]:
    """What the local engine does with each row: the one chain of laredo.pipeline_ops."""
    out = []
    for r in rows:
        got = run_chain(T, r, filters, transforms)
        if got is not None:
            out.append(canon(got))
    return sorted(out)


def on_spark(
    spark: Any, rows: list[dict[str, Any]], filters: list[Any], transforms: list[Any]
) -> list[str]:
    frame = frame_from_rows(spark, rows, infer_kinds(rows, NAMES), T)
    return sorted(canon(r) for r in apply_chain(frame, filters, transforms).rows())


text = st.text(alphabet="abcAB_ 1é", max_size=5)
values = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-5, 5),
    st.integers(-(2**63), 2**63 - 1),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0.0, -0.0, 1.0, 2.5, 2.0**53]),
    text,
)
rows_st = st.lists(
    st.fixed_dictionaries(
        {
            "id": st.integers(0, 10**6),
            "name": st.one_of(st.none(), text),
            "score": st.one_of(
                st.none(), st.floats(allow_nan=True), st.sampled_from([1.0, 2.0, -0.0])
            ),
            "flag": st.one_of(st.none(), st.booleans()),
            "amount": st.one_of(
                st.none(), st.decimals(places=2, allow_nan=False, max_value=100, min_value=-100)
            ),
            "tag": st.one_of(st.none(), text, st.integers(-3, 3)),
            "day": st.one_of(st.none(), st.dates(min_value=date(1970, 1, 1))),
        }
    ),
    min_size=0,
    max_size=12,
)
fields = st.sampled_from([*NAMES, "missing"])
filter_st = st.one_of(
    st.builds(FieldEquals, fields, values.filter(lambda v: v is not None)),
    st.builds(FieldPrefix, fields, text),
    st.builds(
        FieldRegex, fields, st.sampled_from(["a", "^a", "b$", "[ab]+", "A|1", "^$", "a.c", "\\d"])
    ),
)
transform_st = st.one_of(
    st.builds(DropFields, st.lists(fields, max_size=3)),
    st.builds(
        RenameFields,
        st.dictionaries(
            fields, st.sampled_from(["x", "y", "name", "id", "score"]), max_size=3
        ).filter(lambda m: len(set(m.values())) == len(m)),
    ),
    st.builds(
        AddTimestamp,
        st.sampled_from(["ts", "name", "flag"]),
        st.sampled_from(["datetime", "iso", "epoch_millis"]),
        st.just(lambda: FIXED),
    ),
)


@settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    rows=rows_st,
    filters=st.lists(filter_st, max_size=2),
    transforms=st.lists(transform_st, max_size=3),
)
def test_spark_chain_equals_local_runner(
    spark: Any, rows: Any, filters: Any, transforms: Any
) -> None:
    # all rows carry all keys (a DataFrame has a value, maybe NULL, in every column)
    assert on_spark(spark, rows, filters, transforms) == local(rows, filters, transforms)


def test_specs_compile_and_numbers_compare_exactly(spark: Any) -> None:
    rows = [
        {"id": 1, "n": 2**53 + 1, "f": 2.0**53, "s": "1", "b": True, "d": Decimal("1.50")},
        {"id": 2, "n": 3, "f": 3.0, "s": "abc", "b": False, "d": Decimal("0.1")},
        {"id": 3, "n": None, "f": float("nan"), "s": None, "b": None, "d": None},
    ]
    cases = [
        {"type": "field-equals", "field": "n", "value": 3.0},
        {"type": "field-equals", "field": "f", "value": 2**53 + 1},
        {"type": "field-equals", "field": "f", "value": 3},
        {"type": "field-equals", "field": "b", "value": 1},
        {"type": "field-equals", "field": "s", "value": 1},
        {"type": "field-equals", "field": "d", "value": 1.5},
        {"type": "field-equals", "field": "d", "value": 0.1},
        {"type": "field-prefix", "field": "s", "prefix": "ab"},
        {"type": "field-regex", "field": "s", "pattern": "^a.c$"},
    ]
    for spec in cases:
        f = filter_from_spec(spec)
        frame = frame_from_rows(spark, rows, table=T)
        got = sorted(r["id"] for r in apply_chain(frame, [f]).rows())
        want = sorted(r["id"] for r in rows if f.include(T, r))
        assert got == want, spec


def test_transform_specs_and_key_order(spark: Any) -> None:
    rows = [{"a": 1, "b": "x", "c": 2.5, "secret": "pw"}]
    transforms = [
        transform_from_spec({"type": "drop-fields", "fields": ["secret"]}),
        transform_from_spec({"type": "rename-fields", "mapping": {"a": "b", "b": "a"}}),
    ]
    frame = apply_chain(frame_from_rows(spark, rows, table=T), [], transforms)
    (got,) = frame.rows()
    want = rows[0]
    for t in transforms:
        want = t.transform(T, want)
    assert got == want and list(got) == list(want)
    assert frame.opaque is False  # built-ins stay Spark expressions


def keep_even(row: dict[str, Any]) -> bool:
    return row["id"] % 2 == 0


def shout(table: TableIdentifier, row: dict[str, Any]) -> dict[str, Any] | None:
    if row["id"] == 4:
        return None
    return {**row, "name": str(row["name"]).upper(), "where": str(table), "extra": Decimal("1.5")}


def test_custom_callables_run_as_python_udfs(spark: Any) -> None:
    from pyspark import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    rows = [{"id": i, "name": f"n{i}", "amount": Decimal(i)} for i in range(7)]
    filters = [keep_even, FieldPrefix("name", "n")]
    transforms = [DropFields(["amount"]), shout, RenameFields({"name": "label"})]
    frame = apply_chain(frame_from_rows(spark, rows, table=T), filters, transforms)
    assert frame.opaque
    from laredo.filters import as_filter
    from laredo.transforms import as_transform

    want = local(rows, [as_filter(f) for f in filters], [as_transform(t) for t in transforms])
    assert sorted(canon(r) for r in frame.rows()) == want
    assert len(want) == 3  # ids 0, 2, 6


def test_column_names_with_dots_and_json_kinds_round_trip(spark: Any) -> None:
    rows = [{"a.b": 1, "doc": {"k": [1, Decimal("2.5")]}, "when": FIXED, "raw": b"\x00\xff"}]
    frame = frame_from_rows(spark, rows, table=T)
    assert frame.kinds == {
        "a.b": "int",
        "doc": "json",
        "when": "timestamptz:+00:00",
        "raw": "bytes",
    }
    out = apply_chain(frame, [FieldEquals("a.b", 1)], [RenameFields({"a.b": "ab"})]).rows()
    assert out == [{"ab": 1, "doc": rows[0]["doc"], "when": FIXED, "raw": b"\x00\xff"}]
    assert type(out[0]["raw"]) is bytes


def test_json_lines_are_the_typed_json_encoding_for_every_kind(spark: Any) -> None:
    from laredo.serialization import loads_row

    rows = [
        {
            "i": -(2**63),
            "s": 'q"\\\n\t\u00e9\x01',
            "f": float("nan"),
            "g": -0.0,
            "h": 1e300,
            "k": float("-inf"),
            "b": True,
            "d": date(1, 1, 1),
            "j": Decimal("1.50"),
            "t": FIXED,
            "z": FIXED.astimezone(ZoneInfo("Europe/Paris")),
            "o": FIXED.astimezone(timezone(timedelta(hours=-3, minutes=-30))),
            "l": FIXED.replace(tzinfo=None, microsecond=0),
            "n": None,
        },
        {
            "i": 3,
            "s": None,
            "f": 2.5,
            "g": 1e-7,
            "h": None,
            "k": 3.0,
            "b": None,
            "d": None,
            "j": None,
            "t": None,
            "z": None,
            "o": None,
            "l": None,
            "n": None,
        },
    ]
    for extra in ({}, {"raw": b"\x00\xff"}):  # bytes columns take the Python path
        data = [
            {**r, **{k: (v if i == 0 else None) for k, v in extra.items()}}
            for i, r in enumerate(rows)
        ]
        frame = frame_from_rows(spark, data, table=T)
        assert frame.kinds["j"] == "decimal" and frame.kinds["l"] == "timestamp"
        assert frame.kinds["z"] == "timestamptz:Europe/Paris"
        assert frame.kinds["o"] == "timestamptz:-03:30"
        # collect, then back to the exact Python values (canon: NaN, zones, Decimal exponent)
        assert [canon(r) for r in frame.rows()] == [canon(r) for r in data]
        got = [loads_row(r[0]) for r in frame.json_lines().collect()]
        assert [canon(r) for r in got] == [canon(r) for r in data]
        assert [list(r) for r in got] == [list(r) for r in data]
