"""Buffered changes folded to one net change per key, and the change rows that apply them.

A flush turns the changes of complete transactions into one append (see :mod:`.layout`): per
key the last state wins (an upsert with the full row, or a delete). An UPDATE that did not carry
an unchanged TOAST column takes it from an earlier buffered change of the same key, else from
the row the table holds. A TRUNCATE drops the state folded so far; the flush then replaces the
table's contents.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date, datetime
from decimal import Decimal
from typing import Any

import pyarrow as pa
from laredo.types import ChangeAction, ChangeEvent, Row

from .columns import ColumnCodec, to_arrow
from .layout import OP, SEQ

__all__ = [
    "NetChanges",
    "change_rows",
    "fold",
    "kept_keys",
    "key_queries",
    "quote",
]

_DELETE = "__laredo_delete"
_KEEP = "__laredo_keep_"


@dataclass(frozen=True, slots=True)
class NetChanges:
    """The net effect of a run of changes: ``rows[key] = (row, keep)`` or ``None`` (deleted);
    ``truncated`` when the run started by emptying the table; ``fresh``: the keys whose first
    change in the run is an INSERT (absent from the table before the run)."""

    rows: dict[tuple[Any, ...], tuple[Row, frozenset[str]] | None]
    truncated: bool
    changes: int
    fresh: frozenset[tuple[Any, ...]] = frozenset()


_NONE: frozenset[str] = frozenset()


def fold(
    events: Sequence[ChangeEvent], key_columns: Sequence[str], columns: Sequence[str]
) -> NetChanges:
    """Fold ``events`` (in order) to the net change per key."""
    rows: dict[tuple[Any, ...], tuple[Row, frozenset[str]] | None] = {}
    fresh: set[tuple[Any, ...]] = set()
    truncated = False
    all_columns = frozenset(columns)
    width = len(all_columns)
    keys = tuple(key_columns)
    insert, update, delete = ChangeAction.INSERT, ChangeAction.UPDATE, ChangeAction.DELETE
    for e in events:
        action = e.action
        if action is delete:
            old = e.old_values or {}
            rows[tuple([old.get(k) for k in keys])] = None
            continue
        if action is not insert and action is not update:
            if action is ChangeAction.TRUNCATE:
                rows.clear()
                fresh.clear()
                truncated = True
            continue
        new = e.new_values
        if new is None:
            continue
        key = tuple([new.get(k) for k in keys])
        if action is insert and key not in rows:
            fresh.add(key)
        if action is update and e.old_values:
            old_key = tuple([e.old_values.get(k, v) for k, v in zip(keys, key, strict=True)])
            if old_key != key:
                prior_old = rows.get(old_key)
                rows[old_key] = None
                if key not in rows and prior_old is not None:
                    rows[key] = prior_old
        if len(new) == width:  # the common case: a whole row
            rows[key] = (new, _NONE)
            continue
        missing = all_columns.difference(new)
        prior = rows.get(key)
        if prior is not None:
            prior_row, prior_keep = prior
            new = {**{c: prior_row[c] for c in missing if c in prior_row}, **new}
            missing = missing & (prior_keep | all_columns.difference(prior_row))
        rows[key] = (new, frozenset(missing))
    return NetChanges(rows, truncated, len(events), frozenset(fresh))


def sql_literal(value: Any) -> str:
    """A key value as a DataFusion SQL literal (keys of other types raise ``TypeError``)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | Decimal):
        return str(value)
    if isinstance(value, str | uuid.UUID):
        return "'" + str(value).replace("'", "''") + "'"
    if isinstance(value, datetime):
        return f"CAST('{value.isoformat()}' AS TIMESTAMP)"
    if isinstance(value, date):
        return f"DATE '{value.isoformat()}'"
    raise TypeError(f"no SQL literal for a key value of type {type(value).__name__}")


_CHUNK = 2_000
"""Keys per lookup query: a long IN list overflows a thread's stack in DataFusion's planner
(delta-rs 1.6 segfaults at ~60,000 literals on an 8 MiB stack)."""


def key_queries(
    keys: Sequence[tuple[Any, ...]], key_columns: Sequence[str], select: str = "*", table: str = "t"
) -> list[str]:
    """SQL selecting ``select`` of the table's rows (change rows included) holding ``keys``,
    in chunks (no query: no keys); fills the columns an UPDATE left unchanged."""
    out = []
    step = _CHUNK if len(key_columns) == 1 else _CHUNK // 10  # OR chains nest deeper
    for lo in range(0, len(keys), step):
        chunk = keys[lo : lo + step]
        if len(key_columns) == 1:
            literals = ", ".join(sql_literal(k[0]) for k in chunk)
            where = f"{quote(key_columns[0])} IN ({literals})"
        else:
            where = " OR ".join(
                "("
                + " AND ".join(
                    f"{quote(c)} = {sql_literal(v)}" for c, v in zip(key_columns, k, strict=True)
                )
                + ")"
                for k in chunk
            )
        out.append(f"SELECT {select} FROM {table} WHERE {where}")
    return out


def quote(name: str) -> str:
    """A column name as a SQL identifier of delta-rs's MERGE expressions."""
    return '"' + name.replace('"', '""') + '"'


def change_rows(
    net: NetChanges,
    codecs: Sequence[ColumnCodec],
    key_columns: Sequence[str],
    seq: int,
    current: dict[tuple[Any, ...], Row | None],
) -> tuple[pa.Table, dict[str, int]]:
    """The rows a flush appends (see :mod:`.layout`): one per key, its op and ``seq``; a column
    an UPDATE left unchanged (TOAST) takes its value from ``current`` (the state before the
    run). Also the counts per op."""
    rows: list[Row] = []
    ops: list[str] = []
    counts = {"insert": 0, "update": 0, "delete": 0}
    for key, item in net.rows.items():
        if item is None:
            rows.append(dict(zip(key_columns, key, strict=True)))
            op = "delete"
        else:
            row, keep = item
            if keep:
                before = current.get(key) or {}
                row = {**{c: before.get(c) for c in keep}, **row}
            rows.append(row)
            op = "insert" if key in net.fresh else "update"
        ops.append(op)
        counts[op] += 1
    extra: dict[str, tuple[pa.DataType, list[Any]]] = {
        SEQ: (pa.int64(), [seq] * len(rows)),
        OP: (pa.string(), list(ops)),
    }
    return to_arrow(codecs, rows, extra), counts


def kept_keys(net: NetChanges) -> list[tuple[Any, ...]]:
    """The keys of upserts that left a column unchanged (their value comes from the table)."""
    return [k for k, item in net.rows.items() if item is not None and item[1]]
