"""A reference receiver: applies the HTTP sync protocol's requests to an in-memory table.

It shows, in a few lines, what a receiver has to do, and the tests use it to check that what the
target sends rebuilds exactly the source's rows (values and Python types)::

    replica = Replica()
    # in your POST handler, for each request in arrival order:
    replica.apply(path, json.loads(body))
    replica.rows()  # the table, decoded
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

from laredo.serialization import decode_columns
from laredo.types import key_tuple, row_key, row_key_columns

from ._codec import decode_row

Row = dict[str, Any]


class Replica:
    """One table, keyed by its primary key (every column when the table has none: the rule of
    :func:`laredo.types.row_key_columns`, PostgreSQL's ``REPLICA IDENTITY FULL``).

    Rules: ``/baseline/start`` begins a new copy, ``/baseline/batch`` adds rows to it,
    ``/baseline/complete`` replaces the table with it. ``/changes``: INSERT upserts, UPDATE
    replaces the row (moving it when the identity's key differs) and keeps the stored value of
    every column absent from ``new`` (unchanged TOAST), DELETE removes by the identity's key
    (a missing row is ignored), TRUNCATE empties the table. Applying a change twice is harmless,
    as at-least-once delivery requires.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._rows: dict[tuple[Any, ...], Row] = {}
        self._pending: dict[tuple[Any, ...], Row] | None = None
        self.key_columns: list[str] = []
        self.columns: list[dict[str, Any]] = []
        self.baselines = 0
        self.changes_applied = 0

    def _key(self, row: Mapping[str, Any]) -> tuple[Any, ...]:
        return row_key(row, self.key_columns or sorted(row))

    def apply(self, path: str, body: Mapping[str, Any]) -> None:
        """Apply one request (``path`` may carry the base URL's prefix)."""
        with self._lock:
            if path.endswith("/baseline/start"):
                self.columns = list(body.get("columns", []))
                self.key_columns = list(body.get("primary_key") or []) or list(
                    row_key_columns(decode_columns(self.columns))
                )
                self._pending = {}
            elif path.endswith("/baseline/batch"):
                if self._pending is None:
                    raise ValueError("/baseline/batch before /baseline/start")
                for raw in body["rows"]:
                    row = decode_row(raw) or {}
                    self._pending[self._key(row)] = row
            elif path.endswith("/baseline/complete"):
                if self._pending is None:
                    raise ValueError("/baseline/complete before /baseline/start")
                self._rows, self._pending = self._pending, None
                self.baselines += 1
            elif path.endswith("/changes"):
                for change in body["changes"]:
                    self._change(change)
            else:
                raise ValueError(f"unknown HTTP sync path {path!r}")

    def _change(self, change: Mapping[str, Any]) -> None:
        action = change["action"]
        new = decode_row(change.get("new"))
        old = decode_row(change.get("old"))
        rows = self._rows
        if action == "INSERT" and new is not None:
            rows[self._key(new)] = new
        elif action == "UPDATE" and new is not None:
            key = self._key(new)
            old_key = self._key(old) if old else key
            stored = rows.pop(old_key, None) if old_key != key else rows.get(key)
            merged = dict(stored or {})
            merged.update(new)
            rows[key] = merged
        elif action == "DELETE" and old is not None:
            rows.pop(self._key(old), None)
        elif action == "TRUNCATE":
            rows.clear()
        else:
            raise ValueError(f"invalid change: {dict(change)!r}")
        self.changes_applied += 1

    def rows(self) -> list[Row]:
        """Copies of the current rows."""
        with self._lock:
            return [dict(r) for r in self._rows.values()]

    def get(self, *key: Any) -> Row | None:
        with self._lock:
            row = self._rows.get(key_tuple(key))
            return dict(row) if row is not None else None

    def __len__(self) -> int:
        return len(self._rows)
