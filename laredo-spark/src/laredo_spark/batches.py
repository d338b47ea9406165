"""Arrow record batches in a frame's kinds: what Laredo's Spark readers yield.

:func:`rows_batch` builds a batch from Python rows (one Python step per value);
:func:`convert_batch` turns a stored batch (a Parquet part: native columns plus the encodings of
:mod:`laredo.snapshots.arrow`) into the requested kinds, passing columns through untouched
where the stored form already is the kind's (no Python object per value), converting the
others value by value.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import pyarrow as pa
from laredo.snapshots.arrow import value_decoder
from laredo.snapshots.parquet import column_values
from laredo.types import Row

from .kinds import arrow_type, base_kind, to_spark_value

__all__ = ["BATCH_ROWS", "convert_batch", "rows_batch", "rows_batches"]

BATCH_ROWS = 10_000

# the stored encoding (None: native) each kind can take as it is
_PASS = {"json": "json", "decimal": "decimal"}


def _array(kind: str, values: Iterable[Any]) -> Any:
    return pa.array([to_spark_value(kind, v) for v in values], type=arrow_type(pa, kind))


def rows_batch(kinds: Mapping[str, str], rows: list[Row]) -> Any:
    """A record batch of ``rows`` in ``kinds`` (a missing key is NULL); ``TypeError`` names
    the column whose value does not fit its kind."""
    arrays = []
    for name, kind in kinds.items():
        try:
            arrays.append(_array(kind, (r.get(name) for r in rows)))
        except TypeError as exc:
            raise TypeError(f"column {name!r}: {exc}") from None
    return pa.RecordBatch.from_arrays(arrays, schema=_schema(kinds))


def rows_batches(kinds: Mapping[str, str], rows: Iterable[Row]) -> Iterator[Any]:
    """Record batches of up to :data:`BATCH_ROWS` rows."""
    chunk: list[Row] = []
    for row in rows:
        chunk.append(row)
        if len(chunk) >= BATCH_ROWS:
            yield rows_batch(kinds, chunk)
            chunk = []
    if chunk:
        yield rows_batch(kinds, chunk)


def _schema(kinds: Mapping[str, str]) -> Any:
    return pa.schema([pa.field(n, arrow_type(pa, k)) for n, k in kinds.items()])


def _passes(kind: str, encoding: str | None, typ: Any) -> bool:
    base = base_kind(kind)
    if base in _PASS:
        return encoding == _PASS[base]
    if encoding is not None:
        return False
    want = arrow_type(pa, kind)
    if base == "timestamptz":
        return bool(pa.types.is_timestamp(typ) and typ.tz is not None)
    if base == "str":
        return bool(typ == want or pa.types.is_large_string(typ))
    if base == "bytes":
        return bool(typ == want or pa.types.is_large_binary(typ))
    return bool(typ == want)


def convert_batch(kinds: Mapping[str, str], batch: Any, encoded: Mapping[str, str]) -> Any:
    """``batch`` (stored with ``encoded``) as a record batch in ``kinds``; ``TypeError`` names
    a column whose values do not fit its kind."""
    names = batch.schema.names
    arrays = []
    for name, kind in kinds.items():
        if name not in names:
            arrays.append(pa.nulls(batch.num_rows, type=arrow_type(pa, kind)))
            continue
        col = batch.column(names.index(name))
        enc = encoded.get(name)
        want = arrow_type(pa, kind)
        if _passes(kind, enc, col.type):
            arrays.append(col if col.type == want else col.cast(want))
            continue
        decode = value_decoder(enc)
        values = column_values(pa, col)
        if decode is not None:
            values = [None if v is None else decode(v) for v in values]
        try:
            arrays.append(_array(kind, values))
        except TypeError as exc:
            raise TypeError(f"column {name!r}: {exc}") from None
    return pa.RecordBatch.from_arrays(arrays, schema=_schema(kinds))
