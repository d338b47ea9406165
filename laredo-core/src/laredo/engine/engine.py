"""The engine: the public facade of the local runner (threads).

Per source: one reader thread runs ``init -> validate -> (resume | snapshot restore | baseline)
-> stream``; the source's changes are demultiplexed by table into each pipeline's bounded
buffer; one worker thread per pipeline applies them in order. A scheduler thread drives ACKs of
buffering targets, scheduled snapshots and lag.

ACK guarantee: ``source.ack(p)`` is called only when every non-failed pipeline of the source has
made every change at or before ``p`` durable, and ACKs only move forward. A target that is not
durable by itself (memory) counts as durable only up to its latest completed snapshot when the
source can resume and a snapshot store is configured; a restart then restores that snapshot and
resumes strictly after its position. Without a usable snapshot the engine re-baselines rather
than resume into an empty target.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import timedelta
from typing import Any, TypeVar, get_args, overload

from ..contracts import (
    DeadLetterStore,
    EngineObserver,
    ObserverLike,
    Resettable,
    SnapshotSerializer,
    SnapshotStore,
    SyncSource,
    SyncTarget,
)
from ..engine_settings import (
    LAG_INTERVAL,
    SHUTDOWN_TIMEOUT,
    SNAPSHOT_MAX_AGE,
    SNAPSHOT_META_POLICY,
    SNAPSHOT_ON_SHUTDOWN,
    SNAPSHOT_RETENTION,
    SNAPSHOT_SCHEDULE,
)
from ..errors import ConfigError, EngineStateError
from ..events import PipelineAdded, PipelineRemoved, SourceDisconnected
from ..observers import composite
from ..pipeline import Pipeline, PipelineInfo, SourceRunInfo
from ..snapshots.jsonl import JsonlSerializer
from ..types import ColumnDefinition, PipelineState, Position, TableIdentifier
from .backfiller import exports_mid_baseline
from .context import EngineContext, FailureScope, ObserverWants
from .membership import attach, detach, preflight, retire
from .pipeline_worker import PipelineWorker
from .queries import EngineView
from .scheduler import Scheduler
from .snapshots import Export, SnapshotCoordinator
from .source_reader import SourceReader
from .validation import check_duration, check_pipelines, check_sources
from .verify import VERIFY_MAX_KEYS, VerifyResult, verify_pipeline

logger = logging.getLogger(__name__)
T = TypeVar("T")

__all__ = ["Engine"]


def _snapshot_problems(
    seconds: float | None, schedule: object, retention: int | None, policy: str
) -> list[str]:
    """What is wrong with the snapshot keywords of :class:`Engine` (``seconds``: the schedule's,
    ``schedule`` as given)."""
    problems: list[str] = []
    if seconds is not None and seconds <= 0:
        problems.append(f"snapshot_schedule: must be positive (got {schedule!r})")
    if retention is not None and retention < 1:
        problems.append(f"snapshot_retention: must be >= 1 (got {retention!r})")
    policies = get_args(SNAPSHOT_META_POLICY.of_type)
    if policy not in policies:
        problems.append(
            f"snapshot_meta_policy: use {' or '.join(map(repr, policies))} (got {policy!r})"
        )
    return problems


class Engine:
    """Runs pipelines. Construct, ``start()``, ``await_ready()``, query targets, ``stop()``.

    All public methods are thread-safe. ``a``-prefixed coroutines wrap them for asyncio callers.
    """

    def __init__(
        self,
        sources: Mapping[str, SyncSource],
        pipelines: Sequence[Pipeline],
        *,
        snapshot_store: SnapshotStore | None = None,
        snapshot_serializer: SnapshotSerializer | None = None,
        snapshot_schedule: float | timedelta | str | None = SNAPSHOT_SCHEDULE.default,
        snapshot_retention: int | None = SNAPSHOT_RETENTION.default,
        snapshot_max_age: float | timedelta | str | None = SNAPSHOT_MAX_AGE.default,
        snapshot_on_shutdown: bool = SNAPSHOT_ON_SHUTDOWN.default,
        snapshot_user_meta: Mapping[str, Any] | None = None,
        snapshot_meta_policy: str = SNAPSHOT_META_POLICY.default,
        dead_letter_store: DeadLetterStore | None = None,
        observers: Iterable[ObserverLike] = (),
        observer: ObserverLike | None = None,
        shutdown_timeout: float | timedelta | str = SHUTDOWN_TIMEOUT.default,
        lag_interval: float | timedelta | str = LAG_INTERVAL.default,
    ) -> None:
        self.sources: dict[str, SyncSource] = dict(sources or {})
        self.pipeline_configs = list(pipelines or [])
        own: list[str] = []
        sched = check_duration(snapshot_schedule, "snapshot_schedule", own)
        max_age = check_duration(snapshot_max_age, "snapshot_max_age", own)
        shutdown = check_duration(shutdown_timeout, "shutdown_timeout", own)
        lag_every = check_duration(lag_interval, "lag_interval", own)
        problems = check_sources(self.sources)
        problems += check_pipelines(
            self.pipeline_configs,
            self.sources,
            dead_letter_store is not None,
            snapshots_without_store=bool(sched or snapshot_on_shutdown) and snapshot_store is None,
        )
        problems += own + _snapshot_problems(
            sched, snapshot_schedule, snapshot_retention, snapshot_meta_policy
        )
        if problems:
            raise ConfigError(problems)
        if snapshot_store is not None and snapshot_serializer is None:
            snapshot_serializer = JsonlSerializer()
        self.snapshot_store = snapshot_store
        self.snapshot_serializer = snapshot_serializer
        self.snapshot_schedule = sched
        self.snapshot_retention = snapshot_retention
        self.snapshot_max_age = max_age
        self.snapshot_on_shutdown = snapshot_on_shutdown
        self.snapshot_user_meta = dict(snapshot_user_meta or {})
        self.snapshot_meta_policy = snapshot_meta_policy
        self.dead_letter_store = dead_letter_store
        extra = [] if observer is None else [observer]
        self._obs: EngineObserver = composite([*(observers or ()), *extra])
        self.shutdown_timeout = shutdown or SHUTDOWN_TIMEOUT.default
        self.lag_interval = lag_every or LAG_INTERVAL.default
        self._lifecycle = "new"
        self._lock = threading.RLock()
        self._ready = threading.Event()
        self._ready_callbacks: list[Callable[[], None]] = []
        self._readers: dict[str, SourceReader] = {}
        self._pipelines: list[PipelineWorker] = []
        self._scheduler: Scheduler | None = None
        self._coordinator: SnapshotCoordinator | None = None
        self._ctx: EngineContext | None = None
        self._membership = threading.Lock()  # one add/remove at a time
        self._view = EngineView(
            sources=self.sources,
            configs=self.pipeline_configs,
            readers=self._readers,
            workers=self._pipelines,
            lifecycle=lambda: self._lifecycle,
        )
        if snapshot_store is not None and snapshot_serializer is not None:
            self._coordinator = SnapshotCoordinator(
                snapshot_store,
                snapshot_serializer,
                observer=self._obs,
                user_meta=self.snapshot_user_meta,
                meta_policy=snapshot_meta_policy,
                keep_count=snapshot_retention,
                max_age=max_age,
            )

    # -- lifecycle ----------------------------------------------------------------------------
    def start(self) -> None:
        """Start every source and pipeline; returns at once (see ``await_ready``)."""
        with self._lock:
            if self._lifecycle == "running":
                raise EngineStateError("engine already started")
            if self._lifecycle == "stopped":
                raise EngineStateError("engine was stopped; create a new Engine to start again")
            ctx = self._ctx = EngineContext(
                observer=self._obs,
                dead_letters=self.dead_letter_store,
                snapshots=self._coordinator,
                wants=ObserverWants.of(self._obs),
                escalate=self._escalate,
                readiness_changed=self._readiness_changed,
            )
            for sid, src in self.sources.items():
                self._readers[sid] = SourceReader(ctx, sid, src)
            for cfg in self.pipeline_configs:
                reader = self._readers[cfg.source_id]
                worker = PipelineWorker(ctx, reader.link, cfg)
                reader.add(worker)
                self._pipelines.append(worker)
            self._lifecycle = "running"
        for reader in self._readers.values():
            if reader.pipelines:
                reader.start()
        coordinator = self._coordinator
        self._scheduler = Scheduler(
            self._readers,
            self._obs,
            snapshot_every=self.snapshot_schedule,
            snapshot_due_since=(lambda: coordinator.last_taken_at)
            if coordinator
            else time.monotonic,
            take_snapshot=lambda: self._take_snapshot({"trigger": "schedule"}, direct=False),
            is_ready=lambda: self._ready.is_set() or not self._not_snapshottable(),
            lag_interval=self.lag_interval,
        )
        self._scheduler.start()

    def stop(self, timeout: float | None = None) -> None:
        """Stop streaming, drain every buffer into its target, take the shutdown snapshot if
        configured, acknowledge what is durable, close targets and sources."""
        with self._lock:
            if self._lifecycle != "running":
                raise EngineStateError(
                    "engine is not running"
                    if self._lifecycle == "new"
                    else "engine already stopped"
                )
            self._lifecycle = "stopping"
        deadline = time.monotonic() + (timeout if timeout is not None else self.shutdown_timeout)

        def left() -> float:
            return max(0.1, deadline - time.monotonic())

        if self._scheduler is not None:
            self._scheduler.stop(0)
        for reader in self._readers.values():
            reader.stop_stream()
        for reader in self._readers.values():
            if not reader.join(left()):
                logger.warning("source %s did not stop in time; closing it", reader.id)
                with contextlib.suppress(Exception):
                    reader.source.close()
                reader.join(left())

        def shutdown_snapshot() -> None:
            try:
                self._take_snapshot({"trigger": "shutdown"}, direct=True)
            except Exception:
                logger.exception("snapshot on shutdown failed")

        def ack() -> None:
            for reader in self._readers.values():
                reader.try_ack()

        snapshot = self.snapshot_on_shutdown and self._coordinator is not None
        retire(
            self._pipelines, deadline, drained=shutdown_snapshot if snapshot else None, flushed=ack
        )
        for reader in self._readers.values():
            try:
                reader.source.close()
            except Exception:
                logger.warning("source %s: close failed", reader.id, exc_info=True)
            self._obs.on_event(SourceDisconnected(reader.id, "engine stopped"))
        if self._scheduler is not None:
            self._scheduler.stop(1.0)
        with self._lock:
            self._lifecycle = "stopped"

    def __enter__(self) -> Engine:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._lifecycle == "running":
            self.stop()

    def _escalate(self, scope: FailureScope, source_id: str, message: str) -> None:
        readers = (
            self._readers.values()
            if scope is FailureScope.ALL
            else ([self._readers[source_id]] if source_id in self._readers else [])
        )
        for reader in list(readers):
            reader.fail_all(message)

    # -- readiness ----------------------------------------------------------------------------
    def _readiness_changed(self) -> None:
        if self._ready.is_set():
            return
        if self._pipelines and all(p.ready for p in self._pipelines):
            with self._lock:
                if self._ready.is_set():
                    return
                self._ready.set()
                callbacks = list(self._ready_callbacks)
                self._ready_callbacks.clear()
            for cb in callbacks:
                try:
                    cb()
                except Exception:
                    logger.exception("on_ready callback failed")

    def is_ready(
        self, source_id: str | None = None, table: TableIdentifier | str | None = None
    ) -> bool:
        """True when every matching pipeline finished its baseline/restore and is streaming
        (or paused). An unknown source or table is not ready."""
        pipes = self._view.match(source_id, table)
        return bool(pipes) and all(
            p.ready and p.state in (PipelineState.STREAMING, PipelineState.PAUSED) for p in pipes
        )

    def await_ready(self, timeout: float | None = None) -> bool:
        """Block until every pipeline is ready; ``timeout <= 0`` only checks."""
        if timeout is not None and timeout <= 0:
            return self._ready.is_set()
        return self._ready.wait(timeout)

    def on_ready(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` once when the engine becomes ready (at once if it already is)."""
        with self._lock:
            if not self._ready.is_set():
                self._ready_callbacks.append(callback)
                return
        callback()

    # -- the read side (delegated to EngineView, :mod:`laredo.engine.queries`) ------------------
    def wait_for(
        self,
        source_id: str,
        position: Position | str,
        timeout: float | None = None,
        durable: bool = False,
    ) -> bool:
        """Block until every pipeline of ``source_id`` has applied every change at or before
        ``position`` (the source's position, or its text: for PostgreSQL the text of
        ``pg_current_wal_lsn()`` read after a commit). True when reached, False when
        ``timeout`` (seconds) passes first or no pipeline of the source is active. Idle
        sources advance through heartbeats, so an idle wait answers once the source reports
        its current position. With ``durable`` it waits until every target holds those changes
        durably (what the source may be acknowledged: a buffering target's flush, a volatile
        target's snapshot when acknowledgements follow snapshots). Raises ``KeyError`` listing
        the known sources for an unknown id, ``ValueError`` naming the expected form for an
        unparsable position."""
        return self._view.wait_for(source_id, position, timeout, durable)

    def applied_position(self, source_id: str) -> str | None:
        """See :meth:`EngineView.applied_position`."""
        return self._view.applied_position(source_id)

    def durable_position(self, source_id: str) -> str | None:
        """See :meth:`EngineView.durable_position`."""
        return self._view.durable_position(source_id)

    def targets(
        self, source_id: str | None = None, table: TableIdentifier | str | None = None
    ) -> list[SyncTarget]:
        return self._view.targets(source_id, table)

    @overload
    def get_target(self, source_id: str | None, table: TableIdentifier | str) -> Any: ...

    @overload
    def get_target(
        self, source_id: str | None, table: TableIdentifier | str, cls: type[T]
    ) -> T | None: ...

    def get_target(
        self, source_id: str | None, table: TableIdentifier | str, cls: type[Any] | None = None
    ) -> Any:
        """The first target for ``(source_id, table)`` (of type ``cls`` if given), or None."""
        return self._view.get_target(source_id, table, cls)  # the overloads type it

    def pipelines(self) -> list[PipelineInfo]:
        return self._view.pipelines()

    def source_ids(self) -> list[str]:
        return self._view.source_ids()

    def source(self, source_id: str) -> SyncSource:
        return self._view.source(source_id)

    def source_info(self, source_id: str) -> SourceRunInfo | None:
        return self._view.source_info(source_id)

    def table_schema(
        self, table: TableIdentifier | str, source_id: str | None = None
    ) -> list[ColumnDefinition]:
        return self._view.table_schema(table, source_id)

    @property
    def observer(self) -> EngineObserver:
        return self._obs

    # -- admin ----------------------------------------------------------------------------------
    def reload(
        self, source_id: str, table: TableIdentifier | str, timeout: float | None = None
    ) -> None:
        """Re-baseline one table: its targets are emptied and reloaded; changes that arrive
        meanwhile are buffered and applied after the reload (none is lost). Blocks until done."""
        self._view.reader(source_id)
        pipes = [
            p
            for p in self._view.match(source_id, table)
            if p.state in (PipelineState.STREAMING, PipelineState.PAUSED)
        ]
        if not pipes:
            raise KeyError(f"no streaming pipeline for table {table} on source {source_id!r}")
        futures = [p.submit("reload") for p in pipes]
        for f in futures:
            f.result(timeout)

    def backfill(
        self,
        source_id: str,
        table: TableIdentifier | str,
        where: str | None = None,
        *,
        chunk_rows: int | None = None,
        timeout: float | None = 0,
    ) -> dict[str, Any]:
        """Re-sync one table (or the rows matching the SQL condition ``where``) in key-range
        chunks merged with the stream by watermarks, while every table keeps streaming (see
        :mod:`laredo.engine.backfiller`). Waits up to ``timeout`` seconds (``None``: until
        done; ``0``: not at all) and returns the table's progress. ``ConfigError`` when the
        source cannot read in chunks, the table has no key or a backfill of it runs."""
        reader = self._view.reader(source_id)
        tid = table if isinstance(table, TableIdentifier) else TableIdentifier.parse(table)
        bf = reader.backfill(tid, where, chunk_rows)
        if timeout != 0:
            bf.finished.wait(timeout)
        return bf.progress.as_dict()

    def backfills(self) -> list[dict[str, Any]]:
        """Progress of every running backfill and chunked baseline, and of the last finished
        one of each table (``done``/``error``): chunks, rows read, applied, superseded."""
        out: list[dict[str, Any]] = []
        for sid, reader in list(self._readers.items()):
            running = dict(reader.backfills)
            last = {t: p for t, p in reader.backfills_done.items() if t not in running}
            progress = [bf.progress for bf in running.values()] + list(last.values())
            out.extend({"source": sid, **p.as_dict()} for p in progress)
        return out

    def reload_all(self, source_id: str | None = None, timeout: float | None = None) -> None:
        for sid in [source_id] if source_id else list(self._readers):
            tables = dict.fromkeys(p.table for p in self._readers[sid].pipelines)
            for t in tables:
                self.reload(sid, t, timeout)

    def call_in_pipeline(
        self, pipeline_id: str, work: Callable[[], T], timeout: float | None = None
    ) -> T:
        """Run ``work`` on the pipeline's worker thread, between two of its batches, and return
        its result (or raise its error). This is how code outside the engine writes to a running
        pipeline's target (a snapshot replay, a dead-letter replay), which keeps one writer per
        target. The request goes ahead of buffered changes and also runs while the source is
        paused or the pipeline is in ERROR. ``KeyError`` for an unknown pipeline;
        ``EngineStateError`` when its worker is not running or stops before running ``work``;
        ``TimeoutError`` after ``timeout`` seconds (``work`` may still run later)."""
        worker = self._worker(pipeline_id)

        if not worker.is_running():
            raise EngineStateError(f"pipeline {pipeline_id} is not running")
        future = worker.submit("call", work)
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            try:
                result: T = future.result(0.25)
                return result
            except TimeoutError:
                if future.done():
                    raise  # raised by ``work`` itself
            if not worker.is_running() and not future.done():
                raise EngineStateError(f"pipeline {pipeline_id} stopped before the call ran")
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(f"pipeline {pipeline_id} did not run the call in {timeout}s")

    def verify(
        self, pipeline_id: str, timeout: float | None = None, max_keys: int = VERIFY_MAX_KEYS
    ) -> VerifyResult:
        """Compare a pipeline's target with its source, key by key and row by row, exactly at
        one source position, while the source keeps streaming (see :mod:`laredo.engine.verify`).
        ``KeyError`` for an unknown pipeline; ``EngineStateError`` when it is not streaming or
        its target cannot list its rows; ``TimeoutError`` after ``timeout`` seconds."""
        self._view.require_running()
        worker = self._worker(pipeline_id)
        return verify_pipeline(
            lambda work, left: self.call_in_pipeline(pipeline_id, work, left),
            worker,
            timeout,
            max_keys,
        )

    def pause(self, source_id: str) -> None:
        """Pause a source: its pipelines stop applying; changes keep buffering (with the block
        policy the source is then back-pressured). Nothing is dropped."""
        reader = self._view.reader(source_id)
        self._tell_source(source_id, reader.source.pause, "pause")
        for p in reader.pipelines:
            p.hold(True)
            if p.state is PipelineState.STREAMING:
                p.set_state(PipelineState.PAUSED)

    def resume(self, source_id: str) -> None:
        reader = self._view.reader(source_id)
        for p in reader.pipelines:
            if p.state is PipelineState.PAUSED:
                p.set_state(PipelineState.STREAMING)
            p.hold(False)
        self._tell_source(source_id, reader.source.resume, "resume")

    @staticmethod
    def _tell_source(source_id: str, call: Callable[[], None], what: str) -> None:
        """Pass pause/resume on to the source. The pipelines' buffers pause and resume either
        way (nothing is lost): a source that cannot is logged, never raised to the caller."""
        try:
            call()
        except NotImplementedError:
            logger.info(
                "source %s does not %s its reading; its pipelines' buffers do", source_id, what
            )
        except Exception as exc:
            logger.warning(
                "source %s: %s() failed (%s: %s); its pipelines' buffers %s all the same",
                source_id,
                what,
                type(exc).__name__,
                exc,
                "hold what it sends" if what == "pause" else "apply what it sends",
            )

    def reset_source(self, source_id: str, drop_publication: bool = False) -> bool:
        """Drop the source's replication state (slot). On a running source its pipelines then
        re-baseline in place (BASELINING, not ready, until done) and True is returned; on a
        stopped one the next start baselines (False)."""
        src = self.sources.get(source_id)
        if src is None:
            raise KeyError(f"unknown source {source_id!r}")
        if not isinstance(src, Resettable):
            raise EngineStateError(f"source {source_id!r} ({type(src).__name__}) cannot be reset")
        reader = self._readers.get(source_id)
        if reader is not None and reader.is_running():
            reader.reset_in_place(lambda: src.reset_source(drop_publication))
            return True
        src.reset_source(drop_publication)
        return False

    # -- hot reload -------------------------------------------------------------------------
    def add_pipeline(
        self,
        pipeline: Pipeline,
        source: SyncSource | None = None,
        timeout: float | None = None,
    ) -> None:
        """Add a pipeline to the running engine and return once it streams.

        On a running source only the new table is baselined, aligned exactly with the running
        stream (see :mod:`laredo.engine.membership`); other pipelines are not touched. For a
        new source id pass ``source`` (same as :meth:`add_source` with one pipeline). Raises
        ``ConfigError`` for an invalid pipeline or a duplicate id (nothing running is
        disturbed) and ``EngineStateError`` when the source cannot add tables while it runs."""
        if source is not None:
            self.add_source(pipeline.source_id, source, [pipeline], timeout)
            return
        self._view.require_running()
        assert self._ctx is not None
        with self._membership:
            self._check_new(self.sources, [pipeline])
            reader = self._readers[pipeline.source_id]
            worker = PipelineWorker(self._ctx, reader.link, pipeline)
            attach(reader, worker, timeout)
            self._pipelines.append(worker)
            self.pipeline_configs.append(pipeline)
            self._obs.on_event(PipelineAdded(worker.id, pipeline.source_id, pipeline.table_id))

    def preflight_pipeline(
        self, pipeline: Pipeline
    ) -> tuple[list[ColumnDefinition] | None, list[str]]:
        """What joining ``pipeline`` to its running source would meet, changing nothing: the
        table's live columns (None when the source cannot tell without delivering the table)
        and every problem that would stop the pipeline (see :func:`membership.preflight`)."""
        self._view.require_running()
        reader = self._readers.get(pipeline.source_id)
        if reader is None:
            return None, [f"source {pipeline.source_id!r} is not running"]
        return preflight(reader, pipeline.table_id)

    def add_source(
        self,
        source_id: str,
        source: SyncSource,
        pipelines: Sequence[Pipeline],
        timeout: float | None = None,
    ) -> None:
        """Start a new source with its pipelines in the running engine (it starts like any
        source: resume, snapshot restore or baseline) and return once they stream. Raises
        ``ConfigError`` (nothing started) for a duplicate source or pipeline id or an invalid
        pipeline, ``EngineStateError`` when a pipeline does not become ready in ``timeout``."""
        self._view.require_running()
        assert self._ctx is not None
        with self._membership:
            problems = (
                []
                if source_id not in self.sources
                else [f"source {source_id!r} already exists; add pipelines to it with add_pipeline"]
            )
            problems += check_sources({source_id: source})
            wrong = [p.pipeline_id() for p in pipelines if p.source_id != source_id]
            if wrong:
                problems.append(f"pipelines {wrong} do not read source {source_id!r}")
            if not pipelines:
                problems.append(f"source {source_id!r}: give at least one pipeline")
            if problems:
                raise ConfigError(problems)
            self._check_new({**self.sources, source_id: source}, pipelines)
            reader = SourceReader(self._ctx, source_id, source)
            workers = [PipelineWorker(self._ctx, reader.link, p) for p in pipelines]
            for w in workers:
                reader.add(w)
            self.sources[source_id] = source
            self._readers[source_id] = reader
            self._pipelines.extend(workers)
            self.pipeline_configs.extend(pipelines)
            reader.start()
            for w in workers:
                self._obs.on_event(PipelineAdded(w.id, source_id, w.table))
        late = [w.id for w in workers if not self._wait_streaming(w, timeout)]
        if late:
            raise EngineStateError(
                f"pipelines {late} of new source {source_id!r} did not become ready within "
                f"{timeout}s: " + "; ".join(f"{w.id}: {w.state} {w.error or ''}" for w in workers)
            )

    def _check_new(self, sources: Mapping[str, SyncSource], pipelines: Sequence[Pipeline]) -> None:
        problems = check_pipelines(pipelines, sources, self.dead_letter_store is not None)
        if not problems:
            existing = {p.id for p in self._pipelines}
            for p in pipelines:
                pid = p.pipeline_id()
                if pid in existing:
                    problems.append(f"pipeline {pid!r} already exists; give it a distinct id=")
                existing.add(pid)
        if problems:
            raise ConfigError(problems)

    def _worker(self, pipeline_id: str) -> PipelineWorker:
        return self._view.worker(pipeline_id)

    def _wait_streaming(self, worker: PipelineWorker, timeout: float | None) -> bool:
        deadline = None if timeout is None else time.monotonic() + timeout
        while not (worker.ready or worker.failed):
            if deadline is not None and time.monotonic() >= deadline:
                return False
            time.sleep(0.02)
        return not worker.failed

    def remove_pipeline(self, pipeline_id: str, timeout: float | None = None) -> None:
        """Remove a pipeline from the running engine: it is drained into its target, the
        target is closed, and its source stops delivering the table when no other pipeline
        needs it. ACKs no longer wait for it. A source left without pipelines is stopped and
        closed. Raises ``KeyError`` (listing the pipelines) for an unknown id."""
        self._view.require_running()
        with self._membership:
            worker = self._worker(pipeline_id)
            sid = worker.link.source_id
            reader = self._readers[sid]
            self._detach(reader, worker, timeout)
            if not reader.pipelines:
                self._stop_source(reader)

    def remove_source(self, source_id: str, timeout: float | None = None) -> None:
        """Remove every pipeline of a source (each drained, its target closed), then stop and
        close the source. Raises ``KeyError`` (listing the sources) for an unknown id."""
        self._view.require_running()
        with self._membership:
            reader = self._view.reader(source_id)
            for worker in list(reader.pipelines):
                self._detach(reader, worker, timeout)
            self._stop_source(reader)

    def _detach(self, reader: SourceReader, worker: PipelineWorker, timeout: float | None) -> None:
        detach(reader, worker, timeout if timeout is not None else self.shutdown_timeout)
        self._pipelines.remove(worker)
        self.pipeline_configs[:] = [c for c in self.pipeline_configs if c is not worker.cfg]
        self._obs.on_event(PipelineRemoved(worker.id, reader.id, "removed"))

    def _stop_source(self, reader: SourceReader) -> None:
        reader.stop_stream()
        reader.join(self.shutdown_timeout)
        try:
            reader.source.close()
        except Exception:
            logger.warning("source %s: close failed", reader.id, exc_info=True)
        self._obs.on_event(SourceDisconnected(reader.id, "no pipelines left"))
        del self._readers[reader.id]
        del self.sources[reader.id]

    # -- snapshots ------------------------------------------------------------------------------
    def create_snapshot(self, user_meta: Mapping[str, Any] | None = None) -> str:
        """Export every pipeline's target consistently with its applied position and save a
        snapshot. Returns the snapshot id."""
        self._view.require_running()
        if self._coordinator is None:
            raise EngineStateError("no snapshot store configured (snapshot_store=...)")
        return self._take_snapshot(dict(user_meta or {}), direct=False)

    def _take_snapshot(self, user_meta: dict[str, Any], direct: bool) -> str:
        """Snapshot every non-failed pipeline. ``direct`` exports from the calling thread
        (workers have stopped); otherwise each export runs on its pipeline's worker, between
        two batches, so rows and position agree."""
        coordinator = self._coordinator
        if coordinator is None:
            raise EngineStateError("no snapshot store configured (snapshot_store=...)")

        def collect() -> list[Export]:
            pipes = [p for p in self._pipelines if not p.failed]
            not_ready = self._not_snapshottable()
            if not_ready:
                raise EngineStateError(
                    f"cannot snapshot while pipelines are not ready: {', '.join(not_ready)}"
                )
            if direct:
                return [p.export() for p in pipes]
            futures = [p.submit("export") for p in pipes]
            return [f.result(self.shutdown_timeout) for f in futures]

        result = coordinator.take(collect, self.sources, user_meta)
        by_id = {p.id: p for p in self._pipelines}
        for e in result.exports:
            if e.position is not None:
                by_id[e.pipeline_id].snapshot_position = e.position
        for reader in self._readers.values():
            reader.try_ack()
        return result.snapshot_id

    def _not_snapshottable(self) -> list[str]:
        """Pipelines a snapshot cannot hold now: not ready, and not in a chunked baseline whose
        progress their target keeps (``backfiller.exports_mid_baseline``)."""
        out = []
        for p in self._pipelines:
            if p.failed or p.ready:
                continue
            reader = self._readers.get(p.link.source_id)
            if reader is None or not exports_mid_baseline(reader, p):
                out.append(p.id)
        return out

    # -- asyncio wrappers ------------------------------------------------------------------
    async def astart(self) -> None:
        await asyncio.to_thread(self.start)

    async def astop(self) -> None:
        await asyncio.to_thread(self.stop)

    async def await_ready_async(self, timeout: float | None = None) -> bool:
        return await asyncio.to_thread(self.await_ready, timeout)

    async def areload(self, source_id: str, table: TableIdentifier | str) -> None:
        await asyncio.to_thread(self.reload, source_id, table)

    async def apause(self, source_id: str) -> None:
        await asyncio.to_thread(self.pause, source_id)

    async def aresume(self, source_id: str) -> None:
        await asyncio.to_thread(self.resume, source_id)

    async def acreate_snapshot(self, user_meta: Mapping[str, Any] | None = None) -> str:
        return await asyncio.to_thread(self.create_snapshot, user_meta)

    async def await_for(
        self, source_id: str, position: Position | str, timeout: float | None = None
    ) -> bool:
        """:meth:`wait_for` for asyncio callers."""
        return await asyncio.to_thread(self.wait_for, source_id, position, timeout)

    async def aadd_source(
        self,
        source_id: str,
        source: SyncSource,
        pipelines: Sequence[Pipeline],
        timeout: float | None = None,
    ) -> None:
        await asyncio.to_thread(self.add_source, source_id, source, pipelines, timeout)

    async def aremove_source(self, source_id: str, timeout: float | None = None) -> None:
        await asyncio.to_thread(self.remove_source, source_id, timeout)

    async def aadd_pipeline(
        self, pipeline: Pipeline, source: SyncSource | None = None, timeout: float | None = None
    ) -> None:
        await asyncio.to_thread(self.add_pipeline, pipeline, source, timeout)

    async def aremove_pipeline(self, pipeline_id: str, timeout: float | None = None) -> None:
        await asyncio.to_thread(self.remove_pipeline, pipeline_id, timeout)
