from __future__ import annotations

import enum
import ipaddress
import json
import math
import uuid
from datetime import UTC, date, datetime, time, timedelta, timezone
from decimal import Decimal
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from laredo_target_http import decode_row, decode_value, encode_row, encode_value

CASES: list[tuple[str, Any, Any]] = [
    # (name, value, expected wire form after a JSON round trip)
    ("str", "héllo ✓", "héllo ✓"),
    ("int", 42, 42),
    ("bigint", 2**70, 2**70),
    ("bool", True, True),
    ("null", None, None),
    ("float", 1.25, 1.25),
    ("float_repr", 0.1 + 0.2, 0.1 + 0.2),
    ("nan", math.nan, {"$type": "float", "value": "NaN"}),
    ("inf", math.inf, {"$type": "float", "value": "Infinity"}),
    ("-inf", -math.inf, {"$type": "float", "value": "-Infinity"}),
    ("decimal", Decimal("1.50"), {"$type": "decimal", "value": "1.50"}),
    ("decimal_exp", Decimal("1E+2"), {"$type": "decimal", "value": "1E+2"}),
    ("decimal_big", Decimal("12345678901234567890.000000001"), None),
    ("decimal_nan", Decimal("NaN"), None),
    ("decimal_neg_zero", Decimal("-0.00"), None),
    (
        "timestamptz_offset",
        datetime(2024, 5, 1, 12, 30, 45, 123456, tzinfo=timezone(timedelta(hours=-5))),
        {"$type": "timestamptz", "value": "2024-05-01T12:30:45.123456-05:00"},
    ),
    (
        "timestamptz_zone",
        datetime(2024, 11, 3, 1, 30, tzinfo=ZoneInfo("America/New_York"), fold=1),
        None,
    ),
    (
        "timestamp",
        datetime(2024, 5, 1, 12, 30, 45),
        {"$type": "timestamp", "value": "2024-05-01T12:30:45"},
    ),
    ("date", date(1999, 12, 31), {"$type": "date", "value": "1999-12-31"}),
    ("time", time(23, 59, 59, 999999), {"$type": "time", "value": "23:59:59.999999"}),
    (
        "timetz",
        time(8, 0, tzinfo=timezone(timedelta(hours=5, minutes=30))),
        {"$type": "timetz", "value": "08:00:00+05:30"},
    ),
    ("interval", timedelta(days=-3, seconds=5, microseconds=7), None),
    ("interval_big", timedelta(days=999_999_999, microseconds=1), None),
    (
        "uuid",
        uuid.UUID("12345678-1234-5678-1234-567812345678"),
        {"$type": "uuid", "value": "12345678-1234-5678-1234-567812345678"},
    ),
    ("bytes", b"\x00\xffbin\n", {"$type": "bytes", "value": "AP9iaW4K"}),
    ("bytes_empty", b"", {"$type": "bytes", "value": ""}),
    (
        "json_object",
        {"a": [1, 2.5, None, {"b": "c"}], "kind": "x"},
        {"$type": "json", "value": {"a": [1, 2.5, None, {"b": "c"}], "kind": "x"}},
    ),
    # a document holding a key named like a tag travels as a map, so that no "json" payload
    # ever contains "$type" and bottom-up decoders cannot mistake data for a tag
    (
        "json_object_with_tag_key",
        {"$type": "not a tag", "a": 1},
        {"$type": "map", "value": [["$type", "not a tag"], ["a", 1]]},
    ),
    ("json_list", [{"a": 1}, "x", 2], [{"$type": "json", "value": {"a": 1}}, "x", 2]),
    ("int_array", [1, 2, None], [1, 2, None]),
    ("nested_array", [[1, 2], [3, 4]], [[1, 2], [3, 4]]),
    (
        "decimal_array",
        [Decimal("1.1"), None],
        [{"$type": "decimal", "value": "1.1"}, None],
    ),
    ("date_array", [date(2020, 1, 1)], [{"$type": "date", "value": "2020-01-01"}]),
    ("map_nonstring_keys", {1: "a", 2: Decimal("3")}, None),
    ("map_nested_tags", {"when": date(2020, 2, 2)}, None),
    ("ipv4", ipaddress.ip_address("10.0.0.1"), {"$type": "ip_address", "value": "10.0.0.1"}),
    ("ipv6_iface", ipaddress.ip_interface("fe80::1/64"), None),
    ("ipv4_net", ipaddress.ip_network("10.0.0.0/8"), None),
    # PostgreSQL's date and timestamp infinities (laredo.types): the extreme values, UTC when zoned
    ("date_infinity", date.max, {"$type": "date", "value": "9999-12-31"}),
    ("date_minus_infinity", date.min, {"$type": "date", "value": "0001-01-01"}),
    (
        "timestamp_infinity",
        datetime.max,
        {"$type": "timestamp", "value": "9999-12-31T23:59:59.999999"},
    ),
    (
        "timestamptz_infinity",
        datetime.max.replace(tzinfo=UTC),
        {"$type": "timestamptz", "value": "9999-12-31T23:59:59.999999+00:00"},
    ),
    (
        "timestamptz_minus_infinity",
        datetime.min.replace(tzinfo=UTC),
        {"$type": "timestamptz", "value": "0001-01-01T00:00:00+00:00"},
    ),
]


