"""The server runtime: one engine at a time, its observers, readiness and admin state.

``ServerRuntime`` is a plain object: it knows nothing of gRPC or HTTP. Front ends (the gRPC
server, the health/metrics HTTP server) implement :class:`Frontend`, are attached by the
composition root (:mod:`laredo_server.serve`) and are started after the engine and stopped
around it. ``restore_snapshot`` replaces the engine with a new one built by the same factory,
started from the chosen snapshot.
"""

from __future__ import annotations

import builtins
import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from laredo import Engine, Pipeline, PipelineInfo
from laredo.auth import Access
from laredo.engine_settings import SHUTDOWN_TIMEOUT
from laredo.errors import EngineStateError, SnapshotError
from laredo.observers import CompositeObserver
from laredo.replay import SnapshotReplay
from laredo.secrets import mask_text
from laredo.types import PipelineState, SnapshotDescriptor, TableIdentifier

from . import __version__
from .capabilities import DrainableTarget, PipelineLabelled
from .config import Built
from .dead_letter_backlog import DeadLetterBacklog
from .latest_snapshot import LatestSnapshot
from .metrics import PrometheusObserver, SampleLike
from .scrape_metrics import ScrapeMetrics
from .state import ServiceState
from .watch import WatchHub

logger = logging.getLogger(__name__)

__all__ = [
    "EngineFactory",
    "Frontend",
    "Listeners",
    "PinnedSnapshotStore",
    "ServerRuntime",
    "liveness_reasons",
    "readiness_reasons",
    "service_state_of",
]

EngineFactory = Callable[[Sequence[Any], Any], Built]
"""``factory(observers, snapshot_store_override) -> Built``; the override (or None) replaces the
configured snapshot store (used to start from one chosen snapshot)."""

_SERVING = (PipelineState.STREAMING, PipelineState.PAUSED)


@runtime_checkable
class Frontend(Protocol):
    """A listener in front of the runtime (gRPC, HTTP).

    ``start`` runs after the engine started; ``stop(grace)`` before the engine stops (stop
    taking calls); ``close`` after the engine stopped (release the port)."""

    def start(self) -> None: ...

    def stop(self, grace: float) -> None: ...

    def close(self) -> None: ...


class Reloader(Protocol):
    """Applies a re-read configuration (``laredo_server.reload.ConfigReloader``)."""

    generation: int
    last: Any
    """The last applied or rejected reload (``ReloadResult``; None before any)."""
    last_at: float | None
    missing_cause: str | None
    """Why the last reload left configured pipelines not running (None: it did not)."""

    def reload(self, dry_run: bool = False) -> Any: ...

    def configured_pipelines(self) -> dict[str, str]:
        """Pipeline id -> table of every pipeline the applied configuration names."""
        ...


@dataclass
class Listeners:
    """The ports the front ends bound (None: not listening)."""

    grpc_port: int | None = None
    health_port: int | None = None


# -- pinned snapshot store (RestoreSnapshot) -----------------------------------------------------


class PinnedSnapshotStore:
    """Wraps a store so the engine's startup restore sees only one chosen snapshot; after that
    snapshot is loaded, the store behaves normally."""

    def __init__(self, store: Any, snapshot_id: str) -> None:
        self._store = store
        self.pinned: str | None = snapshot_id

    @property
    def inner(self) -> Any:
        """The wrapped store."""
        return self._store

    def list(self, table: TableIdentifier | None = None) -> builtins.list[SnapshotDescriptor]:
        listed = self._store.list(table)
        if self.pinned is None:
            return builtins.list(listed)
        return [d for d in listed if d.snapshot_id == self.pinned]

    def load(self, snapshot_id: str, serializer: Any = None) -> Any:
        out = self._store.load(snapshot_id, serializer)
        if snapshot_id == self.pinned:
            self.pinned = None
        return out

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


# -- state computations (pure) -------------------------------------------------------------------


