"""Key values as users type them: text (or a JSON scalar) converted to the key column's type.

``laredo query get public.accounts '"42"'`` finds the row whose integer ``id`` is 42, and a
uuid, numeric, timestamp or date key may be given as its text. The conversion follows the
column types the target was initialised with (else the source's catalog); a value that does
not parse as the column's type is a ``ValueError`` naming the field, its type and the value.
Values of a type the table does not declare (or of a type this module does not know) pass
through unchanged.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from datetime import UTC, date, datetime
from decimal import Decimal, InvalidOperation
from typing import Any

from laredo.contracts import SecondaryIndexed
from laredo.types import ColumnDefinition, TableIdentifier, primary_key_columns

from ..capabilities import UniqueLookup

__all__ = ["coerce_key", "index_fields", "key_fields"]

_INT = frozenset({"int2", "int4", "int8", "smallint", "integer", "int", "bigint", "oid"})
_NUMERIC = frozenset({"numeric", "decimal"})
_FLOAT = frozenset({"float4", "float8", "real", "double precision", "float"})
_TEXT = frozenset(
    {"text", "varchar", "bpchar", "character varying", "character", "char", "name", "citext"}
)


def _base(type_name: str) -> str:
    """``numeric(12,2)`` -> ``numeric``; ``character varying(80)`` -> ``character varying``."""
    return type_name.split("(", 1)[0].strip().lower()


def _to_int(v: Any) -> int:
    if isinstance(v, bool):
        raise ValueError("a boolean is not an integer")
    if isinstance(v, int):
        return v
    if isinstance(v, Decimal | float) and v == int(v):
        return int(v)
    if isinstance(v, str):
        return int(v.strip())
    raise ValueError("not an integer")


def _to_decimal(v: Any) -> Decimal:
    if isinstance(v, bool):
        raise ValueError("a boolean is not a number")
    if isinstance(v, Decimal):
        return v
    try:
        return Decimal(str(v).strip())
    except InvalidOperation:
        raise ValueError("not a number") from None


def _to_float(v: Any) -> float:
    if isinstance(v, bool):
        raise ValueError("a boolean is not a number")
    return float(v)


def _to_uuid(v: Any) -> uuid.UUID:
    return v if isinstance(v, uuid.UUID) else uuid.UUID(str(v).strip())


def _to_timestamp(v: Any, aware: bool) -> datetime:
    when = v if isinstance(v, datetime) else datetime.fromisoformat(str(v).strip())
    if aware and when.tzinfo is None:
        return when.replace(tzinfo=UTC)  # text without an offset is taken as UTC
    if not aware and when.tzinfo is not None:
        raise ValueError("has a time zone offset; the column is a timestamp without time zone")
    return when


def _to_date(v: Any) -> date:
    if isinstance(v, date) and not isinstance(v, datetime):
        return v
    return date.fromisoformat(str(v).strip())


def _to_bool(v: Any) -> bool:
    if isinstance(v, bool):
        return v
    text = str(v).strip().lower()
    if text in ("t", "true", "y", "yes", "on", "1"):
        return True
    if text in ("f", "false", "n", "no", "off", "0"):
        return False
    raise ValueError("not a boolean (true or false)")


def _to_text(v: Any) -> str:
    if isinstance(v, str):
        return v
    if isinstance(v, bool | dict | list) or v is None:
        raise ValueError("not text")
    return str(v)


_CONVERTERS: dict[str, Callable[[Any], Any]] = {
    **dict.fromkeys(_INT, _to_int),
    **dict.fromkeys(_NUMERIC, _to_decimal),
    **dict.fromkeys(_FLOAT, _to_float),
    **dict.fromkeys(_TEXT, _to_text),
    "uuid": _to_uuid,
    "timestamp": lambda v: _to_timestamp(v, aware=False),
    "timestamp without time zone": lambda v: _to_timestamp(v, aware=False),
    "timestamptz": lambda v: _to_timestamp(v, aware=True),
    "timestamp with time zone": lambda v: _to_timestamp(v, aware=True),
    "date": _to_date,
    "bool": _to_bool,
    "boolean": _to_bool,
}


def coerce_key(
    values: Sequence[Any],
    fields: Sequence[str],
    columns: Sequence[ColumnDefinition],
    table: TableIdentifier,
) -> list[Any]:
    """``values`` converted to the types of ``fields`` (positionally); None (SQL NULL) and
    fields without a known column type pass through. ``ValueError`` names the field, its
    type, the value and the table."""
    types = {c.name: _base(c.type) for c in columns}
    out: list[Any] = []
    for i, v in enumerate(values):
        name = fields[i] if i < len(fields) else None
        conv = _CONVERTERS.get(types.get(name, "")) if name is not None else None
        if conv is None or v is None:
            out.append(v)
            continue
        try:
            out.append(conv(v))
        except (TypeError, ValueError, ArithmeticError) as exc:
            raise ValueError(
                f"key field {name!r} of {table} is {types[name or '']}: {v!r} does not convert "
                f"({exc}); give the value as the column's type, e.g. as text"
            ) from None
    return out


def key_fields(target: object, columns: Sequence[ColumnDefinition]) -> list[str]:
    """The fields ``target.get(*key)`` takes: the target's ``key_fields``, else the primary
    key of ``columns``."""
    fields = getattr(target, "key_fields", None)
    if isinstance(fields, tuple | list) and fields:
        return [str(f) for f in fields]
    return primary_key_columns(list(columns))


def index_fields(target: object, index_name: str, columns: Sequence[ColumnDefinition]) -> list[str]:
    """The fields of ``index_name`` (``""`` or ``lookup``: the unique lookup fields, else the
    key); empty when the target declares no such index."""
    if isinstance(target, SecondaryIndexed):
        for idx in target.indexes or ():
            if idx.name == index_name:
                return list(idx.fields)
    if index_name in ("", "lookup"):
        if isinstance(target, UniqueLookup) and target.lookup_fields:
            return list(target.lookup_fields)
        return key_fields(target, columns)
    return []
