"""The ``http-sync`` target: baseline and changes as batched JSON POSTs, with exact durability."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import pydantic
from laredo.base import BufferingTarget, WriteBatch
from laredo.errors import ConfigError, TargetError
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

from ._client import HttpClient
from ._codec import ENCODING_NAME, encode_row, encode_value
from ._options import HttpSyncOptions, has_credentials

logger = logging.getLogger(__name__)

__version__ = "0.1.0"

_ACTION_NAMES = {a: a.name for a in ChangeAction}

# A buffered change: (encoded change, is it a TRUNCATE).
_Item = tuple[dict[str, Any], bool]


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


class HttpSyncTarget(BufferingTarget):
    target_label = "http-sync"
    write_on_caller = True

    """Sends a table's baseline and changes to an HTTP receiver as batched JSON POSTs.

    * Baseline: ``POST {base_url}/baseline/start`` (table, columns), ``/baseline/batch`` (rows,
      ``batch_size`` per request), ``/baseline/complete`` (row count). ``start`` is sent with the
      first row (or at completion of an empty table), so a resumed pipeline sends no baseline.
    * Changes: ``POST {base_url}/changes`` with ``{"table", "changes": [...]}``, at most
      ``batch_size`` per request, whole transactions only (:class:`laredo.base.BufferingTarget`):
      sent when ``batch_size`` complete changes wait or within ``flush_interval`` of a
      transaction's end, whether or not anything follows it, on a background flusher thread. A
      TRUNCATE is sent in a request of its own, after what came before it.
    * Retries: 5xx, 408/425/429, timeouts and connection errors are retried ``retry_count`` times
      with exponential backoff (``Retry-After`` honoured, capped by ``retry_after_max``). Any
      other 4xx raises a terminal ``HttpSyncError`` (a ``laredo.TargetError``) at once. Delivery
      is at least once: a retried request may already have been processed by the receiver.
    * Durability is exact: ``durable_position()`` is the end of the last whole transaction
      whose changes, and all before them, were in requests answered 2xx. So a transaction split
      across requests is never reported durable halfway. Buffered changes are not durable;
      ``on_close`` sends what it can, and what it cannot is redelivered by a stateful source
      after restart, because the engine never acknowledged it.
    * After a failed timed flush (retried with backoff), the next call from the engine first
      sends the buffer again and raises if that still fails; a call that raises leaves none of
      its changes buffered, so the engine may retry it without duplicates. A change whose value
      has no encoding fails the call that brings it (a ``TargetError`` naming the column).

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
        super().__init__(
            flush_rows=opts.batch_size,
            flush_interval=opts.flush_interval,
            max_write=opts.batch_size,
        )
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

        self._client = HttpClient(
            opts.base_url,
            timeout=opts.timeout,
            headers=request_headers,
            retry_count=opts.retry_count,
            backoff=opts.retry_backoff,
            backoff_max=opts.retry_backoff_max,
            retry_after_max=opts.retry_after_max,
            stop=self._stop,  # the base's: close stops retries
        )
        self._lock = threading.RLock()  # baseline requests and the table's columns

        self._table: TableIdentifier | None = None
        self._table_name = ""
        self._name_of: tuple[Any, str] = (None, "")
        self._columns: list[ColumnDefinition] = []
        self._baseline_buf: list[dict[str, Any]] = []
        self._baseline_started = False
        self._baseline_rows = 0

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
        super().bind_pipeline(context)
        if self._position_formatter is None:
            self._position_formatter = context.position_to_string

    def set_position_formatter(self, formatter: Callable[[Position], str] | None) -> None:
        """How positions are written in change bodies (the engine passes the source's
        ``position_to_string``); default ``str()``."""
        self._position_formatter = formatter

    def stats(self) -> dict[str, int]:
        return {
            "changes_sent": self.changes_sent,
            "batches_sent": self.batches_sent,
            "baseline_rows_sent": self.baseline_rows_sent,
            "pending_changes": self.pending_changes(),
            "requests": self._client.requests,
            "retries": self._client.retries,
        }

    # -- lifecycle -----------------------------------------------------------------------------
    def on_init(self, table: TableIdentifier, columns: Sequence[ColumnDefinition]) -> None:
        with self._lock:
            self._check_open()
            self._table = self.buffer_table = table
            self._table_name = str(table)
            self._columns = list(columns)
            self._baseline_buf = []
            self._baseline_started = False
            self._baseline_rows = 0

    def on_close(self, table: TableIdentifier) -> None:
        """Stop the flusher and send what is buffered (a close stops the client's retries).
        Changes that could not be sent stay non-durable (logged); never raises for them."""
        self.close_buffer()
        self._client.close()

    # -- baseline --------------------------------------------------------------------------------
    def load(self, table: TableIdentifier, rows: Sequence[Row]) -> None:
        """Baseline rows (the engine's door): sent ``batch_size`` per request."""
        self.on_baseline_rows(table, rows)

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
            self._table = self.buffer_table = table
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
    def flush(self) -> None:
        """Send everything buffered now (baseline rows and changes); raises if a request fails
        after its retries."""
        with self._lock:
            self._check_open()
            while self._baseline_buf:
                self._post_baseline_batch(self.batch_size)
        super().flush()

    def prepare(self, changes: Sequence[ChangeEvent]) -> list[_Item]:
        """Encode on the engine's thread: a value without an encoding fails the call."""
        return [(data, trunc) for _, data, trunc in self._encode_events(changes)]

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

    def write(self, batch: WriteBatch) -> Position | None:
        """POST the batch (at most ``batch_size`` changes), a TRUNCATE in a request of its
        own. A failed request raises; the base retries the batch (at least once)."""
        items: Sequence[_Item] = batch.changes
        run: list[dict[str, Any]] = []
        for data, is_truncate in items:
            if is_truncate:
                self._post_changes(run)
                self._post_changes([data])
                run = []
            else:
                run.append(data)
        self._post_changes(run)
        return batch.committed

    def _post_changes(self, changes: list[dict[str, Any]]) -> None:
        if not changes:
            return
        body = _dumps({"table": self._table_name, "changes": changes})
        lo, hi = changes[0]["position"], changes[-1]["position"]
        where = f"at position {lo}" if lo == hi else f"at positions {lo}..{hi}"
        self._client.post("/changes", body, f"{len(changes)} change(s) {where}")
        self.changes_sent += len(changes)
        self.batches_sent += 1

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
