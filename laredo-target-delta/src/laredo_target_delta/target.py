"""The ``delta`` target: one Delta table per pipeline, equal to the source table.

Guarantees:

* **Baseline** = one version (a new table's first; a re-baseline overwrites in a new version,
  so history stays readable). Written at ``on_baseline_complete`` with the baseline's position.
* **Changes** are buffered and committed as one MERGE per flush by
  :class:`laredo.base.BufferingTarget`: whole transactions only, within ``flush_interval`` of a
  transaction's end (the engine says when it ends; nothing has to follow it), at once when
  ``flush_rows`` complete changes wait, on ``flush()`` and on close. Each commit records the
  position it holds.
* **Durability**: ``durable_position()`` is the position of the last commit, so the engine
  acknowledges nothing that is not in the Delta log. A crash loses only uncommitted changes,
  which the source redelivers; on restart the target skips redelivered changes at or before
  its last committed position (no change is applied twice).
* **Chunked baselines** (``laredo.ProgressTarget``): the first progress record empties the
  table (a new version, the first of a new table) and is committed in it; chunk rows are
  committed like changes, each chunk's record in the commit that holds its last row
  (``laredo.progress``, see :mod:`.archive`), so after kill -9 a restart continues after the
  last chunk in the Delta log. ``on_baseline_complete`` of a chunked baseline writes nothing;
  the finished baseline's ``""`` record rides with the next commit.
* Commits run on the base's flusher thread, so the stream is not held up by a MERGE; the
  engine's thread waits only when ``4 * flush_rows`` changes are waiting. A failed commit is
  retried with backoff; the next engine call raises it after a failed retry.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterable, Sequence

import pyarrow as pa
from laredo.base import BufferingTarget, WriteBatch
from laredo.contracts import PipelineContext
from laredo.errors import TargetError
from laredo.types import (
    ChangeEvent,
    ColumnDefinition,
    Position,
    Row,
    SchemaChangeAction,
    SchemaChangeResponse,
    TableIdentifier,
    TableSnapshotInfo,
    no_primary_key_problem,
    primary_key_columns,
)

from .changes import fold
from .columns import storage_columns, to_arrow
from .options import DeltaTargetOptions
from .writer import CommitStats, DeltaConfigError, DeltaWriter

logger = logging.getLogger(__name__)

__all__ = ["DeltaTarget"]

_BASELINE_CHUNK = 50_000


def _describe(columns: Sequence[ColumnDefinition]) -> str:
    return "(" + ", ".join(f"{c.name} {c.type}" for c in columns) + ")"


class DeltaTarget(BufferingTarget):
    """A Delta Lake mirror of one table (see the module docstring for the guarantees)."""

    counts_delivered_rows = True
    target_type = "delta"
    target_label = "delta target"
    writes_delta_baseline = True
    """A capability flag: the Spark runner writes this target's baseline as a Delta version
    on the executors (``laredo spark baseline``), not as snapshot parts."""

    def __init__(self, options: DeltaTargetOptions) -> None:
        super().__init__(flush_rows=options.flush_rows, flush_interval=options.flush_interval)
        self.options = options
        self._source_id = ""
        self._writer: DeltaWriter | None = None
        self._table: TableIdentifier | None = None
        self._baseline: list[pa.Table] = []
        self._baseline_rows: list[Row] = []
        self._mismatch: str | None = None
        self.last_stats: CommitStats | None = None
        self.commits = 0
        self._chunked = False  # a chunked baseline runs (begun, or resumed: load_progress)

    @classmethod
    def from_options(cls, options: DeltaTargetOptions) -> DeltaTarget:
        return cls(options)

    def __repr__(self) -> str:
        return f"DeltaTarget({self.options!r})"

    # -- engine hooks ---------------------------------------------------------------------------
    def bind_pipeline(self, context: PipelineContext) -> None:
        super().bind_pipeline(context)
        self._source_id = context.source_id

    def _keyed(
        self, table: TableIdentifier, columns: Sequence[ColumnDefinition]
    ) -> list[ColumnDefinition]:
        """``columns`` with ``key_fields`` (when set) as the key rows are merged by; a
        ``DeltaConfigError`` naming the fix when there is no key at all."""
        fields = self.options.key_fields
        if not fields:
            if not primary_key_columns(list(columns)):
                raise DeltaConfigError(
                    no_primary_key_problem(table, "delta", "key_fields = [...]")
                    + " (with key_fields the table needs REPLICA IDENTITY FULL)"
                )
            return list(columns)
        names = [c.name for c in columns]
        missing = [f for f in fields if f not in names]
        if missing:
            raise DeltaConfigError(
                f"delta target {table}: key_fields {missing} are not columns of the table "
                f"(columns: {', '.join(names)})"
            )
        return [
            dataclasses.replace(
                c,
                primary_key=c.name in fields,
                primary_key_ordinal=fields.index(c.name) + 1 if c.name in fields else 0,
            )
            for c in columns
        ]

    # -- lifecycle ------------------------------------------------------------------------------
    def on_init(self, table: TableIdentifier, columns: Sequence[ColumnDefinition]) -> None:
        columns = self._keyed(table, columns)
        self._table = self.buffer_table = table
        writer = DeltaWriter(self.options, table, self._source_id)
        writer.set_columns(columns)
        desc = writer.open_existing()
        self._writer = writer
        last = writer.last_commit()
        committed: Position | None = None
        if last is not None and last.position is not None:
            try:
                committed = self.from_string(last.position)
            except Exception as exc:
                raise TargetError(
                    f"delta target {table}: uri = {self.options.uri!r}: its last commit's "
                    f"position {last.position!r} is not a position of this source ({exc})"
                ) from None
            self.resume_after(committed)
            logger.info(
                "delta target %s: resuming after version %d at position %s",
                table,
                last.version,
                last.position,
                extra={"table": str(table), "position": last.position},
            )
        self._chunked = False
        self.restore_progress(writer.last_progress())
        self._mismatch = None
        if desc is not None and list(desc.columns) != list(columns):
            stored = {c.name: c for c in desc.columns}
            kept = storage_columns(desc.columns, columns)
            if kept is not None:
                writer.set_columns(desc.columns)
                added = [c for c in columns if c.name not in stored]
                if added or [c.name for c in kept] != [c.name for c in desc.columns]:
                    text = (last and last.position) or ""
                    writer.add_columns(added, kept, text, committed)
            else:
                # a baseline replaces the table (a new version); a resumed stream cannot
                self._mismatch = (
                    f"delta target {table}: uri = {self.options.uri!r} holds columns "
                    f"{_describe(desc.columns)} but the source has {_describe(columns)}; reset "
                    "the source so the table is baselined again (a new version), or use a new uri"
                )

    # -- chunked baselines (laredo.ProgressTarget) ---------------------------------------------
    def save_progress(self, table: TableIdentifier, record: str | None) -> None:
        """Commit ``record`` with the chunk rows handed over before it (``None``: the baseline
        finished). The first record of a baseline empties the table in a commit holding it."""
        if record is None:
            if self._chunked or self.durable_progress() is not None:
                self.queue_progress(None)
            self._chunked = False
        elif not self._chunked:
            self._begin_chunks(record)
        else:
            self.queue_progress(record)

    def load_progress(self, table: TableIdentifier) -> str | None:
        """The last record in the Delta log (None: none). The engine asks when it resumes a
        chunked baseline, which then runs on (``on_baseline_complete`` writes nothing)."""
        record = self.durable_progress()
        self._chunked = record is not None
        return record

    def _begin_chunks(self, record: str) -> None:
        writer = self._need_writer()
        position = self.change_position
        if position is None:
            position = self.durable_position()
        text = "" if position is None else self.to_string(position)
        self._baseline_rows, self._baseline = [], []
        self._baseline_chunk()  # no rows: the table's schema
        with self._write_lock:
            self.committed_baseline(self.durable_position())  # drop what is buffered
            stats = writer.write_baseline(self._baseline, text, position, record)
            self.committed_baseline(position)
            self.restore_progress(record)
        self._baseline = []
        self._mismatch = None
        self._chunked = True
        self.last_stats = stats
        self.commits += 1
        logger.info(
            "delta target %s: a chunked baseline begins: version %d (empty) at %s",
            self._table,
            stats.version,
            text,
            extra={"table": str(self._table), "position": text},
        )

    def on_close(self, table: TableIdentifier) -> None:
        """Commit what is buffered and stop the flusher; what cannot be committed stays
        unacknowledged (the source redelivers it). Never raises for a failed commit."""
        self.close_buffer()

    # -- baseline ---------------------------------------------------------------------------------
    def load(self, table: TableIdentifier, rows: Sequence[Row]) -> None:
        """Baseline rows (the engine's door); written as one version at completion."""
        self._baseline_rows.extend(rows)
        if len(self._baseline_rows) >= _BASELINE_CHUNK:
            self._baseline_chunk()

    on_baseline_rows = load

    def _baseline_chunk(self) -> None:
        writer = self._need_writer()
        try:
            self._baseline.append(to_arrow(writer.codecs, self._baseline_rows))
        except ValueError as exc:
            raise TargetError(f"delta target {self._table}: baseline row: {exc}") from None
        self._baseline_rows = []

    def on_baseline_complete(self, table: TableIdentifier) -> None:
        """Write the baseline as one version at the position given by ``set_change_position``
        (nothing after a chunked baseline: its rows are committed as changes)."""
        if self._chunked:
            logger.info("delta target %s: chunked baseline complete", table)
            return
        writer = self._need_writer()
        self._baseline_chunk()
        position = self.change_position
        text = "" if position is None else self.to_string(position)
        with self._write_lock:
            self.committed_baseline(self.durable_position())  # drop what is buffered
            done = "" if self.durable_progress() is not None else None  # a stale record: void
            stats = writer.write_baseline(self._baseline, text, position, done)
            self.committed_baseline(position)
            self.restore_progress(None)
        self._baseline = []
        self._mismatch = None
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
    def apply(
        self, table: TableIdentifier, changes: Sequence[ChangeEvent], complete: bool = True
    ) -> None:
        """Buffer ``changes`` (the engine's door); commits happen on the flusher thread."""
        if self._mismatch is not None:
            raise DeltaConfigError(self._mismatch)
        super().apply(table, changes, complete)

    def on_truncate(self, table: TableIdentifier) -> None:
        if self._writer is None or self._writer.dt is None:
            return  # a re-baseline of a table never written: the baseline creates it
        super().on_truncate(table)

    def write(self, batch: WriteBatch) -> Position | None:
        """One MERGE of the batch's net changes. A ``partial`` batch (flush or close inside a
        transaction) is marked so: a restart does not skip past it."""
        writer = self._need_writer()
        text, position = batch.position_text, batch.position
        net = fold(batch.changes, writer.keys, [c.name for c in writer.columns])
        stats = writer.merge(net, text, position, partial=batch.partial, progress=batch.progress)
        writer.maintain(text, position, batch.progress)  # a compaction keeps the record too
        if stats is not None:
            self.last_stats = stats
            self.commits += 1
            logger.debug(
                "delta target %s: version %d holds %d change(s) up to %s (%.3f s)",
                self._table,
                stats.version,
                len(batch.changes),
                text,
                stats.seconds,
                extra={"table": str(self._table), "position": text},
            )
        return batch.committed

    def _need_writer(self) -> DeltaWriter:
        if self._writer is None:
            raise TargetError("delta target: on_init was not called")
        return self._writer

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
        new_columns = self._keyed(table, new_columns)
        old = {c.name: c for c in writer.columns}
        kept = storage_columns(writer.columns, new_columns)
        compatible = kept is not None and primary_key_columns(
            writer.columns
        ) == primary_key_columns(new_columns)
        if kept is None or not compatible:
            writer.set_columns(new_columns)
            return SchemaChangeResponse(
                SchemaChangeAction.RE_BASELINE,
                "delta target: columns changed incompatibly; writing a new version",
            )
        added = [c for c in new_columns if c.name not in old]
        if added:
            self._write_all(everything=False)
            with self._write_lock:
                committed = self.durable_position()
                text = "" if committed is None else self.to_string(committed)
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
                self.set_change_position(self.from_string(info.position))
            except Exception as exc:
                raise TargetError(
                    f"delta target {table}: snapshot position {info.position!r} is not a "
                    f"position of this source ({exc})"
                ) from None
        self.on_baseline_rows(table, list(rows))
        self.on_baseline_complete(table)

    def supports_consistent_snapshot(self) -> bool:
        return False
