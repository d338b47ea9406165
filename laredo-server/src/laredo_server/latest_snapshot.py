""":class:`LatestSnapshot`: the newest complete snapshot, for the status page and the
``laredo_snapshot_*`` metrics.

It is read from the snapshot store on first use and at most every :data:`SNAPSHOT_RELIST`
seconds after, and kept current in between by ``SnapshotCompleted`` events (it is an observer on
the server's one event stream). Nothing runs in the background: an idle server pays nothing.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from laredo import Engine
from laredo.events import SnapshotCompleted, handles
from laredo.observers import NullObserver

logger = logging.getLogger(__name__)

__all__ = ["SNAPSHOT_RELIST", "LatestSnapshot", "SnapshotFact"]

SNAPSHOT_RELIST = 300.0
"""Seconds between two listings of the snapshot store (events keep the latest in between)."""


@dataclass(frozen=True, slots=True)
class SnapshotFact:
    """The latest complete snapshot: id, end time (Unix seconds) and size."""

    snapshot_id: str
    at: float
    size_bytes: int


class LatestSnapshot(NullObserver):
    """The newest complete snapshot of the engine running now (``engine()``: a restore
    replaces it)."""

    def __init__(self, engine: Callable[[], Engine]) -> None:
        self._engine = engine
        self._lock = threading.Lock()
        self._latest: SnapshotFact | None = None
        self._listed_at: float | None = None

    @handles(SnapshotCompleted)
    def _snapshot_completed(self, ev: SnapshotCompleted) -> None:
        with self._lock:
            self._latest = SnapshotFact(ev.snapshot_id, time.time(), ev.size_bytes)

    def read(self) -> SnapshotFact | None:
        """The newest complete snapshot, from the store (listed at most every
        :data:`SNAPSHOT_RELIST` seconds) or a later completion event; None: no store or no
        snapshot."""
        store = self._engine().snapshot_store
        if store is None:
            return None
        now = time.monotonic()
        with self._lock:
            if self._listed_at is not None and now - self._listed_at < SNAPSHOT_RELIST:
                return self._latest
            self._listed_at = now
        try:
            listed = getattr(store, "inner", store).list()
        except Exception as exc:
            logger.warning("cannot list snapshots for the status: %s", exc)
            listed = []
        with self._lock:
            if listed:
                d = listed[0]
                fact = SnapshotFact(d.snapshot_id, d.created_at.timestamp(), int(d.size_bytes))
                if self._latest is None or fact.at > self._latest.at:
                    self._latest = fact
            return self._latest
