"""Changes and baseline rows holding values no Python type holds: dead-lettered, never applied.

A source marks such a value with :class:`~laredo.types.Unrepresentable` (a year after 9999, a
BC date, ``time '24:00'``) and says which batches may hold one
(:attr:`ChangeBatch.unrepresentable <laredo.batches.ChangeBatch.unrepresentable>`,
:attr:`RowBatch.rejected <laredo.batches.RowBatch.rejected>`), so ordinary batches pay nothing.
The pipeline worker writes each such change to the dead-letter store through the same store and
observer call as a change its target refused, with a message naming table, key and column, and
goes on with the rest, whatever its error policy. Without a dead-letter store the pipeline's
error policy applies, as for any change that cannot be applied.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..batches import ChangeBatch
from ..types import (
    ChangeEvent,
    ColumnDefinition,
    TableIdentifier,
    Unrepresentable,
    row_key_columns,
    unrepresentable_columns,
)

__all__ = ["problem", "split"]


def _marked(values: Any) -> bool:
    if values is None:
        return False
    if isinstance(values, dict):
        values = values.values()
    return any(type(v) is Unrepresentable for v in values)


def split(batch: ChangeBatch) -> tuple[ChangeBatch, list[ChangeEvent]]:
    """``batch`` without the changes holding an Unrepresentable value, and those changes as
    events (in order)."""
    keep: list[Any] = []
    bad: list[ChangeEvent] = []
    for op in batch.ops:
        if _marked(op[1]) or _marked(op[2]):
            bad.append(batch.event(op))
        else:
            keep.append(op)
    rest = ChangeBatch(
        batch.table,
        batch.names,
        keep,
        batch.position,
        commit_time=batch.commit_time,
        xid=batch.xid,
    )
    return rest, bad


def problem(table: TableIdentifier, event: ChangeEvent, columns: Sequence[ColumnDefinition]) -> str:
    """Why ``event`` was not applied: its table, key and the columns holding markers."""
    row = event.new_values if event.new_values is not None else event.old_values
    row = row or {}
    fields = row_key_columns(columns) if columns else tuple(row)
    key = {f: row.get(f) for f in fields}
    held: dict[str, Any] = {}
    for values in (event.new_values, event.old_values):  # an UPDATE's old key may hold one
        for c in unrepresentable_columns(values):
            held.setdefault(c, values[c])  # type: ignore[index]
    described = ", ".join(f"column {c!r} holds {v}" for c, v in held.items())
    return (
        f"{table}: row with key {key}: {described}, which Python cannot represent; the "
        f"{event.action.name} was not applied. Change the value in the source (or exclude the "
        "row with a row filter), then replay or reload the table"
    )
