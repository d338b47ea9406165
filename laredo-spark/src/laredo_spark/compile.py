"""A pipeline's filters and transforms on a :class:`~laredo_spark.frame.LaredoFrame`.

The built-ins compile to Spark column expressions that give exactly the local runner's rows
(``laredo.filters`` / ``laredo.transforms`` state the rules; a hypothesis test holds the two
together). Custom filters and transforms, and built-in filters on ``json``-kind columns (Decimal,
UUID, ...), run as Python UDFs calling the very same objects. As in the local runner, every
filter sees the source row, then the transforms run in order.

Differences from the local runner, by design:

* ``add-timestamp`` takes the processing time once per compiled chain (when the Spark job is
  planned), the same for every row of the job, like Spark's ``current_timestamp()``.
* ``field-regex`` runs Java regular expressions (``rlike``, found anywhere, like
  ``re.search``): keep patterns in the common subset of Python and Java syntax.
* After the first custom transform the frame is opaque (whole rows as typed JSON) and the rest
  of the chain runs in Python on the executors.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from typing import Any

from laredo.filters import FieldEquals, FieldPrefix, FieldRegex, as_filter
from laredo.serialization import dumps_row
from laredo.transforms import AddTimestamp, DropFields, RenameFields, as_transform
from laredo.types import Row, TableIdentifier
from pyspark.sql import functions as F
from pyspark.sql.types import BooleanType, StringType

from .frame import OPAQUE_COLUMN, LaredoFrame
from .kinds import base_kind, decode_json, encode_json, from_spark_value, make_row_decoder

logger = logging.getLogger(__name__)

__all__ = ["apply_chain", "compile_filter", "is_compiled"]

_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


def col(name: str) -> Any:
    """A column by exact name (dots and backticks in names are quoted)."""
    return F.col("`" + name.replace("`", "``") + "`")


def _udf(fn: Any, return_type: Any) -> Any:
    fn.__annotations__ = {}  # plain Python UDF: no eval type inference from the hints
    return F.udf(fn, return_type)


def is_compiled(obj: Any) -> bool:
    """True when ``obj`` (a filter or transform) compiles to Spark expressions."""
    return isinstance(obj, FieldEquals | FieldPrefix | FieldRegex | DropFields | RenameFields)


# -- filters -----------------------------------------------------------------------------------


def _equals_expr(c: Any, kind: str, value: Any) -> Any:
    false = F.lit(False)
    if isinstance(value, bool):
        return c == F.lit(value) if kind == "bool" else false
    if isinstance(value, str):
        return c == F.lit(value) if kind == "str" else false
    if isinstance(value, int):
        if kind == "int":
            return c == F.lit(value) if _INT64_MIN <= value <= _INT64_MAX else false
        if kind == "float":
            # Python compares int and float exactly; Spark would round the int to a double.
            try:
                as_float = float(value)
            except OverflowError:
                return false
            return c == F.lit(as_float) if int(as_float) == value else false
        return false
    if isinstance(value, float):
        if math.isnan(value):  # NaN equals nothing in Python (Spark says NaN = NaN)
            return false
        if kind == "float":
            return (c == F.lit(value)) & ~F.isnan(c)
        if kind == "int":
            if value in (float("inf"), float("-inf")) or not value.is_integer():
                return false
            as_int = int(value)
            return c == F.lit(as_int) if _INT64_MIN <= as_int <= _INT64_MAX else false
        return false
    return false


def compile_filter(f: Any, frame: LaredoFrame) -> Any:
    """A boolean, never-NULL column expression selecting the rows ``f`` includes."""
    f = as_filter(f)
    if frame.opaque:
        return _opaque_filter_udf(f, frame.table)
    field = getattr(f, "field", None)
    if isinstance(f, FieldEquals | FieldPrefix | FieldRegex):
        assert isinstance(field, str)
        kind = frame.kinds.get(field)
        if kind is None:  # a missing field never matches
            return F.lit(False)
        base = base_kind(kind)
        if base == "json":
            return _value_filter_udf(f, field, "json", frame.table)(col(field))
        if base in ("decimal", "timestamp", "timestamptz"):
            if not isinstance(f, FieldEquals):  # prefix / regex match strings only
                return F.lit(False)
            return _value_filter_udf(f, field, kind, frame.table)(col(field))
        kind = base
        c = col(field)
        if isinstance(f, FieldEquals):
            expr = _equals_expr(c, kind, f.value)
        elif isinstance(f, FieldPrefix):
            expr = c.startswith(f.prefix) if kind == "str" else F.lit(False)
        else:
            expr = c.rlike(f.pattern) if kind == "str" else F.lit(False)
        return F.coalesce(expr, F.lit(False))
    return _row_filter_udf(f, frame)


def _value_filter_udf(f: Any, field: str, kind: str, table: TableIdentifier) -> Any:
    def include(value: Any) -> bool:
        return bool(f.include(table, {field: from_spark_value(kind, value)}))

    return _udf(include, BooleanType())


def _row_filter_udf(f: Any, frame: LaredoFrame) -> Any:
    decode = make_row_decoder(frame.kinds)
    table = frame.table

    def include(*values: Any) -> bool:
        return bool(f.include(table, decode(values)))

    cols = [col(n) for n in frame.kinds]
    return _udf(include, BooleanType())(*cols)


def _opaque_filter_udf(f: Any, table: TableIdentifier) -> Any:
    def include(text: str) -> bool:
        return bool(f.include(table, decode_json(text)))

    return _udf(include, BooleanType())(col(OPAQUE_COLUMN))


# -- transforms --------------------------------------------------------------------------------


def _rename(frame: LaredoFrame, t: RenameFields) -> LaredoFrame:
    mapping = dict(t.mapping)
    names = list(frame.kinds)
    renamed_here = {mapping[n]: n for n in names if n in mapping}
    out: list[tuple[str, str]] = []  # (new name, source column)
    placed: set[str] = set()
    for n in names:
        if n in mapping:
            continue
        if n in renamed_here:  # replaced by a renamed field, keeping this position
            out.append((n, renamed_here[n]))
        else:
            out.append((n, n))
        placed.add(n)
    for n in names:
        if n in mapping and mapping[n] not in placed:
            out.append((mapping[n], n))
            placed.add(mapping[n])
    kinds = {new: frame.kinds[src] for new, src in out}
    df = frame.df.select(*[col(src).alias(new) for new, src in out])
    return frame.with_df(df, kinds)


def _add_timestamp(frame: LaredoFrame, t: AddTimestamp) -> LaredoFrame:
    now = t.clock()
    value: Any
    if t.format == "datetime":
        value, kind = encode_json(now), "json"
    elif t.format == "iso":
        value, kind = now.isoformat(), "str"
    else:
        value, kind = int(now.timestamp() * 1000), "int"
    kinds = dict(frame.kinds)
    lit = F.lit(value).cast("string" if kind != "int" else "long")
    if t.field in kinds:
        cols = [lit.alias(n) if n == t.field else col(n) for n in kinds]
        kinds[t.field] = kind
    else:
        cols = [col(n) for n in kinds] + [lit.alias(t.field)]
        kinds[t.field] = kind
    return frame.with_df(frame.df.select(*cols), kinds)


def _to_opaque(frame: LaredoFrame, transforms: Sequence[Any]) -> LaredoFrame:
    """Run ``transforms`` in Python on each row; the frame becomes opaque."""
    table = frame.table
    chain = list(transforms)

    def run(row: Row) -> str | None:
        for t in chain:
            out = t.transform(table, row)
            if out is None:
                return None
            row = out
        return dumps_row(row)

    if frame.opaque:

        def apply(text: str) -> str | None:
            return run(decode_json(text))

        out = _udf(apply, StringType())(col(OPAQUE_COLUMN))
    else:
        decode = make_row_decoder(frame.kinds)

        def apply_values(*values: Any) -> str | None:
            return run(decode(values))

        out = _udf(apply_values, StringType())(*[col(n) for n in frame.kinds])
    df = frame.df.select(out.alias(OPAQUE_COLUMN)).where(col(OPAQUE_COLUMN).isNotNull())
    return LaredoFrame(df, {OPAQUE_COLUMN: "json"}, frame.table, opaque=True)


def apply_chain(
    frame: LaredoFrame, filters: Sequence[Any] = (), transforms: Sequence[Any] = ()
) -> LaredoFrame:
    """The frame after the pipeline's filters (all on the source row) and transforms."""
    fs = [as_filter(f) for f in filters]
    ts = [as_transform(t) for t in transforms]
    if fs:
        cond = None
        for f in fs:
            expr = compile_filter(f, frame)
            cond = expr if cond is None else (cond & expr)
        frame = LaredoFrame(frame.df.where(cond), frame.kinds, frame.table, frame.opaque)
    for i, t in enumerate(ts):
        if frame.opaque or not isinstance(t, DropFields | RenameFields | AddTimestamp):
            logger.debug("transform %r runs as a Python UDF", t)
            return _to_opaque(frame, ts[i:])
        if isinstance(t, DropFields):
            drop = [n for n in t.fields if n in frame.kinds]
            kinds = {n: k for n, k in frame.kinds.items() if n not in drop}
            frame = frame.with_df(frame.df.select(*[col(n) for n in kinds]), kinds)
        elif isinstance(t, RenameFields):
            frame = _rename(frame, t)
        else:
            frame = _add_timestamp(frame, t)
    return frame
