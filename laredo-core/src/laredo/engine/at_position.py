"""Work armed for one source position on a pipeline worker's thread (verify, count validation).

:class:`AtPosition` runs the work once the worker's target holds exactly the changes up to the
position: at once when they are applied, else just before the first item after it (a change past
it, or a heartbeat at or past it). When one batch holds changes on both sides of the position
there is no exact moment: ``missed`` runs instead. One piece of work at a time.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, Protocol, cast

from ..batches import ChangeBatch
from ..contracts import RowCounter
from ..types import Position, TableIdentifier
from .buffer import Batch, ControlKind, Heartbeat

logger = logging.getLogger(__name__)

__all__ = ["AtPosition", "Counted"]


class Counted(Protocol):
    """What a count validation uses of its pipeline worker."""

    id: str
    table: TableIdentifier
    expected_rows: int
    applied: Position | None

    def submit(
        self, kind: ControlKind, payload: Callable[[], Any] | None = None
    ) -> Future[Any]: ...

    def validate(self, expected: int, after_baseline: bool = False) -> bool: ...


class AtPosition:
    """One worker's armed work (see the module docstring); used on the worker's thread only,
    except :meth:`cancel`."""

    def __init__(self, compare: Callable[[Position, Position], int]) -> None:
        self._compare = compare
        self.armed: tuple[Position, Callable[[], None], Callable[[], None] | None] | None = None
        self.counting = False  # a source count of periodic validation is on its way

    def arm(
        self,
        applied: Position | None,
        position: Position,
        work: Callable[[], None],
        missed: Callable[[], None] | None,
    ) -> bool:
        """Run ``work`` now when ``applied`` is at or past ``position``, else keep it for
        :meth:`reached`. False when another is waiting."""
        if self.armed is not None:
            return False
        if applied is not None and self._compare(applied, position) >= 0:
            work()
        else:
            self.armed = (position, work, missed)
        return True

    def cancel(self) -> None:
        self.armed = None

    def reached(self, item: Any) -> None:
        """Before the worker handles ``item``: run the armed work when it is due."""
        assert self.armed is not None
        position, work, missed = self.armed
        compare = self._compare
        due = False
        if type(item) is Batch and item.events:
            events = item.events
            one = type(events) is ChangeBatch  # one position for the whole batch
            first = cast(ChangeBatch, events).position if one else events[0].position
            if compare(first, position) > 0:
                due = True
            elif not one and compare(events[-1].position, position) > 0:
                self.armed = None  # the batch spans the position: no exact moment
                if missed is not None:
                    missed()
        elif type(item) is Heartbeat:
            due = compare(item.position, position) >= 0
        if due:
            self.armed = None
            work()

    def count_at_source(self, worker: Counted, source: RowCounter) -> None:
        """Periodic validation against the source: the table is counted at a source position
        on a helper thread (the worker keeps applying) and compared with the target once it
        holds exactly that position; a round the worker has already passed is skipped. A
        failed count compares with the engine's count instead."""

        def count() -> None:
            try:
                rows, position = source.count_rows_at(worker.table)
            except Exception as exc:
                logger.warning(
                    "pipeline %s: counting %s at the source failed (%s); comparing with the "
                    "engine's count",
                    worker.id,
                    worker.table,
                    exc,
                )
                worker.submit("call", lambda: worker.validate(worker.expected_rows))
            else:
                worker.submit("call", lambda: self._arm_count(worker, rows, position))
            finally:
                self.counting = False

        self.counting = True
        threading.Thread(target=count, name=f"laredo-count-{worker.id}", daemon=True).start()

    def _arm_count(self, worker: Counted, rows: int, position: Position) -> None:
        applied = worker.applied
        if applied is not None and self._compare(applied, position) > 0:
            logger.debug("pipeline %s: applied past the counted position; next round", worker.id)
            return

        def compare() -> None:
            worker.validate(rows)

        self.arm(applied, position, compare, None)
