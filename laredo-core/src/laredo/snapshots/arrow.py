"""Laredo rows as Arrow record batches: how columns are encoded, and back to rows.

Writers that produce Arrow data (the Spark runner's tasks) hand a snapshot part to a serializer
as record batches plus an *encoding map* ``{column: encoding}``. A column not in the map holds
its values natively (``bool``, ``int64``, ``double``, ``string``, ``binary``, ``date32``, ...:
``to_pylist`` gives the row values back). The encodings:

=============  ===============================================================================
``json``       a string column of the typed JSON of each value (:mod:`laredo.serialization`)
``decimal``    a string column of ``str(Decimal)`` (exact: ``"1.50"`` keeps its exponent)
``uuid``       a string column of canonical UUID text
``row``        the only column: each value is a whole row as a typed-JSON object (a row whose
               columns are not known in advance, e.g. after a custom transform)
=============  ===============================================================================

Nothing here imports pyarrow: functions take batches and call their methods, so core stays free
of it until a caller hands one over. Serializers that write batches natively implement
:class:`BatchWriteSerializer` (Parquet, JSONL); any other serializer is given the decoded rows.
:class:`BatchReadSerializer` (Parquet) reads a part back as batches.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from datetime import timezone, tzinfo
from decimal import Decimal
from typing import IO, Any, Protocol, runtime_checkable
from zoneinfo import ZoneInfo

from ..serialization import loads_row, object_hook
from ..types import Row, TableSnapshotInfo

__all__ = [
    "DECIMAL",
    "ENCODINGS",
    "JSON",
    "ROW",
    "UUID",
    "BatchReadSerializer",
    "BatchWriteSerializer",
    "batch_rows",
    "batches_rows",
    "check_encodings",
    "value_decoder",
    "zone_name",
]

JSON = "json"
DECIMAL = "decimal"
UUID = "uuid"
ROW = "row"
ENCODINGS = (JSON, DECIMAL, UUID, ROW)


@runtime_checkable
class BatchWriteSerializer(Protocol):
    """A serializer that writes a part straight from Arrow record batches, in the same file
    format as its row ``write`` (a reader cannot tell them apart)."""

    def format_id(self) -> str: ...

    def write_batches(
        self,
        info: TableSnapshotInfo,
        batches: Iterable[Any],
        out: IO[bytes],
        encoded: Mapping[str, str],
    ) -> int:
        """Write ``info`` (its ``row_count`` is replaced by the rows written) and the batches
        (see the module docstring for ``encoded``); returns the number of rows written."""
        ...


@runtime_checkable
class BatchReadSerializer(Protocol):
    """A serializer that reads a part back as Arrow record batches."""

    def format_id(self) -> str: ...

    def read_batches(
        self, inp: IO[bytes]
    ) -> tuple[TableSnapshotInfo, dict[str, str], Iterator[Any]]:
        """The header, the encoding map and the record batches of a part."""
        ...


def check_encodings(encoded: Mapping[str, str]) -> None:
    """``ValueError`` naming an unknown encoding."""
    bad = {k: v for k, v in encoded.items() if v not in ENCODINGS}
    if bad:
        raise ValueError(f"unknown column encodings {bad}; use one of {ENCODINGS}")


_DECODE_JSON = json.JSONDecoder(object_hook=object_hook).decode
_TEXT: dict[str, Callable[[str], Any]] = {DECIMAL: Decimal, UUID: uuid.UUID}


def value_decoder(encoding: str | None) -> Callable[[Any], Any] | None:
    """The function turning one stored value of ``encoding`` back into the row value
    (``None`` when values are stored natively)."""
    if encoding is None:
        return None
    if encoding == JSON:
        return _DECODE_JSON
    if encoding == ROW:
        return loads_row
    return _TEXT[encoding]


def batch_rows(batch: Any, encoded: Mapping[str, str]) -> Iterator[Row]:
    """The rows of one record batch (see the module docstring; a ``row`` column must be the
    batch's only column, and its NULLs are skipped)."""
    names = list(batch.schema.names)
    if not names:
        for _ in range(batch.num_rows):
            yield {}
        return
    if len(names) == 1 and encoded.get(names[0]) == ROW:
        for text in batch.column(0).to_pylist():
            if text is not None:
                yield loads_row(text)
        return
    columns: list[list[Any]] = []
    for i, name in enumerate(names):
        values = batch.column(i).to_pylist()
        dec = value_decoder(encoded.get(name))
        if dec is not None:
            values = [None if v is None else dec(v) for v in values]
        columns.append(values)
    for values in zip(*columns, strict=True):
        yield dict(zip(names, values, strict=True))


def batches_rows(batches: Iterable[Any], encoded: Mapping[str, str]) -> Iterator[Row]:
    """The rows of every batch, in order."""
    for batch in batches:
        yield from batch_rows(batch, encoded)


def zone_name(tz: tzinfo | None) -> str | None:
    """The time zone name that gives ``tz`` back (an IANA key, or ``+HH:MM`` for a plain fixed
    offset), as Arrow timestamp types and Spark kinds spell it; ``None`` when there is none (a
    named fixed offset would lose its name)."""
    if isinstance(tz, ZoneInfo):
        return tz.key
    if isinstance(tz, timezone):
        off = tz.utcoffset(None)
        if off is None or tz.tzname(None) != timezone(off).tzname(None):
            return None
        total = int(off.total_seconds())
        if total % 60 or off.microseconds:
            return None
        sign = "-" if total < 0 else "+"
        total = abs(total)
        return f"{sign}{total // 3600:02d}:{total % 3600 // 60:02d}"
    return None
