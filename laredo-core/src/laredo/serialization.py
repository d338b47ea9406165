"""``laredo-json/1``: the one typed JSON encoding of row values in Laredo.

Snapshots (JSONL), dead letters, the HTTP sync body, the fan-out wire, the gRPC services, the
Kinesis record format and the Spark runner all write values this way, so a value decodes to the
same Python type wherever it travelled.

A value is written as plain JSON when JSON holds it losslessly (``str``, ``int``, ``bool``,
``None``, finite ``float``; lists and tuples become arrays of encoded elements), and as a
tagged object ``{"$type": <tag>, "value": <payload>}`` otherwise. An object in a value position
is therefore always a tag, never data. A row is a JSON object of column name to encoded value
(a row with a column literally named ``$type`` or ``$t`` is written whole as a ``map``).

==================  ====================================================  =====================
tag                 ``value``                                             decodes to
==================  ====================================================  =====================
``decimal``         ``str(d)``: ``"1.50"``, ``"NaN"``, ``"1E+2"``         ``Decimal``
``float``           ``"NaN"``, ``"Infinity"`` or ``"-Infinity"``          ``float``
``timestamptz``     ISO 8601 with offset; an IANA zone name in ``"zone"``  aware ``datetime``
                    when the value had a ``ZoneInfo``
``timestamp``       ISO 8601 without offset                               naive ``datetime``
``date``            ``YYYY-MM-DD``                                        ``date``
``time``            ``HH:MM:SS[.ffffff]``                                 naive ``time``
``timetz``          ``HH:MM:SS[.ffffff]+HH:MM``                           aware ``time``
``interval``        total microseconds (a JSON integer)                   ``timedelta``
``uuid``            canonical hyphenated text                             ``UUID``
``bytes``           standard base64                                       ``bytes``
``json``            a JSON object, verbatim (string keys, plain values,   ``dict``
                    no key named ``$type`` or ``$t`` at any depth)
``map``             ``[[key, value], ...]``, keys and values encoded: any  ``dict`` (list keys
                    other ``dict``                                        become tuples)
``ip_address``,     ``str(v)``                                            ``ipaddress`` objects
``ip_interface``,
``ip_network``
``unrepresentable`` ``[type name, text]``: a source value no Python type     ``Unrepresentable``
                    holds (dead letters carry it; never a stored row)
==================  ====================================================  =====================

Date and timestamp infinities are the extreme values of their types (``date.max``,
``datetime.max``, in UTC for ``timestamptz``; see :mod:`laredo.types`): plain ``date`` and
``timestamp``/``timestamptz`` tags that decode back to the same values.

``bytearray``/``memoryview`` decode as ``bytes``, tuples as lists, subclasses (``IntEnum``,
``StrEnum``, ...) as their base type. Any other type raises ``TypeError`` naming it.

Compatibility: readers also accept the 0.1 spelling ``{"$t": <tag>, "v": <payload>}`` (tags
``datetime``, ``timedelta`` as ``[days, seconds, µs]``, ``ip`` as ``[kind, text]``, ``float``
as ``"nan"``/``"inf"``, and plain nested objects) until 0.3. Because tag objects never nest a
``$type`` key inside a ``json`` payload, bottom-up decoding (``json`` ``object_hook``, used by
:func:`loads_row`) and top-down decoding (:func:`decode_value`) give the same result.
"""

from __future__ import annotations

import base64
import ipaddress
import json
import math
import uuid
from collections.abc import Callable
from datetime import UTC, date, datetime, time, timedelta, timezone
from decimal import Decimal
from typing import Any
from zoneinfo import ZoneInfo

from .types import (
    ChangeAction,
    ChangeEvent,
    ColumnDefinition,
    DeadLetter,
    ErrorInfo,
    IndexDefinition,
    Row,
    SnapshotMetadata,
    TableIdentifier,
    TableSnapshotInfo,
    Unrepresentable,
)

ENCODING_NAME = "laredo-json/1"
TAG = "$type"
VALUE = "value"
LEGACY_TAG = "$t"

