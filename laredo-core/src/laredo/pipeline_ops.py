"""Per-change semantics of a pipeline, written once.

The local engine's workers, dead-letter replay, snapshot replay, the Spark sinks and the
Spark-equals-local property test all call these functions, so a rule changes in one place:

* **Chain**: filters first (all must include the row), then transforms in order; a transform
  returning ``None`` drops the row (:func:`run_chain`).
* **Identity**: the key columns a DELETE carries go through the same transforms, so a renamed
  key column is deleted under its new name; a transform that would drop an identity leaves it
  as it was (:func:`transform_identity`).
* **An UPDATE leaving the filter becomes a DELETE** of the transformed identity (old row when
  the source sent one, else the new row); an INSERT that does not pass is dropped.
* **TTL**: a row whose expiry time is at or before *now* is treated like a row that left the
  filter (an INSERT dropped, an UPDATE turned into a DELETE, a baseline row not loaded).
* **Apply**: INSERT → ``on_insert``, UPDATE → ``on_update(new, identity)``, DELETE →
  ``on_delete(identity)``, TRUNCATE → ``on_truncate`` (:func:`apply_change`); baseline rows in
  batches where the target takes them (:func:`deliver_baseline`).

Nothing here retries, acknowledges or touches positions beyond ``set_change_position``: that is
the caller's job (the engine's worker, a sink's batch log).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from .batches import ChangeBatch
from .contracts import BaselineBatchTarget, PipelineFilter, PipelineTransform, SyncTarget
from .errors import InvalidChangeError
from .types import ChangeAction, ChangeEvent, Row, TableIdentifier

logger = logging.getLogger(__name__)

__all__ = [
    "Chain",
    "Prepared",
    "TtlFunction",
    "apply_change",
    "deliver_baseline",
    "row_count_change",
    "run_chain",
    "transform_identity",
    "ttl_from_field",
]

INSERT = ChangeAction.INSERT
UPDATE = ChangeAction.UPDATE
DELETE = ChangeAction.DELETE
TRUNCATE = ChangeAction.TRUNCATE

TtlFunction = Callable[[Row], datetime | None]
"""``row -> expiry time`` (``None``: the row does not expire)."""


def run_chain(
    table: TableIdentifier,
    row: Row,
    filters: Sequence[PipelineFilter],
    transforms: Sequence[PipelineTransform],
) -> Row | None:
    """The row after the filters and transforms, or ``None`` when it is dropped."""
    for f in filters:
        if not f.include(table, row):
            return None
    for t in transforms:
        out = t.transform(table, row)
        if out is None:
            return None
        row = out
    return row


def transform_identity(
    table: TableIdentifier, row: Row, transforms: Sequence[PipelineTransform]
) -> Row:
    """A DELETE's (or an UPDATE's old) identity through the transforms; never dropped."""
    for t in transforms:
        out = t.transform(table, row)
        if out is None:
            return row
        row = out
    return row


def ttl_from_field(name: str) -> TtlFunction:
    """Expiry read from column ``name``: a ``datetime`` (naive is UTC) or ISO-8601 text."""

    def expiry(row: Row) -> datetime | None:
        v = row.get(name)
        if isinstance(v, datetime):
            return v if v.tzinfo else v.replace(tzinfo=UTC)
        if isinstance(v, str):
            try:
                d = datetime.fromisoformat(v)
            except ValueError:
                return None
            return d if d.tzinfo else d.replace(tzinfo=UTC)
        return None

    return expiry


def _with(ev: ChangeEvent, action: ChangeAction, new: Row | None, old: Row | None) -> ChangeEvent:
    """``dataclasses.replace`` without its per-call introspection (hot path)."""
    return ChangeEvent(
        ev.table,
        action,
        ev.position,
        ev.timestamp,
        new,
        old,
        ev.xid,
        ev.commit_timestamp,
        ev.unchanged_toast,
    )


@dataclass(slots=True)
class Prepared:
    """What :meth:`Chain.prepare` made of a batch: the events to apply, and how the table's
    row count moves (``reset``: a TRUNCATE restarted it from 0 before ``delta``)."""

    events: list[ChangeEvent]
    delta: int = 0
    reset: bool = False

    def count_after(self, count: int) -> int:
        return (0 if self.reset else count) + self.delta


@dataclass(frozen=True, slots=True)
class Chain:
    """One pipeline's row semantics: its table, filters, transforms and TTL."""

    table: TableIdentifier
    filters: tuple[PipelineFilter, ...] = ()
    transforms: tuple[PipelineTransform, ...] = ()
    ttl: TtlFunction | None = None
    label: str = field(default="", compare=False)

    @property
    def plain(self) -> bool:
        """True when rows pass unchanged (no filter, transform or TTL)."""
        return not self.filters and not self.transforms and self.ttl is None

    def row(self, row: Row) -> Row | None:
        """:func:`run_chain` for this pipeline (no TTL)."""
        return run_chain(self.table, row, self.filters, self.transforms)

    def identity(self, row: Row) -> Row:
        """:func:`transform_identity` for this pipeline."""
        return transform_identity(self.table, row, self.transforms)

    def expired(self, row: Row, now: datetime) -> bool:
        """True when the TTL says ``row`` expired at or before ``now``. A TTL function that
        raises keeps the row (logged): expiry never loses data by accident."""
        if self.ttl is None:
            return False
        try:
            at = self.ttl(row)
        except Exception:
            logger.exception("%s: ttl function failed; row kept", self.label or self.table)
            return False
        return at is not None and at <= now

    def baseline_rows(self, rows: Iterable[Row], now: datetime | None = None) -> list[Row]:
        """The baseline rows to load: through the chain, expired ones left out."""
        out: list[Row] = []
        now = (now or datetime.now(UTC)) if self.ttl is not None else None
        for r in rows:
            new = self.row(r)
            if new is not None and (now is None or not self.expired(new, now)):
                out.append(new)
        return out

    def prepare(self, events: Sequence[ChangeEvent], now: datetime | None = None) -> Prepared:
        """The events to apply for ``events`` (see the module docstring for the rules)."""
        out: list[ChangeEvent] = []
        result = Prepared(out)
        now = (now or datetime.now(UTC)) if self.ttl is not None else None
        transforms = self.transforms
        delta = 0
        for ev in events:
            action = ev.action
            if action is INSERT or action is UPDATE:
                row = ev.new_values or {}
                new = self.row(row)
                if new is not None and now is not None and self.expired(new, now):
                    new = None
                if new is None:
                    if action is UPDATE:
                        out.append(_with(ev, DELETE, None, self.identity(ev.old_values or row)))
                        delta -= 1
                    continue
                if new is not row or (action is UPDATE and transforms):
                    old = ev.old_values
                    if old is not None and transforms:
                        old = self.identity(old)
                    ev = _with(ev, action, new, old)
                if action is INSERT:
                    delta += 1
                out.append(ev)
            elif action is DELETE:
                if transforms and ev.old_values is not None:
                    ev = _with(ev, action, None, self.identity(ev.old_values))
                delta -= 1
                out.append(ev)
            else:
                if action is TRUNCATE:
                    result.reset = True
                    delta = 0
                out.append(ev)
        result.delta = delta
        return result


