"""Typed-JSON decoding (``laredo.serialization``) raises only ``ValueError`` on any input."""

from __future__ import annotations

import contextlib
import json
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from laredo.serialization import decode_row, decode_value, encode_value, loads_row

pytestmark = pytest.mark.fuzz

TAGS = [
    "decimal",
    "float",
    "timestamptz",
    "timestamp",
    "date",
    "time",
    "timetz",
    "interval",
    "uuid",
    "bytes",
    "json",
    "map",
    "ip_address",
    "ip_interface",
    "ip_network",
    "unrepresentable",
    "datetime",
    "timedelta",
    "ip",
    "nope",
]
TRICKY = [
    "NaN",
    "sNaN",
    "Infinity",
    "-inf",
    "1e100000000",
    "-1E-999999999",
    "9" * 5000,
    "2026-01-01T00:00:00+00:00",
    "9999-12-31T23:59:59",
    "12:00:00+25:00",
    "Europe/Paris",
    "../../etc/passwd",
    "00000000-0000-0000-0000-000000000000",
    "AAAA",
    "=",
    "10.0.0.1/8",
    "::1",
    "network",
]
scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats()
    | st.text(max_size=12)
    | st.sampled_from(TRICKY)
)
KEYS = st.sampled_from(["$type", "value", "zone", "$t", "v", "z"]) | st.text(max_size=6)


def _tagged(children: Any) -> Any:
    return st.fixed_dictionaries(
        {"$type": st.sampled_from(TAGS) | scalars},
        optional={"value": children, "zone": scalars},
    ) | st.fixed_dictionaries(
        {"$t": st.sampled_from(TAGS) | scalars}, optional={"v": children, "z": scalars}
    )


json_values = st.recursive(
    scalars,
    lambda c: st.lists(c, max_size=4) | st.dictionaries(KEYS, c, max_size=4) | _tagged(c),
    max_leaves=25,
)


def _deep(n: int) -> list[Any]:
    """A list nested ``n`` deep (built without recursion)."""
    out: list[Any] = []
    for _ in range(n):
        out = [out]
    return out


@settings.get_profile("laredo-fuzz")
@given(json_values)
@example({"$type": "decimal", "value": "1e100000000"})
@example({"$type": "uuid", "value": 5})
@example({"$type": "ip_network", "value": True})
@example({"$t": "uuid", "v": 5})
@example({"$type": "map", "value": [[[[]], 1]]})
@example({"$t": "timedelta", "v": [10**20]})
@example({"$type": "timestamptz", "value": "2026-01-01T00:00:00+00:00", "zone": 5})
def test_decode_value_raises_only_value_error(obj: Any) -> None:
    with contextlib.suppress(ValueError):
        decode_value(obj)


@settings.get_profile("laredo-fuzz")
@given(st.dictionaries(KEYS, json_values, max_size=5))
def test_decode_row_raises_only_value_error(obj: Any) -> None:
    with contextlib.suppress(ValueError):
        assert type(decode_row(obj)) is dict


@settings.get_profile("laredo-fuzz")
@given(
    st.binary(max_size=200)
    | json_values.map(lambda v: json.dumps(v).encode())
    | st.dictionaries(KEYS, json_values, max_size=5).map(lambda v: json.dumps(v).encode())
)
@example(b"[" * 200_000)
@example(b'{"a": ' + b"[" * 100_000 + b"}")
@example(b'{"a": {"$type": "decimal", "value": "1e100000000"}}')
@example(b'{"a": {"$type": "interval", "value": "' + b"9" * 10_000 + b'"}}')
@example(b"\xff\xfe")
def test_loads_row_raises_only_value_error(data: bytes) -> None:
    with contextlib.suppress(ValueError):
        assert type(loads_row(data)) is dict


@settings.get_profile("laredo-fuzz")
@given(st.decimals(allow_nan=True, allow_infinity=True) | st.integers() | st.text())
def test_encoded_values_decode_to_themselves(value: Any) -> None:
    back = decode_value(json.loads(json.dumps(encode_value(value))))
    if isinstance(value, Decimal) and value.is_nan():
        assert isinstance(back, Decimal) and back.is_nan()
    else:
        assert back == value and type(back) is type(value)


def test_an_ip_payload_must_be_text() -> None:
    with pytest.raises(ValueError, match="expected a string"):
        decode_value({"$type": "ip_address", "value": 1})


def test_a_huge_decimal_is_rejected_not_expanded() -> None:
    with pytest.raises(ValueError, match="limit"):
        loads_row(b'{"a": {"$type": "decimal", "value": "1e100000000"}}')
    assert loads_row(b'{"a": {"$type": "decimal", "value": "1e131072"}}')["a"] == Decimal(
        "1e131072"
    )


def test_a_deeply_nested_value_raises_value_error() -> None:
    with pytest.raises(ValueError, match="nested too deeply"):
        decode_value(_deep(100_000))
