"""Typed JSON encoding of rows, shared by JSONL snapshots, dead letters and other file formats.

Plain JSON values (``str``, ``int``, ``float``, ``bool``, ``None``, ``list``, ``dict`` with string
keys) are written as themselves. Every other value becomes a *tagged object*
``{"$t": <tag>, "v": <payload>}`` so that decoding gives back the same Python type:

===============  =========================================================================
tag              value
===============  =========================================================================
``decimal``      ``Decimal``; payload ``str(value)`` (keeps the exponent: ``1.50`` stays ``1.50``)
``datetime``     ``datetime``; payload ISO 8601 (``+HH:MM`` offset when aware); a ``ZoneInfo``
                 zone is kept by name in ``"z"``
``date``         ``date``; ISO 8601
``time``         ``time``; ISO 8601 (offset when aware)
``timedelta``    ``timedelta``; payload ``[days, seconds, microseconds]``
``uuid``         ``UUID``; canonical string
``bytes``        ``bytes`` (``bytearray``/``memoryview`` decode as ``bytes``); base64
``float``        non-finite floats; payload ``"nan"``, ``"inf"`` or ``"-inf"``
``ip``           ``ipaddress`` address / network / interface; payload ``[kind, text]``
``map``          a ``dict`` that itself has a ``"$t"`` key, or non-string keys; payload
                 ``[[key, value], ...]`` (keys and values encoded)
===============  =========================================================================

Tuples and sets are not JSON: tuples are written as lists and decode as lists; other types
raise ``TypeError`` naming the type. Decoding is bottom-up (``json`` ``object_hook`` order), so
``loads_row(text)`` and ``decode_row(json.loads(text))`` give the same result.
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
)

TAG = "$t"

__all__ = [
    "TAG",
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


# -- values -------------------------------------------------------------------------------------


def _encode_special(v: Any) -> Any:
    """Tagged form of one non-JSON scalar (children are not visited)."""
    if isinstance(v, datetime):
        tz = v.tzinfo
        out: dict[str, Any] = {TAG: "datetime", "v": v.isoformat()}
        if isinstance(tz, ZoneInfo):
            out["z"] = tz.key
        return out
    if isinstance(v, date):
        return {TAG: "date", "v": v.isoformat()}
    if isinstance(v, Decimal):
        return {TAG: "decimal", "v": str(v)}
    if isinstance(v, uuid.UUID):
        return {TAG: "uuid", "v": str(v)}
    if isinstance(v, time):
        return {TAG: "time", "v": v.isoformat()}
    if isinstance(v, timedelta):
        return {TAG: "timedelta", "v": [v.days, v.seconds, v.microseconds]}
    if isinstance(v, bytes | bytearray | memoryview):
        return {TAG: "bytes", "v": base64.b64encode(bytes(v)).decode("ascii")}
    if isinstance(v, float):
        return {TAG: "float", "v": "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf")}
    if isinstance(v, ipaddress.IPv4Address | ipaddress.IPv6Address):
        return {TAG: "ip", "v": ["address", str(v)]}
    if isinstance(v, ipaddress.IPv4Network | ipaddress.IPv6Network):
        return {TAG: "ip", "v": ["network", str(v)]}
    if isinstance(v, ipaddress.IPv4Interface | ipaddress.IPv6Interface):
        return {TAG: "ip", "v": ["interface", str(v)]}
    raise TypeError(
        f"cannot encode a value of type {type(v).__module__}.{type(v).__qualname__}: "
        "convert it to a JSON value, Decimal, datetime, date, time, timedelta, UUID or bytes "
        "(e.g. with a transform)"
    )


def encode_value(v: Any) -> Any:
    """The JSON-able form of one value (recursive; see the module docstring)."""
    t = type(v)
    if t is str or t is int or t is bool or v is None:
        return v
    if t is float:
        return v if math.isfinite(v) else _encode_special(v)
    if t is dict:
        if TAG in v or not all(type(k) is str for k in v):
            return {TAG: "map", "v": [[encode_value(k), encode_value(x)] for k, x in v.items()]}
        return {k: encode_value(x) for k, x in v.items()}
    if t is list or t is tuple:
        return [encode_value(x) for x in v]
    if isinstance(v, bool | int | str):  # subclasses (IntEnum, StrEnum): their base value
        return v
    if isinstance(v, float):
        return encode_value(float(v))
    return _encode_special(v)


def encode_row(row: Row) -> dict[str, Any]:
    """The JSON-able form of a row (a dict of column name to value)."""
    out = encode_value(dict(row))
    assert isinstance(out, dict)
    return out


def _decode_ip(payload: list[str]) -> Any:
    kind, text = payload
    if kind == "address":
        return ipaddress.ip_address(text)
    if kind == "network":
        return ipaddress.ip_network(text)
    if kind == "interface":
        return ipaddress.ip_interface(text)
    raise ValueError(f"unknown ip kind {kind!r}")


def _decode_datetime(d: dict[str, Any]) -> datetime:
    value = datetime.fromisoformat(d["v"])
    zone = d.get("z")
    if zone is None:
        return value
    # same wall time in the named zone; the recorded offset picks the fold (DST overlaps)
    zi = ZoneInfo(zone)
    out = value.replace(tzinfo=zi, fold=0)
    if out.utcoffset() != value.utcoffset():
        out = value.replace(tzinfo=zi, fold=1)
    return out


def _decode_float(payload: str) -> float:
    if payload not in ("nan", "inf", "-inf"):
        raise ValueError(f"bad float payload {payload!r}")
    return float(payload)


_DECODERS: dict[str, Callable[[dict[str, Any]], Any]] = {
    "decimal": lambda d: Decimal(d["v"]),
    "datetime": _decode_datetime,
    "date": lambda d: date.fromisoformat(d["v"]),
    "time": lambda d: time.fromisoformat(d["v"]),
    "timedelta": lambda d: timedelta(*d["v"]),
    "uuid": lambda d: uuid.UUID(d["v"]),
    "bytes": lambda d: base64.b64decode(d["v"], validate=True),
    "float": lambda d: _decode_float(d["v"]),
    "ip": lambda d: _decode_ip(d["v"]),
    "map": lambda d: {k: x for k, x in d["v"]},
}


def object_hook(d: dict[str, Any]) -> Any:
    """``json`` object hook: turns tagged objects back into Python values (children first).

    Raises ``ValueError`` for an unknown tag or a malformed payload.
    """
    if TAG not in d:
        return d
    tag = d[TAG]
    try:
        # the common tags inline (this runs once per tagged value on the read path)
        if tag == "datetime" and "z" not in d:
            return datetime.fromisoformat(d["v"])
        if tag == "decimal":
            return Decimal(d["v"])
        decoder = _DECODERS.get(tag) if isinstance(tag, str) else None
        if decoder is None:
            raise ValueError(f"unknown type tag {tag!r} (written by a newer Laredo?)")
        return decoder(d)
    except (KeyError, TypeError, ValueError, IndexError, ArithmeticError) as exc:
        if "unknown type tag" in str(exc):
            raise
        raise ValueError(f"malformed {tag!r} value {d.get('v')!r}: {exc}") from None


def decode_value(obj: Any) -> Any:
    """Inverse of :func:`encode_value` for an already parsed JSON value."""
    t = type(obj)
    if t is dict:
        return object_hook({k: decode_value(x) for k, x in obj.items()})
    if t is list:
        return [decode_value(x) for x in obj]
    return obj


def decode_row(obj: Any) -> Row:
    """Inverse of :func:`encode_row`; raises ``ValueError`` unless the result is a row dict."""
    row = decode_value(obj)
    if type(row) is not dict:
        raise ValueError(f"expected a JSON object for a row, got {type(row).__name__}")
    return row


_DECODER = json.JSONDecoder(object_hook=object_hook)


def loads_row(text: str | bytes) -> Row:
    """Parse one encoded row from JSON text."""
    if isinstance(text, bytes | bytearray):
        text = text.decode("utf-8")
    row = _DECODER.decode(text)
    if type(row) is not dict:
        raise ValueError(f"expected a JSON object for a row, got {type(row).__name__}")
    return row


_FAST_TYPES = frozenset(
    {str, int, float, bool, type(None), Decimal, datetime, date, time, timedelta, uuid.UUID, bytes}
)


def _enc_datetime(v: datetime) -> dict[str, Any]:
    if v.tzinfo is None or type(v.tzinfo) is timezone:
        return {TAG: "datetime", "v": v.isoformat()}
    return _encode_special(v)  # type: ignore[no-any-return]


_BY_TYPE: dict[type, Callable[[Any], Any]] = {
    Decimal: lambda v: {TAG: "decimal", "v": str(v)},
    datetime: _enc_datetime,
    date: lambda v: {TAG: "date", "v": v.isoformat()},
    uuid.UUID: lambda v: {TAG: "uuid", "v": str(v)},
}


def _default(v: Any) -> Any:
    enc = _BY_TYPE.get(type(v))
    if enc is not None:
        return enc(v)
    return _encode_special(v)


class RowEncoder:
    """Fast row → JSON text encoder.

    Rows whose values are all scalars go straight through the C JSON encoder, non-JSON
    scalars being tagged by its ``default`` hook. Rows the fast path cannot write exactly
    (containers, whose keys ``json`` would coerce; non-finite floats; a column named ``"$t"``)
    take the exact path, :func:`encode_row`.
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
        if _FAST_TYPES.issuperset(map(type, row.values())) and TAG not in row:
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
        out.append(d)
    return out


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
            )
        )
    return tuple(out)


def encode_table_info(info: TableSnapshotInfo) -> dict[str, Any]:
    return {
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


def decode_table_info(obj: Any) -> TableSnapshotInfo:
    if not isinstance(obj, dict) or "table" not in obj:
        raise ValueError("expected a table snapshot header object with a 'table' key")
    row_count = obj.get("row_count", 0)
    if type(row_count) is not int or row_count < 0:
        raise ValueError(f"bad row_count {row_count!r}")
    position = obj.get("position")
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
        "user_meta": encode_value(dict(meta.user_meta)),
    }


def decode_metadata(obj: Any) -> SnapshotMetadata:
    if not isinstance(obj, dict) or not isinstance(obj.get("snapshot_id"), str):
        raise ValueError("expected a snapshot metadata object with a 'snapshot_id'")
    positions = obj.get("source_positions") or {}
    if not isinstance(positions, dict):
        raise ValueError("source_positions must be an object")
    user_meta = decode_value(obj.get("user_meta") or {})
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
