"""The ``delta`` target: one Delta table per pipeline, equal to the source table.

Guarantees:

* **Baseline** = one version (a new table's first; a re-baseline overwrites in a new version,
  so history stays readable). Written at ``on_baseline_complete`` with the baseline's position.
* **Changes** are buffered and committed as one MERGE per flush (every ``flush_interval``, when
  ``flush_rows`` complete changes wait, on ``flush()`` and on close). A flush commits only whole
  transactions: changes of the newest position stay buffered until a later position (or a
  heartbeat) shows it is complete. Each commit records the position it holds.
* **Durability**: ``durable_position()`` is the position of the last commit, so the engine
  acknowledges nothing that is not in the Delta log. A crash loses only uncommitted changes,
  which the source redelivers; on restart the target skips redelivered changes at or before
  its last committed position (no change is applied twice).
* Commits run on a background flusher thread, so the stream is not held up by a MERGE; the
  engine's thread waits only when ``4 * flush_rows`` changes are waiting. A failed commit is
  retried at the next flush; the next engine call raises it after a failed retry.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import pyarrow as pa
from laredo.contracts import PipelineContext
from laredo.errors import TargetError
from laredo.types import (
    ChangeAction,
    ChangeEvent,
    ColumnDefinition,
    Position,
    Row,
    SchemaChangeAction,
    SchemaChangeResponse,
    TableIdentifier,
    TableSnapshotInfo,
)

from .changes import fold
from .columns import storage_columns, to_arrow
from .options import DeltaTargetOptions
from .writer import CommitStats, DeltaConfigError, DeltaWriter

logger = logging.getLogger(__name__)

__all__ = ["DeltaTarget"]

_BASELINE_CHUNK = 50_000
_NOTHING: Any = object()


def _describe(columns: Sequence[ColumnDefinition]) -> str:
    return "(" + ", ".join(f"{c.name} {c.type}" for c in columns) + ")"


def _compare(a: Any, b: Any) -> int:
    return int((a > b) - (a < b))


class DeltaTarget:
    """A Delta Lake mirror of one table (see the module docstring for the guarantees)."""

    counts_delivered_rows = True
    target_type = "delta"

    def __init__(self, options: DeltaTargetOptions) -> None:
        self.options = options
        self._source_id = ""
        self._to_string: Callable[[Position], str] = str
        self._from_string: Callable[[str], Position] = lambda s: s
        self._compare: Callable[[Position, Position], int] = _compare
        self._writer: DeltaWriter | None = None
        self._table: TableIdentifier | None = None

        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._commit_lock = threading.Lock()  # one Delta commit at a time
        self._events: list[ChangeEvent] = []
        self._complete = 0  # events[:_complete] belong to complete transactions
        self._complete_position: Any = _NOTHING
        self._complete_since = 0.0
        self._last_received: Any = _NOTHING
        self._current_position: Position = None
        self._committed: Position | None = None
        self._skip_until: Position | None = None
        self._error: BaseException | None = None
        self._baseline: list[pa.Table] = []
        self._baseline_rows: list[Row] = []
        self._stop = threading.Event()
        self._flusher: threading.Thread | None = None
        self._closed = False
        self._mismatch: str | None = None
        self.last_stats: CommitStats | None = None
        self.commits = 0

    @classmethod
    def from_options(cls, options: DeltaTargetOptions) -> DeltaTarget:
        return cls(options)

    def __repr__(self) -> str:
        return f"DeltaTarget({self.options!r})"

    # -- engine hooks ---------------------------------------------------------------------------
    def bind_pipeline(self, context: PipelineContext) -> None:
        self._source_id = context.source_id
        self._to_string = context.position_to_string
        self._from_string = context.position_from_string
        self._compare = context.compare_positions

    def is_durable(self) -> bool:
        return True

    def durable_position(self) -> Position | None:
        """The position of the last commit (None before the first)."""
        return self._committed

    def set_change_position(self, position: Position) -> None:
        with self._lock:
            self._current_position = position
            self._received(position)

    def _received(self, position: Position) -> None:
        """Called under the lock: a change (or heartbeat) of ``position`` arrived."""
        if self._last_received is _NOTHING or position != self._last_received:
            if self._last_received is not _NOTHING and len(self._events) > self._complete:
                self._complete = len(self._events)
                self._complete_position = self._last_received
                if not self._complete_since:
                    self._complete_since = time.monotonic()
                self._cond.notify_all()
            self._last_received = position

    # -- lifecycle ------------------------------------------------------------------------------
    def on_init(self, table: TableIdentifier, columns: Sequence[ColumnDefinition]) -> None:
        self._table = table
        writer = DeltaWriter(self.options, table, self._source_id)
        writer.set_columns(columns)
        desc = writer.open_existing()
        self._writer = writer
        last = writer.last_commit()
        if last is not None and last.position is not None:
            try:
                self._committed = self._from_string(last.position)
            except Exception as exc:
                raise TargetError(
                    f"delta target {table}: uri = {self.options.uri!r}: its last commit's "
                    f"position {last.position!r} is not a position of this source ({exc})"
                ) from None
            self._skip_until = self._committed
            logger.info(
                "delta target %s: resuming after version %d at position %s",
                table,
                last.version,
                last.position,
                extra={"table": str(table), "position": last.position},
            )
        self._mismatch = None
        if desc is not None and list(desc.columns) != list(columns):
            stored = {c.name: c for c in desc.columns}
            kept = storage_columns(desc.columns, columns)
            if kept is not None:
                writer.set_columns(desc.columns)
                added = [c for c in columns if c.name not in stored]
                if added or [c.name for c in kept] != [c.name for c in desc.columns]:
                    text = (last and last.position) or ""
                    writer.add_columns(added, kept, text, self._committed)
            else:
                # a baseline replaces the table (a new version); a resumed stream cannot
                self._mismatch = (
                    f"delta target {table}: uri = {self.options.uri!r} holds columns "
                    f"{_describe(desc.columns)} but the source has {_describe(columns)}; reset "
                    "the source so the table is baselined again (a new version), or use a new uri"
                )

    def on_close(self, table: TableIdentifier) -> None:
        """Commit what is complete and stop the flusher; what cannot be committed stays
        unacknowledged (the source redelivers it). Never raises for a failed commit."""
        if self._closed:
            return
        self._stop.set()
        with self._cond:
            self._cond.notify_all()
        if self._flusher is not None:
            self._flusher.join()
        try:
            self._commit(everything=True)
        except Exception as exc:
            logger.warning(
                "delta target %s: changes could not be committed at close and are not "
                "acknowledged (the source redelivers them): %s",
                table,
                exc,
                extra={"table": str(table)},
            )
        self._closed = True

    # -- baseline ---------------------------------------------------------------------------------
    def on_baseline_row(self, table: TableIdentifier, row: Row) -> None:
        self.on_baseline_rows(table, (row,))

    def on_baseline_rows(self, table: TableIdentifier, rows: Sequence[Row]) -> None:
        self._baseline_rows.extend(rows)
        if len(self._baseline_rows) >= _BASELINE_CHUNK:
            self._baseline_chunk()

    def _baseline_chunk(self) -> None:
        writer = self._need_writer()
        try:
            self._baseline.append(to_arrow(writer.codecs, self._baseline_rows))
        except ValueError as exc:
            raise TargetError(f"delta target {self._table}: baseline row: {exc}") from None
        self._baseline_rows = []

    def on_baseline_complete(self, table: TableIdentifier) -> None:
        """Write the baseline as one version at the position given by ``set_change_position``."""
        writer = self._need_writer()
        self._baseline_chunk()
        position = self._current_position
        text = "" if position is None else self._to_string(position)
        with self._commit_lock:
            with self._lock:
                self._events.clear()
                self._complete = 0
                self._complete_position = _NOTHING
                self._complete_since = 0.0
            stats = writer.write_baseline(self._baseline, text, position)
        self._baseline = []
        self._mismatch = None
        with self._lock:
            self._committed = position
            self._skip_until = None
            self.last_stats = stats
            self.commits += 1
        logger.info(
            "delta target %s: baseline of %d rows is version %d at %s",
            table,
            stats.rows,
            stats.version,
            text,
            extra={"table": str(table), "position": text},
        )

    # -- changes ----------------------------------------------------------------------------------
    def apply_changes(self, table: TableIdentifier, events: Sequence[ChangeEvent]) -> None:
        """Buffer ``events`` (BatchTarget fast path); a commit happens on the flusher thread."""
        if self._mismatch is not None:
            raise DeltaConfigError(self._mismatch)
        self._raise_pending()
        skip = self._skip_until
        if skip is not None:
            events = [e for e in events if self._compare(e.position, skip) > 0]
            if events:
                self._skip_until = None  # redelivery has passed the last commit
            if not events:
                return
        limit = 4 * self.options.flush_rows
        with self._cond:
            self._check_open()
            for e in events:
                self._received(e.position)
                self._events.append(e)
            if self._complete >= self.options.flush_rows:
                self._cond.notify_all()
            while len(self._events) >= limit and self._complete and self._error is None:
                self._cond.wait(1.0)  # back-pressure: the flusher is behind
            if self._flusher is None:
                self._start_flusher()

    def _one(self, action: ChangeAction, new: Row | None, old: Row | None) -> None:
        # a column absent from an UPDATE's row keeps its value (fold() sees it is missing)
        table = self._need_table()
        event = ChangeEvent(table, action, self._current_position, new_values=new, old_values=old)
        self.apply_changes(table, (event,))

    def on_insert(self, table: TableIdentifier, row: Row) -> None:
        self._one(ChangeAction.INSERT, row, None)

    def on_update(self, table: TableIdentifier, row: Row, identity: Row | None) -> None:
        self._one(ChangeAction.UPDATE, row, identity)

    def on_delete(self, table: TableIdentifier, identity: Row) -> None:
        self._one(ChangeAction.DELETE, None, identity)

    def on_truncate(self, table: TableIdentifier) -> None:
        if self._writer is None or self._writer.dt is None:
            return  # a re-baseline of a table never written: the baseline creates it
        self._one(ChangeAction.TRUNCATE, None, None)

    def flush(self) -> None:
        """Commit every buffered change now (engine stop, pipeline removal); raises if the
        commit fails."""
        self._commit(everything=True)

    # -- committing -------------------------------------------------------------------------------
    def _commit(self, everything: bool) -> None:
        """One commit of the complete changes. ``everything`` (flush, close) commits the newest
        position's changes too; not knowing that transaction is complete, the commit is marked
        partial: it does not move the durable position, and a restart does not skip it."""
        with self._commit_lock:
            with self._lock:
                n = self._complete
                position = self._complete_position
                partial = everything and len(self._events) > n
                if partial:
                    n = len(self._events)
                    position = self._last_received
                if not n:
                    return
                batch = self._events[:n]
                durable = self._complete_position if partial else position
            writer = self._need_writer()
            text = self._to_string(position)
            net = fold(batch, writer.keys, [c.name for c in writer.columns])
            stats = writer.merge(net, text, position, partial=partial)
            writer.maintain(text, position)
            with self._lock:
                del self._events[:n]
                self._complete = 0 if partial else self._complete - n
                if self._complete:  # more became complete while this commit ran
                    self._complete_since = time.monotonic()
                else:
                    self._complete_since = 0.0
                    self._complete_position = _NOTHING
                if durable is not _NOTHING:
                    self._committed = durable
                self._error = None
                if stats is not None:
                    self.last_stats = stats
                    self.commits += 1
                self._cond.notify_all()
        if stats is not None:
            logger.debug(
                "delta target %s: version %d holds %d change(s) up to %s (%.3f s)",
                self._table,
                stats.version,
                len(batch),
                text,
                stats.seconds,
                extra={"table": str(self._table), "position": text},
            )

    def _start_flusher(self) -> None:
        name = f"laredo-delta-flusher-{self._table}"
        self._flusher = threading.Thread(target=self._run_flusher, name=name, daemon=True)
        self._flusher.start()

    def _due(self) -> float:
        """Seconds until the next commit is due (0: now); called under the lock."""
        if not self._complete:
            return 3600.0
        if self._complete >= self.options.flush_rows:
            return 0.0
        interval = self.options.flush_interval
        if interval <= 0:
            return 3600.0
        return max(0.0, self._complete_since + interval - time.monotonic())

    def _run_flusher(self) -> None:
        backoff = 0.5
        while not self._stop.is_set():
            with self._cond:
                wait = self._due()
                if wait > 0:
                    self._cond.wait(min(wait, 1.0))
                    continue
            try:
                self._commit(everything=False)
                backoff = 0.5
            except Exception as exc:
                with self._cond:
                    self._error = exc
                    self._cond.notify_all()
                logger.warning(
                    "delta target %s: commit failed, changes stay buffered: %s",
                    self._table,
                    exc,
                    extra={"table": str(self._table)},
                )
                self._stop.wait(backoff)
                backoff = min(backoff * 2, 30.0)

    def _raise_pending(self) -> None:
        if self._error is None:
            return
        self._commit(everything=False)  # raises when it still fails

    def _check_open(self) -> None:
        if self._closed:
            raise TargetError(f"delta target {self._table}: closed")

    def _need_table(self) -> TableIdentifier:
        if self._table is None:
            raise TargetError("delta target: on_init was not called")
        return self._table

    def _need_writer(self) -> DeltaWriter:
        if self._writer is None:
            raise TargetError("delta target: on_init was not called")
        return self._writer

    def pending_changes(self) -> int:
        return len(self._events)

    # -- the rest of SyncTarget -----------------------------------------------------------------
    def on_schema_change(
        self,
        table: TableIdentifier,
        old_columns: Sequence[ColumnDefinition],
        new_columns: Sequence[ColumnDefinition],
    ) -> SchemaChangeResponse:
        """Added columns evolve the Delta schema (a commit); any other change re-baselines
        (a new version with the new contents)."""
        writer = self._need_writer()
        old = {c.name: c for c in writer.columns}
        kept = storage_columns(writer.columns, new_columns)
        compatible = kept is not None and [c.name for c in writer.columns if c.primary_key] == [
            c.name for c in new_columns if c.primary_key
        ]
        if kept is None or not compatible:
            writer.set_columns(new_columns)
            return SchemaChangeResponse(
                SchemaChangeAction.RE_BASELINE,
                "delta target: columns changed incompatibly; writing a new version",
            )
        added = [c for c in new_columns if c.name not in old]
        if added:
            self._commit(everything=False)
            with self._commit_lock:
                committed = self._committed
                text = "" if committed is None else self._to_string(committed)
                writer.add_columns(added, kept, text, committed)
        return SchemaChangeResponse()

    def export_snapshot(self) -> list[Row]:
        """The Delta table is its own snapshot; nothing to export."""
        return []

    def restore_snapshot(self, info: TableSnapshotInfo, rows: Iterable[Row]) -> None:
        """A restored snapshot is written like a baseline: a new version, at the snapshot's
        position (its text, ``info.position``) when it has one."""
        table = self._need_table()
        if info.position:
            try:
                self.set_change_position(self._from_string(info.position))
            except Exception as exc:
                raise TargetError(
                    f"delta target {table}: snapshot position {info.position!r} is not a "
                    f"position of this source ({exc})"
                ) from None
        self.on_baseline_rows(table, list(rows))
        self.on_baseline_complete(table)

    def supports_consistent_snapshot(self) -> bool:
        return False
