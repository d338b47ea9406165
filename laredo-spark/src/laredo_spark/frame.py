"""Laredo rows as Spark DataFrames, with the exact Python types preserved.

A :class:`LaredoFrame` is a DataFrame plus the *kind* of each column (see
:mod:`laredo_spark.kinds`, whose names this module re-exports: native Spark columns where the
values survive, typed JSON text otherwise). After a custom (Python) transform the frame is
*opaque*: one ``__laredo_row`` column holding each whole row as typed JSON, because a Python
function may change the columns per row.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from laredo.serialization import encode_value
from laredo.types import Row, TableIdentifier
from pyspark.sql import functions as F

from .kinds import (
    KINDS,
    base_kind,
    compact_json,
    decode_json,
    encode_json,
    from_spark_value,
    infer_kinds,
    kind_of_column,
    make_row_decoder,
    row_to_tuple,
    spark_schema,
    spark_type,
    to_spark_value,
    value_kind,
)

__all__ = [
    "KINDS",
    "OPAQUE_COLUMN",
    "LaredoFrame",
    "decode_json",
    "encode_json",
    "frame_from_rows",
    "from_spark_value",
    "infer_kinds",
    "json_value",
    "kind_of_column",
    "make_row_decoder",
    "row_to_tuple",
    "spark_schema",
    "spark_type",
    "to_spark_value",
    "value_kind",
]

OPAQUE_COLUMN = "__laredo_row"
_ISO = "yyyy-MM-dd'T'HH:mm:ss.SSSSSS"


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
            return compact_json({n: encode_value(v) for n, v in decode(tuple(r)).items()})

        return self.df.rdd.map(enc)

    def json_lines(self) -> Any:
        """A one-column DataFrame of typed-JSON row texts (the ``laredo.serialization``
        encoding, key order = column order), built by Spark SQL expressions in the JVM when
        every kind allows it (``bytes`` columns fall back to :meth:`encoded_rows`)."""
        if self.opaque:
            return self.df
        if any(k == "bytes" for k in self.kinds.values()):
            return self.encoded_rows().map(lambda s: (s,)).toDF(["line"])
        parts = []
        for name, kind in self.kinds.items():
            c = F.col("`" + name.replace("`", "``") + "`")
            key = F.lit(compact_json(name) + ":")
            parts.append(F.concat(key, F.coalesce(json_value(c, kind), F.lit("null"))))
        if not parts:
            return self.df.select(F.lit("{}").alias("line"))
        line = F.concat(F.lit("{"), F.concat_ws(",", *parts), F.lit("}"))
        return self.df.select(line.alias("line"))

    def arrow_encoding(self) -> dict[str, str]:
        """The column encodings of this frame's Arrow batches for a snapshot part
        (:mod:`laredo.snapshots.arrow`): ``json`` / ``decimal`` text columns, or the opaque
        row column."""
        if self.opaque:
            return {OPAQUE_COLUMN: "row"}
        out = {}
        for name, kind in self.kinds.items():
            base = base_kind(kind)
            if base in ("json", "decimal"):
                out[name] = base
        return out

    def iter_rows(self) -> Iterator[Row]:
        """Rows on the driver, partition by partition (``toLocalIterator``)."""
        if self.opaque:
            for r in self.df.toLocalIterator():
                yield decode_json(r[0])
            return
        decode = make_row_decoder(self.kinds)
        for r in self.df.toLocalIterator():
            yield decode(tuple(r))

    def rows(self) -> list[Row]:
        if self.opaque:
            return [decode_json(r[0]) for r in self.df.collect()]
        decode = make_row_decoder(self.kinds)
        return [decode(tuple(r)) for r in self.df.collect()]


def json_value(c: Any, kind: str) -> Any:
    """A column expression of the typed-JSON text of ``c`` (NULL stays NULL), in the JVM."""
    base = base_kind(kind)
    if base == "json":
        return c
    if base == "date":
        return F.concat(
            F.lit('{"$type":"date","value":"'), F.date_format(c, "yyyy-MM-dd"), F.lit('"}')
        )
    if base == "decimal":  # canonical Decimal text: digits, '.', 'E', signs, NaN, Infinity
        return F.concat(F.lit('{"$type":"decimal","value":"'), c, F.lit('"}'))
    if base == "timestamp":
        return F.concat(
            F.lit('{"$type":"timestamp","value":"'), F.date_format(c, _ISO), F.lit('"}')
        )
    if base == "timestamptz":
        zone = kind.partition(":")[2]
        utc = F.to_utc_timestamp(c, F.current_timezone())  # shows c's UTC wall time
        if zone[:1] in "+-":  # a fixed offset: its own wall time and offset
            wall = F.date_format(F.from_utc_timestamp(utc, zone), _ISO)
            return F.concat(F.lit('{"$type":"timestamptz","value":"'), wall, F.lit(f'{zone}"}}'))
        tail = f'+00:00","zone":{compact_json(zone)}}}' if zone else '+00:00"}'
        return F.concat(
            F.lit('{"$type":"timestamptz","value":"'), F.date_format(utc, _ISO), F.lit(tail)
        )
    inner = F.to_json(F.array(c))  # "[<value>]": Jackson's JSON text of the value
    body = F.regexp_replace(F.regexp_replace(inner, "^\\[", ""), "\\]$", "")
    if base == "float":
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