def row_count_change(events: Sequence[ChangeEvent], count: int) -> int:
    """The table's row count after ``events`` applied unchanged: +1 per INSERT, -1 per DELETE,
    0 after a TRUNCATE (a batch's actions are read from its ops, no event is built)."""
    if type(events) is ChangeBatch:
        if events.rows is not None:  # a chunk of rows: INSERTs only (no ops built)
            return count + len(events)
        actions: Iterable[Any] = (op[0] for op in events.ops)
    else:
        actions = (ev.action for ev in events)
    for action in actions:
        if action is INSERT:
            count += 1
        elif action is DELETE:
            count -= 1
        elif action is TRUNCATE:
            count = 0
    return count


def apply_change(
    target: SyncTarget, table: TableIdentifier, change: ChangeEvent, *, positioned: bool = False
) -> None:
    """Apply one (already prepared) change through the target's per-change methods.

    With ``positioned`` the target's ``set_change_position`` is called first. A change that
    lacks the values its action needs raises :class:`~laredo.errors.InvalidChangeError`
    (terminal: retrying cannot help).
    """
    if positioned:
        target.set_change_position(change.position)  # type: ignore[attr-defined]
    action = change.action
    if action is INSERT:
        if change.new_values is None:
            raise InvalidChangeError(f"{table}: INSERT without new values")
        target.on_insert(table, change.new_values)
    elif action is UPDATE:
        if change.new_values is None:
            raise InvalidChangeError(f"{table}: UPDATE without new values")
        target.on_update(table, change.new_values, change.old_values)
    elif action is DELETE:
        identity = change.old_values if change.old_values is not None else change.new_values
        if identity is None:
            raise InvalidChangeError(f"{table}: DELETE without old values (its identity)")
        target.on_delete(table, identity)
    elif action is TRUNCATE:
        target.on_truncate(table)
    else:
        raise InvalidChangeError(f"{table}: cannot apply a {action.name} change to a target")


def deliver_baseline(target: Any, table: TableIdentifier, rows: Sequence[Row]) -> int:
    """Hand baseline rows to the target (in one call when it takes batches); returns
    ``len(rows)``."""
    if isinstance(target, BaselineBatchTarget):
        target.on_baseline_rows(table, rows)
    else:
        fn = target.on_baseline_row
        for r in rows:
            fn(table, r)
    return len(rows)
