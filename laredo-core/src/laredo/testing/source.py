"""``TestSource``: a programmable, in-memory ``SyncSource`` for tests, examples and benchmarks.

It keeps its own tables (the "database") and a change log with integer positions. ``baseline``
returns the current rows and the current position; ``stream(p)`` delivers every logged change
after ``p``, then waits for more. Changes are injected with ``insert``/``update``/``delete``/
``truncate`` (one transaction each) or ``transaction([...])``; errors and disconnects with
``fail_stream`` / ``disconnect``. Resume support is switchable.
"""

from __future__ import annotations

import bisect
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime
from typing import Any

from ..contracts import ChangeHandler, RowCallback
from ..errors import ReBaselineRequired, SourceError
from ..types import (
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
    row_key_columns,
)


def columns(
    *names: str, pk: Sequence[str] = ("id",), types: dict[str, str] | None = None
) -> list[ColumnDefinition]:
    """Column definitions for ``names``; ``pk`` names the primary key columns in order."""
    out = []
    for i, n in enumerate(names, 1):
        is_pk = n in pk
        out.append(
            ColumnDefinition(
                name=n,
                type=(types or {}).get(n, "text"),
                ordinal_position=i,
                nullable=not is_pk,
                primary_key=is_pk,
                primary_key_ordinal=list(pk).index(n) + 1 if is_pk else 0,
            )
        )
    return out