def service_state_of(
    states: Iterable[PipelineState], *, started: bool, stopping: bool, reloading: bool
) -> ServiceState:
    """The service state for the pipelines' states, in precedence order: STOPPING, STARTING
    (not started or no pipeline), ERROR (any), RELOADING, PAUSED (any), BASELINING (any),
    STREAMING (all); anything else is STARTING."""
    if stopping:
        return ServiceState.STOPPING
    states = list(states)
    if not started or not states:
        return ServiceState.STARTING
    if any(s is PipelineState.ERROR for s in states):
        return ServiceState.ERROR
    if reloading:
        return ServiceState.RELOADING
    if any(s is PipelineState.PAUSED for s in states):
        return ServiceState.PAUSED
    if any(s is PipelineState.BASELINING for s in states):
        return ServiceState.BASELINING
    if all(s is PipelineState.STREAMING for s in states):
        return ServiceState.STREAMING
    return ServiceState.STARTING


def readiness_reasons(
    pipes: Iterable[PipelineInfo],
    is_ready: Callable[[PipelineInfo], bool],
    *,
    started: bool,
    shutting_down: bool,
    detail: bool = True,
) -> list[str]:
    """Why the server (for ``pipes``) is not ready; empty when it is. A pipeline is ready when
    it is STREAMING or PAUSED and ``is_ready`` (its source's baseline is done) holds.
    ``detail``: include each failed pipeline's error text (masked); False: only "ERROR"."""
    reasons: list[str] = []
    if shutting_down:
        reasons.append("server is shutting down")
    if not started:
        reasons.append("engine not started")
    for p in pipes:
        if p.state is PipelineState.ERROR:
            text = f": {mask_text(p.error or 'failed')}" if detail else ""
            reasons.append(f"pipeline {p.id}: ERROR{text}")
        elif p.state not in _SERVING:
            reasons.append(f"pipeline {p.id}: {p.state.value}")
        elif not is_ready(p):
            reasons.append(f"pipeline {p.id}: not ready")
    return reasons


def liveness_reasons(pipes: Iterable[PipelineInfo]) -> list[str]:
    """Why the server is not live: a source all of whose pipelines failed."""
    by_src: dict[str, list[PipelineInfo]] = {}
    for p in pipes:
        by_src.setdefault(p.source_id, []).append(p)
    return [
        f"source {sid}: every pipeline failed"
        for sid, group in by_src.items()
        if group and all(p.state is PipelineState.ERROR for p in group)
    ]


# -- runtime -------------------------------------------------------------------------------------


