""":class:`DeadLetterBacklog`: dead letters stored per pipeline, for the status page and the
``laredo_dead_letter_backlog`` gauge.

Each pipeline's entries are counted by the store (:func:`laredo.deadletter.count_dead_letters`:
the store's ``count`` where it has one, so no entry is read or decoded), at most every
:data:`BACKLOG_TTL` seconds, and counted again after a ``DeadLetterWritten`` event (it is an
observer on the server's one event stream). Nothing runs in the background.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from laredo import Engine
from laredo.deadletter import count_dead_letters
from laredo.events import DeadLetterWritten, handles
from laredo.observers import NullObserver

logger = logging.getLogger(__name__)

__all__ = ["BACKLOG_TTL", "DeadLetterBacklog"]

BACKLOG_TTL = 15.0
"""Seconds a dead-letter backlog read from the store is reused."""


class DeadLetterBacklog(NullObserver):
    """The dead-letter backlog of the engine running now (``engine()``: a restore replaces
    it)."""

    def __init__(self, engine: Callable[[], Engine]) -> None:
        self._engine = engine
        self._lock = threading.Lock()
        self._cached: tuple[float, dict[str, int]] | None = None

    @handles(DeadLetterWritten)
    def _dead_letter_written(self, ev: DeadLetterWritten) -> None:
        with self._lock:
            self._cached = None  # the next read counts the store again

    def read(self) -> dict[str, int] | None:
        """Dead letters stored per pipeline id (pipelines without any are absent); None when no
        dead-letter store is configured or it cannot be read."""
        store = self._engine().dead_letter_store
        if store is None:
            return None
        now = time.monotonic()
        with self._lock:
            cached = self._cached
        if cached is not None and now - cached[0] < BACKLOG_TTL:
            return cached[1]
        try:
            out = {pid: count_dead_letters(store, pid) for pid in store.pipelines()}
        except Exception as exc:
            logger.warning("cannot count dead letters for the status: %s", exc)
            return None
        with self._lock:
            self._cached = (now, out)
        return out
