"""``RecordingHandler``: a ``ChangeHandler`` that records everything it is given (thread-safe),
for tests that drive a source's ``stream`` directly (every source package's tests use it)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

from laredo.types import ChangeEvent, ColumnDefinition, Position, TableIdentifier

from .waiting import wait_until

__all__ = ["RecordingHandler"]


class RecordingHandler:
    """Records batches, events, heartbeats and schema changes; ``on_batch`` (if set) is called
    with each batch after it is recorded."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.events: list[ChangeEvent] = []
        self.batches: list[list[ChangeEvent]] = []
        self.completes: list[bool] = []
        """The ``complete`` flag of each batch (False: its transaction continues)."""
        self.heartbeats: list[Position] = []
        self.schema_changes: list[
            tuple[TableIdentifier, list[ColumnDefinition], list[ColumnDefinition], Position]
        ] = []
        self.on_batch: Callable[[list[ChangeEvent]], None] | None = None

    def on_changes(self, events: Sequence[ChangeEvent], complete: bool = True) -> None:
        batch = list(events)
        with self.lock:
            self.batches.append(batch)
            self.completes.append(complete)
            self.events.extend(batch)
        if self.on_batch is not None:
            self.on_batch(batch)

    def on_change(self, event: ChangeEvent) -> None:
        self.on_changes([event])

    def on_heartbeat(self, position: Position) -> None:
        with self.lock:
            self.heartbeats.append(position)

    def on_schema_change(
        self,
        table: TableIdentifier,
        old_columns: Sequence[ColumnDefinition],
        new_columns: Sequence[ColumnDefinition],
        position: Position = None,
    ) -> None:
        with self.lock:
            self.schema_changes.append((table, list(old_columns), list(new_columns), position))

    def snapshot(self) -> list[ChangeEvent]:
        """A copy of the events recorded so far."""
        with self.lock:
            return list(self.events)

    def wait_for_events(
        self, count: int, timeout: float = 10.0, what: Any = ""
    ) -> list[ChangeEvent]:
        """Wait (``wait_until``) for at least ``count`` events; returns a copy of them all."""
        wait_until(
            lambda: len(self.events) >= count, timeout, what=what or f"{count} change events"
        )
        return self.snapshot()