__all__ = [
    "DECIMAL_LIMIT",
    "ENCODING_NAME",
    "LEGACY_TAG",
    "TAG",
    "VALUE",
    "RowEncoder",
    "decode_change",
    "decode_columns",
    "decode_dead_letter",
    "decode_metadata",
    "decode_row",
    "decode_table",
    "decode_table_info",
    "decode_value",
    "dumps_row",
    "encode_change",
    "encode_columns",
    "encode_dead_letter",
    "encode_metadata",
    "encode_row",
    "encode_table",
    "encode_table_info",
    "encode_value",
    "loads_row",
    "object_hook",
]


# -- encoding -----------------------------------------------------------------------------------

_PLAIN: frozenset[type] = frozenset({str, int, bool, type(None)})
_US_PER_DAY = 86_400_000_000


def _float(v: float) -> Any:
    if math.isfinite(v):
        return v
    text = "NaN" if math.isnan(v) else ("Infinity" if v > 0 else "-Infinity")
    return {TAG: "float", VALUE: text}


def _datetime(v: datetime) -> dict[str, Any]:
    if v.tzinfo is None or v.utcoffset() is None:
        return {TAG: "timestamp", VALUE: v.isoformat()}
    out: dict[str, Any] = {TAG: "timestamptz", VALUE: v.isoformat()}
    if isinstance(v.tzinfo, ZoneInfo):
        out["zone"] = v.tzinfo.key
    return out


def _time(v: time) -> dict[str, Any]:
    if v.tzinfo is None or v.utcoffset() is None:
        return {TAG: "time", VALUE: v.isoformat()}
    return {TAG: "timetz", VALUE: v.isoformat()}


def _interval(v: timedelta) -> dict[str, Any]:
    return {TAG: "interval", VALUE: v.days * _US_PER_DAY + v.seconds * 1_000_000 + v.microseconds}


def _bytes(v: bytes | bytearray | memoryview) -> dict[str, Any]:
    return {TAG: "bytes", VALUE: base64.b64encode(v).decode("ascii")}


def _is_plain_json(v: Any) -> bool:
    """Can ``v`` travel verbatim inside a ``json`` tag (and decode bottom-up unchanged)?"""
    t = type(v)
    if t in _PLAIN:
        return True
    if t is float:
        return math.isfinite(v)
    if t is dict:
        if TAG in v or LEGACY_TAG in v:
            return False
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


def _dict(v: dict[Any, Any]) -> dict[str, Any]:
    if _is_plain_json(v):
        return {TAG: "json", VALUE: v}
    return {TAG: "map", VALUE: [[encode_value(k), encode_value(x)] for k, x in v.items()]}


def _list(v: list[Any] | tuple[Any, ...]) -> list[Any]:
    return [x if type(x) in _PLAIN else encode_value(x) for x in v]


def _decimal(v: Decimal) -> dict[str, Any]:
    return {TAG: "decimal", VALUE: str(v)}


def _date(v: date) -> dict[str, Any]:
    return {TAG: "date", VALUE: v.isoformat()}


def _uuid(v: uuid.UUID) -> dict[str, Any]:
    return {TAG: "uuid", VALUE: str(v)}


def _ip(tag: str) -> Callable[[Any], dict[str, Any]]:
    return lambda v: {TAG: tag, VALUE: str(v)}


def _unrepresentable(v: Unrepresentable) -> dict[str, Any]:
    return {TAG: "unrepresentable", VALUE: [v.type_name, v.text]}


def _decode_unrepresentable(payload: Any) -> Unrepresentable:
    type_name, text = payload
    return Unrepresentable(_text(type_name), _text(text))


_ENCODERS: dict[type, Callable[[Any], Any]] = {
    Unrepresentable: _unrepresentable,
    float: _float,
    Decimal: _decimal,
    datetime: _datetime,
    date: _date,
    time: _time,
    timedelta: _interval,
    uuid.UUID: _uuid,
    bytes: _bytes,
    bytearray: _bytes,
    memoryview: _bytes,
    dict: _dict,
    list: _list,
    tuple: _list,
    ipaddress.IPv4Address: _ip("ip_address"),
    ipaddress.IPv6Address: _ip("ip_address"),
    ipaddress.IPv4Interface: _ip("ip_interface"),
    ipaddress.IPv6Interface: _ip("ip_interface"),
    ipaddress.IPv4Network: _ip("ip_network"),
    ipaddress.IPv6Network: _ip("ip_network"),
}

