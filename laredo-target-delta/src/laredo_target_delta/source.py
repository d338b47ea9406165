"""The ``delta`` archive source: a Delta table written by a ``delta`` target, as a source.

* The table named in the Delta metadata is the source's one table, with the columns recorded
  there (primary key included).
* **Positions are Delta versions** (integers; text ``"12"``): comparable, and a stream can start
  after any version still in the log.
* **Baseline** = the latest version, or with ``as_of`` the last version whose commit is at or
  before that *source* position (an LSN ``X/Y`` for a PostgreSQL-fed archive). The baseline's
  position is that version.
* **Stream** = the change data feed of every later version, one transaction per version in
  version order (deletes, then updates, then inserts: an overwrite's rows replace its deleted
  ones); a change row (see :mod:`.layout`) is delivered as its ``_laredo_op``; a version
  without row changes (small-file compaction, schema, a ``compaction`` of change rows) is a
  heartbeat. With ``follow`` the
  source polls for new versions every ``poll_interval``; without it, it stops reading at the
  version that was latest when the stream started and only sends heartbeats.
* Nothing is persisted: ``ack`` is remembered in memory, ``supports_resume()`` is false, so a
  restarted engine baselines again (from the archive, never from the database).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from typing import Any

from laredo.contracts import ChangeHandler, RowCallback
from laredo.errors import SourceError
from laredo.types import (
    ChangeAction,
    ChangeEvent,
    ColumnDefinition,
    LagInfo,
    OrderingGuarantee,
    Row,
    SourceConfig,
    SourceState,
    TableIdentifier,
    TableProblem,
    primary_key_columns,
)

from .archive import (
    COMPACTION,
    ArchiveError,
    commits,
    description_of,
    open_table,
    select_commit,
    table_reader,
)
from .columns import ColumnCodec, codecs_for, decode_description, rows_of
from .feed import feed
from .options import DeltaSourceOptions

logger = logging.getLogger(__name__)

__all__ = ["DeltaSource"]

_BATCH = 10_000


class DeltaSource:
    """A Delta archive as a ``SyncSource`` (see the module docstring)."""

    def __init__(self, options: DeltaSourceOptions) -> None:
        self.options = options
        self._dt: Any = None
        self._table: TableIdentifier | None = None
        self._columns: list[ColumnDefinition] = []
        self._codecs: list[ColumnCodec] = []
        self._stop = threading.Event()
        self._paused = threading.Event()
        self._acked: int | None = None
        self._state = SourceState.CONNECTING
        self._latest_seen = -1
        self._delivered = -1

    def __repr__(self) -> str:
        return f"DeltaSource({self.options!r})"

    def _error(self, exc: ArchiveError) -> SourceError:
        return SourceError(f"delta source: {exc}")

    # -- setup ------------------------------------------------------------------------------------
    def init(self, config: SourceConfig) -> dict[TableIdentifier, list[ColumnDefinition]]:
        try:
            self._dt = open_table(self.options.uri, self.options.storage_options)
            desc = description_of(self._dt, self.options.uri)
        except ArchiveError as exc:
            self._state = SourceState.ERROR
            raise self._error(exc) from None
        self._table = desc.table
        self._set_columns(list(desc.columns))
        self._state = SourceState.CONNECTED
        return {desc.table: list(self._columns)}

    def _set_columns(self, columns: list[ColumnDefinition]) -> None:
        self._columns = columns
        self._codecs = codecs_for(columns)

    def validate_tables(self, tables: Sequence[TableIdentifier]) -> list[TableProblem]:
        return [
            TableProblem(
                t,
                "TABLE_NOT_FOUND",
                f"the Delta table at uri = {self.options.uri!r} holds {self._table}, not {t}",
            )
            for t in tables
            if t != self._table
        ]

    # -- baseline ---------------------------------------------------------------------------------
    def _baseline_version(self) -> int:
        dt = self._need_table()
        dt.update_incremental()
        if self.options.as_of is None:
            return int(dt.version())
        try:
            return select_commit(commits(dt), self.options.as_of, self.options.uri).version
        except ArchiveError as exc:
            raise SourceError(f"delta source: as_of = {self.options.as_of!r}: {exc}") from None

    def baseline_batches(
        self,
        tables: Sequence[TableIdentifier],
        batch_callback: Callable[[TableIdentifier, list[Row]], None],
    ) -> int:
        """The rows of the baseline version, in lists; returns that version."""
        import pyarrow as pa  # noqa: PLC0415 - lazy: pyarrow, only when reading

        dt = self._need_table()
        version = self._baseline_version()
        dt.load_as_version(version)
        self._check_description()
        table = self._need_name()
        if table in tables:
            for batch in self._read(dt):
                for start in range(0, batch.num_rows, _BATCH):
                    part = pa.Table.from_batches([batch.slice(start, _BATCH)])
                    batch_callback(table, rows_of(part, self._codecs))
        self._delivered = version
        return version

    def _read(self, dt: Any) -> Any:
        try:
            return table_reader(dt, self.options.uri)
        except ArchiveError as exc:
            raise self._error(exc) from None

    def baseline(self, tables: Sequence[TableIdentifier], row_callback: RowCallback) -> int:
        def per_row(table: TableIdentifier, rows: list[Row]) -> None:
            for row in rows:
                row_callback(table, row)

        return self.baseline_batches(tables, per_row)

    def _check_description(self) -> None:
        desc = decode_description(self._need_table().metadata().description)
        if desc is not None and list(desc.columns) != self._columns:
            self._set_columns(list(desc.columns))

    # -- stream -----------------------------------------------------------------------------------
    def stream(self, from_position: Any, handler: ChangeHandler) -> None:
        """Deliver every version after ``from_position``, one transaction each, then follow."""
        self._stop.clear()
        dt = self._need_table()
        table = self._need_name()
        current = int(from_position)
        dt.update_incremental()
        stop_at = None if self.options.follow else int(dt.version())
        self._state = SourceState.STREAMING
        while not self._stop.is_set():
            if self._paused.is_set():
                self._stop.wait(0.1)
                continue
            latest = int(dt.version())
            self._latest_seen = latest
            if stop_at is not None:
                latest = min(latest, stop_at)
            if current < latest:
                kinds = self._kinds(current)
                while current < latest and not self._stop.is_set() and not self._paused.is_set():
                    current += 1
                    self._deliver(current, kinds.get(current), table, handler)
                continue
            handler.on_heartbeat(current)
            if self._stop.wait(self.options.poll_interval):
                break
            if stop_at is None:
                try:
                    dt.update_incremental()
                except Exception as exc:
                    logger.warning("delta source: polling %s failed: %s", self.options.uri, exc)
        self._state = SourceState.CONNECTED

    def _kinds(self, after: int) -> dict[int, str | None]:
        """``laredo.kind`` of every version after ``after`` (schema and baseline versions may
        change the columns)."""
        return {c.version: c.kind for c in commits(self._need_table()) if c.version > after}

    def _deliver(
        self, version: int, kind: str | None, table: TableIdentifier, handler: ChangeHandler
    ) -> None:
        dt = self._need_table()
        old_columns = self._columns
        if kind == COMPACTION:  # the same state, rewritten (see .layout): no change
            handler.on_heartbeat(version)
            self._delivered = version
            return
        if kind in ("schema", "baseline"):
            try:
                snapshot = open_table(self.options.uri, self.options.storage_options)
                snapshot.load_as_version(version)
            except ArchiveError as exc:
                raise SourceError(f"delta source: version {version}: {exc}") from None
            desc = decode_description(snapshot.metadata().description)
            if desc is not None and list(desc.columns) != old_columns:
                self._set_columns(list(desc.columns))
                handler.on_schema_change(table, old_columns, list(desc.columns), version)
        keys = primary_key_columns(self._columns)
        events: list[ChangeEvent] = []
        for f in feed(dt, version, version, self._codecs, keys):
            if f.action is ChangeAction.DELETE:
                events.append(ChangeEvent(table, f.action, version, f.at, old_values=f.row))
            else:
                events.append(ChangeEvent(table, f.action, version, f.at, new_values=f.row))
        if events:
            handler.on_changes(events, True)
        else:
            handler.on_heartbeat(version)
        self._delivered = version

    def stop_stream(self) -> None:
        self._stop.set()

    # -- positions --------------------------------------------------------------------------------
    def ack(self, position: Any) -> None:
        self._acked = int(position)

    def supports_resume(self) -> bool:
        return False

    def last_acked_position(self) -> int | None:
        return self._acked

    def compare_positions(self, a: Any, b: Any) -> int:
        x = -1 if a is None else int(a)
        y = -1 if b is None else int(b)
        return (x > y) - (x < y)

    def position_to_string(self, position: Any) -> str:
        return str(int(position))

    def position_from_string(self, text: str) -> int:
        text = text.strip()
        if not text.isdigit():
            raise ValueError(f"delta source: {text!r} is not a Delta version (an integer >= 0)")
        return int(text)

    # -- control ----------------------------------------------------------------------------------
    def pause(self) -> None:
        self._paused.set()
        self._state = SourceState.PAUSED

    def resume(self) -> None:
        self._paused.clear()
        self._state = SourceState.STREAMING

    def get_lag(self) -> LagInfo:
        behind = max(0, self._latest_seen - self._delivered)
        return LagInfo(lag_bytes=behind)

    def ordering_guarantee(self) -> OrderingGuarantee:
        return OrderingGuarantee.TOTAL_ORDER

    def state(self) -> SourceState:
        return self._state

    def close(self) -> None:
        self._stop.set()
        self._state = SourceState.CLOSED

    # -- helpers ----------------------------------------------------------------------------------
    def _need_table(self) -> Any:
        if self._dt is None:
            raise SourceError("delta source: init() was not called")
        return self._dt

    def _need_name(self) -> TableIdentifier:
        if self._table is None:
            raise SourceError("delta source: init() was not called")
        return self._table
