"""Column *kinds*: how a Laredo value is held in a Spark column, and how it comes back.

Kinds whose Python values survive a Spark (and Arrow) round trip are native Spark columns;
every other value is its typed-JSON text (:mod:`laredo.serialization`) in a string column of
kind ``json``, decoded on the way out, so every value comes back with its exact Python type:

===============  =====================  ===================================================
kind             Spark type             Python values
===============  =====================  ===================================================
``bool``         BooleanType            ``bool``
``int``          LongType               ``int`` within int64
``float``        DoubleType             ``float``
``str``          StringType             ``str``
``bytes``        BinaryType             ``bytes``
``date``         DateType               ``datetime.date`` (not ``datetime``)
``decimal``      StringType             ``Decimal``, as ``str(value)`` (exact: keeps the
                                        exponent, NaN)
``timestamp``    TimestampNTZType       naive ``datetime`` (microseconds)
``timestamptz``  TimestampType          aware ``datetime``: the instant, given back in the
                                        kind's zone: ``timestamptz:Europe/Paris``,
                                        ``timestamptz:+02:00`` (``timestamptz``: UTC)
``json``         StringType             anything else, typed JSON per value (NULL stays NULL)
===============  =====================  ===================================================

PostgreSQL columns get their kind from the type OID (:func:`kind_of_column`: numeric is
``decimal``, timestamptz ``timestamptz:<zone>`` with the session's zone); rows of unknown origin
from their values (:func:`infer_kinds`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import UTC, date, datetime, timedelta, timezone, tzinfo
from decimal import Decimal
from typing import Any
from zoneinfo import ZoneInfo

from laredo.serialization import encode_value, object_hook
from laredo.snapshots.arrow import zone_name
from laredo.types import ColumnDefinition, Row
from pyspark.sql import types as T

__all__ = [
    "CLASSIC_KINDS",
    "KINDS",
    "arrow_type",
    "base_kind",
    "compact_json",
    "decode_json",
    "encode_json",
    "from_spark_value",
    "infer_kinds",
    "kind_of_column",
    "kind_zone",
    "make_row_decoder",
    "row_to_tuple",
    "spark_schema",
    "spark_type",
    "timestamptz_kind",
    "to_spark_value",
    "value_kind",
    "zone_name",
]

KINDS = (
    "bool",
    "int",
    "float",
    "str",
    "bytes",
    "date",
    "decimal",
    "timestamp",
    "timestamptz",
    "json",
)
CLASSIC_KINDS = ("bool", "int", "float", "str", "bytes", "date", "json")
"""The kinds of Laredo 0.1 (what ``kinds="declared"`` of ``laredo-baseline`` still gives)."""
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1

# PostgreSQL type OIDs whose psycopg values map to a native kind.
_OID_KINDS = {
    16: "bool",
    20: "int",
    21: "int",
    23: "int",
    26: "int",
    700: "float",
    701: "float",
    25: "str",
    1043: "str",
    1042: "str",
    19: "str",
    17: "bytes",
    1082: "date",
    1700: "decimal",
    1114: "timestamp",
    1184: "timestamptz",
}
_NAME_KINDS = {
    "bool": "bool",
    "boolean": "bool",
    "int2": "int",
    "int4": "int",
    "int8": "int",
    "smallint": "int",
    "integer": "int",
    "bigint": "int",
    "oid": "int",
    "float4": "float",
    "float8": "float",
    "real": "float",
    "double precision": "float",
    "text": "str",
    "varchar": "str",
    "character varying": "str",
    "bpchar": "str",
    "character": "str",
    "name": "str",
    "bytea": "bytes",
    "date": "date",
    "numeric": "decimal",
    "decimal": "decimal",
    "timestamp": "timestamp",
    "timestamp without time zone": "timestamp",
    "timestamptz": "timestamptz",
    "timestamp with time zone": "timestamptz",
}
_PLAIN = frozenset({"bool", "int", "float", "str", "date"})


def compact_json(obj: Any) -> str:
    """``obj`` as compact JSON text (no spaces, UTF-8 kept)."""
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


_DECODE = json.JSONDecoder(object_hook=object_hook).decode


def encode_json(value: Any) -> str | None:
    """Typed-JSON text of one value (``None`` stays ``None``); the same text as
    ``json.dumps(encode_value(value))``, with fast paths for Decimal and datetime."""
    if value is None:
        return None
    t = type(value)
    if t is Decimal:
        return '{"$type":"decimal","value":"' + str(value) + '"}'
    if t is datetime:
        tz = value.tzinfo
        if tz is None:
            return '{"$type":"timestamp","value":"' + str(value.isoformat()) + '"}'
        if type(tz) is timezone:
            return '{"$type":"timestamptz","value":"' + str(value.isoformat()) + '"}'
    return compact_json(encode_value(value))


def decode_json(text: str | None) -> Any:
    """The value of a typed-JSON text (``None`` stays ``None``)."""
    if text is None:
        return None
    return _DECODE(text)


def base_kind(kind: str) -> str:
    """The kind without its zone: ``timestamptz:Europe/Paris`` -> ``timestamptz``."""
    return kind.partition(":")[0]


def _zone(name: str) -> tzinfo:
    if name[:1] in "+-" and len(name) == 6 and name[3] == ":":
        sign = -1 if name[0] == "-" else 1
        return timezone(sign * timedelta(hours=int(name[1:3]), minutes=int(name[4:6])))
    return ZoneInfo(name)


def kind_zone(kind: str) -> tzinfo:
    """The zone of a ``timestamptz`` kind (UTC when it names none)."""
    _base, _, name = kind.partition(":")
    return _zone(name) if name else UTC


def timestamptz_kind(zone: str | None) -> str:
    """``timestamptz:<zone>`` (``timestamptz`` when no zone is given)."""
    return f"timestamptz:{zone}" if zone else "timestamptz"


def kind_of_column(
    col: ColumnDefinition, zone: str | None = None, kinds: Sequence[str] = KINDS
) -> str:
    """The kind of a source column: by PostgreSQL type OID when known, else by type name
    (``zone``: the session time zone of the connection that reads timestamptz values). Kinds
    not in ``kinds`` become ``json``.

    Use this only when the source guarantees the declared type (PostgreSQL does); for other
    sources infer kinds from the values (:func:`infer_kinds`).
    """
    if col.type_oid:
        kind = _OID_KINDS.get(col.type_oid, "json")
    else:
        kind = _NAME_KINDS.get(col.type.lower().strip(), "json")
    if kind not in kinds:
        return "json"
    return timestamptz_kind(zone) if kind == "timestamptz" else kind


def value_kind(v: Any) -> str:
    """The kind one (non-NULL) value needs."""
    t = type(v)
    if t is bool:
        return "bool"
    if t is int:
        return "int" if _INT64_MIN <= v <= _INT64_MAX else "json"
    if t is float:
        return "float"
    if t is str:
        return "str"
    if t is bytes:
        return "bytes"
    if t is date:
        return "date"
    if t is Decimal:
        return "decimal"
    if t is datetime:
        if v.tzinfo is None:
            return "timestamp"
        name = zone_name(v.tzinfo)
        return "json" if name is None else timestamptz_kind(name)
    return "json"


def infer_kinds(rows: Iterable[Row], names: Sequence[str] | None = None) -> dict[str, str]:
    """Kinds from the values: a column is native only when all its non-null values have the
    same kind (for ``timestamptz``: the same zone); columns with no non-null value are
    ``json`` (NULL everywhere)."""
    order: dict[str, None] = dict.fromkeys(names or ())
    seen: dict[str, set[str]] = {}
    for row in rows:
        for k, v in row.items():
            if k not in order:
                order[k] = None
            if v is not None:
                seen.setdefault(k, set()).add(value_kind(v))
    out: dict[str, str] = {}
    for k in order:
        kinds = seen.get(k, set())
        out[k] = kinds.pop() if len(kinds) == 1 else "json"
    return out


_SPARK_TYPES: dict[str, Callable[[], Any]] = {
    "bool": T.BooleanType,
    "int": T.LongType,
    "float": T.DoubleType,
    "str": T.StringType,
    "bytes": T.BinaryType,
    "date": T.DateType,
    "decimal": T.StringType,
    "timestamp": T.TimestampNTZType,
    "timestamptz": T.TimestampType,
    "json": T.StringType,
}


def spark_type(kind: str) -> Any:
    """The Spark SQL type of a kind's column."""
    return _SPARK_TYPES[base_kind(kind)]()


