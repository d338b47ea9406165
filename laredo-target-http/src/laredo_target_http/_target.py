"""The ``http-sync`` target: baseline and changes as batched JSON POSTs, with exact durability."""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import pydantic
from laredo.errors import BatchApplyError, ConfigError, TargetError
from laredo.plugins import format_validation_error
from laredo.types import (
    ChangeAction,
    ChangeEvent,
    ColumnDefinition,
    Position,
    Row,
    SchemaChangeResponse,
    TableIdentifier,
    TableSnapshotInfo,
    primary_key_columns,
)

from ._client import HttpClient, HttpSyncError
from ._codec import ENCODING_NAME, encode_row, encode_value
from ._options import HttpSyncOptions, has_credentials

logger = logging.getLogger(__name__)

__version__ = "0.1.0"

_ACTION_NAMES = {a: a.name for a in ChangeAction}

_NOTHING: Any = object()
"""Sentinel: no position seen yet (distinct from a ``None`` position)."""

# A buffered change: (position, encoded change, monotonic time it was buffered).
_Item = tuple[Any, dict[str, Any], float]


def _dumps(body: Any) -> bytes:
    return json.dumps(body, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode()


def _column(c: ColumnDefinition) -> dict[str, Any]:
    return {
        "name": c.name,
        "type": c.type,
        "type_oid": c.type_oid,
        "ordinal_position": c.ordinal_position,
        "nullable": c.nullable,
        "primary_key": c.primary_key,
        "primary_key_ordinal": c.primary_key_ordinal,
    }


class HttpSyncTarget:
    """Sends a table's baseline and changes to an HTTP receiver as batched JSON POSTs.

    * Baseline: ``POST {base_url}/baseline/start`` (table, columns), ``/baseline/batch`` (rows,
      ``batch_size`` per request), ``/baseline/complete`` (row count). ``start`` is sent with the
      first row (or at completion of an empty table), so a resumed pipeline sends no baseline.
    * Changes: ``POST {base_url}/changes`` with ``{"table", "changes": [...]}``, sent when
      ``batch_size`` changes are buffered (on the caller's thread) or when the oldest buffered
      change is ``flush_interval`` old (on a background flusher thread). A TRUNCATE first sends
      what is buffered, then a batch holding only the TRUNCATE.
    * Retries: 5xx, 408/425/429, timeouts and connection errors are retried ``retry_count`` times
      with exponential backoff (``Retry-After`` honoured, capped by ``retry_after_max``). Any
      other 4xx raises a terminal ``HttpSyncError`` (a ``laredo.TargetError``) at once. Delivery
      is at least once: a retried request may already have been processed by the receiver.
    * Durability is exact: ``durable_position()`` is the highest position whose changes, and all
      before them, were in requests answered 2xx, *and* that is known to be complete: a later
      position has been seen (a later change, or ``set_change_position`` with a new position).
      So a transaction split across batches is never reported durable halfway. Buffered changes
      are not durable; ``on_close`` sends what it can, and what it cannot is redelivered by a
      stateful source after restart, because the engine never acknowledged it.
    * After a failed timed flush, the next call from the engine (``apply_changes``, ``on_*``)
      first sends the buffer again and raises if that still fails. A call that raises leaves
      none of its own unsent changes buffered, so the engine may retry it without duplicates;
      when some of its changes were already delivered, ``apply_changes`` raises
      ``laredo.errors.BatchApplyError`` with their count, so the engine retries from the first
      undelivered change.

    Values are encoded with ``laredo_target_http.encode_value`` (``laredo-json/1``; see README).
    """

    def __init__(
        self,
        base_url: str | None = None,
        *,
        options: HttpSyncOptions | None = None,
        position_formatter: Callable[[Position], str] | None = None,
        **kwargs: Any,
    ) -> None:
        """``HttpSyncTarget(base_url, batch_size=100, flush_interval="200ms", ...)`` takes the
        options of :class:`HttpSyncOptions` as keywords; ``HttpSyncTarget(options=model)`` (or
        :meth:`from_options`) takes them validated. Invalid options raise ``ConfigError``
        listing every problem."""
        if options is None:
            if base_url is not None:
                kwargs["base_url"] = base_url
            try:
                options = HttpSyncOptions.model_validate(kwargs)
            except pydantic.ValidationError as exc:
                raise ConfigError(
                    [f"http-sync target: {p}" for p in format_validation_error(exc)]
                ) from None
        elif base_url is not None or kwargs:
            raise TypeError("HttpSyncTarget: give options= or keyword options, not both")
        opts = options
        if has_credentials(opts.base_url):
            raise ConfigError(
                "http-sync target: base_url: must not contain credentials (user:password@); "
                "put them in auth_header"
            )
        if opts.auth_header is not None and any(
            c in opts.auth_header.get_secret_value() for c in "\r\n\0"
        ):
            # Checked here, not in the model, so the secret never appears in an error message.
            raise ConfigError("http-sync target: auth_header: must not contain line breaks")
        self.options = opts
        self.base_url = opts.base_url
        self.batch_size = opts.batch_size
        self.flush_interval = opts.flush_interval
        self._position_formatter = position_formatter

        request_headers = {
            "Content-Type": "application/json",
            "User-Agent": f"laredo-target-http/{__version__}",
            "X-Laredo-Encoding": ENCODING_NAME,
        }
        request_headers.update(opts.headers)
        if opts.auth_header is not None:
            for key in [k for k in request_headers if k.lower() == "authorization"]:
                del request_headers[key]
            request_headers["Authorization"] = opts.auth_header.get_secret_value()

        self._stop = threading.Event()
        self._client = HttpClient(
            opts.base_url,
            timeout=opts.timeout,
            headers=request_headers,
            retry_count=opts.retry_count,
            backoff=opts.retry_backoff,
            backoff_max=opts.retry_backoff_max,
            retry_after_max=opts.retry_after_max,
            stop=self._stop,
        )
        self._lock = threading.RLock()
        self._cond = threading.Condition(self._lock)
        self._flusher: threading.Thread | None = None
        self._closed = False
        self._pending_error: BaseException | None = None

        self._table: TableIdentifier | None = None
        self._table_name = ""
        self._name_of: tuple[Any, str] = (None, "")
        self._columns: list[ColumnDefinition] = []
        self._baseline_buf: list[dict[str, Any]] = []
        self._baseline_started = False
        self._baseline_rows = 0

        self._buf: list[_Item] = []
        self._current_position: Position = None
        self._last_received: Any = _NOTHING
        self._delivered_last: Any = _NOTHING
        self._delivered_prev: Any = _NOTHING
        self._durable: Position | None = None

        self.changes_sent = 0
        self.batches_sent = 0
        self.baseline_rows_sent = 0

    @classmethod
    def from_options(cls, options: HttpSyncOptions) -> HttpSyncTarget:
        """A target from validated options (the plugin registry's factory)."""
        return cls(options=options)

    def __repr__(self) -> str:
        return (
            f"HttpSyncTarget(base_url={self.base_url!r}, batch_size={self.batch_size}, "
            f"flush_interval={self.flush_interval})"
        )

    # -- engine hooks: positions and durability ----------------------------------------------
    def bind_pipeline(self, context: Any) -> None:
        """Engine hook (``laredo.PipelineAware``): write positions with the source's format."""
        if self._position_formatter is None:
            self._position_formatter = context.position_to_string

    def set_position_formatter(self, formatter: Callable[[Position], str] | None) -> None:
        """How positions are written in change bodies (the engine passes the source's
        ``position_to_string``); default ``str()``."""
        self._position_formatter = formatter

    def set_change_position(self, position: Position) -> None:
        """The position of the changes that follow (per-change path). A position different from
        the previous one also tells the target the previous position is complete; calling it
        with a heartbeat position lets the last transaction become durable on an idle source."""
        with self._lock:
            self._current_position = position
            if self._last_received is _NOTHING or position != self._last_received:
                self._last_received = position
                self._update_durable()

    def durable_position(self) -> Position | None:
        """Highest position whose changes (and all earlier ones) got a 2xx; None before any.
        Never blocks on a request in flight."""
        return self._durable

    def is_durable(self) -> bool:
        return True

    def pending_changes(self) -> int:
        """Changes buffered and not yet acknowledged by the receiver."""
        return len(self._buf)

    def stats(self) -> dict[str, int]:
        return {
            "changes_sent": self.changes_sent,
            "batches_sent": self.batches_sent,
            "baseline_rows_sent": self.baseline_rows_sent,
            "pending_changes": len(self._buf),
            "requests": self._client.requests,
            "retries": self._client.retries,
        }

    def _update_durable(self) -> None:
        last = self._delivered_last
        if last is _NOTHING:
            self._durable = None
            return
        open_run = (self._buf and self._buf[0][0] == last) or self._last_received == last
        if open_run:
            prev = self._delivered_prev
            self._durable = None if prev is _NOTHING else prev
        else:
            self._durable = last

    # -- lifecycle -----------------------------------------------------------------------------
    def on_init(self, table: TableIdentifier, columns: Sequence[ColumnDefinition]) -> None:
        with self._lock:
            self._check_open()
            self._table = table
            self._table_name = str(table)
            self._columns = list(columns)
            self._baseline_buf = []
            self._baseline_started = False
            self._baseline_rows = 0

    def on_close(self, table: TableIdentifier) -> None:
        """Stop the flusher and send what is buffered, one attempt per request (no retries).
        Changes that could not be sent stay non-durable (logged); never raises for them."""
        if self._closed:
            return
        self._stop.set()
        with self._cond:
            self._cond.notify_all()
        flusher = self._flusher
        if flusher is not None:
            flusher.join()
        with self._lock:
            try:
                self._flush_changes_locked()
            except Exception as exc:
                logger.warning(
                    "http-sync %s: %d change(s) could not be delivered at close and are not "
                    "durable (a stateful source redelivers them after restart): %s",
                    self._table_name or table,
                    len(self._buf),
                    exc,
                    extra={"table": str(table)},
                )
            self._closed = True
            self._client.close()

    def _check_open(self) -> None:
        if self._closed:
            raise TargetError(f"http-sync target for {self._table_name or '?'} is closed")

    # -- baseline --------------------------------------------------------------------------------
    def on_baseline_row(self, table: TableIdentifier, row: Row) -> None:
        self.on_baseline_rows(table, (row,))

    def on_baseline_rows(self, table: TableIdentifier, rows: Sequence[Row]) -> None:
        encoded = [self._encode_row(table, r, "baseline row") for r in rows]
        with self._lock:
            self._check_open()
            self._ensure_table(table)
            if not self._baseline_started:
                self._post_baseline_start()
            buf = self._baseline_buf
            before = len(buf)
            buf.extend(encoded)
            sent_before = self.baseline_rows_sent
            try:
                while len(buf) >= self.batch_size:
                    self._post_baseline_batch(self.batch_size)
            except BaseException:
                mine_sent = max(0, self.baseline_rows_sent - sent_before - before)
                unsent = len(encoded) - mine_sent
                if unsent > 0:
                    del buf[len(buf) - unsent :]
                raise

    def on_baseline_complete(self, table: TableIdentifier) -> None:
        with self._lock:
            self._check_open()
            self._ensure_table(table)
            if not self._baseline_started:
                self._post_baseline_start()
            while self._baseline_buf:
                self._post_baseline_batch(self.batch_size)
            body = {"table": self._table_name, "row_count": self._baseline_rows}
            self._client.post("/baseline/complete", _dumps(body), "baseline complete")
            self._baseline_started = False

    def _ensure_table(self, table: TableIdentifier) -> None:
        if self._table is None:
            self._table = table
            self._table_name = str(table)

    def _post_baseline_start(self) -> None:
        body = {
            "table": self._table_name,
            "columns": [_column(c) for c in self._columns],
            "primary_key": primary_key_columns(self._columns),
            "encoding": ENCODING_NAME,
        }
        self._client.post("/baseline/start", _dumps(body), "baseline start")
        self._baseline_started = True
        self._baseline_rows = 0

    def _post_baseline_batch(self, n: int) -> None:
        rows = self._baseline_buf[:n]
        body = _dumps({"table": self._table_name, "rows": rows})
        self._client.post("/baseline/batch", body, f"baseline batch of {len(rows)} rows")
        del self._baseline_buf[: len(rows)]
        self._baseline_rows += len(rows)
        self.baseline_rows_sent += len(rows)

    # -- changes ---------------------------------------------------------------------------------
    def apply_changes(self, table: TableIdentifier, events: Sequence[ChangeEvent]) -> None:
        """Buffer ``events`` in order and send full batches now (BatchTarget fast path)."""
        self._raise_pending()
        self._accept(self._encode_events(events))

    def on_insert(self, table: TableIdentifier, row: Row) -> None:
        self._one(table, ChangeAction.INSERT, row, None)

    def on_update(self, table: TableIdentifier, row: Row, identity: Row | None) -> None:
        self._one(table, ChangeAction.UPDATE, row, identity)

    def on_delete(self, table: TableIdentifier, identity: Row) -> None:
        self._one(table, ChangeAction.DELETE, None, identity)

    def on_truncate(self, table: TableIdentifier) -> None:
        self._one(table, ChangeAction.TRUNCATE, None, None)

    def _one(
        self, table: TableIdentifier, action: ChangeAction, new: Row | None, old: Row | None
    ) -> None:
        self._raise_pending()
        event = ChangeEvent(table, action, self._current_position, new_values=new, old_values=old)
        self._accept(self._encode_events((event,)))

    def flush(self) -> None:
        """Send everything buffered now (baseline rows and changes); raises if a request fails
        after its retries. A pending error of the background flusher is superseded: the failed
        batch is simply sent again."""
        with self._lock:
            self._check_open()
            self._pending_error = None
            while self._baseline_buf:
                self._post_baseline_batch(self.batch_size)
            self._flush_changes_locked()
            self._cond.notify_all()

    def _raise_pending(self) -> None:
        """After a failed timed flush, send the buffer now, before accepting anything more:
        the error is raised if it still fails, so a receiver that keeps refusing fails every
        call (and the engine's error policy acts) instead of the buffer growing."""
        with self._lock:
            if self._pending_error is None:
                return
            self._pending_error = None
            try:
                self._flush_changes_locked()
            finally:
                self._cond.notify_all()

    def _encode_event(self, e: ChangeEvent) -> tuple[Any, dict[str, Any], bool]:
        """The wire form of one change. Raises ``TypeError`` for a value without an encoding
        (``_encode_events`` turns it into a ``TargetError`` naming the column)."""
        position = e.position
        action = e.action
        fmt = self._position_formatter
        table = e.table
        if table is not self._name_of[0]:
            self._name_of = (table, str(table))
        new = e.new_values
        old = e.old_values
        ts = e.timestamp
        data = {
            "action": _ACTION_NAMES[action],
            "table": self._name_of[1],
            "position": None if position is None else (fmt(position) if fmt else str(position)),
            "xid": e.xid or None,
            "timestamp": None if ts is None else ts.isoformat(),
            "new": None if new is None else encode_row(new),
            "old": None if old is None else encode_row(old),
            "unchanged": sorted(e.unchanged_toast) if e.unchanged_toast else [],
        }
        if e.commit_timestamp is not None:
            data["commit_timestamp"] = e.commit_timestamp.isoformat()
        return position, data, action is ChangeAction.TRUNCATE

    def _encode_events(
        self, events: Sequence[ChangeEvent]
    ) -> list[tuple[Any, dict[str, Any], bool]]:
        encode = self._encode_event
        try:
            return [encode(e) for e in events]
        except TypeError:
            for e in events:
                for row in (e.new_values, e.old_values):
                    if row is not None:
                        self._encode_row(e.table, row, e)
            raise

    def _encode_row(self, table: TableIdentifier, row: Row, what: Any) -> dict[str, Any]:
        try:
            return encode_row(row)
        except TypeError:
            for column, value in row.items():
                try:
                    encode_value(value)
                except TypeError as exc:
                    if isinstance(what, ChangeEvent):
                        what = f"{what.action.name} at position {what.position}"
                    raise TargetError(
                        f"http-sync {table}: {what}: column {column!r}: {exc}"
                    ) from exc
            raise

    def _accept(self, items: list[tuple[Any, dict[str, Any], bool]]) -> None:
        now = time.monotonic()
        with self._lock:
            self._check_open()
            buf = self._buf
            was_empty = not buf
            before = len(buf)
            sent_before = self.changes_sent
            appended = 0
            try:
                for position, data, is_truncate in items:
                    if self._last_received is _NOTHING or position != self._last_received:
                        self._last_received = position
                    if is_truncate:
                        self._flush_changes_locked()
                        buf.append((position, data, now))
                        appended += 1
                        self._send_changes(1)
                        continue
                    buf.append((position, data, now))
                    appended += 1
                    if len(buf) >= self.batch_size:
                        self._send_changes(self.batch_size)
            except BaseException as exc:
                mine_sent = max(0, self.changes_sent - sent_before - before)
                unsent = appended - mine_sent
                if unsent > 0:
                    del buf[len(buf) - unsent :]
                self._update_durable()
                if mine_sent > 0 and isinstance(exc, Exception):
                    # The engine retries change by change from the first undelivered one.
                    raise BatchApplyError(mine_sent, f"{exc}") from exc
                raise
            self._update_durable()
            if buf and self.flush_interval > 0:
                if self._flusher is None:
                    self._start_flusher()
                elif was_empty:
                    self._cond.notify_all()

    def _flush_changes_locked(self) -> None:
        while self._buf:
            self._send_changes(self.batch_size)

    def _send_changes(self, n: int) -> None:
        batch = self._buf[:n]
        body = _dumps({"table": self._table_name, "changes": [item[1] for item in batch]})
        lo, hi = batch[0][1]["position"], batch[-1][1]["position"]
        where = f"at position {lo}" if lo == hi else f"at positions {lo}..{hi}"
        self._client.post("/changes", body, f"{len(batch)} change(s) {where}")
        del self._buf[: len(batch)]
        last, prev = self._delivered_last, self._delivered_prev
        for item in batch:
            pos = item[0]
            if last is _NOTHING or pos != last:
                prev, last = last, pos
        self._delivered_last, self._delivered_prev = last, prev
        self.changes_sent += len(batch)
        self.batches_sent += 1
        self._update_durable()

    # -- background flusher ------------------------------------------------------------------------
    def _start_flusher(self) -> None:
        name = f"laredo-http-flusher-{self._table_name or id(self)}"
        self._flusher = threading.Thread(target=self._run_flusher, name=name, daemon=True)
        self._flusher.start()

    def _run_flusher(self) -> None:
        interval = self.flush_interval
        with self._cond:
            while not self._stop.is_set():
                if not self._buf or self._pending_error is not None:
                    self._cond.wait()
                    continue
                wait = self._buf[0][2] + interval - time.monotonic()
                if wait > 0:
                    self._cond.wait(wait)
                    continue
                try:
                    self._flush_changes_locked()
                except HttpSyncError as exc:
                    self._pending_error = exc
                except Exception as exc:
                    self._pending_error = TargetError(f"http-sync flush failed: {exc}")
                    self._pending_error.__cause__ = exc
                if self._pending_error is not None and not self._stop.is_set():
                    logger.warning(
                        "http-sync %s: timed flush failed, %d change(s) stay buffered: %s",
                        self._table_name,
                        len(self._buf),
                        self._pending_error,
                        extra={"table": self._table_name},
                    )

    # -- the rest of SyncTarget ------------------------------------------------------------
    def on_schema_change(
        self,
        table: TableIdentifier,
        old_columns: Sequence[ColumnDefinition],
        new_columns: Sequence[ColumnDefinition],
    ) -> SchemaChangeResponse:
        """Keep streaming: rows simply carry the new columns from now on."""
        with self._lock:
            self._columns = list(new_columns)
        return SchemaChangeResponse()

    def export_snapshot(self) -> list[Row]:
        """The receiver holds the state; there is nothing to export."""
        return []

    def restore_snapshot(self, info: TableSnapshotInfo, rows: Iterable[Row]) -> None:
        """No-op: the receiver keeps its own state."""

    def supports_consistent_snapshot(self) -> bool:
        return False
