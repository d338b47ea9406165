"""Buffered changes folded to one net change per key, and the MERGE that applies them.

A flush turns the changes of complete transactions into one MERGE: per key the last state wins
(an upsert with the full row, or a delete). An UPDATE that did not carry an unchanged TOAST
column takes it from an earlier buffered change of the same key, else the MERGE keeps the value
the table holds (``CASE WHEN keep THEN t.col ELSE s.col END``). A TRUNCATE drops the state folded
so far and makes the MERGE delete every row the source does not hold.
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

__all__ = [
    "DELETE_FLAG",
    "NetChanges",
    "deleted_keys_queries",
    "fold",
    "merge_clauses",
    "merge_source",
    "quote",
    "without_missing_deletes",
]

_DELETE = "__laredo_delete"
_KEEP = "__laredo_keep_"


@dataclass(frozen=True, slots=True)
class NetChanges:
    """The net effect of a run of changes: ``rows[key] = (row, keep)`` or ``None`` (deleted);
    ``truncated`` when the run started by emptying the table."""

    rows: dict[tuple[Any, ...], tuple[Row, frozenset[str]] | None]
    truncated: bool
    changes: int


_NONE: frozenset[str] = frozenset()


def fold(
    events: Sequence[ChangeEvent], key_columns: Sequence[str], columns: Sequence[str]
) -> NetChanges:
    """Fold ``events`` (in order) to the net change per key."""
    rows: dict[tuple[Any, ...], tuple[Row, frozenset[str]] | None] = {}
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
                truncated = True
            continue
        new = e.new_values
        if new is None:
            continue
        key = tuple([new.get(k) for k in keys])
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
    return NetChanges(rows, truncated, len(events))


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


def deleted_keys_queries(
    net: NetChanges, key_columns: Sequence[str], table: str = "t"
) -> list[str]:
    """SQL selecting which keys the run deletes exist in the table (no query: it deletes none).

    delta-rs 1.6 fails a MERGE (with the change data feed on) whose source holds a row that
    matches nothing and is inserted by no clause, i.e. the delete of a key the table does not
    hold, so such deletes are dropped before the MERGE."""
    deleted = [k for k, item in net.rows.items() if item is None]
    cols = ", ".join(quote(k) for k in key_columns)
    out = []
    step = _CHUNK if len(key_columns) == 1 else _CHUNK // 10  # OR chains nest deeper
    for lo in range(0, len(deleted), step):
        chunk = deleted[lo : lo + step]
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
        out.append(f"SELECT {cols} FROM {table} WHERE {where}")
    return out


def without_missing_deletes(net: NetChanges, existing: set[tuple[Any, ...]]) -> NetChanges:
    """``net`` without the deletes of keys not in ``existing``."""
    rows = {k: v for k, v in net.rows.items() if v is not None or k in existing}
    return NetChanges(rows, net.truncated, net.changes)


def quote(name: str) -> str:
    """A column name as a SQL identifier of delta-rs's MERGE expressions."""
    return '"' + name.replace('"', '""') + '"'


def merge_source(
    net: NetChanges, codecs: Sequence[ColumnCodec], key_columns: Sequence[str]
) -> tuple[pa.Table, set[str]]:
    """The MERGE source (one row per key, a delete flag, a keep flag per column some update
    left unchanged) and the names of the kept columns."""
    rows: list[Row] = []
    deletes: list[bool] = []
    kept: set[str] = set()
    for key, item in net.rows.items():
        if item is None:
            rows.append(dict(zip(key_columns, key, strict=True)))
            deletes.append(True)
        else:
            rows.append(item[0])
            deletes.append(False)
            kept |= item[1]
    extra: dict[str, tuple[pa.DataType, list[Any]]] = {_DELETE: (pa.bool_(), deletes)}
    items = list(net.rows.values())
    for name in sorted(kept):
        flags = [item is not None and name in item[1] for item in items]
        extra[_KEEP + name] = (pa.bool_(), flags)
    return to_arrow(codecs, rows, extra), kept


def merge_clauses(
    codecs: Sequence[ColumnCodec], key_columns: Sequence[str], kept: set[str]
) -> tuple[str, dict[str, str], dict[str, str]]:
    """The MERGE predicate, the update expressions and the insert expressions."""
    predicate = " AND ".join(f"t.{quote(k)} = s.{quote(k)}" for k in key_columns)
    updates: dict[str, str] = {}
    inserts: dict[str, str] = {}
    for c in codecs:
        q = quote(c.name)
        inserts[q] = f"s.{q}"
        if c.name in key_columns:
            continue
        if c.name in kept:
            flag = quote(_KEEP + c.name)
            updates[q] = f"CASE WHEN s.{flag} THEN t.{q} ELSE s.{q} END"
        else:
            updates[q] = f"s.{q}"
    return predicate, updates, inserts


DELETE_FLAG = f"s.{quote(_DELETE)}"
