"""Play a stored snapshot through targets, at full speed, in "real time" or throttled.

    result = (
        SnapshotReplay(store)
        .target(Table("public", "users"), my_target)
        .speed(5000.0)                      # rows per second; or "full" / "realtime"
        .run("snap-1700000000")
    )

For each table of the snapshot that has a target (others are skipped), in snapshot order:
``on_init(table, columns)``, ``on_baseline_row(table, row)`` per row, then
``on_baseline_complete(table)``. A target mapped to a table the snapshot does not hold is an
error raised before any target is called.

Speeds:

* ``"full"`` (default): no pacing.
* a number: at most that many rows per second over the whole replay.
* ``"realtime"``: with ``timestamp_field=...``, each row is released when the wall-clock time
  since the table's replay started reaches the row's timestamp minus the table's first
  timestamp (rows are played in stored order; a row whose timestamp is missing, unparsable or
  earlier goes at once; gaps are capped by ``max_gap``). Without a timestamp field, rows are
  spread evenly over the snapshot's recorded duration: ``duration=`` if given, else the
  snapshot's ``user_meta["duration_seconds"]``; if neither exists, ``run`` raises
  ``ConfigError`` rather than guess.

``start(snapshot_id)`` runs the replay in a thread and returns a ``Future[ReplayResult]``;
``stop()`` makes it return early (the current table then gets no ``on_baseline_complete``);
``status()`` reports progress for the server's GetReplayStatus.

Every target call goes through the ``call`` given with :meth:`target` (default: called on the
replay's thread). A server replaying into a running engine passes
``lambda work: engine.call_in_pipeline(pipeline_id, work)``, so the pipeline's worker makes the
calls between its batches and the target keeps one writer (at full speed one call per chunk of
rows, when paced one per row).
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

from .errors import ConfigError, EngineStateError, SnapshotError
from .pipeline_ops import deliver_baseline
from .plugins import serializer as build_serializer
from .snapshots.jsonl import JsonlSerializer
from .types import TableIdentifier
from .units import parse_timedelta

logger = logging.getLogger(__name__)

_CHUNK = 1024
"""Rows handed to a target at once when replaying at full speed."""

__all__ = ["ReplayResult", "ReplayStatus", "SnapshotReplay", "TargetCall"]

T = TypeVar("T")

TargetCall = Callable[[Callable[[], Any]], Any]
"""Runs one target call (``call(work)`` returns ``work()``), e.g. on the pipeline's thread."""


def _direct(work: Callable[[], T]) -> T:
    return work()


@dataclass(frozen=True, slots=True)
class ReplayResult:
    snapshot_id: str
    tables: tuple[TableIdentifier, ...]
    total_rows: int
    duration: timedelta
    stopped: bool = False


@dataclass(frozen=True, slots=True)
class ReplayStatus:
    """``state`` is ``idle``, ``running``, ``completed``, ``stopped`` or ``error``."""

    state: str
    snapshot_id: str | None
    rows_replayed: int
    elapsed: timedelta
    current_table: TableIdentifier | None = None
    tables_completed: int = 0
    error: str | None = None


def _epoch_seconds(value: Any) -> float | None:
    if isinstance(value, datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=UTC)
        return float(value.timestamp())
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        try:
            return _epoch_seconds(datetime.fromisoformat(value))
        except ValueError:
            return None
    return None


