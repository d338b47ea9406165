"""Delivering a baseline: the one path for a source's start, a re-baseline and a table reload.

:func:`baseline_into` asks the source for its tables' rows — in lists when it is a
:class:`~laredo.contracts.BatchBaselineSource`, otherwise row by row, gathered into chunks of
:data:`BASELINE_CHUNK` — and hands each chunk to every receiver of its table (the pipeline's
chain, then its target). Every :data:`PROGRESS_EVERY` rows of a table the observer hears
``BaselineRowLoaded`` for each of its pipelines (when it opted in). A receiver whose
target fails is failed with the reason and gets no further rows; the others go on. Rows a source
left out of a :class:`~laredo.batches.RowBatch` as ``rejected`` (a value no Python type holds)
are dead-lettered by each receiver as INSERTs, and the baseline goes on. A failure of
the source itself propagates unchanged: the caller decides what it means (the whole source at
start-up, one pipeline on a reload).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from ..contracts import BatchBaselineSource, SyncSource
from ..events import BaselineRowLoaded
from ..types import ChangeAction, ChangeEvent, Position, Row, TableIdentifier
from .context import EngineContext

__all__ = ["BASELINE_CHUNK", "PROGRESS_EVERY", "BaselineReceiver", "baseline_into"]

PROGRESS_EVERY = 10_000
"""Baseline progress events every this many rows per table."""
BASELINE_CHUNK = 2_000
"""Rows handed to targets at once when the source delivers them one by one."""


class BaselineReceiver(Protocol):
    """What a baseline is delivered into (a pipeline worker)."""

    @property
    def id(self) -> str: ...
    @property
    def table(self) -> TableIdentifier: ...
    @property
    def failed(self) -> bool: ...
    def baseline_rows(self, rows: Sequence[Row]) -> int:
        """Load rows through the chain into the target; returns how many were kept."""
        ...

    def fail(self, message: str) -> None: ...
    def reject(self, ev: ChangeEvent) -> bool:
        """Dead-letter a row that holds an Unrepresentable value; True when the receiver goes
        on."""
        ...


def baseline_into(
    ctx: EngineContext, source: SyncSource, receivers: Sequence[BaselineReceiver]
) -> tuple[Position, dict[str, int]]:
    """Baseline the receivers' tables from ``source`` (see the module docstring).

    Returns the position the stream continues strictly after and, per receiver id, how many rows
    its target was given. Raises whatever the source raised."""
    obs = ctx.observer
    wants_progress = ctx.wants.baseline_progress
    by_table: dict[TableIdentifier, list[BaselineReceiver]] = {}
    for r in receivers:
        by_table.setdefault(r.table, []).append(r)
    loaded: dict[str, int] = {r.id: 0 for r in receivers}
    seen: dict[TableIdentifier, int] = dict.fromkeys(by_table, 0)
    pending: dict[TableIdentifier, list[Row]] = {}

    def deliver(table: TableIdentifier, rows: Sequence[Row]) -> None:
        targets = by_table.get(table)
        if not targets:
            return
        for r in targets:
            if r.failed:
                continue
            try:
                loaded[r.id] += r.baseline_rows(rows)
            except Exception as exc:
                r.fail(f"baseline load into target failed for {table}: {exc}")
            for row in getattr(rows, "rejected", ()):
                if not r.failed:
                    r.reject(ChangeEvent(table, ChangeAction.INSERT, None, new_values=row))
        before = seen[table]
        seen[table] = after = before + len(rows)
        if wants_progress and after // PROGRESS_EVERY != before // PROGRESS_EVERY:
            for r in targets:
                obs.on_event(BaselineRowLoaded(r.id, table, after))

    def row_cb(table: TableIdentifier, row: Row) -> None:
        buf = pending.get(table)
        if buf is None:
            if table not in by_table:
                return
            buf = pending[table] = []
        buf.append(row)
        if len(buf) >= BASELINE_CHUNK:
            pending[table] = []  # a fresh list: the target may keep the one it is given
            deliver(table, buf)

    tables = list(by_table)
    if isinstance(source, BatchBaselineSource):
        position = source.baseline_batches(tables, deliver)
    else:
        position = source.baseline(tables, row_cb)
    for table, rows in pending.items():
        if rows:
            deliver(table, rows)
    return position, loaded
