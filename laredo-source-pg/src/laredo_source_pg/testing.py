"""Helpers for tests that drive a :class:`~laredo_source_pg.source.PostgresSource` directly."""

from __future__ import annotations

import threading
from typing import Any

from laredo.testing import wait_until
from laredo.testing.handler import RecordingHandler
from laredo.types import Position

__all__ = ["RecordingHandler", "StreamThread", "wait_until"]


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
