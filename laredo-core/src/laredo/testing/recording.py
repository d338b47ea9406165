"""``RecordingTarget``: a target that records every call and keeps rows by primary key.

Programmable: ``durable`` (is_durable), ``fail_times``/``fail_always``/``fail_when`` to inject
errors. Thread-safe reads.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from ..base import RowTarget
from ..errors import TargetError
from ..types import (
    ColumnDefinition,
    Position,
    Row,
    SchemaChangeAction,
    SchemaChangeResponse,
    TableIdentifier,
    TableSnapshotInfo,
    key_tuple,
    row_key,
    row_key_columns,
)


class RecordingTarget(RowTarget):
    """Records ``(method, table, args...)`` calls; holds the resulting rows (a
    :class:`~laredo.base.RowTarget`: the engine's batches arrive change by change, each after
    ``set_change_position``)."""

    target_type = "recording"

    def __init__(
        self,
        durable: bool = True,
        key_fields: Sequence[str] | None = None,
        schema_response: SchemaChangeResponse | None = None,
    ) -> None:
        self.durable = durable
        self.key_fields = list(key_fields) if key_fields else None
        self.calls: list[tuple[Any, ...]] = []
        self._rows: dict[Any, Row] = {}
        self.columns: list[ColumnDefinition] = []
        self.position: Position = None
        self.positions: list[Position] = []
        self.baseline_complete = 0
        self.closed = False
        self.fail_times = 0
        self.fail_always = False
        self.fail_when: Callable[[str, Row | None], bool] | None = None
        self.schema_response = schema_response or SchemaChangeResponse(SchemaChangeAction.CONTINUE)
        self._lock = threading.Condition()

    # -- helpers ----------------------------------------------------------------------------------
    def _key(self, row: Row) -> Any:
        # the one rule (laredo.types.row_key_columns); before on_init, every field of the row
        fields = self.key_fields or row_key_columns(self.columns) or sorted(row)
        try:
            return row_key(row, fields)
        except KeyError as exc:
            raise TargetError(f"row misses key field {exc}: {row!r}") from None

    def _maybe_fail(self, method: str, row: Row | None) -> None:
        if self.fail_always:
            raise TargetError(f"injected failure in {method}")
        if self.fail_times > 0:
            self.fail_times -= 1
            raise TargetError(f"injected failure in {method}")
        if self.fail_when is not None and self.fail_when(method, row):
            raise TargetError(f"injected failure in {method} for {row!r}")

    def _record(self, *call: Any) -> None:
        self.calls.append(call)
        self._lock.notify_all()

    # -- SyncTarget ------------------------------------------------------------------
    def on_init(self, table: TableIdentifier, columns: Sequence[ColumnDefinition]) -> None:
        with self._lock:
            self.columns = list(columns)
            self._record("on_init", table, list(columns))

    def on_baseline_row(self, table: TableIdentifier, row: Row) -> None:
        with self._lock:
            self._maybe_fail("on_baseline_row", row)
            self._rows[self._key(row)] = dict(row)
            self._record("on_baseline_row", table, row)

    def on_baseline_complete(self, table: TableIdentifier) -> None:
        with self._lock:
            self.baseline_complete += 1
            self._record("on_baseline_complete", table)

    def set_change_position(self, position: Position) -> None:
        self.position = position
        self.positions.append(position)

    def on_insert(self, table: TableIdentifier, row: Row) -> None:
        with self._lock:
            self._maybe_fail("on_insert", row)
            self._rows[self._key(row)] = dict(row)
            self._record("on_insert", table, row, self.position)

    def on_update(self, table: TableIdentifier, row: Row, identity: Row | None) -> None:
        with self._lock:
            self._maybe_fail("on_update", row)
            key = self._key(row)
            if identity:
                try:
                    old_key = self._key(identity)
                except TargetError:
                    old_key = key
                if old_key != key:
                    self._rows.pop(old_key, None)
            merged = dict(self._rows.get(key, {}))
            merged.update(row)
            self._rows[key] = merged
            self._record("on_update", table, row, identity, self.position)

    def on_delete(self, table: TableIdentifier, identity: Row) -> None:
        with self._lock:
            self._maybe_fail("on_delete", identity)
            self._rows.pop(self._key(identity), None)
            self._record("on_delete", table, identity, self.position)

    def on_truncate(self, table: TableIdentifier) -> None:
        with self._lock:
            self._maybe_fail("on_truncate", None)
            self._rows.clear()
            self._record("on_truncate", table, self.position)

    def is_durable(self) -> bool:
        return self.durable

    def on_schema_change(
        self,
        table: TableIdentifier,
        old_columns: Sequence[ColumnDefinition],
        new_columns: Sequence[ColumnDefinition],
    ) -> SchemaChangeResponse:
        with self._lock:
            self._record("on_schema_change", table, list(old_columns), list(new_columns))
            if self.schema_response.action is SchemaChangeAction.CONTINUE:
                self.columns = list(new_columns)
            return self.schema_response

    def export_snapshot(self) -> list[Row]:
        with self._lock:
            return [dict(r) for r in self._rows.values()]

    def restore_snapshot(self, info: TableSnapshotInfo, rows: Iterable[Row]) -> None:
        with self._lock:
            if info.columns:
                self.columns = list(info.columns)
            self._rows = {}
            for r in rows:
                self._rows[self._key(r)] = dict(r)
            self._record("restore_snapshot", info.table, len(self._rows))

    def supports_consistent_snapshot(self) -> bool:
        return True

    def on_close(self, table: TableIdentifier) -> None:
        with self._lock:
            self.closed = True
            self._record("on_close", table)

    # -- reads ------------------------------------------------------------------
    def count(self) -> int:
        with self._lock:
            return len(self._rows)

    def items(self) -> Iterator[tuple[Any, Row]]:
        with self._lock:
            return iter([(k, dict(v)) for k, v in self._rows.items()])

    def rows(self) -> list[Row]:
        return self.export_snapshot()

    def get(self, *key: Any) -> Row | None:
        with self._lock:
            r = self._rows.get(key_tuple(key))
            return dict(r) if r is not None else None

    def methods(self) -> list[str]:
        with self._lock:
            return [c[0] for c in self.calls]

    def wait_for(self, predicate: Callable[[RecordingTarget], bool], timeout: float = 10.0) -> bool:
        """Wait until ``predicate(self)`` holds (checked after each call)."""
        with self._lock:
            return self._lock.wait_for(lambda: predicate(self), timeout)


class PerChangeTarget:
    """A :class:`RecordingTarget` reached through the deprecated per-change protocol: it has
    no ``apply``/``load``, so the engine goes through ``laredo.base.LegacyDoor`` (for tests of
    that path; subclasses may add ``apply_changes`` and the other deprecated batch methods).
    Every other attribute is the wrapped ``recording``'s."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.recording = RecordingTarget(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        if name in ("apply", "load", "recording"):
            raise AttributeError(name)
        return getattr(self.recording, name)
