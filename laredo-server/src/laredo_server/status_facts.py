"""What the status page and the operator metrics read beyond the engine's own status.

Per pipeline, the changes applied, the failed attempts and the dead letters written since the
server started (read from the :class:`~laredo_server.metrics.PrometheusObserver`'s counters, the
one place they are counted); per source, the WAL its replication slot retains on the database
server (sources implementing :class:`~laredo_server.capabilities.RetainsWal`); the latest
snapshot (read from the store on first use and every few minutes after, then kept current by
snapshot events); the dead-letter backlog (entries stored, read from the store at most every
:data:`BACKLOG_TTL` seconds).

Nothing runs in the background: every value is kept by an event or read when asked (a
``/metrics`` scrape, a ``GetStatus`` call), so an idle server pays nothing for it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from laredo import Engine
from laredo.events import DeadLetterWritten, SnapshotCompleted, handles
from laredo.observers import NullObserver

from .capabilities import CountsSourceEvents, RetainsWal
from .metrics import MetricSample, PrometheusObserver, SampleLike

logger = logging.getLogger(__name__)

__all__ = ["BACKLOG_TTL", "SNAPSHOT_RELIST", "PipelineCounts", "SnapshotFact", "StatusFacts"]

BACKLOG_TTL = 15.0
"""Seconds a dead-letter backlog read from the store is reused."""
SNAPSHOT_RELIST = 300.0
"""Seconds between two listings of the snapshot store (events keep the latest in between)."""


@dataclass(frozen=True, slots=True)
class PipelineCounts:
    """Counted since the server started."""

    changes_applied: int = 0
    change_errors: int = 0
    dead_letters_written: int = 0


@dataclass(frozen=True, slots=True)
class SnapshotFact:
    """The latest complete snapshot: id, end time (Unix seconds) and size."""

    snapshot_id: str
    at: float
    size_bytes: int


class StatusFacts(NullObserver):
    """On-demand reads (see the module docstring), kept current by two events. ``engine()`` is
    the engine running now (a restore replaces it); ``metrics`` counts the events (it must be
    on the same observer stream); ``started`` the server's start time."""

    def __init__(
        self,
        engine: Callable[[], Engine],
        metrics: PrometheusObserver,
        started: float | None = None,
    ) -> None:
        self._engine = engine
        self._metrics = metrics
        self.started = time.time() if started is None else started
        self._lock = threading.Lock()
        self._latest: SnapshotFact | None = None
        self._listed_at: float | None = None
        self._backlog: tuple[float, dict[str, int]] | None = None

    # -- events --------------------------------------------------------------------------------
    @handles(DeadLetterWritten)
    def _dead_letter_written(self, ev: DeadLetterWritten) -> None:
        with self._lock:
            self._backlog = None  # the next read counts the store again

    @handles(SnapshotCompleted)
    def _snapshot_completed(self, ev: SnapshotCompleted) -> None:
        with self._lock:
            self._latest = SnapshotFact(ev.snapshot_id, time.time(), ev.size_bytes)

    # -- reads ---------------------------------------------------------------------------------
    def counts(self, pipeline_id: str) -> PipelineCounts:
        """The metrics' counters of the pipeline (every action summed)."""

        total = self._metrics.pipeline_total
        return PipelineCounts(
            total("laredo_changes_applied_total", pipeline_id),
            total("laredo_change_errors_total", pipeline_id),
            total("laredo_dead_letters_total", pipeline_id),
        )

    def wal_retained(self, source_id: str) -> int | None:
        """Bytes of WAL the source's slot retains; None when the source cannot tell."""
        try:
            src = self._engine().source(source_id)
            if isinstance(src, RetainsWal):
                return src.wal_retained_bytes()
        except Exception as exc:  # a status read never fails for this
            logger.debug("wal retained of %s: %s", source_id, exc)
        return None

    def snapshot_schedule(self) -> float | None:
        """Seconds between scheduled snapshots (None: no schedule)."""
        sched = getattr(self._engine(), "snapshot_schedule", None)
        return float(sched) if sched else None

    def latest_snapshot(self) -> SnapshotFact | None:
        """The newest complete snapshot, from the store (listed at most every
        :data:`SNAPSHOT_RELIST` seconds) or a later completion event."""
        store = self._engine().snapshot_store
        if store is None:
            return None
        now = time.monotonic()
        with self._lock:
            fresh = self._listed_at is not None and now - self._listed_at < SNAPSHOT_RELIST
            if fresh:
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

    def dead_letter_backlog(self) -> dict[str, int] | None:
        """Dead letters stored per pipeline id (pipelines without any are absent); None when no
        dead-letter store is configured or it cannot be read."""
        store = self._engine().dead_letter_store
        if store is None:
            return None
        now = time.monotonic()
        with self._lock:
            cached = self._backlog
        if cached is not None and now - cached[0] < BACKLOG_TTL:
            return cached[1]
        try:
            out = {pid: len(store.read(pid)) for pid in store.pipelines()}
        except Exception as exc:
            logger.warning("cannot count dead letters for the status: %s", exc)
            return None
        with self._lock:
            self._backlog = (now, out)
        return out

    # -- metrics -------------------------------------------------------------------------------
    def collect(self) -> Iterator[SampleLike]:
        """The scrape-time metrics (a ``PrometheusObserver`` collector)."""
        eng = self._engine()
        for sid in eng.source_ids():
            retained = self.wal_retained(sid)
            if retained is not None:
                yield MetricSample(
                    "laredo_source_wal_retained_bytes",
                    "gauge",
                    "WAL the source's replication slot holds back on the database server.",
                    (("source", sid),),
                    retained,
                )
            yield from self._source_counters(sid)
        for bf in eng.backfills():
            labels = (("source", bf["source"]), ("table", bf["table"]))
            yield (
                "laredo_backfill_chunks",
                "gauge",
                "Chunks read by the table's running (or last) chunked baseline or backfill.",
                labels,
                bf["chunks"],
            )
            for kind in ("read", "applied", "dropped"):
                yield (
                    "laredo_backfill_rows",
                    "gauge",
                    "Rows of the table's running (or last) backfill: read, applied, and dropped "
                    "(a newer change from the stream superseded them).",
                    (*labels, ("kind", kind)),
                    bf[f"rows_{kind}"],
                )
            yield (
                "laredo_backfill_done",
                "gauge",
                "1 when the table's last backfill finished, 0 while it runs or after it failed.",
                labels,
                1.0 if bf["done"] else 0.0,
            )
            if bf["rows_estimated"] >= 0:
                yield (
                    "laredo_backfill_rows_estimated",
                    "gauge",
                    "The table's rows estimated when its backfill started (pg_class.reltuples).",
                    labels,
                    bf["rows_estimated"],
                )
            if bf["eta_seconds"] is not None:
                yield (
                    "laredo_backfill_eta_seconds",
                    "gauge",
                    "Seconds the table's backfill still needs at its rate so far (0 when done; "
                    "absent when unknown).",
                    labels,
                    bf["eta_seconds"],
                )
        if eng.snapshot_store is not None:
            yield from self._snapshot_samples()
        # no dead-letter store: nothing is stored, so every backlog is a true zero
        backlog = self.dead_letter_backlog() if eng.dead_letter_store is not None else {}
        if backlog is not None:
            for c in eng.pipeline_configs:
                pid = c.pipeline_id()
                yield MetricSample(
                    "laredo_dead_letter_backlog",
                    "gauge",
                    "Dead letters stored and not yet replayed or purged.",
                    (("pipeline", pid), ("source", c.source_id), ("table", str(c.table))),
                    backlog.get(pid, 0),
                )

    def _source_counters(self, source_id: str) -> Iterator[MetricSample]:
        """``laredo_source_<name>`` counters of a :class:`CountsSourceEvents` source."""
        try:
            src = self._engine().source(source_id)
            counts = dict(src.counters()) if isinstance(src, CountsSourceEvents) else {}
        except Exception as exc:  # a scrape never fails for this
            logger.debug("counters of %s: %s", source_id, exc)
            return
        for name, value in sorted(counts.items()):
            yield MetricSample(
                f"laredo_source_{name}",
                "counter",
                f"Source events counted by the source ({name.removesuffix('_total')}).",
                (("source", source_id),),
                value,
            )

    def _snapshot_samples(self) -> Iterator[MetricSample]:
        latest = self.latest_snapshot()
        if latest is not None:
            yield MetricSample(
                "laredo_snapshot_last_success_timestamp_seconds",
                "gauge",
                "When the last snapshot ended.",
                (),
                latest.at,
            )
        since = latest.at if latest is not None else self.started
        yield MetricSample(
            "laredo_snapshot_age_seconds",
            "gauge",
            "Seconds since the last complete snapshot (since the server started when none).",
            (),
            max(0.0, time.time() - since),
        )
        sched = self.snapshot_schedule()
        if sched is not None:
            yield MetricSample(
                "laredo_snapshot_schedule_seconds",
                "gauge",
                "The configured interval between scheduled snapshots.",
                (),
                sched,
            )