class SnapshotReplay:
    """Replays one snapshot of ``store`` into the targets given with :meth:`target`."""

    def __init__(self, store: Any, serializer: Any = None) -> None:
        self.store = store
        self.serializer = serializer
        self._targets: dict[TableIdentifier, Any] = {}
        self._calls: dict[TableIdentifier, TargetCall] = {}
        self._rate: float | None = None
        self._realtime = False
        self._ts_field: str | None = None
        self._duration: timedelta | None = None
        self._max_gap = timedelta(seconds=60)
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._state = "idle"
        self._snapshot_id: str | None = None
        self._rows = 0
        self._t0 = 0.0
        self._t_end: float | None = None
        self._current: TableIdentifier | None = None
        self._completed = 0
        self._error: str | None = None
        self._thread: threading.Thread | None = None

    # -- configuration --------------------------------------------------------------------
    def target(
        self, table: TableIdentifier, target: Any, *, call: TargetCall | None = None
    ) -> SnapshotReplay:
        """Replay ``table`` into ``target``; each target call runs through ``call`` (see the
        module docstring)."""
        self._targets[table] = target
        self._calls[table] = call or _direct
        return self

    def speed(
        self,
        speed: str | float,
        *,
        timestamp_field: str | None = None,
        duration: Any = None,
        max_gap: Any = None,
    ) -> SnapshotReplay:
        """``"full"``, ``"realtime"`` or rows per second (see the module docstring)."""
        self._rate = None
        self._realtime = False
        if isinstance(speed, str) and speed.lower() in ("full", "full_speed", "fullspeed"):
            pass
        elif isinstance(speed, str) and speed.lower() in ("realtime", "real_time", "real-time"):
            self._realtime = True
        elif isinstance(speed, int | float) and not isinstance(speed, bool) and speed > 0:
            self._rate = float(speed)
        else:
            raise ConfigError(
                f"replay speed must be 'full', 'realtime' or a positive number of rows per "
                f"second, got {speed!r}"
            )
        self._ts_field = timestamp_field
        self._duration = None if duration is None else parse_timedelta(duration, "replay duration")
        if max_gap is not None:
            self._max_gap = parse_timedelta(max_gap, "replay max_gap")
        return self

    # -- running --------------------------------------------------------------------------
    def status(self) -> ReplayStatus:
        with self._lock:
            end = self._t_end if self._t_end is not None else time.monotonic()
            elapsed = timedelta(seconds=end - self._t0) if self._t0 else timedelta(0)
            return ReplayStatus(
                state=self._state,
                snapshot_id=self._snapshot_id,
                rows_replayed=self._rows,
                elapsed=elapsed,
                current_table=self._current,
                tables_completed=self._completed,
                error=self._error,
            )

    def stop(self) -> None:
        """Ask a running replay to return early; safe to call at any time."""
        self._stop.set()

    def start(self, snapshot_id: str) -> Future[ReplayResult]:
        """Run in a background thread; the future holds the result or the error."""
        with self._lock:
            if self._state == "running":
                raise EngineStateError(f"a replay of {self._snapshot_id!r} is already running")
            self._state = "running"
            self._snapshot_id = snapshot_id
        future: Future[ReplayResult] = Future()
        future.set_running_or_notify_cancel()

        def work() -> None:
            try:
                future.set_result(self.run(snapshot_id))
            except BaseException as exc:
                future.set_exception(exc)

        self._thread = threading.Thread(
            target=work, name=f"laredo-replay-{snapshot_id}", daemon=True
        )
        self._thread.start()
        return future

    def join(self, timeout: float | None = None) -> bool:
        """Wait for a started replay's thread; True when it has finished."""
        t = self._thread
        if t is None:
            return True
        t.join(timeout)
        return not t.is_alive()

    def _serializer_for(self, snapshot_id: str) -> Any:
        if self.serializer is not None:
            return self.serializer
        fmt = self.store.describe(snapshot_id).format
        if fmt == "jsonl":
            return JsonlSerializer()
        return build_serializer(fmt)

    def run(self, snapshot_id: str) -> ReplayResult:
        """Replay synchronously; returns when done or stopped."""
        if not self._targets:
            raise ConfigError("replay: no targets; call .target(table, target) first")
        with self._lock:
            self._state = "running"
            self._snapshot_id = snapshot_id
            self._rows = 0
            self._completed = 0
            self._error = None
            self._current = None
            self._t0 = time.monotonic()
            self._t_end = None
        self._stop.clear()
        try:
            result = self._run(snapshot_id)
        except BaseException as exc:
            with self._lock:
                self._state = "error"
                self._error = f"{type(exc).__name__}: {exc}"
                self._t_end = time.monotonic()
            raise
        with self._lock:
            self._state = "stopped" if result.stopped else "completed"
            self._t_end = time.monotonic()
        return result

    def _run(self, snapshot_id: str) -> ReplayResult:
        meta, iterators = self.store.load(snapshot_id, self._serializer_for(snapshot_id))
        infos = {t.table: t for t in meta.tables}
        missing = [str(t) for t in self._targets if t not in infos]
        if missing:
            raise SnapshotError(
                f"replay: snapshot {snapshot_id!r} has no table {', '.join(missing)} "
                f"(it holds {', '.join(str(t) for t in infos) or 'no tables'})"
            )
        rate = self._rate
        if self._realtime and self._ts_field is None:
            duration = self._duration
            if duration is None and "duration_seconds" in meta.user_meta:
                duration = parse_timedelta(
                    meta.user_meta["duration_seconds"], "snapshot user_meta duration_seconds"
                )
            if duration is None:
                raise ConfigError(
                    f"replay of {snapshot_id!r} at 'realtime' needs a timestamp_field, a "
                    "duration, or a snapshot that recorded user_meta['duration_seconds']"
                )
            total = sum(infos[t].row_count for t in self._targets)
            secs = duration.total_seconds()
            rate = None if secs <= 0 or total == 0 else total / secs
        t_start = time.monotonic()
        done_tables: list[TableIdentifier] = []
        stopped = False
        for info in meta.tables:
            rows = iterators[info.table]
            target = self._targets.get(info.table)
            if target is None:
                _close(rows)
                continue
            with self._lock:
                self._current = info.table
            call = self._calls[info.table]
            call(functools.partial(target.on_init, info.table, list(info.columns)))
            if self._replay_table(info.table, target, rows, rate, t_start):
                stopped = True
                _close(rows)
                break
            call(functools.partial(target.on_baseline_complete, info.table))
            done_tables.append(info.table)
            with self._lock:
                self._completed += 1
        if stopped:
            for rest in iterators.values():
                _close(rest)
        with self._lock:
            self._current = None
        duration_td = timedelta(seconds=time.monotonic() - t_start)
        logger.info(
            "replayed snapshot %s: %d rows into %d tables in %s%s",
            snapshot_id,
            self._rows,
            len(done_tables),
            duration_td,
            " (stopped)" if stopped else "",
        )
        return ReplayResult(snapshot_id, tuple(done_tables), self._rows, duration_td, stopped)

    def _replay_table(
        self,
        table: TableIdentifier,
        target: Any,
        rows: Iterator[Any],
        rate: float | None,
        t_start: float,
    ) -> bool:
        """Returns True when stopped."""
        call = self._calls[table]
        stop = self._stop
        ts_field = self._ts_field if self._realtime else None
        if rate is None and ts_field is None:
            chunk: list[Any] = []
            for row in rows:
                chunk.append(row)
                if len(chunk) == _CHUNK:
                    self._rows += call(functools.partial(deliver_baseline, target, table, chunk))
                    chunk = []
                    if stop.is_set():
                        return True
            if chunk:
                self._rows += call(functools.partial(deliver_baseline, target, table, chunk))
            return stop.is_set()
        on_row = target.on_baseline_row
        first_ts: float | None = None
        table_t0 = time.monotonic()
        max_gap = self._max_gap.total_seconds()
        last_offset = 0.0
        for row in rows:
            if rate is not None:
                due = t_start + self._rows / rate
            else:
                ts = _epoch_seconds(row.get(ts_field)) if ts_field else None
                if ts is None:
                    due = 0.0
                else:
                    if first_ts is None:
                        first_ts = ts
                    offset = ts - first_ts
                    offset = min(offset, last_offset + max_gap)
                    last_offset = max(last_offset, offset)
                    due = table_t0 + offset
            wait = due - time.monotonic()
            if wait > 0.0005 and stop.wait(wait):
                return True
            if stop.is_set():
                return True
            call(functools.partial(on_row, table, row))
            self._rows += 1
        return False


def _close(rows: Any) -> None:
    close = getattr(rows, "close", None)
    if close is not None:
        try:
            close()
        except Exception:  # pragma: no cover - closing a reader must not mask the result
            logger.debug("closing a snapshot reader failed", exc_info=True)
