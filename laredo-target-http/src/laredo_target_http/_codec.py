"""The typed JSON encoding of row values (``laredo-json/1``).

A value is written as plain JSON when JSON holds it losslessly (``str``, ``int``, ``bool``,
``None``, finite ``float``; lists and tuples become JSON arrays of encoded elements), and as a
tagged object ``{"$type": <tag>, "value": <text or number>}`` otherwise. A JSON object in a value
position is therefore always a tag, never data, so decoding is unambiguous.

=============  ===================================================  ==========================
tag            ``value``                                            Python type decoded
=============  ===================================================  ==========================
``decimal``    ``str(d)``, e.g. ``"1.50"``, ``"NaN"``, ``"1E+2"``    ``decimal.Decimal``
``float``      ``"NaN"``, ``"Infinity"`` or ``"-Infinity"``          ``float``
``timestamptz``ISO-8601 with offset; ``"zone"`` key holds an IANA    aware ``datetime``
               zone name when the value had one
``timestamp``  ISO-8601 without offset                              naive ``datetime``
``date``       ``YYYY-MM-DD``                                       ``date``
``time``       ``HH:MM:SS[.ffffff]``                                naive ``time``
``timetz``     ``HH:MM:SS[.ffffff]+HH:MM``                          aware ``time``
``interval``   total microseconds (JSON integer)                    ``timedelta``
``uuid``       canonical hyphenated text                            ``uuid.UUID``
``bytes``      standard base64                                      ``bytes``
``json``       a JSON object, verbatim (every nested value is plain ``dict``
               JSON: strings, numbers, booleans, null, arrays,
               objects)
``map``        ``[[key, value], ...]`` of encoded keys and values:  ``dict``
               a dict that is not plain JSON (non-string keys, or
               nested values that need tags)
``ip_address`` / ``ip_interface`` / ``ip_network``: ``str(v)``      ``ipaddress`` objects
=============  ===================================================  ==========================

Tuples decode as lists, ``bytearray``/``memoryview`` as ``bytes``. Integers are JSON integers of
any size (JavaScript receivers lose precision above 2**53). Any other type raises ``TypeError``:
add a transform that converts it.
"""

from __future__ import annotations

import base64
import ipaddress
import math
import uuid
from collections.abc import Callable
from datetime import date, datetime, time, timedelta
from decimal import Decimal
from typing import Any
from zoneinfo import ZoneInfo

ENCODING_NAME = "laredo-json/1"
TAG = "$type"

_PLAIN: frozenset[type] = frozenset({str, int, bool, type(None)})
_US_PER_DAY = 86_400_000_000


def _float(v: float) -> Any:
    if math.isfinite(v):
        return v
    text = "NaN" if math.isnan(v) else ("Infinity" if v > 0 else "-Infinity")
    return {TAG: "float", "value": text}


def _datetime(v: datetime) -> Any:
    if v.tzinfo is None or v.utcoffset() is None:
        return {TAG: "timestamp", "value": v.isoformat()}
    out: dict[str, Any] = {TAG: "timestamptz", "value": v.isoformat()}
    if isinstance(v.tzinfo, ZoneInfo):
        out["zone"] = v.tzinfo.key
    return out


def _time(v: time) -> Any:
    if v.tzinfo is None or v.utcoffset() is None:
        return {TAG: "time", "value": v.isoformat()}
    return {TAG: "timetz", "value": v.isoformat()}


def _interval(v: timedelta) -> Any:
    return {
        TAG: "interval",
        "value": v.days * _US_PER_DAY + v.seconds * 1_000_000 + v.microseconds,
    }


def _bytes(v: bytes | bytearray | memoryview) -> Any:
    return {TAG: "bytes", "value": base64.b64encode(v).decode("ascii")}


def _is_plain_json(v: Any) -> bool:
    t = type(v)
    if t in _PLAIN:
        return True
    if t is float:
        return math.isfinite(v)
    if t is dict:
        for k, x in v.items():
            if type(k) is not str or (type(x) not in _PLAIN and not _is_plain_json(x)):
                return False
        return True
    if t is list:
        for x in v:  # noqa: SIM110 - a plain loop is faster than all() here
            if type(x) not in _PLAIN and not _is_plain_json(x):
                return False
        return True
    return False


def _dict(v: dict[Any, Any]) -> Any:
    if _is_plain_json(v):
        return {TAG: "json", "value": v}
    return {TAG: "map", "value": [[encode_value(k), encode_value(x)] for k, x in v.items()]}


def _list(v: list[Any] | tuple[Any, ...]) -> Any:
    return [x if type(x) in _PLAIN else encode_value(x) for x in v]


_ENCODERS: dict[type, Callable[[Any], Any]] = {
    float: _float,
    Decimal: lambda v: {TAG: "decimal", "value": str(v)},
    datetime: _datetime,
    date: lambda v: {TAG: "date", "value": v.isoformat()},
    time: _time,
    timedelta: _interval,
    uuid.UUID: lambda v: {TAG: "uuid", "value": str(v)},
    bytes: _bytes,
    bytearray: _bytes,
    memoryview: _bytes,
    dict: _dict,
    list: _list,
    tuple: _list,
    ipaddress.IPv4Address: lambda v: {TAG: "ip_address", "value": str(v)},
    ipaddress.IPv6Address: lambda v: {TAG: "ip_address", "value": str(v)},
    ipaddress.IPv4Interface: lambda v: {TAG: "ip_interface", "value": str(v)},
    ipaddress.IPv6Interface: lambda v: {TAG: "ip_interface", "value": str(v)},
    ipaddress.IPv4Network: lambda v: {TAG: "ip_network", "value": str(v)},
    ipaddress.IPv6Network: lambda v: {TAG: "ip_network", "value": str(v)},
}