def spark_schema(kinds: Mapping[str, str]) -> Any:
    """A Spark ``StructType`` with one nullable column per kind, in order."""
    return T.StructType([T.StructField(n, spark_type(k), True) for n, k in kinds.items()])


def arrow_type(pa: Any, kind: str) -> Any:
    """The Arrow type a task gives Spark for a kind's column (``pa``: the pyarrow module)."""
    base = base_kind(kind)
    if base == "timestamptz":
        return pa.timestamp("us", tz="UTC")
    if base == "timestamp":
        return pa.timestamp("us")
    return {
        "bool": pa.bool_,
        "int": pa.int64,
        "float": pa.float64,
        "str": pa.string,
        "bytes": pa.binary,
        "date": pa.date32,
        "decimal": pa.string,
        "json": pa.string,
    }[base]()


def to_spark_value(kind: str, v: Any) -> Any:
    """One Python value as the Spark column of ``kind`` stores it (``TypeError`` when the
    value does not have the kind)."""
    if v is None:
        return None
    base = base_kind(kind)
    if base == "json":
        return encode_json(v)
    if base == "decimal":
        if type(v) is not Decimal:
            raise TypeError(f"a {type(v).__name__} in a decimal column: {v!r:.40}")
        return str(v)
    if base == "date" and isinstance(v, datetime):
        raise TypeError(f"a datetime in a date column: {v!r}")
    if base in ("timestamp", "timestamptz") and (
        type(v) is not datetime or (v.tzinfo is None) != (base == "timestamp")
    ):
        raise TypeError(f"a {type(v).__name__} {v!r:.40} in a {base} column")
    return v


def row_to_tuple(kinds: Mapping[str, str], row: Row) -> tuple[Any, ...]:
    """A row as the tuple of a frame with ``kinds`` (a missing key is NULL)."""
    return tuple(to_spark_value(k, row.get(n)) for n, k in kinds.items())


def from_spark_value(kind: str, v: Any) -> Any:
    """The Python value of a Spark column value of ``kind`` (as ``collect`` or a Python UDF
    gives it: TimestampType values arrive as naive local times)."""
    if v is None:
        return None
    base = base_kind(kind)
    if base == "json":
        return decode_json(v)
    if base == "bytes":
        return bytes(v)
    if base == "decimal":
        return Decimal(v)
    if base == "timestamptz":
        return v.astimezone(kind_zone(kind))
    return v


def make_row_decoder(kinds: Mapping[str, str]) -> Callable[[Sequence[Any]], Row]:
    """A function ``values -> Row`` for tuples in ``kinds`` order."""
    names = list(kinds)
    ks = [kinds[n] for n in names]
    if all(k in _PLAIN for k in ks):
        return lambda values: dict(zip(names, values, strict=True))

    def decode(values: Sequence[Any]) -> Row:
        return {
            n: (v if v is None or k in _PLAIN else from_spark_value(k, v))
            for n, k, v in zip(names, ks, values, strict=True)
        }

    return decode