# Subclasses (IntEnum, StrEnum, datetime subclasses, ...) resolve through the first matching
# base in this order; bool before int because bool is an int.
_BASES: tuple[tuple[type, Callable[[Any], Any]], ...] = (
    (bool, bool),
    (int, int),
    (str, str.__str__),
    (float, lambda v: _float(float(v))),
    (datetime, _datetime),
    (date, _date),
    (time, _time),
    (timedelta, _interval),
    (Decimal, _decimal),
    (uuid.UUID, _uuid),
    (bytes, _bytes),
    (dict, lambda v: _dict(dict(v))),
    (list, _list),
    (tuple, _list),
)


def encode_value(v: Any) -> Any:
    """The JSON-ready form of one value (see the module docstring for the tags).

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
        f"cannot encode a value of type {t.__module__}.{t.__qualname__}: add a transform that "
        "converts it to a supported type (str, int, float, bool, Decimal, datetime, date, time, "
        "timedelta, UUID, bytes, dict, list, ipaddress)"
    )


def encode_row(row: Row) -> dict[str, Any]:
    """The JSON-ready form of a row: column name to encoded value (a ``map`` tag for a row
    with a column named ``$type`` or ``$t``)."""
    if TAG in row or LEGACY_TAG in row:
        return _dict(dict(row))
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


# -- decoding -----------------------------------------------------------------------------------


def _decode_map(pairs: Any) -> dict[Any, Any]:
    out: dict[Any, Any] = {}
    for k, x in pairs:
        out[tuple(k) if isinstance(k, list) else k] = x
    return out


def _in_zone(value: datetime, zone: str) -> datetime:
    """``value`` (with a fixed offset) in the named zone, keeping its wall time: the same
    Python value that was encoded, even for a wall time a DST change skips or repeats (the
    recorded offset picks the fold)."""
    zi = ZoneInfo(zone)
    for fold in (0, 1):
        out = value.replace(tzinfo=zi, fold=fold)
        if out.utcoffset() == value.utcoffset():
            return out
    return value.astimezone(zi)


def _decode_timestamptz(tagged: dict[str, Any]) -> datetime:
    value = datetime.fromisoformat(tagged[VALUE])
    zone = tagged.get("zone")
    return _in_zone(value, zone) if zone else value


def _decode_float(text: str) -> float:
    if text not in ("NaN", "Infinity", "-Infinity"):
        raise ValueError(f"invalid float value {text!r} (use NaN, Infinity or -Infinity)")
    return float(text.replace("Infinity", "inf"))


DECIMAL_LIMIT = 150_000
"""Largest adjusted exponent (either sign) and text length of a decoded decimal (and of a
fan-out filter's decimal value). PostgreSQL's
``numeric`` stays inside it (131072 digits before the point, 16383 after); a larger value is
rejected, so no reader can be made to expand ``1e100000000`` into a huge integer."""


def _decode_decimal(payload: Any) -> Decimal:
    d = Decimal(payload)
    exp = d.adjusted()
    if -DECIMAL_LIMIT <= exp <= DECIMAL_LIMIT and (
        type(payload) is not str or len(payload) <= DECIMAL_LIMIT
    ):
        return d
    raise ValueError(
        f"decimal beyond the limit of {DECIMAL_LIMIT} digits or exponent (exponent {exp})"
    )


def _text(payload: Any) -> str:
    """A payload that must be text (``ipaddress`` would also take an int, or a bool)."""
    if type(payload) is not str:
        raise TypeError(f"expected a string, got {type(payload).__name__}")
    return payload


# Decoders receive the tagged object whose payload is already decoded (bottom-up).
_DECODERS: dict[str, Callable[[dict[str, Any]], Any]] = {
    "decimal": lambda t: _decode_decimal(t[VALUE]),
    "float": lambda t: _decode_float(t[VALUE]),
    "timestamptz": _decode_timestamptz,
    "timestamp": lambda t: datetime.fromisoformat(t[VALUE]),
    "date": lambda t: date.fromisoformat(t[VALUE]),
    "time": lambda t: time.fromisoformat(t[VALUE]),
    "timetz": lambda t: time.fromisoformat(t[VALUE]),
    "interval": lambda t: timedelta(microseconds=int(t[VALUE])),
    "uuid": lambda t: uuid.UUID(t[VALUE]),
    "bytes": lambda t: base64.b64decode(t[VALUE], validate=True),
    "json": lambda t: t[VALUE],
    "map": lambda t: _decode_map(t[VALUE]),
    "ip_address": lambda t: ipaddress.ip_address(_text(t[VALUE])),
    "ip_interface": lambda t: ipaddress.ip_interface(_text(t[VALUE])),
    "ip_network": lambda t: ipaddress.ip_network(_text(t[VALUE])),
    "unrepresentable": lambda t: _decode_unrepresentable(t[VALUE]),
}


def _legacy_datetime(d: dict[str, Any]) -> datetime:
    value = datetime.fromisoformat(d["v"])
    zone = d.get("z")
    return value if zone is None else _in_zone(value, zone)


def _legacy_ip(payload: list[str]) -> Any:
    kind, text = payload
    if kind == "address":
        return ipaddress.ip_address(text)
    if kind == "network":
        return ipaddress.ip_network(text)
    if kind == "interface":
        return ipaddress.ip_interface(text)
    raise ValueError(f"unknown ip kind {kind!r}")


def _legacy_float(payload: str) -> float:
    if payload not in ("nan", "inf", "-inf"):
        raise ValueError(f"bad float payload {payload!r}")
    return float(payload)


# The 0.1 spelling {"$t": tag, "v": payload}; read until 0.3.
_LEGACY_DECODERS: dict[str, Callable[[dict[str, Any]], Any]] = {
    "decimal": lambda d: _decode_decimal(d["v"]),
    "datetime": _legacy_datetime,
    "date": lambda d: date.fromisoformat(d["v"]),
    "time": lambda d: time.fromisoformat(d["v"]),
    "timedelta": lambda d: timedelta(*d["v"]),
    "uuid": lambda d: uuid.UUID(d["v"]),
    "bytes": lambda d: base64.b64decode(d["v"], validate=True),
    "float": lambda d: _legacy_float(d["v"]),
    "ip": lambda d: _legacy_ip(d["v"]),
    "map": lambda d: _decode_map(d["v"]),
}


def _decode_tagged(d: dict[str, Any], tag: Any, table: dict[str, Callable[..., Any]]) -> Any:
    decoder = table.get(tag) if isinstance(tag, str) else None
    if decoder is None:
        raise ValueError(
            f"not a laredo-json/1 value: unknown type tag {tag!r} (written by a newer Laredo?)"
        )
    try:
        return decoder(d)
    except (KeyError, TypeError, ValueError, IndexError, ArithmeticError, AttributeError) as exc:
        payload = d.get(VALUE, d.get("v"))
        raise ValueError(f"malformed {tag!r} value {payload!r}: {exc}") from None


def object_hook(d: dict[str, Any]) -> Any:
    """``json`` object hook: turns tagged objects back into Python values (children first).

    Objects without a tag are returned as they are (rows; 0.1 plain nested objects). Raises
    ``ValueError`` for an unknown tag or a malformed payload.
    """
    tag = d.get(TAG)
    if tag is not None:
        # the common tags inline (this runs once per tagged value on the read path)
        if tag == "decimal":
            try:
                return _decode_decimal(d[VALUE])
            except (KeyError, ArithmeticError, TypeError, ValueError):
                pass  # reported with context below
        elif tag == "timestamptz" and "zone" not in d:
            try:
                return datetime.fromisoformat(d[VALUE])
            except (KeyError, TypeError, ValueError):
                pass
        return _decode_tagged(d, tag, _DECODERS)
    if LEGACY_TAG in d:
        return _decode_tagged(d, d[LEGACY_TAG], _LEGACY_DECODERS)
    return d


def _decode(obj: Any) -> Any:
    t = type(obj)
    if t is dict:
        if obj.get(TAG) == "json":
            return obj.get(VALUE)
        return object_hook({k: _decode(x) for k, x in obj.items()})
    if t is list:
        return [_decode(x) for x in obj]
    return obj


def decode_value(obj: Any) -> Any:
    """Inverse of :func:`encode_value` for an already parsed JSON value. Raises only
    ``ValueError`` for a value it cannot decode (too deeply nested included)."""
    try:
        return _decode(obj)
    except RecursionError:
        raise ValueError("not a laredo-json/1 value: nested too deeply") from None


def decode_row(obj: Any) -> Row:
    """Inverse of :func:`encode_row`; raises ``ValueError`` unless the result is a row dict."""
    row = decode_value(obj)
    if type(row) is not dict:
        raise ValueError(f"expected a JSON object for a row, got {type(row).__name__}")
    return row


_DECODER = json.JSONDecoder(object_hook=object_hook)


def loads_row(text: str | bytes) -> Row:
    """Parse one encoded row from JSON text; raises only ``ValueError`` (``UnicodeDecodeError``
    and ``json.JSONDecodeError`` are ValueErrors) for text that is not one."""
    if isinstance(text, bytes | bytearray):
        text = text.decode("utf-8")
    try:
        row = _DECODER.decode(text)
    except RecursionError:
        raise ValueError("not a laredo-json/1 row: nested too deeply") from None
    if type(row) is not dict:
        raise ValueError(f"expected a JSON object for a row, got {type(row).__name__}")
    return row


# -- the fast row encoder -----------------------------------------------------------------------

_FAST_TYPES = frozenset(
    {str, int, float, bool, type(None), Decimal, datetime, date, time, timedelta, uuid.UUID, bytes}
)


def _fast_datetime(v: datetime) -> dict[str, Any]:
    if v.tzinfo is None:
        return {TAG: "timestamp", VALUE: v.isoformat()}
    if type(v.tzinfo) is timezone:
        return {TAG: "timestamptz", VALUE: v.isoformat()}
    return _datetime(v)


_BY_TYPE: dict[type, Callable[[Any], Any]] = {
    **_ENCODERS,
    Decimal: _decimal,
    datetime: _fast_datetime,
}


def _default(v: Any) -> Any:
    enc = _BY_TYPE.get(type(v))
    if enc is not None:
        return enc(v)
    return encode_value(v)


class RowEncoder:
    """Fast row → JSON text encoder.

    Rows whose values are all scalars go straight through the C JSON encoder, non-JSON scalars
    being tagged by its ``default`` hook. Rows the fast path cannot write exactly (containers;
    non-finite floats; a column named ``$type`` or ``$t``) take the exact path,
    :func:`encode_row`.
    """

    __slots__ = ("_encode", "_plain")

    def __init__(self) -> None:
        self._encode = json.JSONEncoder(
            default=_default, allow_nan=False, ensure_ascii=False, separators=(",", ":")
        ).encode
        self._plain = json.JSONEncoder(
            allow_nan=False, ensure_ascii=False, separators=(",", ":")
        ).encode

    def dumps(self, row: Row) -> str:
        if type(row) is not dict:  # a read-only row view (Mapping): the C encoder takes dicts
            row = dict(row)
        if (
            _FAST_TYPES.issuperset(map(type, row.values()))
            and TAG not in row
            and LEGACY_TAG not in row
        ):
            try:
                text: str = self._encode(row)
                return text
            except ValueError:  # NaN / infinity: tagged on the exact path
                pass
        return self._plain(encode_row(row))


def dumps_row(row: Row) -> str:
    """Encode one row to compact JSON text (exact; see :class:`RowEncoder` for bulk use)."""
    return RowEncoder().dumps(row)


# -- metadata types -------------------------------------------------------------------------


def encode_table(table: TableIdentifier) -> dict[str, str]:
    return {"schema": table.schema, "table": table.table}


def decode_table(obj: Any) -> TableIdentifier:
    """Accepts ``{"schema": ..., "table": ...}`` or the text form ``"schema.table"``."""
    if isinstance(obj, str):
        return TableIdentifier.parse(obj)
    if isinstance(obj, dict) and isinstance(obj.get("schema"), str):
        table = obj.get("table")
        if isinstance(table, str):
            return TableIdentifier(obj["schema"], table)
    raise ValueError(f"expected a table {{'schema': ..., 'table': ...}}, got {obj!r}")


def encode_columns(columns: Any) -> list[dict[str, Any]]:
    out = []
    for c in columns:
        d: dict[str, Any] = {
            "name": c.name,
            "type": c.type,
            "ordinal_position": c.ordinal_position,
            "nullable": c.nullable,
            "primary_key": c.primary_key,
            "primary_key_ordinal": c.primary_key_ordinal,
            "type_oid": c.type_oid,
        }
        if c.default_value is not None:
            d["default_value"] = c.default_value
        if c.max_length:
            d["max_length"] = c.max_length
        if c.precision is not None:
            d["precision"] = c.precision
        if c.scale is not None:
            d["scale"] = c.scale
        out.append(d)
    return out


def _optional_int(v: Any) -> int | None:
    return None if v is None else int(v)


def decode_columns(obj: Any) -> tuple[ColumnDefinition, ...]:
    if not isinstance(obj, list):
        raise ValueError(f"expected a list of columns, got {type(obj).__name__}")
    out = []
    for d in obj:
        if not isinstance(d, dict) or not isinstance(d.get("name"), str):
            raise ValueError(f"bad column definition {d!r}")
        out.append(
            ColumnDefinition(
                name=d["name"],
                type=str(d.get("type", "text")),
                ordinal_position=int(d.get("ordinal_position", 0)),
                nullable=bool(d.get("nullable", True)),
                primary_key=bool(d.get("primary_key", False)),
                primary_key_ordinal=int(d.get("primary_key_ordinal", 0)),
                type_oid=int(d.get("type_oid", 0)),
                default_value=d.get("default_value"),
                max_length=int(d.get("max_length", 0)),
                precision=_optional_int(d.get("precision")),
                scale=_optional_int(d.get("scale")),
            )
        )
    return tuple(out)


def encode_table_info(info: TableSnapshotInfo) -> dict[str, Any]:
    out = {
        "table": encode_table(info.table),
        "row_count": info.row_count,
        "columns": encode_columns(info.columns),
        "target_type": info.target_type,
        "indexes": [
            {"name": i.name, "fields": list(i.fields), "unique": i.unique} for i in info.indexes
        ],
        "position": info.position,
        "pipeline_id": info.pipeline_id,
    }
    if info.progress is not None:  # a chunked baseline part way through (issue 32)
        out["progress"] = info.progress
    return out


def decode_table_info(obj: Any) -> TableSnapshotInfo:
    if not isinstance(obj, dict) or "table" not in obj:
        raise ValueError("expected a table snapshot header object with a 'table' key")
    row_count = obj.get("row_count", 0)
    if type(row_count) is not int or row_count < 0:
        raise ValueError(f"bad row_count {row_count!r}")
    position = obj.get("position")
    progress = obj.get("progress")
    return TableSnapshotInfo(
        table=decode_table(obj["table"]),
        row_count=row_count,
        columns=decode_columns(obj.get("columns", [])),
        target_type=str(obj.get("target_type", "")),
        indexes=tuple(
            IndexDefinition(i["name"], i["fields"], bool(i.get("unique", False)))
            for i in obj.get("indexes", [])
        ),
        position=None if position is None else str(position),
        pipeline_id=str(obj.get("pipeline_id", "")),
        progress=None if progress is None else str(progress),
    )


def _dt(value: datetime) -> str:
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.isoformat()


def _parse_dt(text: Any) -> datetime:
    if not isinstance(text, str):
        raise ValueError(f"expected an ISO 8601 timestamp, got {text!r}")
    value = datetime.fromisoformat(text)
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value


def encode_metadata(meta: SnapshotMetadata) -> dict[str, Any]:
    """JSON form of snapshot metadata; ``created_at`` is ISO 8601 (naive is taken as UTC)."""
    return {
        "snapshot_id": meta.snapshot_id,
        "created_at": _dt(meta.created_at),
        "format": meta.format,
        "source_positions": dict(meta.source_positions),
        "tables": [encode_table_info(t) for t in meta.tables],
        "user_meta": encode_row(dict(meta.user_meta)),
    }


def decode_metadata(obj: Any) -> SnapshotMetadata:
    if not isinstance(obj, dict) or not isinstance(obj.get("snapshot_id"), str):
        raise ValueError("expected a snapshot metadata object with a 'snapshot_id'")
    positions = obj.get("source_positions") or {}
    if not isinstance(positions, dict):
        raise ValueError("source_positions must be an object")
    user_meta = decode_row(obj.get("user_meta") or {})
    if not isinstance(user_meta, dict):
        raise ValueError("user_meta must be an object")
    return SnapshotMetadata(
        snapshot_id=obj["snapshot_id"],
        created_at=_parse_dt(obj.get("created_at")),
        source_positions={str(k): str(v) for k, v in positions.items()},
        tables=tuple(decode_table_info(t) for t in obj.get("tables", [])),
        format=str(obj.get("format", "jsonl")),
        user_meta=user_meta,
    )


def _encode_position(position: Any) -> Any:
    try:
        return encode_value(position)
    except TypeError:
        return str(position)


def encode_change(event: ChangeEvent, position: str | None = None) -> dict[str, Any]:
    """JSON form of a change. ``position`` is the caller's serialised position
    (``source.position_to_string``); without it the event's position is encoded as a value
    when it is one (``str``, ``int``, ...) and as ``str(position)`` otherwise."""
    return {
        "table": encode_table(event.table),
        "action": event.action.name,
        "position": position if position is not None else _encode_position(event.position),
        "timestamp": None if event.timestamp is None else encode_value(event.timestamp),
        "commit_timestamp": (
            None if event.commit_timestamp is None else encode_value(event.commit_timestamp)
        ),
        "xid": event.xid,
        "new_values": None if event.new_values is None else encode_row(event.new_values),
        "old_values": None if event.old_values is None else encode_row(event.old_values),
        "unchanged_toast": sorted(event.unchanged_toast),
    }


def decode_change(obj: Any, parse_position: Callable[[str], Any] | None = None) -> ChangeEvent:
    """Inverse of :func:`encode_change`; ``parse_position`` turns a string position back into
    the source's type (``source.position_from_string``)."""
    if not isinstance(obj, dict) or "action" not in obj:
        raise ValueError("expected a change event object with an 'action'")
    position = decode_value(obj.get("position"))
    if parse_position is not None and isinstance(position, str):
        position = parse_position(position)
    new_values = obj.get("new_values")
    old_values = obj.get("old_values")
    return ChangeEvent(
        table=decode_table(obj["table"]),
        action=ChangeAction[obj["action"]],
        position=position,
        timestamp=decode_value(obj.get("timestamp")),
        new_values=None if new_values is None else decode_row(new_values),
        old_values=None if old_values is None else decode_row(old_values),
        xid=int(obj.get("xid", 0)),
        commit_timestamp=decode_value(obj.get("commit_timestamp")),
        unchanged_toast=frozenset(obj.get("unchanged_toast", ())),
    )


def encode_dead_letter(entry: DeadLetter) -> dict[str, Any]:
    return {
        "pipeline_id": entry.pipeline_id,
        "written_at": _dt(entry.written_at),
        "error": {"message": entry.error.message, "error_type": entry.error.error_type},
        "position": entry.position,
        "change": encode_change(entry.change, entry.position),
    }


def decode_dead_letter(obj: Any, parse_position: Callable[[str], Any] | None = None) -> DeadLetter:
    if not isinstance(obj, dict) or "change" not in obj:
        raise ValueError("expected a dead-letter object with a 'change'")
    err = obj.get("error") or {}
    position = obj.get("position")
    return DeadLetter(
        pipeline_id=str(obj["pipeline_id"]),
        change=decode_change(obj["change"], parse_position),
        error=ErrorInfo(str(err.get("message", "")), str(err.get("error_type", ""))),
        written_at=_parse_dt(obj.get("written_at")),
        position=None if position is None else str(position),
    )
