"""Helpers for tests that drive a :class:`~laredo_source_pg.source.PostgresSource` directly."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

from laredo.testing import wait_until
from laredo.types import ChangeEvent, ColumnDefinition, Position, TableIdentifier

__all__ = ["RecordingHandler", "StreamThread", "wait_until"]


class RecordingHandler:
    """A ``ChangeHandler`` that records everything (thread-safe)."""

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
        position: Position,
    ) -> None:
        with self.lock:
            self.schema_changes.append((table, list(old_columns), list(new_columns), position))

    def snapshot(self) -> list[ChangeEvent]:
        with self.lock:
            return list(self.events)

    def wait_for_events(self, count: int, timeout: float = 10.0) -> list[ChangeEvent]:
        wait_until(lambda: len(self.events) >= count, timeout, what=f"{count} change events")
        return self.snapshot()


class StreamThread(threading.Thread):
    """Runs ``source.stream(position, handler)`` in a daemon thread; keeps its exception."""

    def __init__(self, source: Any, position: Position, handler: Any) -> None:
        super().__init__(daemon=True, name="laredo-pg-stream")
        self.source = source
        self.position = position
        self.handler = handler
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self.source.stream(self.position, self.handler)
        except BaseException as exc:
            self.error = exc

    def stop(self, timeout: float = 10.0) -> None:
        self.source.stop_stream()
        self.join(timeout)
        if self.is_alive():
            raise AssertionError("stream() did not return after stop_stream()")
