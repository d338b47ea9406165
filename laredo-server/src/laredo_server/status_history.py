"""The status page's last hour: per source and per pipeline, sampled every few seconds into
bounded ring buffers, so a page opened during an incident shows what led up to it.

Per pipeline: changes applied per second, buffer depth and capacity. Per source: changes per
second with each change counted once (the busiest pipeline of each of its tables, not once per
target), lag in bytes and seconds. Memory is bounded: ``window / interval`` samples per series
(360 at the defaults), whatever the uptime; a removed pipeline's series goes with it.

One daemon thread samples (started and stopped with the HTTP front end); a sample reads the
engine's status and each source's lag (PostgreSQL: one small query on the source's side
connection, cached for a second, the same the lag metrics read), never a target's rows.
Times are Unix seconds (UTC).
"""

from __future__ import annotations

import collections
import logging
import re
import threading
import time
from dataclasses import dataclass
from typing import Any

from .runtime import ServerRuntime

logger = logging.getLogger(__name__)

__all__ = [
    "INTERVAL",
    "WINDOW",
    "HistoryPoint",
    "StatusHistory",
    "fanout_status",
    "lsn_bytes",
    "lsn_distance",
]

INTERVAL = 5.0
"""Seconds between two samples."""
WINDOW = 3600.0
"""Seconds of history kept."""
_LSN = re.compile(r"([0-9A-Fa-f]{1,8})/([0-9A-Fa-f]{1,8})")


@dataclass(frozen=True, slots=True)
class HistoryPoint:
    """One sample of one series: ``at`` (Unix seconds), ``rate`` (changes/s since the previous
    sample), ``lag_bytes``/``lag_seconds`` (sources; -1 unknown), ``depth``/``capacity``
    (pipelines' buffers)."""

    at: float
    rate: float
    lag_bytes: float = -1.0
    lag_seconds: float = -1.0
    depth: int = 0
    capacity: int = 0


def lsn_bytes(text: str | None) -> int | None:
    """A PostgreSQL LSN (``0/1BEF0A8``) as a byte offset; None for any other position text."""
    m = _LSN.fullmatch(text or "")
    return (int(m[1], 16) << 32) + int(m[2], 16) if m else None


def lsn_distance(ahead: str | None, behind: str | None) -> float:
    """Bytes from ``behind`` to ``ahead`` when both are LSNs, else -1 (unknown)."""
    a, b = lsn_bytes(ahead), lsn_bytes(behind)
    return float(max(0, a - b)) if a is not None and b is not None else -1.0


