"""The typed change frame of one table, shaped like Delta's change data feed.

``spark.readStream.format("laredo").option("table", "public.users")`` (or
``stream_options(table=...)``) gives the table's columns as native Spark columns, typed by the
one mapping of :mod:`laredo_spark.kinds` (int -> LONG, numeric -> exact decimal text, text ->
STRING, timestamptz -> TIMESTAMP, bool -> BOOLEAN, ...), then:

* ``_change_type``: ``insert``, ``update_preimage``, ``update_postimage``, ``delete`` (Delta's
  spelling), or ``truncate`` (no Delta equivalent: one row, every data column NULL).
* ``_commit_position``: the source's serialised position of the commit (what
  ``startingPosition`` takes).
* ``_commit_version``: the position as a number when the source's positions are integers
  (PostgreSQL: the commit LSN), else NULL; it orders commits, the text does not.
* ``_commit_timestamp``: the commit's time (TIMESTAMP).
* ``_seq``: the change's order within its commit (0, 1, ...); an update's pre- and post-image
  share it.
* ``_unchanged_toast``: columns the source did not send (unchanged TOAST): NULL in the
  post-image unless the pre-image carries them (REPLICA IDENTITY FULL), which fills them in.

An update's pre-image holds what the source sent as the old row: the whole row under REPLICA
IDENTITY FULL, the old key when the key changed, otherwise the (unchanged) key columns of the
new row with the other columns NULL. A delete's row is likewise the old row or its key.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any

from laredo.errors import SourceError
from laredo.types import ChangeEvent, ColumnDefinition, Row
from pyspark.sql import types as T

from ..kinds import kind_of_column, spark_schema, to_spark_value

__all__ = ["SYSTEM_COLUMNS", "cdf_kinds", "cdf_rows", "cdf_schema"]

SYSTEM_COLUMNS = (
    "_change_type",
    "_commit_position",
    "_commit_version",
    "_commit_timestamp",
    "_seq",
    "_unchanged_toast",
)
_SYSTEM_FIELDS = [
    T.StructField("_change_type", T.StringType(), False),
    T.StructField("_commit_position", T.StringType(), False),
    T.StructField("_commit_version", T.LongType(), True),
    T.StructField("_commit_timestamp", T.TimestampType(), True),
    T.StructField("_seq", T.LongType(), False),
    T.StructField("_unchanged_toast", T.ArrayType(T.StringType(), False), True),
]


def cdf_kinds(table: str, columns: Sequence[ColumnDefinition]) -> dict[str, str]:
    """The kind of each column of the frame, in the table's order (a column named like one of
    the frame's own columns is refused with a ``SourceError``)."""
    ordered = sorted(columns, key=lambda c: c.ordinal_position)
    clash = [c.name for c in ordered if c.name in SYSTEM_COLUMNS]
    if clash:
        raise SourceError(
            f"laredo stream: table {table} has column(s) {clash} named like the change frame's "
            "own columns; read it with the 'tables' option (the typed-JSON frame)"
        )
    return {c.name: kind_of_column(c) for c in ordered}


def cdf_schema(kinds: Mapping[str, str]) -> Any:
    """The Spark schema of the frame of a table with these column kinds."""
    return T.StructType([*spark_schema(kinds).fields, *_SYSTEM_FIELDS])


def _values(table: str, kinds: Mapping[str, str], row: Row | None, position: str) -> list[Any]:
    if row is None:
        return [None] * len(kinds)
    if not kinds.keys() >= row.keys():
        extra = sorted(set(row) - set(kinds))
        raise SourceError(
            f"laredo stream: a change of {table} at position {position} has column(s) {extra} "
            "the frame does not have (the table's columns changed since the query started): "
            "restart the query (the frame's columns are read when it starts)"
        )
    out = []
    for name, kind in kinds.items():
        try:
            out.append(to_spark_value(kind, row.get(name)))
        except (TypeError, ValueError) as exc:
            raise SourceError(
                f"laredo stream: column {name} of {table} at position {position} does not "
                f"fit the frame's {kind} column: {exc}; the table's columns changed since the "
                "query started? restart it (the frame's columns are read when it starts)"
            ) from None
    return out


def cdf_rows(
    table: str,
    kinds: Mapping[str, str],
    keys: Sequence[str],
    events: Sequence[tuple[str, str, ChangeEvent]],
    version: Callable[[Any], int | None],
) -> list[tuple[Any, ...]]:
    """The frame's rows of ``events`` (``(serialised position, action name, event)`` in stream
    order, whole transactions only), with ``_seq`` counted per position."""
    out: list[tuple[Any, ...]] = []
    seq = 0
    prev: str | None = None
    for pos, action, ev in events:
        seq = seq + 1 if pos == prev else 0
        prev = pos
        ts = ev.commit_timestamp or ev.timestamp
        meta = (pos, version(ev.position), ts if isinstance(ts, datetime) else None, seq)
        for change, row, missing in _images(action, ev, keys):
            out.append((*_values(table, kinds, row, pos), change, *meta, missing))
    return out


def _images(
    action: str, ev: ChangeEvent, keys: Sequence[str]
) -> list[tuple[str, Row | None, list[str] | None]]:
    """``(change type, row, unchanged TOAST columns left NULL)`` of one event."""
    if action == "INSERT":
        return [("insert", ev.new_values, None)]
    if action == "DELETE":
        return [("delete", ev.old_values, None)]
    if action == "TRUNCATE":
        return [("truncate", None, None)]
    if action != "UPDATE":
        return []
    new = dict(ev.new_values or {})
    old = ev.old_values
    if old is None:
        old = {k: new.get(k) for k in keys}
    toast = sorted(ev.unchanged_toast or ())
    for c in toast:
        if c in old:
            new[c] = old[c]
    missing = [c for c in toast if c not in old]
    return [("update_preimage", old, None), ("update_postimage", new, missing)]