@pytest.mark.parametrize(("name", "value", "wire"), CASES, ids=[c[0] for c in CASES])
def test_round_trip_is_exact(name: str, value: Any, wire: Any) -> None:
    encoded = json.loads(json.dumps(encode_value(value), allow_nan=False))
    if wire is not None:
        assert encoded == wire
    decoded = decode_value(encoded)
    assert type(decoded) is type(value)
    if isinstance(value, float) and math.isnan(value):
        assert math.isnan(decoded)
    elif isinstance(value, Decimal) and value.is_nan():
        assert decoded.is_nan()
    else:
        assert decoded == value
        # Same representation, not just equal: precision, offset, zone and fold survive.
        assert repr(decoded) == repr(value)
    if isinstance(value, datetime | time) and value.tzinfo is not None:
        assert decoded.utcoffset() == value.utcoffset()


def test_zone_name_survives() -> None:
    value = datetime(2024, 7, 1, 9, tzinfo=ZoneInfo("Europe/Paris"))
    encoded = encode_value(value)
    assert encoded == {
        "$type": "timestamptz",
        "value": "2024-07-01T09:00:00+02:00",
        "zone": "Europe/Paris",
    }
    decoded = decode_value(json.loads(json.dumps(encoded)))
    assert decoded.tzinfo == ZoneInfo("Europe/Paris")
    assert decoded == value


def test_tuples_and_buffers_decode_as_lists_and_bytes() -> None:
    assert decode_value(encode_value((1, Decimal("2")))) == [1, Decimal("2")]
    assert decode_value(encode_value(bytearray(b"ab"))) == b"ab"
    assert decode_value(encode_value(memoryview(b"cd"))) == b"cd"


def test_subclasses_encode_as_their_base() -> None:
    class Color(enum.IntEnum):
        RED = 1

    class Mood(str, enum.Enum):  # noqa: UP042 - str() of this mixin is "Mood.HAPPY"
        HAPPY = "happy"

    assert encode_value(Color.RED) == 1
    assert type(encode_value(Color.RED)) is int
    assert encode_value(Mood.HAPPY) == "happy"


def test_unsupported_type_names_it() -> None:
    with pytest.raises(TypeError, match=r"builtins\.set.*add a transform"):
        encode_value({1, 2})


def test_unknown_tag_is_rejected() -> None:
    with pytest.raises(ValueError, match="not a laredo-json/1 value"):
        decode_value({"$type": "mystery", "value": 1})
    # an untagged object in a value position is the 0.1 spelling of a JSON object: read as
    # data during the compatibility window (see laredo.serialization)
    assert decode_value({"a": 1}) == {"a": 1}


def test_row_round_trip() -> None:
    row = {
        "id": 7,
        "price": Decimal("19.99"),
        "at": datetime(2024, 1, 1, tzinfo=UTC),
        "tags": ["a", "b"],
        "doc": {"k": [1, {"x": None}]},
        "blob": b"\x01",
        "gone": None,
    }
    wire = json.loads(json.dumps(encode_row(row)))
    assert decode_row(wire) == row
    assert decode_row(None) is None
