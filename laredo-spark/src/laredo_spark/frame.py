"""Laredo rows as Spark DataFrames, with the exact Python types preserved.

Every column has a *kind*. Kinds whose Python values survive a Spark round trip unchanged are
stored as native Spark columns; every other value is stored as its typed-JSON text
(:mod:`laredo.serialization`) in a string column of kind ``json``, and decoded back on the way
out, so Decimal, UUID, datetimes with their zone, dicts, lists, ranges, ... come back exactly:

=========  ===================  ============================================================
kind       Spark type           Python values
=========  ===================  ============================================================
bool       BooleanType          ``bool``
int        LongType             ``int`` within int64
float      DoubleType           ``float``
str        StringType           ``str``
bytes      BinaryType           ``bytes``
date       DateType             ``datetime.date`` (not ``datetime``)
json       StringType           anything else, typed JSON per value (NULL stays NULL)
=========  ===================  ============================================================

A :class:`LaredoFrame` is a DataFrame plus the kind of each column. After a custom (Python)
transform the frame is *opaque*: one ``__laredo_row`` column holding each whole row as typed
JSON, because a Python function may change the columns per row.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime, timezone
from decimal import Decimal
from typing import Any

from laredo.serialization import encode_value, object_hook
from laredo.types import ColumnDefinition, Row, TableIdentifier

__all__ = [
    "KINDS",
    "OPAQUE_COLUMN",
    "LaredoFrame",
    "decode_json",
    "encode_json",
    "frame_from_rows",
    "infer_kinds",
    "kind_of_column",
    "spark_schema",
]

KINDS = ("bool", "int", "float", "str", "bytes", "date", "json")
OPAQUE_COLUMN = "__laredo_row"
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
}


def _dumps(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


def _loads(text: str) -> Any:
    return json.loads(text, object_hook=object_hook)


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
    return _dumps(encode_value(value))


def decode_json(text: str | None) -> Any:
    if text is None:
        return None
    return _loads(text)


def kind_of_column(col: ColumnDefinition) -> str:
    """The kind of a source column: by PostgreSQL type OID when known, else by type name.

    Use this only when the source guarantees the declared type (PostgreSQL does); for other
    sources infer kinds from the values (:func:`infer_kinds`).
    """
    if col.type_oid:
        return _OID_KINDS.get(col.type_oid, "json")
    return _NAME_KINDS.get(col.type.lower().strip(), "json")


def _value_kind(v: Any) -> str:
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
    return "json"


def infer_kinds(rows: Iterable[Row], names: Sequence[str] | None = None) -> dict[str, str]:
    """Kinds from the values: a column is native only when all its non-null values have the
    same native kind; columns with no non-null value are ``json`` (NULL everywhere)."""
    order: dict[str, None] = dict.fromkeys(names or ())
    seen: dict[str, set[str]] = {}
    for row in rows:
        for k, v in row.items():
            if k not in order:
                order[k] = None
            if v is not None:
                seen.setdefault(k, set()).add(_value_kind(v))
    out: dict[str, str] = {}
    for k in order:
        kinds = seen.get(k, set())
        out[k] = kinds.pop() if len(kinds) == 1 else "json"
    return out


def spark_type(kind: str) -> Any:
    from pyspark.sql import types as T

    return {
        "bool": T.BooleanType(),
        "int": T.LongType(),
        "float": T.DoubleType(),
        "str": T.StringType(),
        "bytes": T.BinaryType(),
        "date": T.DateType(),
        "json": T.StringType(),
    }[kind]


def spark_schema(kinds: Mapping[str, str]) -> Any:
    from pyspark.sql import types as T

    return T.StructType([T.StructField(n, spark_type(k), True) for n, k in kinds.items()])


def to_spark_value(kind: str, v: Any) -> Any:
    """One Python value as the Spark column of ``kind`` stores it."""
    if v is None:
        return None
    if kind == "json":
        return encode_json(v)
    if kind == "date" and isinstance(v, datetime):
        raise TypeError(f"a datetime in a date column: {v!r}")
    return v


def row_to_tuple(kinds: Mapping[str, str], row: Row) -> tuple[Any, ...]:
    return tuple(to_spark_value(k, row.get(n)) for n, k in kinds.items())


def from_spark_value(kind: str, v: Any) -> Any:
    if v is None:
        return None
    if kind == "json":
        return decode_json(v)
    if kind == "bytes":
        return bytes(v)
    return v


def make_row_decoder(kinds: Mapping[str, str]) -> Any:
    """A function ``values -> Row`` for tuples in ``kinds`` order."""
    names = list(kinds)
    ks = [kinds[n] for n in names]
    plain = all(k in ("bool", "int", "float", "str", "date") for k in ks)
    if plain:
        return lambda values: dict(zip(names, values, strict=True))

    def decode(values: Sequence[Any]) -> Row:
        return {
            n: (v if v is None or k not in ("json", "bytes") else from_spark_value(k, v))
            for n, k, v in zip(names, ks, values, strict=True)
        }

    return decode


@dataclass(frozen=True)
class LaredoFrame:
    """A DataFrame of Laredo rows of one table: ``kinds`` maps each column to its kind, in
    column order; ``opaque`` frames hold whole rows as typed JSON (see the module docstring)."""

    df: Any
    kinds: dict[str, str]
    table: TableIdentifier = field(default_factory=lambda: TableIdentifier("public", "t"))
    opaque: bool = False

    def with_df(self, df: Any, kinds: dict[str, str] | None = None) -> LaredoFrame:
        return LaredoFrame(df, dict(self.kinds if kinds is None else kinds), self.table, False)

    def encoded_rows(self) -> Any:
        """An RDD of typed-JSON row texts, encoded on the executors (the driver only moves
        strings)."""
        if self.opaque:
            return self.df.rdd.map(lambda r: r[0])
        decode = make_row_decoder(self.kinds)

        def enc(r: Any) -> str:
            return _dumps({n: encode_value(v) for n, v in decode(tuple(r)).items()})

        return self.df.rdd.map(enc)

    def json_lines(self) -> Any:
        """A one-column DataFrame of typed-JSON row texts (the ``laredo.serialization``
        encoding, key order = column order), built by Spark SQL expressions in the JVM when
        every kind allows it (``bytes`` columns fall back to :meth:`encoded_rows`)."""
        from pyspark.sql import functions as F

        if self.opaque:
            return self.df
        if any(k == "bytes" for k in self.kinds.values()):
            return self.encoded_rows().map(lambda s: (s,)).toDF(["line"])
        parts = []
        for name, kind in self.kinds.items():
            c = F.col("`" + name.replace("`", "``") + "`")
            key = F.lit(_dumps(name) + ":")
            parts.append(F.concat(key, F.coalesce(_json_value(F, c, kind), F.lit("null"))))
        if not parts:
            return self.df.select(F.lit("{}").alias("line"))
        line = F.concat(F.lit("{"), F.concat_ws(",", *parts), F.lit("}"))
        return self.df.select(line.alias("line"))

    def iter_rows(self) -> Iterator[Row]:
        """Rows on the driver, partition by partition (``toLocalIterator``)."""
        if self.opaque:
            for r in self.df.toLocalIterator():
                yield _loads(r[0])
            return
        decode = make_row_decoder(self.kinds)
        for r in self.df.toLocalIterator():
            yield decode(tuple(r))

    def rows(self) -> list[Row]:
        if self.opaque:
            return [_loads(r[0]) for r in self.df.collect()]
        decode = make_row_decoder(self.kinds)
        return [decode(tuple(r)) for r in self.df.collect()]


def _json_value(F: Any, c: Any, kind: str) -> Any:
    if kind == "json":
        return c
    if kind == "date":
        return F.concat(
            F.lit('{"$type":"date","value":"'), F.date_format(c, "yyyy-MM-dd"), F.lit('"}')
        )
    inner = F.to_json(F.array(c))  # "[<value>]": Jackson's JSON text of the value
    body = F.regexp_replace(F.regexp_replace(inner, "^\\[", ""), "\\]$", "")
    if kind == "float":
        return (
            F.when(c.isNull(), F.lit(None))
            .when(F.isnan(c), F.lit('{"$type":"float","value":"NaN"}'))
            .when(c == F.lit(float("inf")), F.lit('{"$type":"float","value":"Infinity"}'))
            .when(c == F.lit(float("-inf")), F.lit('{"$type":"float","value":"-Infinity"}'))
            .otherwise(body)
        )
    return F.when(c.isNull(), F.lit(None)).otherwise(body)


def frame_from_rows(
    spark: Any,
    rows: Sequence[Row],
    kinds: Mapping[str, str] | None = None,
    table: TableIdentifier | None = None,
    num_partitions: int | None = None,
) -> LaredoFrame:
    """A frame from Python rows (``kinds`` inferred from the values when not given).

    Rows may miss keys: a missing key is stored as NULL, so it reads back as ``None`` (the
    built-in filters and transforms treat both alike)."""
    k = dict(kinds) if kinds is not None else infer_kinds(rows)
    data = [row_to_tuple(k, r) for r in rows]
    schema = spark_schema(k)
    if num_partitions:
        df = spark.createDataFrame(spark.sparkContext.parallelize(data, num_partitions), schema)
    else:
        df = spark.createDataFrame(data, schema)
    return LaredoFrame(df, k, table or TableIdentifier("public", "t"))