class ServerRuntime:
    """One running server: engine, observers, front ends and admin state."""

    def __init__(
        self,
        factory: EngineFactory,
        *,
        admin_token: str | None = None,
        protect_reads: bool = False,
        read_token: str | None = None,
        per_action_metrics: bool = True,
        metrics_enabled: bool = True,
        watch_buffer: int = 16_384,
        drain: float = 0.0,
        grace_period: float = SHUTDOWN_TIMEOUT.default,
        source_types: dict[str, str] | None = None,
        max_streams: int = 8,
    ) -> None:
        self.factory = factory
        self.admin_token = admin_token
        self.protect_reads = protect_reads
        self.read_token = read_token
        self.watch_buffer = watch_buffer
        self.drain = drain
        self.grace_period = grace_period
        self.source_types = dict(source_types or {})
        self.max_streams = max_streams
        self.streams = threading.BoundedSemaphore(max_streams)
        """Slots for long-lived calls (streams, WaitForPosition), gRPC and Connect together."""
        self.security_warnings: list[str] = []
        """Listeners serving RPCs to any address without a token (shown by GetStatus)."""
        self.version = __version__
        self.stopping = threading.Event()
        self.draining = False
        self.started = False
        self.started_at: float | None = None
        self.replays: dict[str, SnapshotReplay] = {}
        self._reloading = 0
        self._lock = threading.RLock()
        self.hub = WatchHub(self.service_state, watch_buffer)
        # always on the stream: the status reads its counters (per batch when not exported)
        self.metrics = PrometheusObserver(per_action=per_action_metrics and metrics_enabled)
        self.metrics_enabled = metrics_enabled
        self.metrics.add_collector(self._collect)
        self.latest_snapshot = LatestSnapshot(lambda: self.engine)
        self.dead_letter_backlog = DeadLetterBacklog(lambda: self.engine)
        self.scrape_metrics = ScrapeMetrics(
            lambda: self.engine, self.latest_snapshot, self.dead_letter_backlog
        )
        if metrics_enabled:
            self.metrics.add_collector(self.scrape_metrics.collect)
        self.built = factory(self._observers(), None)
        self._bind_engine()
        self.listeners = Listeners()
        self._frontends: list[Frontend] = []
        self.reloader: Reloader | None = None

    def _observers(self) -> list[Any]:
        """The one event stream: watch, status and metrics (status reads the metrics)."""
        return [self.hub, self.latest_snapshot, self.dead_letter_backlog, self.metrics]

    def _bind_engine(self) -> None:
        """Point the hub at the current engine; label every observer's pipeline metrics."""
        self.hub.attach_engine(self.engine)
        labels = {c.pipeline_id(): (c.source_id, c.table) for c in self.engine.pipeline_configs}
        self.metrics.bind(labels)
        obs = self.engine.observer
        for o in obs.observers if isinstance(obs, CompositeObserver) else [obs]:
            if o is not self.metrics and isinstance(o, PipelineLabelled):
                o.bind(labels)

    def _collect(self) -> Iterator[SampleLike]:
        for p in self.engine.pipelines():
            labels = (("pipeline", p.id), ("source", p.source_id), ("table", str(p.table)))
            if p.row_count is not None:
                yield (
                    "laredo_pipeline_rows",
                    "gauge",
                    "Rows currently held by the pipeline's target.",
                    labels,
                    p.row_count,
                )
            yield (
                "laredo_pipeline_buffer_depth",
                "gauge",
                "Items waiting in the pipeline buffer.",
                labels,
                p.buffer_depth,
            )
            yield (
                "laredo_pipeline_buffer_capacity",
                "gauge",
                "Capacity of the pipeline buffer.",
                labels,
                p.buffer_capacity,
            )
        yield ("laredo_ready", "gauge", "1 when the server is ready.", (), int(self.is_ready()))

    @property
    def engine(self) -> Engine:
        engine: Engine = self.built.engine
        return engine

    # -- lifecycle ---------------------------------------------------------------------------
    def add_frontend(self, frontend: Frontend) -> None:
        """Start ``frontend`` with the runtime (in the order added) and stop it around the
        engine."""
        self._frontends.append(frontend)

    def start(self) -> None:
        self.engine.start()
        self.started_at = self.scrape_metrics.started = time.time()
        self.started = True
        for f in self._frontends:
            f.start()

    def stop(self, grace: float | None = None) -> None:
        """Stop the front ends' calls, then the engine (drains buffers, shutdown snapshot, final
        ACK), then close the front ends."""
        grace = self.grace_period if grace is None else grace
        self.stopping.set()
        self.hub.check_service_state()
        for r in list(self.replays.values()):
            with contextlib.suppress(Exception):
                r.stop()
        for f in reversed(self._frontends):
            f.stop(grace)
        try:
            self.engine.stop(timeout=grace)
        except Exception as exc:
            logger.warning("engine stop: %s", exc)
        for f in self._frontends:
            f.close()

    def begin_drain(self) -> None:
        """Readiness turns 503; with ``shutdown.drain`` > 0, fan-out clients also get GoAway
        with that deadline to hand off before the server stops."""
        self.draining = True
        if self.drain > 0:
            self.drain_replication(None, self.drain, reason="server shutting down")

    def drainable_targets(
        self, table: TableIdentifier | None = None
    ) -> list[tuple[str, DrainableTarget]]:
        """``(pipeline id, target)`` of every target that can hand its clients off (fan-out
        targets), of ``table`` only when given."""
        return [
            (c.pipeline_id(), c.target)
            for c in self.engine.pipeline_configs
            if isinstance(c.target, DrainableTarget) and (table is None or c.table_id == table)
        ]

    def drain_replication(
        self, table: TableIdentifier | None, deadline: float, reason: str = "admin"
    ) -> list[str]:
        """Drain the fan-out targets (of ``table``, else all): their clients get GoAway
        carrying ``deadline`` (seconds from now) and hand off; new clients are refused.
        Returns the drained pipeline ids."""
        drained = []
        for pid, target in self.drainable_targets(table):
            target.drain(reason, deadline)
            drained.append(pid)
        if drained:
            logger.info(
                "draining fan-out %s: clients have %.1fs to hand off (%s)",
                ", ".join(drained),
                deadline,
                reason,
            )
        return drained

    @property
    def access(self) -> Access:
        """Who may call what (:class:`laredo.auth.Access`): admin calls need the admin token
        when one is configured, read-only calls a token (admin or read) with
        ``protect_reads``; a presented token that is neither is refused everywhere."""
        return Access(self.admin_token, self.read_token, self.protect_reads)

    # -- state -------------------------------------------------------------------------------
    def ready_check(self) -> Callable[[PipelineInfo], bool]:
        """``check(p)``: ``engine.is_ready(p.source_id, p.table)``, answered from one engine
        scan per source while the whole source is ready (so a status of many pipelines takes
        linear time); a check reflects the moment it was first asked."""
        eng = self.engine
        by_source: dict[str, bool] = {}
        by_table: dict[tuple[str, TableIdentifier], bool] = {}

        def check(p: PipelineInfo) -> bool:
            whole = by_source.get(p.source_id)
            if whole is None:
                whole = by_source[p.source_id] = eng.is_ready(p.source_id)
            if whole:
                return True
            key = (p.source_id, p.table)
            if key not in by_table:
                by_table[key] = eng.is_ready(p.source_id, p.table)
            return by_table[key]

        return check

    def pipeline_ready(
        self, p: PipelineInfo, check: Callable[[PipelineInfo], bool] | None = None
    ) -> bool:
        """The pipeline is STREAMING or PAUSED and its source has finished the baseline
        (``check``: a :meth:`ready_check` shared by the pipelines of one status)."""
        if p.state not in _SERVING:
            return False
        return check(p) if check is not None else self.engine.is_ready(p.source_id, p.table)

    def pipeline_targets(self) -> dict[str, Any]:
        """Every pipeline's target object by pipeline id."""
        return {c.pipeline_id(): c.target for c in self.engine.pipeline_configs}

    def pipeline_map(self, detail: bool = True) -> dict[str, Any]:
        """Per pipeline id: state, readiness, error (masked) and rows (the /health/ready
        body); without ``detail`` only state and readiness."""
        out: dict[str, Any] = {}
        check = self.ready_check()
        for p in self.engine.pipelines():
            out[p.id] = {"state": p.state.value, "ready": self.pipeline_ready(p, check)}
            if detail:
                out[p.id]["error"] = mask_text(p.error) if p.error else p.error
                out[p.id]["rows"] = p.row_count
        return out

    def readiness(
        self,
        source: str | None = None,
        table: str | None = None,
        pipeline_id: str | None = None,
        detail: bool = True,
    ) -> tuple[bool, list[str]]:
        """``(ready, reasons)`` for the whole server or the pipelines of a source, table or
        pipeline id; ``KeyError`` when nothing matches. ``detail``: see
        :func:`readiness_reasons`."""
        eng = self.engine
        if source and source not in eng.source_ids():
            raise KeyError(f"unknown source {source!r} (sources: {', '.join(eng.source_ids())})")
        tid = TableIdentifier.parse(table) if table else None
        pipes = [
            p
            for p in eng.pipelines()
            if (not source or p.source_id == source)
            and (tid is None or p.table == tid)
            and (not pipeline_id or p.id == pipeline_id)
        ]
        missing = self.missing_pipelines() if not (source or pipeline_id) else []
        if tid is not None:
            missing = [m for m in missing if f" (table {tid})" in m]
        if not pipes and not missing:
            what = pipeline_id or table or source
            raise KeyError(f"no pipeline matches {what!r}")
        reasons = readiness_reasons(
            pipes,
            self.ready_check(),
            started=self.started,
            shutting_down=self.draining or self.stopping.is_set(),
            detail=detail,
        )
        reasons += missing
        return (not reasons), reasons

    def missing_pipelines(self) -> list[str]:
        """A reason for each configured pipeline that does not run (a reload that failed and
        could not be undone); empty without a configuration file."""
        rl = self.reloader
        if rl is None:
            return []
        running = {p.id for p in self.engine.pipelines()}
        cause = f": {mask_text(rl.missing_cause)}" if rl.missing_cause else ""
        return [
            f"pipeline {pid} (table {table}) is configured but not running{cause}"
            for pid, table in rl.configured_pipelines().items()
            if pid not in running
        ]

    def is_ready(self) -> bool:
        try:
            return self.readiness()[0]
        except Exception:
            return False

    def liveness(self) -> tuple[bool, list[str]]:
        reasons = liveness_reasons(self.engine.pipelines())
        return (not reasons), reasons

    def service_state(self) -> ServiceState:
        if self.stopping.is_set():
            return ServiceState.STOPPING
        return service_state_of(
            (p.state for p in self.engine.pipelines()),
            started=self.started,
            stopping=False,
            reloading=bool(self._reloading),
        )

    @property
    def config_generation(self) -> int:
        """1 at start; +1 for every configuration reload applied."""
        return self.reloader.generation if self.reloader is not None else 1

    def reload_config(self, dry_run: bool = False) -> Any:
        """Re-read and apply the configuration (``ReloadResult``); EngineStateError when the
        server was not started from a configuration file."""
        if self.reloader is None:
            raise EngineStateError(
                "this server was not started from a configuration file: nothing to reload"
            )
        return self.reloader.reload(dry_run)

    @contextlib.contextmanager
    def reloading(self) -> Iterator[None]:
        """Report RELOADING while the block runs."""
        with self._lock:
            self._reloading += 1
        self.hub.check_service_state()
        try:
            yield
        finally:
            with self._lock:
                self._reloading -= 1
            self.hub.check_service_state()

    def require_source(self, source_id: str) -> str:
        if not source_id:
            raise ValueError("source_id is required")
        if source_id not in self.engine.source_ids():
            known = ", ".join(self.engine.source_ids())
            raise KeyError(f"unknown source {source_id!r} (sources: {known})")
        return source_id

    def source_of(self, table: TableIdentifier) -> str:
        sids = sorted({c.source_id for c in self.engine.pipeline_configs if c.table_id == table})
        if not sids:
            raise KeyError(f"no pipeline for table {table}")
        if len(sids) > 1:
            raise ValueError(f"table {table} is read from several sources ({sids}): give source_id")
        return str(sids[0])

    def pipeline_config(self, pipeline_id: str) -> Pipeline:
        for c in self.engine.pipeline_configs:
            if c.pipeline_id() == pipeline_id:
                return c
        known = ", ".join(c.pipeline_id() for c in self.engine.pipeline_configs)
        raise KeyError(f"unknown pipeline {pipeline_id!r} (pipelines: {known})")

    def pipeline_target(self, pipeline_id: str) -> Any:
        """The target object of a pipeline (None for an unknown id)."""
        for c in self.engine.pipeline_configs:
            if c.pipeline_id() == pipeline_id:
                return c.target
        return None

    # -- restore -----------------------------------------------------------------------------
    def restore_snapshot(self, snapshot_id: str, timeout: float | None = None) -> None:
        """Stop the engine (no shutdown snapshot) and start a new one from ``snapshot_id``.

        Raises ``EngineStateError`` before stopping anything when a source cannot resume from
        the snapshot's position, and ``SnapshotError`` when the new engine did not restore it
        (it then runs without it)."""
        with self._lock:
            old = self.built
            store = old.engine.snapshot_store
            if store is None:
                raise EngineStateError("no snapshot store configured")
            desc = store.describe(snapshot_id)
            problems = []
            for sid in old.engine.source_ids():
                src = old.engine.source(sid)
                if sid not in (desc.source_positions or {}):
                    problems.append(f"snapshot {snapshot_id} has no position for source {sid!r}")
                elif not src.supports_resume():
                    problems.append(
                        f"source {sid!r} cannot resume from a position (use a stateful slot), "
                        "so it could only re-baseline"
                    )
            if problems:
                raise EngineStateError("cannot restore: " + "; ".join(problems))
            before = self.hub.restored.get(snapshot_id, 0)
            old.engine.snapshot_on_shutdown = False
            old.engine.stop(timeout=self.grace_period)
            real = store.inner if isinstance(store, PinnedSnapshotStore) else store
            self.built = self.factory(self._observers(), PinnedSnapshotStore(real, snapshot_id))
            self._bind_engine()
            self.engine.start()
        ok = self.engine.await_ready(timeout if timeout is not None else self.grace_period)
        if not ok:
            logger.warning("engine not ready after restoring %s", snapshot_id)
        if self.hub.restored.get(snapshot_id, 0) <= before:
            raise SnapshotError(
                f"snapshot {snapshot_id} was not usable (older than the position the sources "
                "acknowledged, or unreadable: see the server log); the engine restarted "
                "without it"
            )