class TestSource:
    """In-memory source with programmable changes (positions are ints starting at 1)."""

    __test__ = False  # not a pytest test class

    def __init__(
        self,
        tables: dict[TableIdentifier | str, Sequence[ColumnDefinition]] | None = None,
        *,
        supports_resume: bool = False,
        batch_size: int = 1000,
        heartbeat_interval: float | None = None,
        ordering: OrderingGuarantee = OrderingGuarantee.TOTAL_ORDER,
    ) -> None:
        self._lock = threading.Condition()
        self._columns: dict[TableIdentifier, list[ColumnDefinition]] = {}
        self._rows: dict[TableIdentifier, dict[Any, Row]] = {}
        self._log: list[list[ChangeEvent]] = []  # transactions, in order
        self._log_end: list[int] = []  # position of each transaction's commit
        self._position = 0
        self._resume = supports_resume
        self._last_ack: int | None = None
        self._state = SourceState.CLOSED
        self._stream_error: BaseException | None = None
        self._stop = threading.Event()
        self._paused = False
        self.batch_size = batch_size
        self.heartbeat_interval = heartbeat_interval
        self._ordering = ordering
        self.acks: list[int] = []
        self.init_error: BaseException | None = None
        self.baseline_error: BaseException | None = None
        self.validation_errors: list[TableProblem] = []
        self.baseline_calls = 0
        self.table_set_calls: list[tuple[str, tuple[TableIdentifier, ...]]] = []
        self.stream_calls = 0
        for t, cols in (tables or {}).items():
            self.add_table(t, cols)

    # -- programming the source -----------------------------------------------------------------
    def add_table(
        self,
        table: TableIdentifier | str,
        cols: Sequence[ColumnDefinition],
        rows: Iterable[Row] = (),
    ) -> TableIdentifier:
        t = table if isinstance(table, TableIdentifier) else TableIdentifier.parse(table)
        with self._lock:
            self._columns[t] = list(cols)
            self._rows[t] = {}
            for r in rows:
                self._rows[t][self._key(t, r)] = dict(r)
        return t

    def _key(self, table: TableIdentifier, row: Row) -> Any:
        key = row_key_columns(self._columns[table])
        try:
            return tuple(row[c] for c in key)
        except KeyError as exc:
            raise ValueError(f"row for {table} misses key column {exc}") from None

    def rows(self, table: TableIdentifier | str) -> list[Row]:
        t = table if isinstance(table, TableIdentifier) else TableIdentifier.parse(table)
        with self._lock:
            return [dict(r) for r in self._rows[t].values()]

    @property
    def position(self) -> int:
        return self._position

    def _apply(self, ev: ChangeEvent) -> None:
        rows = self._rows[ev.table]
        if ev.action is ChangeAction.INSERT or ev.action is ChangeAction.UPDATE:
            assert ev.new_values is not None
            if ev.action is ChangeAction.UPDATE and ev.old_values:
                old_key = self._key(ev.table, ev.old_values)
                new_key = self._key(ev.table, ev.new_values)
                if old_key != new_key:
                    rows.pop(old_key, None)
            rows[self._key(ev.table, ev.new_values)] = dict(ev.new_values)
        elif ev.action is ChangeAction.DELETE:
            assert ev.old_values is not None
            rows.pop(self._key(ev.table, ev.old_values), None)
        elif ev.action is ChangeAction.TRUNCATE:
            rows.clear()

    def transaction(
        self, changes: Iterable[tuple[str, TableIdentifier | str, Row | None, Row | None]]
    ) -> int:
        """Commit ``(action, table, new_values, old_values)`` changes as one transaction;
        returns its position."""
        with self._lock:
            self._position += 1
            pos = self._position
            now = datetime.now(UTC)
            events = []
            for action, table, new, old in changes:
                t = table if isinstance(table, TableIdentifier) else TableIdentifier.parse(table)
                if t not in self._columns:
                    raise ValueError(f"unknown table {t}; add_table() it first")
                ev = ChangeEvent(
                    table=t,
                    action=ChangeAction[action.upper()] if isinstance(action, str) else action,
                    position=pos,
                    timestamp=now,
                    new_values=dict(new) if new is not None else None,
                    old_values=dict(old) if old is not None else None,
                    xid=pos,
                    commit_timestamp=now,
                )
                self._apply(ev)
                events.append(ev)
            self._log.append(events)
            self._log_end.append(pos)
            self._lock.notify_all()
            return pos

    def insert(self, table: TableIdentifier | str, row: Row) -> int:
        return self.transaction([("INSERT", table, row, None)])

    def update(self, table: TableIdentifier | str, row: Row, old: Row | None = None) -> int:
        return self.transaction([("UPDATE", table, row, old)])

    def delete(self, table: TableIdentifier | str, identity: Row) -> int:
        return self.transaction([("DELETE", table, None, identity)])

    def truncate(self, table: TableIdentifier | str) -> int:
        return self.transaction([("TRUNCATE", table, None, None)])

    def load_changes(
        self, events_by_txn: Iterable[list[tuple[str, TableIdentifier, Row | None, Row | None]]]
    ) -> int:
        """Bulk-append many transactions (benchmarks)."""
        last = 0
        for txn in events_by_txn:
            last = self.transaction(txn)
        return last

    def heartbeat(self) -> int:
        """Advance the position with a transaction that touches no table (like unrelated WAL)."""
        with self._lock:
            self._position += 1
            self._log.append([])
            self._log_end.append(self._position)
            self._lock.notify_all()
            return self._position

    def schema_change(
        self, table: TableIdentifier | str, new_columns: Sequence[ColumnDefinition]
    ) -> int:
        t = table if isinstance(table, TableIdentifier) else TableIdentifier.parse(table)
        with self._lock:
            self._position += 1
            old = self._columns[t]
            self._columns[t] = list(new_columns)
            marker = ChangeEvent(
                table=t,
                action=ChangeAction.SCHEMA_CHANGE,
                position=self._position,
                new_values={"columns": list(new_columns)},
                old_values={"columns": old},
            )
            self._log.append([marker])
            self._log_end.append(self._position)
            self._lock.notify_all()
            return self._position

    def fail_stream(self, error: BaseException) -> None:
        """The running (or next) ``stream`` call raises ``error``."""
        with self._lock:
            self._stream_error = error
            self._lock.notify_all()

    def disconnect(self) -> None:
        """Simulate a lost connection that needs a re-baseline."""
        self.fail_stream(ReBaselineRequired("test source disconnected"))

    def set_supports_resume(self, value: bool) -> None:
        self._resume = value

    # -- SyncSource -------------------------------------------------------------------------------
    def init(self, config: SourceConfig) -> dict[TableIdentifier, list[ColumnDefinition]]:
        self._state = SourceState.CONNECTING
        if self.init_error is not None:
            self._state = SourceState.ERROR
            raise self.init_error
        self._stop.clear()
        out = {}
        for t in config.tables:
            if t in self._columns:
                out[t] = list(self._columns[t])
        self._state = SourceState.CONNECTED
        return out

    def add_tables(
        self, tables: Sequence[TableIdentifier]
    ) -> dict[TableIdentifier, list[ColumnDefinition]]:
        """Hot reload: the columns of ``tables`` (the test source streams every table it has,
        so nothing else changes); recorded in ``table_set_calls``."""
        self.table_set_calls.append(("add", tuple(tables)))
        with self._lock:
            return {t: list(self._columns[t]) for t in tables if t in self._columns}

    def describe_tables(
        self, tables: Sequence[TableIdentifier]
    ) -> dict[TableIdentifier, list[ColumnDefinition]]:
        """Hot reload check: the columns of the tables it has (nothing recorded or changed)."""
        with self._lock:
            return {t: list(self._columns[t]) for t in tables if t in self._columns}

    def count_rows_at(self, table: TableIdentifier) -> tuple[int, int]:
        """Row-count validation: the table's rows and the position they are at."""
        with self._lock:
            return len(self._rows.get(table, {})), self._position

    def remove_tables(self, tables: Sequence[TableIdentifier]) -> None:
        self.table_set_calls.append(("remove", tuple(tables)))

    def validate_tables(self, tables: Sequence[TableIdentifier]) -> list[TableProblem]:
        out = list(self.validation_errors)
        for t in tables:
            if t not in self._columns:
                out.append(
                    TableProblem(
                        t, "TABLE_NOT_FOUND", f"table {t} does not exist in the test source"
                    )
                )
        return out

    def baseline(self, tables: Sequence[TableIdentifier], row_callback: RowCallback) -> int:
        self.baseline_calls += 1
        if self.baseline_error is not None:
            raise self.baseline_error
        with self._lock:
            pos = self._position
            snapshot = {
                t: [dict(r) for r in self._rows[t].values()] for t in tables if t in self._rows
            }
        for t, rows in snapshot.items():
            for r in rows:
                row_callback(t, r)
        return pos

    def stream(self, from_position: Any, handler: ChangeHandler) -> None:
        self.stream_calls += 1
        self._state = SourceState.STREAMING
        start = 0 if from_position is None else int(from_position)
        with self._lock:
            idx = _bisect_right(self._log_end, start)
        last_hb = 0.0
        while not self._stop.is_set():
            with self._lock:
                if self._stream_error is not None:
                    err, self._stream_error = self._stream_error, None
                    self._state = (
                        SourceState.ERROR
                        if not isinstance(err, ReBaselineRequired)
                        else SourceState.CONNECTED
                    )
                    raise err
                if idx >= len(self._log):
                    timeout = self.heartbeat_interval or 0.05
                    self._lock.wait(timeout)
                    pending: list[list[ChangeEvent]] = []
                else:
                    end = min(len(self._log), idx + max(1, self.batch_size))
                    pending = self._log[idx:end]
                    ends = self._log_end[idx:end]
                    idx = end
            if not pending:
                if self.heartbeat_interval is not None:
                    now = time.monotonic()
                    if now - last_hb >= self.heartbeat_interval:
                        last_hb = now
                        handler.on_heartbeat(self._position if idx >= len(self._log) else start)
                continue
            for txn, end_pos in zip(pending, ends, strict=True):
                if not txn:
                    handler.on_heartbeat(end_pos)
                    continue
                if txn[0].action is ChangeAction.SCHEMA_CHANGE:
                    ev = txn[0]
                    assert ev.new_values is not None and ev.old_values is not None
                    handler.on_schema_change(
                        ev.table, ev.old_values["columns"], ev.new_values["columns"], ev.position
                    )
                    continue
                handler.on_changes(txn)
        self._state = SourceState.CLOSED

    def stop_stream(self) -> None:
        self._stop.set()
        with self._lock:
            self._lock.notify_all()

    def ack(self, position: Any) -> None:
        with self._lock:
            p = int(position)
            if self._last_ack is not None and p < self._last_ack:
                raise SourceError(f"ack went backwards: {p} < {self._last_ack}")
            self._last_ack = p
            self.acks.append(p)

    def supports_resume(self) -> bool:
        return self._resume

    def last_acked_position(self) -> int | None:
        return self._last_ack if self._resume else None

    @property
    def acked(self) -> int | None:
        return self._last_ack

    def compare_positions(self, a: Any, b: Any) -> int:
        x, y = int(a), int(b)
        return int(x > y) - int(x < y)

    def position_to_string(self, position: Any) -> str:
        return str(int(position))

    def position_from_string(self, text: str) -> int:
        try:
            return int(text)
        except ValueError:
            raise ValueError(
                f"invalid test source position {text!r}: expected an integer"
            ) from None

    def pause(self) -> None:
        self._paused = True
        self._state = SourceState.PAUSED

    def resume(self) -> None:
        self._paused = False
        self._state = SourceState.STREAMING

    def get_lag(self) -> LagInfo:
        ack = self._last_ack or 0
        return LagInfo(lag_bytes=max(0, self._position - ack))

    def ordering_guarantee(self) -> OrderingGuarantee:
        return self._ordering

    def state(self) -> SourceState:
        return self._state

    def close(self) -> None:
        self.stop_stream()
        self._state = SourceState.CLOSED


def _bisect_right(seq: list[int], value: int) -> int:
    return bisect.bisect_right(seq, value)


def rows_of(n: int, make: Callable[[int], Row]) -> list[Row]:
    return [make(i) for i in range(n)]
