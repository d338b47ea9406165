"""How a table's columns are stored in Delta, and the table's Laredo description.

A column's Delta type follows from its declared (PostgreSQL) type, so every commit has the same
schema whatever values it holds. Columns whose values survive Arrow unchanged are native; the
others use the column encodings of :mod:`laredo.snapshots.arrow` (``decimal``, ``uuid``,
``json`` = typed JSON of :mod:`laredo.serialization`), decoded by its ``value_decoder``:

======================================  ============================  ====================
declared type                           Delta type                    encoding
======================================  ============================  ====================
bool                                    boolean                       native
int2 / int4 / int8, oid                 short / integer / long        native
float4 / float8                         double                        native
text, varchar, bpchar, name             string                        native
bytea                                   binary                        native
date                                    date                          native
timestamp                               timestamp_ntz                 native
timestamptz                             timestamp (UTC instant)       native
numeric(p,s), p <= 38, 0 <= s <= p     decimal(p,s)                  native
numeric (no declared precision), or     string                        ``decimal`` (exact)
  p > 38, or a negative scale
uuid                                    string                        ``uuid``
json, jsonb                             string (the JSON text)        ``jsontext``
int/text/bool/float arrays (1-dim)      array<element>                native
anything else                           string                        ``json`` (typed)
======================================  ============================  ====================

A numeric's precision and scale come from the column definition (``precision``, ``scale``; the
PostgreSQL source reads them from ``pg_attribute.atttypmod``) or from a type text
``numeric(p,s)``. An unconstrained ``numeric`` stays exact text: it holds values of any
precision and scale, which no fixed ``decimal(p,s)`` can (``decimal(38,s)`` would round or
refuse some), so nothing is lost.

The table's Delta ``name`` is ``schema.table``; its ``description`` is a JSON object
``{"laredo": 1, "table": ..., "columns": [...]}`` holding the column definitions, so readers
(``read_as_of``, the ``delta`` source) give values back with their Python types.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, fields
from typing import Any

import pyarrow as pa
from laredo.errors import LaredoError
from laredo.serialization import encode_value
from laredo.snapshots.arrow import DECIMAL, JSON, UUID, value_decoder
from laredo.snapshots.parquet import column_values
from laredo.types import ColumnDefinition, Row, TableIdentifier

__all__ = [
    "JSONTEXT",
    "ColumnCodec",
    "DescriptionError",
    "TableDescription",
    "codecs_for",
    "decode_description",
    "encode_description",
    "keeps_storage",
    "rows_of",
    "storage_columns",
    "to_arrow",
]

JSONTEXT = "jsontext"
"""A json/jsonb column: the JSON document as text (what Spark or DuckDB readers expect)."""

_NATIVE: dict[str, pa.DataType] = {
    "bool": pa.bool_(),
    "int2": pa.int16(),
    "int4": pa.int32(),
    "int8": pa.int64(),
    "oid": pa.int64(),
    "float4": pa.float64(),
    "float8": pa.float64(),
    "text": pa.string(),
    "varchar": pa.string(),
    "bpchar": pa.string(),
    "name": pa.string(),
    "bytea": pa.binary(),
    "date": pa.date32(),
    "timestamp": pa.timestamp("us"),
    "timestamptz": pa.timestamp("us", tz="UTC"),
}
_ALIASES = {
    "boolean": "bool",
    "smallint": "int2",
    "integer": "int4",
    "int": "int4",
    "bigint": "int8",
    "real": "float4",
    "double precision": "float8",
    "character varying": "varchar",
    "character": "bpchar",
    "timestamp without time zone": "timestamp",
    "timestamp with time zone": "timestamptz",
}
_OIDS = {
    16: "bool",
    21: "int2",
    23: "int4",
    20: "int8",
    26: "oid",
    700: "float4",
    701: "float8",
    25: "text",
    1043: "varchar",
    1042: "bpchar",
    19: "name",
    17: "bytea",
    1082: "date",
    1114: "timestamp",
    1184: "timestamptz",
    1700: "numeric",
    2950: "uuid",
    114: "json",
    3802: "jsonb",
}
_ARRAY_ELEMENTS = {"int2", "int4", "int8", "text", "varchar", "bool", "float4", "float8"}
_NUMERIC = re.compile(r"(?:numeric|decimal)\s*\(\s*(\d+)\s*(?:,\s*(\d+)\s*)?\)")


@dataclass(frozen=True, slots=True)
class ColumnCodec:
    """One column: its Arrow type and how values are encoded into it (``None``: native)."""

    name: str
    arrow_type: pa.DataType
    encoding: str | None
    nullable: bool

    def encoder(self) -> Callable[[Any], Any] | None:
        if self.encoding in (DECIMAL, UUID):
            return str
        if self.encoding == JSON:
            return _typed_json
        if self.encoding == JSONTEXT:
            return _json_text
        return None

    def decoder(self) -> Callable[[Any], Any] | None:
        if self.encoding == JSONTEXT:
            return json.loads
        return value_decoder(self.encoding)


_ENCODE = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=True).encode


def _typed_json(v: Any) -> str:
    return _ENCODE(encode_value(v))


def _json_text(v: Any) -> str:
    return _ENCODE(v)


def _type_name(col: ColumnDefinition) -> str:
    name = col.type.lower().strip()
    name = _ALIASES.get(name, name)
    if col.type_oid and col.type_oid in _OIDS and "(" not in name:
        return _OIDS[col.type_oid]
    return name


def _precision_scale(col: ColumnDefinition, m: re.Match[str] | None) -> tuple[int | None, int]:
    """A numeric column's declared precision and scale: from the column definition (the
    PostgreSQL source reads them from the catalog), else from a type text ``numeric(p,s)``."""
    if col.precision is not None:
        return col.precision, col.scale or 0
    if m is not None:
        return int(m.group(1)), int(m.group(2) or 0)
    return None, 0


def codec_for(col: ColumnDefinition) -> ColumnCodec:
    """The Delta storage of one column (see the module docstring)."""
    name = _type_name(col)
    nullable = col.nullable or not col.primary_key
    if name in _NATIVE:
        return ColumnCodec(col.name, _NATIVE[name], None, nullable)
    m = _NUMERIC.fullmatch(name)
    if m is not None or name in ("numeric", "decimal"):
        precision, scale = _precision_scale(col, m)
        if precision is not None and 1 <= precision <= 38 and 0 <= scale <= precision:
            return ColumnCodec(col.name, pa.decimal128(precision, scale), None, nullable)
        return ColumnCodec(col.name, pa.string(), DECIMAL, nullable)
    if name == "uuid":
        return ColumnCodec(col.name, pa.string(), UUID, nullable)
    if name in ("json", "jsonb"):
        return ColumnCodec(col.name, pa.string(), JSONTEXT, nullable)
    element = name[1:] if name.startswith("_") else name.removesuffix("[]")
    element = _ALIASES.get(element, element)
    if element != name and element in _ARRAY_ELEMENTS:
        return ColumnCodec(col.name, pa.list_(_NATIVE[element]), None, nullable)
    return ColumnCodec(col.name, pa.string(), JSON, nullable)


def keeps_storage(stored: ColumnDefinition, new: ColumnDefinition) -> bool:
    """Whether values of the column ``new`` describes can go on being written the way the
    table stores ``stored``: the same type, and the same Delta type, or exact text holding any
    numeric (a table written before the source reported the numeric's precision)."""
    if (stored.type, stored.type_oid) != (new.type, new.type_oid):
        return False
    old = codec_for(stored)
    return old.arrow_type == codec_for(new).arrow_type or old.encoding == DECIMAL


def storage_columns(
    stored: Sequence[ColumnDefinition], new: Sequence[ColumnDefinition]
) -> list[ColumnDefinition] | None:
    """The columns to write when the source describes ``new`` and the table stores ``stored``:
    each stored column as it is stored, added columns as ``new`` describes them; ``None`` when a
    stored column is missing from ``new`` or cannot keep its storage (see
    :func:`keeps_storage`)."""
    by_name = {c.name: c for c in stored}
    if not set(by_name) <= {c.name for c in new}:
        return None
    out = []
    for c in new:
        old = by_name.get(c.name)
        if old is not None and not keeps_storage(old, c):
            return None
        out.append(c if old is None else old)
    return out


def codecs_for(columns: Sequence[ColumnDefinition]) -> list[ColumnCodec]:
    return [codec_for(c) for c in columns]


def arrow_schema(codecs: Sequence[ColumnCodec]) -> pa.Schema:
    return pa.schema([pa.field(c.name, c.arrow_type, nullable=c.nullable) for c in codecs])


def to_arrow(
    codecs: Sequence[ColumnCodec],
    rows: Sequence[Row],
    extra: Mapping[str, tuple[pa.DataType, list[Any]]] | None = None,
) -> pa.Table:
    """Rows as an Arrow table of the Delta schema (a column absent from a row is NULL), plus
    ``extra`` columns given as (type, values). ``ValueError`` names a column whose values do
    not fit its type."""
    arrays: list[pa.Array] = []
    fields: list[pa.Field] = []
    for codec in codecs:
        name = codec.name
        values = [r.get(name) for r in rows]
        enc = codec.encoder()
        if enc is not None:
            values = [None if v is None else enc(v) for v in values]
        try:
            arrays.append(pa.array(values, type=codec.arrow_type))
        except (pa.ArrowException, TypeError, ValueError) as exc:
            raise ValueError(f"column {name!r} ({codec.arrow_type}): {exc}{_hint(codec)}") from None
        fields.append(pa.field(name, codec.arrow_type, nullable=codec.nullable))
    for name, (typ, values) in (extra or {}).items():
        arrays.append(pa.array(values, type=typ))
        fields.append(pa.field(name, typ))
    return pa.Table.from_arrays(arrays, schema=pa.schema(fields))


def _hint(codec: ColumnCodec) -> str:
    if not pa.types.is_decimal(codec.arrow_type):
        return ""
    return (
        "; the column is stored with the precision and scale the source declared: NaN has no "
        "decimal form (declare the column numeric, unconstrained, to keep it), and a wider "
        "value means the column's type changed (ALTER TYPE): restart the pipeline, the target "
        "then refuses the stream until a re-baseline writes the new type"
    )


def rows_of(table: pa.Table, codecs: Sequence[ColumnCodec]) -> list[Row]:
    """The rows of an Arrow table read from Delta, values decoded to their Python types.
    Columns not in ``codecs`` (CDF's ``_change_type``...) are returned as they are."""
    by_name = {c.name: c for c in codecs}
    names = list(table.column_names)
    columns: list[list[Any]] = []
    for name in names:
        values = column_values(pa, table.column(name))
        codec = by_name.get(name)
        dec = codec.decoder() if codec is not None else None
        if dec is not None:
            values = [None if v is None else dec(v) for v in values]
        columns.append(values)
    return [dict(zip(names, vals, strict=True)) for vals in zip(*columns, strict=True)]


@dataclass(frozen=True, slots=True)
class TableDescription:
    """What a ``delta`` target records about its table in the Delta metadata."""

    table: TableIdentifier
    columns: tuple[ColumnDefinition, ...]


def encode_description(desc: TableDescription) -> str:
    return json.dumps(
        {
            "laredo": 1,
            "table": str(desc.table),
            "columns": [asdict(c) for c in desc.columns],
        },
        separators=(",", ":"),
    )


class DescriptionError(LaredoError):
    """A Delta table's description claims to be a ``delta`` target's but cannot be read."""


_FIELDS = {f.name: f.type for f in fields(ColumnDefinition)}


def _column(c: Any) -> ColumnDefinition:
    if not isinstance(c, dict) or set(c) - set(_FIELDS) or not isinstance(c.get("name"), str):
        raise ValueError(f"a column entry {str(c)[:80]!r} is not a column definition")
    try:
        return ColumnDefinition(**c)
    except TypeError as exc:
        raise ValueError(f"column {c['name']!r}: {exc}") from None


def decode_description(text: str | None) -> TableDescription | None:
    """The description a ``delta`` target wrote, or ``None`` for any other Delta table;
    :class:`DescriptionError` when it is a laredo description that cannot be read (forged or
    damaged)."""
    try:
        data = json.loads(text or "")
    except (ValueError, RecursionError):
        return None
    if not isinstance(data, dict) or data.get("laredo") != 1:
        return None
    try:
        raw = data.get("columns")
        if not isinstance(raw, list) or not raw:
            raise ValueError("'columns' is not a non-empty list")
        columns = tuple(_column(c) for c in raw)
        if not all(isinstance(c.type, str) for c in columns):
            raise ValueError("a column's 'type' is not text")
        name = data.get("table")
        if not isinstance(name, str):
            raise ValueError("'table' is not text")
        return TableDescription(TableIdentifier.parse(name), columns)
    except (ValueError, TypeError, AttributeError) as exc:
        raise DescriptionError(
            f"the Delta table's description is laredo table metadata but unreadable ({exc}); "
            "it was damaged or forged: re-baseline into a fresh uri"
        ) from None