class StatusHistory:
    """Ring buffers of :class:`HistoryPoint` per ``p:<pipeline>`` and ``s:<source>``."""

    def __init__(
        self, rt: ServerRuntime, interval: float = INTERVAL, window: float = WINDOW
    ) -> None:
        self.rt = rt
        self.interval = interval
        self.window = window
        self.maxlen = max(2, int(window / interval))
        self._lock = threading.Lock()
        self._series: dict[str, collections.deque[HistoryPoint]] = {}
        self._last: dict[str, tuple[float, int]] = {}  # key -> (at, cumulative changes)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- sampling ------------------------------------------------------------------------------
    def sample(self, now: float | None = None) -> None:
        """Take one sample of every pipeline and source."""
        now = time.time() if now is None else now
        eng = self.rt.engine
        points: dict[str, HistoryPoint] = {}
        per_table: dict[tuple[str, str], int] = {}
        infos = {sid: eng.source_info(sid) for sid in eng.source_ids()}
        for p in eng.pipelines():
            applied = self.rt.metrics.pipeline_counts(p.id).changes_applied
            tkey = (p.source_id, str(p.table))
            per_table[tkey] = max(per_table.get(tkey, 0), applied)
            rate = self._rate("p:" + p.id, now, applied)
            src = infos.get(p.source_id)
            current = src.current_position if src is not None else None
            points["p:" + p.id] = HistoryPoint(
                now,
                rate,
                lag_bytes=lsn_distance(current, p.applied_position),
                depth=p.buffer_depth,
                capacity=p.buffer_capacity,
            )
        for sid, info in infos.items():
            total = sum(n for (s, _t), n in per_table.items() if s == sid)
            lag_b = float(info.lag_bytes) if info is not None and info.lag_bytes else 0.0
            lag_t = info.lag_time if info is not None else None
            points["s:" + sid] = HistoryPoint(
                now,
                self._rate("s:" + sid, now, total),
                lag_bytes=lag_b,
                lag_seconds=lag_t.total_seconds() if lag_t is not None else -1.0,
            )
        with self._lock:
            for key in [k for k in self._series if k not in points]:
                del self._series[key]  # a removed pipeline or source
                self._last.pop(key, None)
            for key, point in points.items():
                series = self._series.get(key)
                if series is None:
                    series = self._series[key] = collections.deque(maxlen=self.maxlen)
                series.append(point)

    def _rate(self, key: str, now: float, total: int) -> float:
        """Changes per second since the previous sample of ``key`` (0 at the first)."""
        with self._lock:
            prev = self._last.get(key)
            self._last[key] = (now, total)
        if prev is None or now <= prev[0]:
            return 0.0
        return max(0, total - prev[1]) / (now - prev[0])

    # -- reads ---------------------------------------------------------------------------------
    def export(self, since: float = 0.0) -> dict[str, Any]:
        """The history (samples after ``since``, Unix seconds) as JSON-ready data: columns
        ``at, rate, lag_bytes, lag_seconds`` per source and ``at, rate, depth, capacity,
        lag_bytes`` per pipeline (lag: the source's position minus the pipeline's applied
        one, for PostgreSQL positions), oldest first."""
        with self._lock:
            series = {k: [p for p in v if p.at > since] for k, v in self._series.items()}
        sources = {
            k[2:]: [[p.at, round(p.rate, 3), p.lag_bytes, p.lag_seconds] for p in v]
            for k, v in series.items()
            if k.startswith("s:")
        }
        pipelines = {
            k[2:]: [[p.at, round(p.rate, 3), p.depth, p.capacity, p.lag_bytes] for p in v]
            for k, v in series.items()
            if k.startswith("p:")
        }
        return {
            "interval_seconds": self.interval,
            "window_seconds": self.window,
            "now": time.time(),
            "time_zone": "UTC",
            "sources": sources,
            "pipelines": pipelines,
            "fanout": fanout_status(self.rt),
        }

    # -- front end (started after the engine, stopped before it) -------------------------------
    def start(self) -> None:
        if self._thread is not None:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="laredo-status-history")
        self._thread.daemon = True
        self._thread.start()

    def _run(self) -> None:
        while True:
            try:
                self.sample()
            except Exception as exc:  # the history never stops the server
                logger.debug("status history sample failed: %s", exc)
            if self._stop.wait(self.interval):
                return

    def stop(self, grace: float) -> None:
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join(max(1.0, grace))

    def close(self) -> None:
        self._stop.set()


def fanout_status(rt: ServerRuntime) -> list[dict[str, Any]]:
    """Per fan-out pipeline (a target with connected clients and a journal): its clients and
    journal (entries held, oldest and current sequence)."""
    out: list[dict[str, Any]] = []
    for pid, target in rt.pipeline_targets().items():
        clients = getattr(target, "clients", None)
        length = getattr(target, "journal_length", None)
        if not callable(clients) or not callable(length):
            continue
        try:
            sessions = list(clients())
            out.append(
                {
                    "pipeline_id": pid,
                    "clients": [
                        {
                            "client_id": str(getattr(s, "client_id", "")),
                            "peer": str(getattr(s, "peer", "")),
                            "mode": str(getattr(getattr(s, "mode", ""), "value", "")),
                            "state": str(getattr(s, "state", "")),
                            "cursor": int(getattr(s, "cursor", 0)),
                        }
                        for s in sessions
                    ],
                    "journal_entries": int(length()),
                    "oldest_sequence": int(getattr(target, "oldest_sequence", 0)),
                    "current_sequence": int(getattr(target, "current_sequence", 0)),
                }
            )
        except Exception as exc:  # a status read never fails for one target
            logger.debug("fan-out status of %s: %s", pid, exc)
    return out
