"""Helper base classes for targets, and the engine's one door into any target.

The engine calls a target through exactly two methods (:class:`~laredo.contracts.TargetDoor`):
``apply(table, changes, complete)`` for changes (a :class:`~laredo.batches.ChangeBatch` is one
such sequence) and ``load(table, rows)`` for baseline rows (a :class:`~laredo.batches.RowBatch`
is one). ``complete=True`` says the last change ends its transaction.

* :class:`RowTarget` maps them onto ``on_insert`` / ``on_update`` / ``on_delete`` /
  ``on_truncate`` / ``on_baseline_row`` for simple plugins.
* :class:`BufferingTarget` (with :mod:`laredo.buffering`) owns what every durable buffering
  target needs; a subclass writes only ``write(batch) -> position``.
* :func:`door_of` is what the engine calls: the target itself when it has the door, otherwise
  the one deprecation path (:class:`LegacyDoor`, warning once per class) for targets written
  against the per-change protocol.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .batches import ChangeBatch
from .buffering import BufferingTarget, WriteBatch
from .contracts import (
    BaselineBatchTarget,
    BatchTarget,
    ChangeBatchTarget,
    DurablePositionTarget,
    PositionedTarget,
    SyncTarget,
    TargetDoor,
)
from .deprecation import deprecated_target
from .errors import BatchApplyError
from .pipeline_ops import apply_change, deliver_baseline
from .types import ChangeEvent, Position, Row, TableIdentifier

__all__ = ["BufferingTarget", "LegacyDoor", "RowTarget", "WriteBatch", "door_of"]


def _apply_each(
    target: Any, table: TableIdentifier, changes: Sequence[ChangeEvent], positioned: bool
) -> None:
    """Apply changes one by one; a failure after the first raises ``BatchApplyError(index)``
    (the ones before it stay applied), so the engine retries from the failed one."""
    for i, ev in enumerate(changes):
        try:
            apply_change(target, table, ev, positioned=positioned)
        except Exception as exc:
            if i == 0:
                raise
            raise BatchApplyError(i, str(exc)) from exc


class RowTarget:
    """Base for simple targets: implement ``on_insert`` / ``on_update`` / ``on_delete`` /
    ``on_truncate`` and ``on_baseline_row``; the engine's batch calls arrive there in order.
    A subclass with ``set_change_position`` (:class:`~laredo.contracts.PositionedTarget`) is
    told each change's position before it. A change that fails after the first raises
    ``BatchApplyError`` naming it."""

    def apply(
        self, table: TableIdentifier, changes: Sequence[ChangeEvent], complete: bool = True
    ) -> None:
        _apply_each(self, table, changes, isinstance(self, PositionedTarget))

    def load(self, table: TableIdentifier, rows: Sequence[Row]) -> None:
        on_row = self.on_baseline_row
        for r in rows:
            on_row(table, r)

    def on_baseline_row(self, table: TableIdentifier, row: Row) -> None:
        raise NotImplementedError

    def on_insert(self, table: TableIdentifier, row: Row) -> None:
        raise NotImplementedError

    def on_update(self, table: TableIdentifier, row: Row, identity: Row | None) -> None:
        raise NotImplementedError

    def on_delete(self, table: TableIdentifier, identity: Row) -> None:
        raise NotImplementedError

    def on_truncate(self, table: TableIdentifier) -> None:
        raise NotImplementedError


class LegacyDoor:
    """The door for a target written against the per-change protocol (deprecated): a
    ``ChangeBatch`` goes to ``apply_change_batch``, other changes to ``apply_changes``, else
    change by change (``set_change_position`` first when it has it); rows to
    ``on_baseline_rows`` or ``on_baseline_row``. A buffering legacy target learns that its last
    transaction is complete from :meth:`heartbeat`, as before."""

    __slots__ = ("_batch", "_change_batch", "_durable", "_positioned", "target")

    def __init__(self, target: SyncTarget) -> None:
        self.target = target
        self._batch = target if isinstance(target, BatchTarget) else None
        self._change_batch = target if isinstance(target, ChangeBatchTarget) else None
        self._positioned = target if isinstance(target, PositionedTarget) else None
        self._durable = isinstance(target, DurablePositionTarget)

    def apply(
        self, table: TableIdentifier, changes: Sequence[ChangeEvent], complete: bool = True
    ) -> None:
        if self._change_batch is not None and type(changes) is ChangeBatch:
            self._change_batch.apply_change_batch(table, changes)
        elif self._batch is not None:
            self._batch.apply_changes(table, changes)
        else:
            _apply_each(self.target, table, changes, self._positioned is not None)

    def load(self, table: TableIdentifier, rows: Sequence[Row]) -> None:
        if isinstance(self.target, BaselineBatchTarget):
            self.target.on_baseline_rows(table, rows)
        else:
            deliver_baseline(self.target, table, rows)

    def heartbeat(self, position: Position) -> None:
        """Nothing more up to ``position``: a positioned buffering target hears it."""
        if self._durable and self._positioned is not None:
            self._positioned.set_change_position(position)


def door_of(target: Any) -> TargetDoor:
    """The engine's door into ``target``: itself when it implements ``apply`` and ``load``,
    otherwise a :class:`LegacyDoor` (a ``TargetProtocolDeprecationWarning``, once per class)."""
    if isinstance(target, TargetDoor):
        return target
    deprecated_target(type(target))
    return LegacyDoor(target)
