""":class:`ScrapeMetrics`: the operator metrics computed when ``/metrics`` is scraped (a
:meth:`~laredo_server.metrics.PrometheusObserver.add_collector` collector), beside the event
counters the observer keeps.

Per source, the WAL its replication slot retains (:class:`~.capabilities.RetainsWal`) and its own
event counters (:class:`~.capabilities.CountsSourceEvents`); per table, its running or last
backfill; the latest snapshot's time and age (:class:`~.latest_snapshot.LatestSnapshot`) and
the schedule; per pipeline, the dead-letter backlog (:class:`~.dead_letter_backlog.
DeadLetterBacklog`). Each is read when asked, so an idle server pays nothing for them.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from typing import Any

from laredo import Engine

from .capabilities import CountsSourceEvents, wal_retained
from .dead_letter_backlog import DeadLetterBacklog
from .latest_snapshot import LatestSnapshot
from .metrics import MetricSample

logger = logging.getLogger(__name__)

__all__ = ["ScrapeMetrics", "snapshot_schedule"]


def snapshot_schedule(engine: Engine) -> float | None:
    """Seconds between the engine's scheduled snapshots (None: no schedule)."""
    sched = getattr(engine, "snapshot_schedule", None)
    return float(sched) if sched else None


class ScrapeMetrics:
    """The scrape-time samples of the engine running now (``engine()``); ``started`` is the
    server's start time (the snapshot age counts from it while there is no snapshot)."""

    def __init__(
        self,
        engine: Callable[[], Engine],
        latest_snapshot: LatestSnapshot,
        backlog: DeadLetterBacklog,
        started: float | None = None,
    ) -> None:
        self._engine = engine
        self._latest = latest_snapshot
        self._backlog = backlog
        self.started = time.time() if started is None else started

    def collect(self) -> Iterator[MetricSample]:
        """Every scrape-time sample."""
        eng = self._engine()
        for sid in eng.source_ids():
            yield from self._source_samples(eng, sid)
        for bf in eng.backfills():
            yield from _backfill_samples(bf)
        if eng.snapshot_store is not None:
            yield from self._snapshot_samples(eng)
        yield from self._backlog_samples(eng)

    @staticmethod
    def _source_samples(eng: Engine, source_id: str) -> Iterator[MetricSample]:
        """``laredo_source_wal_retained_bytes`` and the ``laredo_source_<name>`` counters of a
        :class:`CountsSourceEvents` source."""
        labels = (("source", source_id),)
        try:
            src = eng.source(source_id)
        except Exception as exc:  # a scrape never fails for this
            logger.debug("source %s: %s", source_id, exc)
            return
        retained = wal_retained(src)
        if retained is not None:
            yield MetricSample(
                "laredo_source_wal_retained_bytes",
                "gauge",
                "WAL the source's replication slot holds back on the database server.",
                labels,
                retained,
            )
        try:
            counts = dict(src.counters()) if isinstance(src, CountsSourceEvents) else {}
        except Exception as exc:  # a scrape never fails for this
            logger.debug("counters of %s: %s", source_id, exc)
            return
        for name, value in sorted(counts.items()):
            yield MetricSample(
                f"laredo_source_{name}",
                "counter",
                f"Source events counted by the source ({name.removesuffix('_total')}).",
                labels,
                value,
            )

    def _snapshot_samples(self, eng: Engine) -> Iterator[MetricSample]:
        latest = self._latest.read()
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
        sched = snapshot_schedule(eng)
        if sched is not None:
            yield MetricSample(
                "laredo_snapshot_schedule_seconds",
                "gauge",
                "The configured interval between scheduled snapshots.",
                (),
                sched,
            )

    def _backlog_samples(self, eng: Engine) -> Iterator[MetricSample]:
        # no dead-letter store: nothing is stored, so every backlog is a true zero
        backlog = self._backlog.read() if eng.dead_letter_store is not None else {}
        if backlog is None:
            return
        for c in eng.pipeline_configs:
            pid = c.pipeline_id()
            yield MetricSample(
                "laredo_dead_letter_backlog",
                "gauge",
                "Dead letters stored and not yet replayed or purged.",
                (("pipeline", pid), ("source", c.source_id), ("table", str(c.table))),
                backlog.get(pid, 0),
            )


def _backfill_samples(bf: dict[str, Any]) -> Iterator[MetricSample]:
    """The ``laredo_backfill_*`` gauges of one entry of ``Engine.backfills()``."""
    labels = (("source", bf["source"]), ("table", bf["table"]))
    yield MetricSample(
        "laredo_backfill_chunks",
        "gauge",
        "Chunks read by the table's running (or last) chunked baseline or backfill.",
        labels,
        bf["chunks"],
    )
    for kind in ("read", "applied", "dropped", "removed"):
        yield MetricSample(
            "laredo_backfill_rows",
            "gauge",
            "Rows of the table's running (or last) backfill: read, applied, dropped "
            "(a newer change from the stream superseded them), and removed (the end-of-backfill "
            "sweep deleted them: keys the source lacks).",
            (*labels, ("kind", kind)),
            bf.get(f"rows_{kind}", 0),
        )
    yield MetricSample(
        "laredo_backfill_done",
        "gauge",
        "1 when the table's last backfill finished, 0 while it runs or after it failed.",
        labels,
        1.0 if bf["done"] else 0.0,
    )
    if bf["rows_estimated"] >= 0:
        yield MetricSample(
            "laredo_backfill_rows_estimated",
            "gauge",
            "The table's rows estimated when its backfill started (pg_class.reltuples).",
            labels,
            bf["rows_estimated"],
        )
    if bf["eta_seconds"] is not None:
        yield MetricSample(
            "laredo_backfill_eta_seconds",
            "gauge",
            "Seconds the table's backfill still needs at its rate so far (0 when done; "
            "absent when unknown).",
            labels,
            bf["eta_seconds"],
        )
