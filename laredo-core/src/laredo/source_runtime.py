"""Per-source runtime: the reader thread, the change handler (demux by table) and ACKs.

A source's reader runs ``init -> validate -> (resume | snapshot restore | baseline) -> stream``.
Its handler enqueues each transaction into the buffer of every pipeline of the table and a
heartbeat into the others, so ACKs advance on every pipeline. ``try_ack`` acknowledges the
minimum position that every non-failed pipeline holds durably, forward only.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from .buffer import SCHEMA, SKIP
from .contracts import (
    BatchBaselineSource,
    DurablePositionTarget,
    PipelineAware,
    PipelineContext,
    StoppableSource,
)
from .errors import ReBaselineRequired, retry_class
from .observers import NullObserver
from .runtime import PipelineRuntime
from .types import (
    ChangeEvent,
    ColumnDefinition,
    OrderingGuarantee,
    PipelineState,
    Row,
    SchemaChangeEvent,
    SourceConfig,
    TableIdentifier,
)

logger = logging.getLogger(__name__)
if TYPE_CHECKING:
    from .engine import Engine

T = TypeVar("T")
PROGRESS_EVERY = 10_000
BASELINE_CHUNK = 2_000


def _overrides(observer: Any, name: str) -> bool:
    """Does ``observer`` (or any child of a composite) implement ``name`` for real?"""
    children = getattr(observer, "observers", None)
    if children is not None:
        return any(_overrides(c, name) for c in children)
    impl = getattr(type(observer), name, None)
    return impl is not None and impl is not getattr(NullObserver, name, None)


class _SourceRuntime:
    """One source: its reader thread, its change handler (demux) and its ACK coordination."""

    def __init__(self, engine: Engine, source_id: str, source: Any) -> None:
        self.engine = engine
        self.id = source_id
        self.source = source
        self.pipelines: list[PipelineRuntime] = []
        self.by_table: dict[TableIdentifier, list[PipelineRuntime]] = {}
        self.others: dict[TableIdentifier, list[PipelineRuntime]] = {}
        self.schemas: dict[TableIdentifier, list[ColumnDefinition]] = {}
        self.last_ack: Any = None
        self.current: Any = None
        self.error: str | None = None
        self.thread: threading.Thread | None = None
        self._ack_lock = threading.Lock()
        self._stop = threading.Event()
        self.volatile_acks_snapshot_bound = False
        self.total_order = True
        self.stream_start: Any = None
        self.max_restarts = 10
        self.backoff = 0.05
        self.max_backoff = 5.0

    # -- helpers ----------------------------------------------------------------------------
    def pos_str(self, position: Any) -> str:
        if position is None:
            return "<none>"
        try:
            return str(self.source.position_to_string(position))
        except Exception:
            return repr(position)

    def add(self, p: PipelineRuntime) -> None:
        self.pipelines.append(p)
        self.by_table.setdefault(p.table, []).append(p)

    def finish_wiring(self) -> None:
        for table in self.by_table:
            self.others[table] = [p for p in self.pipelines if p.table != table]
        self.volatile_acks_snapshot_bound = bool(
            self.engine.snapshot_store is not None and _call(self.source.supports_resume, False)
        )
        og = _call(getattr(self.source, "ordering_guarantee", lambda: None), None)
        self.total_order = og in (None, OrderingGuarantee.TOTAL_ORDER)

    def fail_all(self, message: str) -> None:
        self.error = message
        for p in self.pipelines:
            if p.state is not PipelineState.ERROR:
                p.fail(message)
        self.stop_stream()

    def stop_stream(self) -> None:
        self._stop.set()
        try:
            if isinstance(self.source, StoppableSource):
                self.source.stop_stream()
        except Exception:
            logger.exception("source %s: stop_stream failed", self.id)

    # -- ChangeHandler ------------------------------------------------------------------------
    def on_change(self, event: ChangeEvent) -> None:
        self.on_changes((event,))

    def on_changes(self, events: Sequence[ChangeEvent], complete: bool = True) -> None:
        """Demux one batch. ``complete=False`` marks a chunk whose transaction continues in
        the next call (same position): its position is not acknowledged until the end."""
        if not events:
            return
        stop = self._stop
        first = events[0].table
        single = True
        for ev in events:
            t = ev.table
            if t is not first and t != first:
                single = False
                break
        last = events[-1].position
        self.current = last
        if single:
            for p in self.by_table.get(first, ()):
                if p.state is not PipelineState.ERROR:
                    p.enqueue(events, stop, complete)
            others = self.others.get(first, self.pipelines)
        else:
            groups: dict[TableIdentifier, list[ChangeEvent]] = {}
            for ev in events:
                groups.setdefault(ev.table, []).append(ev)
            touched: set[int] = set()
            for t, evs in groups.items():
                for p in self.by_table.get(t, ()):
                    touched.add(id(p))
                    if p.state is not PipelineState.ERROR:
                        p.enqueue(evs, stop, complete)
            others = [p for p in self.pipelines if id(p) not in touched]
        if self.total_order and complete:
            for p in others:
                if p.state is not PipelineState.ERROR:
                    p.buffer.put_heartbeat(last)

    def on_heartbeat(self, position: Any) -> None:
        self.current = position
        for p in self.pipelines:
            if p.state is not PipelineState.ERROR:
                p.buffer.put_heartbeat(position)

    def on_schema_change(
        self,
        table: TableIdentifier,
        old_columns: Sequence[ColumnDefinition],
        new_columns: Sequence[ColumnDefinition],
        position: Any = None,
    ) -> None:
        self.schemas[table] = list(new_columns)
        self.engine._obs.on_schema_change(
            self.id, table, SchemaChangeEvent(tuple(old_columns), tuple(new_columns))
        )
        for p in self.by_table.get(table, ()):
            p.buffer.put_item(SCHEMA, (table, list(old_columns), list(new_columns), position))

    # -- ACK ----------------------------------------------------------------------------------
    def try_ack(self) -> None:
        with self._ack_lock:
            compare = self.source.compare_positions
            best: Any = None
            any_active = False
            for p in self.pipelines:
                if p.state is PipelineState.ERROR:
                    continue
                if not p.ready:
                    return
                c = p.confirmed()
                if c is None:
                    return
                any_active = True
                if best is None or compare(c, best) < 0:
                    best = c
            if not any_active or best is None:
                return
            if self.last_ack is not None and compare(best, self.last_ack) <= 0:
                return
            try:
                self.source.ack(best)
            except Exception:
                logger.warning(
                    "source %s: ack(%s) failed", self.id, self.pos_str(best), exc_info=True
                )
                return
            self.last_ack = best
        self.engine._obs.on_ack_advanced(self.id, best)

    # -- the reader thread --------------------------------------------------------------------
    def start(self) -> None:
        self.thread = threading.Thread(
            target=self._run, name=f"laredo-source-{self.id}", daemon=True
        )
        self.thread.start()

    def _run(self) -> None:
        try:
            self._run_inner()
        except Exception as exc:  # defensive: never leave the engine hanging silently
            logger.exception("source %s: reader crashed", self.id)
            self.fail_all(f"source {self.id} crashed: {exc}")

    def _run_inner(self) -> None:
        obs = self.engine._obs
        tables = list(dict.fromkeys(p.table for p in self.pipelines))
        bind = getattr(self.source, "bind_dead_letter_store", None)
        if callable(bind) and self.engine.dead_letter_store is not None:
            bind(self.engine.dead_letter_store)  # sources that dead-letter bad records
        try:
            schemas = self.source.init(SourceConfig(tables=tables))
        except Exception as exc:
            msg = f"init failed: {exc}"
            obs.on_source_disconnected(self.id, msg)
            self.fail_all(f"source {self.id}: {msg}")
            return
        self.schemas = {t: list(c) for t, c in (schemas or {}).items()}
        try:
            problems = list(self.source.validate_tables(tables) or [])
        except Exception as exc:
            problems = []
            logger.warning("source %s: validate_tables failed: %s", self.id, exc)
        for problem in problems:
            table = getattr(problem, "table", None)
            for p in self.pipelines if table is None else self.by_table.get(table, []):
                p.fail(f"validation failed: {problem}")
        obs.on_source_connected(self.id, type(self.source).__name__)
        for p in self.pipelines:
            if p.state is PipelineState.ERROR:
                continue
            cols = self.schemas.get(p.table)
            if cols is None:
                p.fail(f"table {p.table} not found in source {self.id}")
                continue
            p.columns = cols
            try:
                if isinstance(p.target, PipelineAware):
                    src = self.source
                    p.target.bind_pipeline(
                        PipelineContext(
                            pipeline_id=p.id,
                            source_id=self.id,
                            table=p.table,
                            observer=self.engine._obs,
                            position_to_string=src.position_to_string,
                            position_from_string=src.position_from_string,
                            compare_positions=src.compare_positions,
                        )
                    )
                p.target.on_init(p.table, cols)
            except Exception as exc:
                p.fail(f"target init failed for {p.table}: {exc}")
        for p in self.pipelines:
            p.start_worker()
        if all(p.state is PipelineState.ERROR for p in self.pipelines):
            return
        try:
            position = self._startup()
        except _BaselineFailed:
            return
        self.stream_start = position
        attempt = 0
        while not self._stop.is_set():
            try:
                self.source.stream(position, self)
                return
            except ReBaselineRequired as exc:
                if self._stop.is_set():
                    return
                logger.warning("source %s: re-baseline required: %s", self.id, exc)
                obs.on_rebaseline_triggered(self.id)
                try:
                    position = self._baseline(rebaseline=True)
                except _BaselineFailed:
                    return
                self.stream_start = position
            except Exception as exc:
                if self._stop.is_set():
                    return
                msg = f"stream error: {exc}"
                obs.on_source_disconnected(self.id, msg)
                restart = self._restart_position(exc, attempt)
                if restart is _NO_RESTART:
                    logger.error("source %s: %s", self.id, msg)
                    self.fail_all(f"source {self.id}: {msg}")
                    return
                attempt += 1
                delay = min(self.max_backoff, self.backoff * (2 ** (attempt - 1)))
                logger.warning(
                    "source %s: %s; restarting the stream from %s in %.1fs (attempt %d/%d)",
                    self.id,
                    msg,
                    self.pos_str(restart),
                    delay,
                    attempt,
                    self.max_restarts,
                )
                if self._stop.wait(delay):
                    return
                position = restart
                continue
            attempt = 0

    def _restart_position(self, exc: BaseException, attempt: int) -> Any:
        """Where to restart after a transient stream error, or ``_NO_RESTART``.

        Only transient errors of resumable, totally ordered sources restart in place: the
        stream resumes from the last ack and every pipeline skips what it already received
        (a SKIP marker travels through its buffer, after what is still queued)."""
        if retry_class(exc) != "transient" or attempt >= self.max_restarts:
            return _NO_RESTART
        if not self.total_order or not _call(self.source.supports_resume, False):
            return _NO_RESTART
        restart = self.last_ack if self.last_ack is not None else self.stream_start
        if restart is None:
            return _NO_RESTART
        if self.current is not None:
            for p in self.pipelines:
                p.buffer.put_item(SKIP, self.current)
        return restart

    # -- startup paths --------------------------------------------------------------------------
    def _startup(self) -> Any:
        active = [p for p in self.pipelines if p.state is not PipelineState.ERROR]
        resumable = _call(self.source.supports_resume, False)
        if resumable:
            last = self.source.last_acked_position()
            if last is not None:
                volatile = [p for p in active if not _durable(p.target)]
                if not volatile or self.engine._restore(self, volatile, not_before=last):
                    for p in active:
                        if p not in volatile:
                            p.applied = last
                            self._mark_streaming(p)
                    self.last_ack = last
                    logger.info("source %s: resuming after %s", self.id, self.pos_str(last))
                    return last
                logger.info(
                    "source %s: not resuming at %s: in-memory targets have no usable snapshot; "
                    "re-baselining",
                    self.id,
                    self.pos_str(last),
                )
                return self._baseline(rebaseline=True)
            if self.engine.snapshot_store is not None:
                pos = self.engine._restore(self, active, not_before=None)
                if pos:
                    return self.engine._snapshot_source_position(self)
        return self._baseline()

    def _mark_streaming(self, p: PipelineRuntime) -> None:
        if p.state is PipelineState.ERROR:
            return
        p.set_state(PipelineState.STREAMING)
        p.ready = True
        self.engine._readiness_changed()

    def _baseline(self, rebaseline: bool = False) -> Any:
        obs = self.engine._obs
        active = [p for p in self.pipelines if p.state is not PipelineState.ERROR]
        started = time.monotonic()
        by_table: dict[TableIdentifier, list[PipelineRuntime]] = {}
        for p in active:
            p.set_state(PipelineState.BASELINING)
            p.ready = False
            obs.on_baseline_started(p.id, p.table)
            by_table.setdefault(p.table, []).append(p)
            if rebaseline:
                p.buffer.clear()
                p.skip_until = None
                try:
                    p.target.on_truncate(p.table)
                except Exception as exc:
                    p.fail(f"truncate before re-baseline failed: {exc}")
        loaded: dict[int, int] = {id(p): 0 for p in active}
        seen: dict[TableIdentifier, int] = dict.fromkeys(by_table, 0)
        pending: dict[TableIdentifier, list[Row]] = {}
        wants_progress = _overrides(obs, "on_baseline_row_loaded")

        def deliver(table: TableIdentifier, rows: list[Row]) -> None:
            pipes = by_table.get(table)
            if not pipes:
                return
            for p in pipes:
                if p.state is PipelineState.ERROR:
                    continue
                try:
                    loaded[id(p)] += p.baseline_rows(rows)
                except Exception as exc:
                    p.fail(f"baseline load into target failed for {table}: {exc}")
            before = seen[table]
            seen[table] = after = before + len(rows)
            if wants_progress and after // PROGRESS_EVERY != before // PROGRESS_EVERY:
                for p in pipes:
                    obs.on_baseline_row_loaded(p.id, table, after)

        def row_cb(table: TableIdentifier, row: Row) -> None:
            buf = pending.get(table)
            if buf is None:
                if table not in by_table:
                    return
                buf = pending[table] = []
            buf.append(row)
            if len(buf) >= BASELINE_CHUNK:
                pending[table] = []
                deliver(table, buf)

        tables = list(by_table)
        try:
            if isinstance(self.source, BatchBaselineSource):
                position = self.source.baseline_batches(tables, deliver)
            else:
                position = self.source.baseline(tables, row_cb)
            for table, rows in pending.items():
                if rows:
                    deliver(table, rows)
        except Exception as exc:
            msg = f"baseline failed: {exc}"
            obs.on_source_disconnected(self.id, msg)
            self.fail_all(f"source {self.id}: {msg}")
            raise _BaselineFailed() from exc
        for p in active:
            if p.state is PipelineState.ERROR:
                continue
            try:
                p.complete_baseline(position, loaded[id(p)], started)
            except Exception as exc:
                p.fail(f"baseline completion failed: {exc}")
                continue
            self._mark_streaming(p)
        self.current = position
        self.try_ack()
        return position


class _BaselineFailed(Exception):
    pass


_NO_RESTART = object()


def _call(fn: Callable[[], T], default: T) -> T:
    try:
        return fn()
    except Exception:
        return default


def _durable(target: Any) -> bool:
    if isinstance(target, DurablePositionTarget):
        return True
    try:
        return bool(target.is_durable())
    except Exception:
        return False