# Subclasses (IntEnum, str enums, datetime subclasses, ...) resolve through the first matching
# base in this order; bool is a subclass of int and is handled by the plain fast path.
_BASES: tuple[tuple[type, Callable[[Any], Any]], ...] = (
    (bool, bool),
    (int, int),
    (str, str.__str__),
    (float, lambda v: _float(float(v))),
    (datetime, _datetime),
    (date, lambda v: {TAG: "date", "value": v.isoformat()}),
    (time, _time),
    (timedelta, _interval),
    (Decimal, lambda v: {TAG: "decimal", "value": str(v)}),
    (uuid.UUID, lambda v: {TAG: "uuid", "value": str(v)}),
    (bytes, _bytes),
    (dict, lambda v: _dict(dict(v))),
    (list, _list),
    (tuple, _list),
)


def encode_value(v: Any) -> Any:
    """Encode one value into JSON-ready data (see the module docstring for the tags).

    Raises ``TypeError`` naming the type when the value has no lossless encoding.
    """
    t = type(v)
    if t in _PLAIN:
        return v
    enc = _ENCODERS.get(t)
    if enc is not None:
        return enc(v)
    for base, fn in _BASES:
        if isinstance(v, base):
            return fn(v)
    raise TypeError(
        f"cannot encode a value of type {t.__module__}.{t.__qualname__} for HTTP sync; "
        f"add a transform that converts it to a supported type (str, int, float, bool, Decimal, "
        f"datetime, date, time, timedelta, UUID, bytes, dict, list, ipaddress)"
    )


def encode_row(row: dict[str, Any]) -> dict[str, Any]:
    """Encode every value of a row (keys stay as they are)."""
    plain = _PLAIN
    encoders = _ENCODERS
    out = {}
    for k, v in row.items():
        t = type(v)
        if t in plain:
            out[k] = v
        else:
            enc = encoders.get(t)
            out[k] = enc(v) if enc is not None else encode_value(v)
    return out


def _decode_map(v: Any) -> dict[Any, Any]:
    out: dict[Any, Any] = {}
    for k, x in v:
        key = decode_value(k)
        if isinstance(key, list):
            key = tuple(key)
        out[key] = decode_value(x)
    return out


def _decode_timestamptz(tagged: dict[str, Any]) -> datetime:
    value = datetime.fromisoformat(tagged["value"])
    zone = tagged.get("zone")
    if zone:
        value = value.astimezone(ZoneInfo(zone))
    return value


def _decode_float(text: str) -> float:
    if text not in ("NaN", "Infinity", "-Infinity"):
        raise ValueError(f"invalid float tag value {text!r}")
    return float(text.replace("Infinity", "inf"))


_DECODERS: dict[str, Callable[[dict[str, Any]], Any]] = {
    "decimal": lambda t: Decimal(t["value"]),
    "float": lambda t: _decode_float(t["value"]),
    "timestamptz": _decode_timestamptz,
    "timestamp": lambda t: datetime.fromisoformat(t["value"]),
    "date": lambda t: date.fromisoformat(t["value"]),
    "time": lambda t: time.fromisoformat(t["value"]),
    "timetz": lambda t: time.fromisoformat(t["value"]),
    "interval": lambda t: timedelta(microseconds=int(t["value"])),
    "uuid": lambda t: uuid.UUID(t["value"]),
    "bytes": lambda t: base64.b64decode(t["value"], validate=True),
    "json": lambda t: t["value"],
    "map": lambda t: _decode_map(t["value"]),
    "ip_address": lambda t: ipaddress.ip_address(t["value"]),
    "ip_interface": lambda t: ipaddress.ip_interface(t["value"]),
    "ip_network": lambda t: ipaddress.ip_network(t["value"]),
}


def decode_value(v: Any) -> Any:
    """Invert ``encode_value`` on parsed JSON data. Unknown tags raise ``ValueError``."""
    if isinstance(v, dict):
        tag = v.get(TAG)
        fn = _DECODERS.get(tag) if isinstance(tag, str) else None
        if fn is None:
            raise ValueError(f"not a laredo-json/1 value: object with {TAG}={tag!r}")
        return fn(v)
    if isinstance(v, list):
        return [decode_value(x) for x in v]
    return v


def decode_row(row: dict[str, Any] | None) -> dict[str, Any] | None:
    """Decode every value of an encoded row (``None`` stays ``None``)."""
    if row is None:
        return None
    return {k: decode_value(v) for k, v in row.items()}


def decode_change(change: dict[str, Any]) -> dict[str, Any]:
    """Decode one change of a ``/changes`` body: values, and ``timestamp``/``commit_timestamp``
    parsed into ``datetime``. Other fields are returned as sent."""
    out = dict(change)
    out["new"] = decode_row(change.get("new"))
    out["old"] = decode_row(change.get("old"))
    for key in ("timestamp", "commit_timestamp"):
        if out.get(key) is not None:
            out[key] = datetime.fromisoformat(out[key])
    return out
