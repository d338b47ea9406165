"""The engine and its local runner (threads).

Per source: one reader thread runs ``init -> validate -> (resume | snapshot restore | baseline)
-> stream``; the source's changes are demuxed by table into each pipeline's bounded buffer; one
worker thread per pipeline applies them in order. A scheduler thread drives ACKs of buffering
targets, snapshots, TTL sweeps and lag.

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
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

from .contracts import (
    FlushableTarget,
    Resettable,
)
from .errors import ConfigError, EngineStateError, SnapshotError
from .observers import composite
from .pipeline import Pipeline, PipelineInfo, SourceRunInfo
from .runtime import PipelineRuntime
from .snapshots.schedule import apply_retention
from .source_runtime import _call, _overrides, _SourceRuntime
from .types import (
    ColumnDefinition,
    ErrorInfo,
    PipelineState,
    Row,
    SnapshotMetadata,
    TableIdentifier,
    TableSnapshotInfo,
)
from .units import to_seconds

logger = logging.getLogger(__name__)
T = TypeVar("T")
_REQUIRED_SOURCE_METHODS = (
    "init",
    "validate_tables",
    "baseline",
    "stream",
    "ack",
    "supports_resume",
    "last_acked_position",
    "compare_positions",
    "position_to_string",
    "position_from_string",
    "close",
)


def _duration(value: Any, what: str, problems: list[str]) -> float | None:
    try:
        return to_seconds(value, what)
    except ConfigError as exc:
        problems.extend(exc.problems)
        return None


class Engine:
    """Runs pipelines. Construct, ``start()``, ``await_ready()``, query targets, ``stop()``.

    All public methods are thread-safe. ``a``-prefixed coroutines wrap them for asyncio callers.
    """

    def __init__(
        self,
        sources: Mapping[str, Any],
        pipelines: Sequence[Pipeline],
        *,
        snapshot_store: Any = None,
        snapshot_serializer: Any = None,
        snapshot_schedule: float | timedelta | None = None,
        snapshot_retention: int | None = None,
        snapshot_max_age: float | timedelta | None = None,
        snapshot_on_shutdown: bool = False,
        snapshot_user_meta: Mapping[str, Any] | None = None,
        snapshot_meta_policy: str = "warn",
        dead_letter_store: Any = None,
        observers: Iterable[Any] = (),
        observer: Any = None,
        shutdown_timeout: float | timedelta = 30.0,
        lag_interval: float | timedelta = 10.0,
    ) -> None:
        problems: list[str] = []
        self.sources = dict(sources or {})
        if not self.sources:
            problems.append("sources: none configured; give at least one source")
        for sid, src in self.sources.items():
            if not sid:
                problems.append("sources: a source has an empty id")
            if src is None:
                problems.append(f"sources.{sid}: is None")
                continue
            missing = [m for m in _REQUIRED_SOURCE_METHODS if not callable(getattr(src, m, None))]
            if missing:
                problems.append(
                    f"sources.{sid}: {type(src).__name__} is not a SyncSource "
                    f"(missing {', '.join(missing)})"
                )
        self.pipeline_configs = list(pipelines or [])
        if not self.pipeline_configs:
            problems.append("pipelines: none configured; add at least one Pipeline")
        ids: set[str] = set()
        for i, p in enumerate(self.pipeline_configs):
            if not isinstance(p, Pipeline):
                kind = type(p).__name__  # type: ignore[unreachable]
                problems.append(f"pipelines[{i}]: expected laredo.Pipeline, got {kind}")
                continue
            problems.extend(p.problems(i))
            if p.source_id and p.source_id not in self.sources:
                known = ", ".join(sorted(self.sources)) or "none"
                problems.append(
                    f"pipelines[{i}].source_id: unknown source {p.source_id!r} (sources: {known})"
                )
            if isinstance(p.table, TableIdentifier) and p.target is not None:
                pid = p.pipeline_id()
                if pid in ids:
                    problems.append(
                        f"pipelines[{i}]: duplicate pipeline id {pid!r}; give it a distinct id="
                    )
                ids.add(pid)
            if str(getattr(p.error_policy, "value", p.error_policy)) == "dead_letter" and (
                dead_letter_store is None
            ):
                problems.append(
                    f"pipelines[{i}].error_policy: 'dead_letter' needs a dead_letter_store"
                )
            try:
                from .filters import as_filter
                from .transforms import as_transform

                for f in p.filters:
                    as_filter(f)
                for t in p.transforms:
                    as_transform(t)
            except Exception as exc:
                problems.append(f"pipelines[{i}]: invalid filter/transform: {exc}")
        sched = _duration(snapshot_schedule, "snapshot_schedule", problems)
        max_age = _duration(snapshot_max_age, "snapshot_max_age", problems)
        shutdown = _duration(shutdown_timeout, "shutdown_timeout", problems)
        lag_every = _duration(lag_interval, "lag_interval", problems)
        if sched is not None and sched <= 0:
            problems.append(f"snapshot_schedule: must be positive (got {snapshot_schedule!r})")
        if snapshot_retention is not None and snapshot_retention < 1:
            problems.append(f"snapshot_retention: must be >= 1 (got {snapshot_retention!r})")
        if (sched or snapshot_on_shutdown) and snapshot_store is None:
            problems.append(
                "snapshot_schedule/snapshot_on_shutdown: need a snapshot_store "
                "(e.g. laredo.snapshot_store('local', path=...))"
            )
        if snapshot_meta_policy not in ("warn", "reject"):
            problems.append(
                f"snapshot_meta_policy: use 'warn' or 'reject' (got {snapshot_meta_policy!r})"
            )
        if problems:
            raise ConfigError(problems)
        if snapshot_store is not None and snapshot_serializer is None:
            from .snapshots.jsonl import JsonlSerializer

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
        obs_list = list(observers or [])
        if observer is not None:
            obs_list.append(observer)
        self._obs: Any = composite(obs_list)
        self._wants_received = _overrides(self._obs, "on_change_received")
        self._wants_applied = _overrides(self._obs, "on_change_applied")
        self._wants_depth = _overrides(self._obs, "on_buffer_depth_changed")
        self.shutdown_timeout = shutdown or 30.0
        self.lag_interval = lag_every or 10.0
        self._lifecycle = "new"
        self._lock = threading.RLock()
        self._ready = threading.Event()
        self._ready_callbacks: list[Callable[[], None]] = []
        self._sources_rt: dict[str, _SourceRuntime] = {}
        self._pipelines: list[PipelineRuntime] = []
        self._scheduler: threading.Thread | None = None
        self._stopping = threading.Event()
        self._last_snapshot_at = time.monotonic()
        self._snapshot_lock = threading.Lock()

    # -- lifecycle ----------------------------------------------------------------------------
    def start(self) -> None:
        """Start every source and pipeline; returns at once (see ``await_ready``)."""
        with self._lock:
            if self._lifecycle == "running":
                raise EngineStateError("engine already started")
            if self._lifecycle == "stopped":
                raise EngineStateError("engine was stopped; create a new Engine to start again")
            for sid, src in self.sources.items():
                self._sources_rt[sid] = _SourceRuntime(self, sid, src)
            for cfg in self.pipeline_configs:
                srt = self._sources_rt[cfg.source_id]
                p = PipelineRuntime(self, srt, cfg)
                srt.add(p)
                self._pipelines.append(p)
            for srt in self._sources_rt.values():
                srt.finish_wiring()
            self._lifecycle = "running"
        for srt in self._sources_rt.values():
            if srt.pipelines:
                srt.start()
        self._scheduler = threading.Thread(
            target=self._schedule_loop, name="laredo-scheduler", daemon=True
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
        self._stopping.set()
        for srt in self._sources_rt.values():
            srt.stop_stream()
        for srt in self._sources_rt.values():
            if srt.thread is not None:
                srt.thread.join(max(0.1, deadline - time.monotonic()))
                if srt.thread.is_alive():
                    logger.warning("source %s did not stop in time; closing it", srt.id)
                    with contextlib.suppress(Exception):
                        srt.source.close()
                    srt.thread.join(max(0.1, deadline - time.monotonic()))
        for p in self._pipelines:
            p.buffer.set_paused(False)
            p.buffer.close()
        for p in self._pipelines:
            if p.thread is not None:
                p.thread.join(max(0.1, deadline - time.monotonic()))
                if p.thread.is_alive():
                    logger.warning("pipeline %s did not drain in time", p.id)
                    p._stop_now.set()
        if self.snapshot_on_shutdown and self.snapshot_store is not None:
            try:
                self._take_snapshot({"trigger": "shutdown"}, direct=True)
            except Exception:
                logger.exception("snapshot on shutdown failed")
        for p in self._pipelines:
            if isinstance(p.target, FlushableTarget) and p.state is not PipelineState.ERROR:
                try:
                    p.target.flush()
                except Exception:
                    logger.warning("pipeline %s: final flush failed", p.id, exc_info=True)
        for srt in self._sources_rt.values():
            srt.try_ack()
        for p in self._pipelines:
            try:
                p.target.on_close(p.table)
            except Exception:
                logger.warning("pipeline %s: on_close failed", p.id, exc_info=True)
            if p.state is not PipelineState.ERROR:
                p.set_state(PipelineState.STOPPED)
        for srt in self._sources_rt.values():
            try:
                srt.source.close()
            except Exception:
                logger.warning("source %s: close failed", srt.id, exc_info=True)
            self._obs.on_source_disconnected(srt.id, "engine stopped")
        if self._scheduler is not None:
            self._scheduler.join(1.0)
        with self._lock:
            self._lifecycle = "stopped"

    def __enter__(self) -> Engine:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._lifecycle == "running":
            self.stop()

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
        pipes = self._match(source_id, table)
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

    # -- admin ----------------------------------------------------------------------------------
    def _require_running(self) -> None:
        if self._lifecycle != "running":
            raise EngineStateError(f"engine is {self._lifecycle}; call start() first")

    def _source(self, source_id: str) -> _SourceRuntime:
        self._require_running()
        try:
            return self._sources_rt[source_id]
        except KeyError:
            known = ", ".join(sorted(self._sources_rt))
            raise KeyError(f"unknown source {source_id!r} (sources: {known})") from None

    def _match(
        self, source_id: str | None, table: TableIdentifier | str | None
    ) -> list[PipelineRuntime]:
        if isinstance(table, str):
            table = TableIdentifier.parse(table)
        return [
            p
            for p in self._pipelines
            if (not source_id or p.source_rt.id == source_id)
            and (table is None or p.table == table)
        ]

    def reload(
        self, source_id: str, table: TableIdentifier | str, timeout: float | None = None
    ) -> None:
        """Re-baseline one table: its targets are emptied and reloaded; changes that arrive
        meanwhile are buffered and applied after the reload (none is lost). Blocks until done."""
        self._source(source_id)
        pipes = [
            p
            for p in self._match(source_id, table)
            if p.state in (PipelineState.STREAMING, PipelineState.PAUSED)
        ]
        if not pipes:
            raise KeyError(f"no streaming pipeline for table {table} on source {source_id!r}")
        futures = [p.submit("reload") for p in pipes]
        for f in futures:
            f.result(timeout)

    def reload_all(self, source_id: str | None = None, timeout: float | None = None) -> None:
        for sid in [source_id] if source_id else list(self._sources_rt):
            tables = dict.fromkeys(p.table for p in self._sources_rt[sid].pipelines)
            for t in tables:
                self.reload(sid, t, timeout)

    def pause(self, source_id: str) -> None:
        """Pause a source: its pipelines stop applying; changes keep buffering (with the block
        policy the source is then back-pressured). Nothing is dropped."""
        srt = self._source(source_id)
        with contextlib.suppress(Exception):
            srt.source.pause()
        for p in srt.pipelines:
            p.buffer.set_paused(True)
            if p.state is PipelineState.STREAMING:
                p.set_state(PipelineState.PAUSED)

    def resume(self, source_id: str) -> None:
        srt = self._source(source_id)
        for p in srt.pipelines:
            if p.state is PipelineState.PAUSED:
                p.set_state(PipelineState.STREAMING)
            p.buffer.set_paused(False)
        with contextlib.suppress(Exception):
            srt.source.resume()

    def reset_source(self, source_id: str, drop_publication: bool = False) -> None:
        """Drop and recreate the source's replication state (slot); the next start baselines."""
        src = self.sources.get(source_id)
        if src is None:
            raise KeyError(f"unknown source {source_id!r}")
        if not isinstance(src, Resettable):
            raise EngineStateError(f"source {source_id!r} ({type(src).__name__}) cannot be reset")
        src.reset_source(drop_publication)

    # -- snapshots ------------------------------------------------------------------------------
    def create_snapshot(self, user_meta: Mapping[str, Any] | None = None) -> str:
        """Export every pipeline's target consistently with its applied position and save a
        snapshot. Returns the snapshot id."""
        self._require_running()
        if self.snapshot_store is None:
            raise EngineStateError("no snapshot store configured (snapshot_store=...)")
        return self._take_snapshot(dict(user_meta or {}), direct=False)

    def _take_snapshot(self, user_meta: dict[str, Any], direct: bool) -> str:
        store = self.snapshot_store
        serializer = self.snapshot_serializer
        snap_id = datetime.now(UTC).strftime("snap-%Y%m%dT%H%M%S%fZ-") + uuid.uuid4().hex[:6]
        obs = self._obs
        with self._snapshot_lock:
            started = time.monotonic()
            obs.on_snapshot_started(snap_id)
            try:
                pipes = [p for p in self._pipelines if p.state is not PipelineState.ERROR]
                not_ready = [p.id for p in pipes if not p.ready]
                if not_ready:
                    raise EngineStateError(
                        f"cannot snapshot while pipelines are not ready: {', '.join(not_ready)}"
                    )
                exports: list[tuple[PipelineRuntime, list[Row], Any]] = []
                if direct:
                    for p in pipes:
                        exports.append((p, p.target.export_snapshot(), p.applied))
                else:
                    futures = [(p, p.submit("export")) for p in pipes]
                    for p, f in futures:
                        rows, pos = f.result(self.shutdown_timeout)
                        exports.append((p, rows, pos))
                tables: dict[TableIdentifier, list[Row]] = {}
                infos: list[TableSnapshotInfo] = []
                per_source: dict[str, list[Any]] = {}
                total = 0
                for p, rows, pos in exports:
                    key = p.table
                    if key in tables:  # a second pipeline on the same table
                        key = TableIdentifier(p.table.schema, f"{p.table.table}~{len(tables)}")
                    tables[key] = rows
                    total += len(rows)
                    pos_s = p.source_rt.pos_str(pos) if pos is not None else None
                    infos.append(
                        TableSnapshotInfo(
                            table=key,
                            row_count=len(rows),
                            columns=tuple(p.columns),
                            target_type=p.target_type,
                            indexes=tuple(getattr(p.target, "indexes", ()) or ()),
                            position=pos_s,
                            pipeline_id=p.id,
                        )
                    )
                    per_source.setdefault(p.source_rt.id, []).append(pos)
                positions: dict[str, str] = {}
                for sid, plist in per_source.items():
                    if any(x is None for x in plist):
                        continue
                    srt = self._sources_rt[sid]
                    low = plist[0]
                    for x in plist[1:]:
                        if srt.source.compare_positions(x, low) < 0:
                            low = x
                    positions[sid] = srt.pos_str(low)
                meta = SnapshotMetadata(
                    snapshot_id=snap_id,
                    created_at=datetime.now(UTC),
                    source_positions=positions,
                    tables=tuple(infos),
                    format=serializer.format_id(),
                    user_meta={**self.snapshot_user_meta, **user_meta},
                )
                desc = store.save(snap_id, meta, tables, serializer)
            except Exception as exc:
                obs.on_snapshot_failed(snap_id, ErrorInfo.of(exc))
                raise
            for p, _rows, pos in exports:
                if pos is not None:
                    p.snapshot_position = pos
            self._last_snapshot_at = time.monotonic()
            obs.on_snapshot_completed(
                snap_id,
                len(infos),
                total,
                int(getattr(desc, "size_bytes", 0) or 0),
                timedelta(seconds=time.monotonic() - started),
            )
            self._apply_retention()
        for srt in self._sources_rt.values():
            srt.try_ack()
        return snap_id

    def _apply_retention(self) -> None:
        if not (self.snapshot_max_age or self.snapshot_retention):
            return
        try:
            apply_retention(
                self.snapshot_store,
                keep_count=self.snapshot_retention,
                max_age=self.snapshot_max_age,
            )
        except Exception:
            logger.warning("snapshot retention failed", exc_info=True)

    def _snapshot_source_position(self, srt: _SourceRuntime) -> Any:
        return getattr(srt, "_restored_from", None)

    def _restore(self, srt: _SourceRuntime, pipes: list[PipelineRuntime], not_before: Any) -> bool:
        """Restore ``pipes`` from the newest usable snapshot. With ``not_before`` (a resume
        position), each restored table must be at or after it, or the snapshot is not usable."""
        store = self.snapshot_store
        if store is None or not pipes:
            return False
        obs = self._obs
        try:
            listed = store.list()
        except Exception as exc:
            logger.warning("snapshot store list failed: %s", exc)
            return False
        for desc in listed:
            if desc.source_positions and srt.id not in desc.source_positions:
                continue  # descriptors without positions are decided after load()
            snap_id = desc.snapshot_id
            restored: list[PipelineRuntime] = []
            started = time.monotonic()
            obs.on_snapshot_restore_started(snap_id)
            try:
                meta, data = store.load(snap_id, self.snapshot_serializer)
                if srt.id not in meta.source_positions:
                    raise SnapshotError(f"snapshot {snap_id} has no position for source {srt.id}")
                self._check_user_meta(meta)
                src_pos = srt.source.position_from_string(meta.source_positions[srt.id])
                by_pid = {i.pipeline_id: i for i in meta.tables if i.pipeline_id}
                by_table: dict[TableIdentifier, TableSnapshotInfo] = {}
                for i in meta.tables:
                    by_table.setdefault(i.table, i)
                plan = []
                for p in pipes:
                    info = by_pid.get(p.id) or by_table.get(p.table)
                    if info is None or info.position is None:
                        raise SnapshotError(f"snapshot {snap_id} has no data for pipeline {p.id}")
                    pos = srt.source.position_from_string(info.position)
                    if not_before is not None and srt.source.compare_positions(pos, not_before) < 0:
                        raise SnapshotError(
                            f"snapshot {snap_id} table {p.table} is at {info.position}, before "
                            f"the resume position {srt.pos_str(not_before)}"
                        )
                    plan.append((p, info, pos))
                for p, info, pos in plan:
                    rows = data.get(info.table)
                    if rows is None:
                        raise SnapshotError(
                            f"snapshot {snap_id} misses table file for {info.table}"
                        )
                    restored.append(p)
                    p.target.restore_snapshot(info, rows)
                    p.applied = pos
                    p.last_change = pos
                    p.snapshot_position = pos
                    p.skip_until = pos
                    p.expected_rows = info.row_count
                srt._restored_from = src_pos  # type: ignore[attr-defined]
            except Exception as exc:
                logger.warning("snapshot %s unusable, falling back: %s", snap_id, exc)
                obs.on_snapshot_failed(snap_id, ErrorInfo.of(exc, "restore failed: "))
                for p in restored:
                    with contextlib.suppress(Exception):
                        p.target.on_truncate(p.table)
                    p.skip_until = None
                return False
            for p in pipes:
                srt._mark_streaming(p)
            obs.on_snapshot_restore_completed(
                snap_id, timedelta(seconds=time.monotonic() - started)
            )
            return True
        return False

    def _check_user_meta(self, meta: SnapshotMetadata) -> None:
        expected = self.snapshot_user_meta
        diffs = [
            f"{k}: snapshot has {meta.user_meta.get(k)!r}, engine expects {v!r}"
            for k, v in expected.items()
            if meta.user_meta.get(k) != v
        ]
        if not diffs:
            return
        msg = f"snapshot {meta.snapshot_id} user metadata mismatch: " + "; ".join(diffs)
        if self.snapshot_meta_policy == "reject":
            raise SnapshotError(msg)
        logger.warning("%s (snapshot_meta_policy=warn: restoring anyway)", msg)

    # -- scheduler --------------------------------------------------------------------------------
    def _schedule_loop(self) -> None:
        last_lag = time.monotonic()
        buffering = [
            srt
            for srt in self._sources_rt.values()
            if any(p.has_durable_position for p in srt.pipelines)
        ]
        seen_state: dict[str, Any] = {}
        while not self._stopping.wait(0.05):
            for srt in buffering:
                srt.try_ack()
            self._watch_source_states(seen_state)
            now = time.monotonic()
            if (
                self.snapshot_schedule
                and now - self._last_snapshot_at >= self.snapshot_schedule
                and self._ready.is_set()
            ):
                try:
                    self._take_snapshot({"trigger": "schedule"}, direct=False)
                except Exception as exc:
                    logger.warning("scheduled snapshot failed: %s", exc)
                    self._last_snapshot_at = now
            if now - last_lag >= self.lag_interval:
                last_lag = now
                for srt in self._sources_rt.values():
                    try:
                        lag = srt.source.get_lag()
                        self._obs.on_lag_updated(srt.id, lag.lag_bytes, lag.lag_time)
                    except Exception:
                        logger.debug("lag of %s unavailable", srt.id, exc_info=True)

    def _watch_source_states(self, seen: dict[str, Any]) -> None:
        """Turn a source's own reconnects into observer events (sources have no observer)."""
        for srt in self._sources_rt.values():
            state = _call(getattr(srt.source, "state", lambda: None), None)
            before = seen.get(srt.id)
            if state is None or state == before:
                continue
            seen[srt.id] = state
            name = str(getattr(state, "value", state))
            if name == "RECONNECTING":
                self._obs.on_source_disconnected(srt.id, "connection lost; reconnecting")
            elif (
                name == "STREAMING"
                and before is not None
                and str(getattr(before, "value", before)) == "RECONNECTING"
            ):
                self._obs.on_source_connected(srt.id, type(srt.source).__name__)

    def _fail_all(self, message: str) -> None:
        for srt in self._sources_rt.values():
            srt.fail_all(message)

    # -- introspection ---------------------------------------------------------------------
    def targets(
        self, source_id: str | None = None, table: TableIdentifier | str | None = None
    ) -> list[Any]:
        if self._pipelines:
            return [p.target for p in self._match(source_id, table)]
        if isinstance(table, str):
            table = TableIdentifier.parse(table)
        return [
            c.target
            for c in self.pipeline_configs
            if (not source_id or c.source_id == source_id) and (table is None or c.table == table)
        ]

    def get_target(
        self, source_id: str | None, table: TableIdentifier | str, cls: type[T] | None = None
    ) -> Any:
        """The first target for ``(source_id, table)`` (of type ``cls`` if given), or None."""
        for t in self.targets(source_id, table):
            if cls is None or isinstance(t, cls):
                return t
        return None

    def pipelines(self) -> list[PipelineInfo]:
        out = []
        for p in self._pipelines:
            count = None
            counter = getattr(p.target, "count", None)
            if callable(counter):
                with contextlib.suppress(Exception):
                    count = int(counter())
            durable = None
            with contextlib.suppress(Exception):
                c = p.confirmed()
                durable = p.source_rt.pos_str(c) if c is not None else None
            out.append(
                PipelineInfo(
                    id=p.id,
                    source_id=p.source_rt.id,
                    table=p.table,
                    target_type=p.target_type,
                    state=p.state,
                    row_count=count,
                    buffer_depth=p.buffer.depth,
                    buffer_capacity=p.buffer.capacity,
                    error=p.error,
                    applied_position=p.source_rt.pos_str(p.applied)
                    if p.applied is not None
                    else None,
                    durable_position=durable,
                )
            )
        return out

    def source_ids(self) -> list[str]:
        return list(self.sources)

    def source(self, source_id: str) -> Any:
        return self.sources[source_id]

    def source_info(self, source_id: str) -> SourceRunInfo | None:
        src = self.sources.get(source_id)
        if src is None:
            return None
        srt = self._sources_rt.get(source_id)
        lag = _call(src.get_lag, None) if hasattr(src, "get_lag") else None
        state = _call(src.state, None) if hasattr(src, "state") else None
        og = _call(src.ordering_guarantee, None) if hasattr(src, "ordering_guarantee") else None
        return SourceRunInfo(
            id=source_id,
            source_type=type(src).__name__,
            supports_resume=bool(_call(src.supports_resume, False)),
            ordering_guarantee=str(og) if og is not None else "",
            state=str(state) if state is not None else "",
            lag_bytes=getattr(lag, "lag_bytes", 0) if lag else 0,
            lag_time=getattr(lag, "lag_time", None) if lag else None,
            acked_position=srt.pos_str(srt.last_ack) if srt and srt.last_ack is not None else None,
            current_position=srt.pos_str(srt.current) if srt and srt.current is not None else None,
            pipelines=tuple(p.id for p in srt.pipelines) if srt else (),
            error=srt.error if srt else None,
        )

    def table_schema(
        self, table: TableIdentifier | str, source_id: str | None = None
    ) -> list[ColumnDefinition]:
        if isinstance(table, str):
            table = TableIdentifier.parse(table)
        for srt in self._sources_rt.values():
            if source_id and srt.id != source_id:
                continue
            cols = srt.schemas.get(table)
            if cols is not None:
                return list(cols)
        return []

    @property
    def observer(self) -> Any:
        return self._obs

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
