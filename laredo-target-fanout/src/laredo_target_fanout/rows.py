"""One table's current rows, by key: what the fan-out target serves and snapshots.

The key is the primary key of the column definitions, else an ``id`` column (this target's
documented choice, kept), else every column (:func:`laredo.types.row_key_columns`).
Stored rows are never mutated in place (an update stores a new dict), so a snapshot can share
them. The owner (``FanOutTarget``) calls every method with its lock held.

Each write returns the rows the journal records: the stored old row of an UPDATE or DELETE (the
change's identity when the row was not stored) and the new row as stored.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Mapping
from operator import itemgetter
from typing import Any

from laredo.errors import ConfigError, TargetError
from laredo.types import (
    ColumnDefinition,
    Row,
    TableIdentifier,
    primary_key_columns,
    row_key_columns,
)

__all__ = ["KeyedRows"]


def _not_initialised(row: Mapping[str, Any]) -> Any:
    raise TypeError("not initialised")


class KeyedRows:
    """Rows by key; see the module docstring."""

    def __init__(self) -> None:
        self.table: TableIdentifier | None = None
        self.columns: tuple[ColumnDefinition, ...] = ()
        self.key_fields: tuple[str, ...] = ()
        self._key_of: Callable[[Mapping[str, Any]], Any] = _not_initialised
        self._rows: dict[Any, Row] = {}

    def set_columns(self, table: TableIdentifier, columns: tuple[ColumnDefinition, ...]) -> None:
        """Adopt the table's columns; a changed key re-keys the stored rows."""
        key = tuple(primary_key_columns(columns))
        if not key:
            names = [c.name for c in columns]
            key = ("id",) if "id" in names else row_key_columns(columns)
        if not key:
            raise ConfigError(
                f"table {table}: the replication-fanout target got no column definitions, so "
                "no row key (the source must describe the table's columns; add a primary key "
                "to the table)"
            )
        changed = key != self.key_fields
        self.table = table
        self.columns = columns
        self.key_fields = key
        getter = itemgetter(*key)
        self._key_of = getter
        if changed and self._rows:
            self._rows = {getter(r): r for r in self._rows.values()}

    def key(self, row: Mapping[str, Any], what: str) -> Any:
        try:
            return self._key_of(row)
        except KeyError as exc:
            raise TargetError(
                f"table {self.table}: {what} values miss key column {exc.args[0]!r} (key: "
                f"{', '.join(self.key_fields)})"
            ) from None
        except TypeError:
            raise TargetError(
                f"replication-fanout target for {self.table}: on_init was not called"
            ) from None

    # ------------------------------------------------------------------ writes
    def put_baseline(self, row: Row) -> Row:
        r = dict(row)
        try:
            k = self._key_of(r)
        except KeyError as exc:
            raise TargetError(
                f"table {self.table}: baseline row misses key column {exc.args[0]!r}"
            ) from None
        self._rows[k] = r
        return r

    def insert(self, values: Row | None) -> Row:
        new = dict(values or {})
        self._rows[self.key(new, "INSERT")] = new
        return new

    def update(
        self, values: Row | None, identity: Row | None, unchanged: frozenset[str]
    ) -> tuple[Row | None, Row]:
        """Store the new row (a column absent from ``values`` keeps its stored value, and so
        does one listed in ``unchanged``); a changed key moves the row."""
        rows = self._rows
        new_in = values or {}
        k = self.key(new_in, "UPDATE")
        ok = k
        if identity:
            with contextlib.suppress(KeyError):
                ok = self._key_of(identity)
        old = rows.get(ok)
        if old is not None and (unchanged or not old.keys() <= new_in.keys()):
            new = {**old, **new_in}
            for col in unchanged:
                if col in old:
                    new[col] = old[col]
        else:
            new = dict(new_in)
        if ok != k:
            rows.pop(ok, None)
        rows[k] = new
        return (old if old is not None else identity), new

    def delete(self, identity: Row) -> Row:
        k = self.key(identity, "DELETE")
        old = self._rows.pop(k, None)
        return old if old is not None else dict(identity)

    def clear(self) -> None:
        self._rows = {}

    def replace(self, rows: Iterable[Row]) -> None:
        new: dict[Any, Row] = {}
        for r in rows:
            d = dict(r)
            new[self.key(d, "snapshot row")] = d
        self._rows = new

    # ------------------------------------------------------------------ reads
    def get(self, key: Any) -> Row | None:
        return self._rows.get(key)

    def values(self) -> tuple[Row, ...]:
        return tuple(self._rows.values())

    def __len__(self) -> int:
        return len(self._rows)
