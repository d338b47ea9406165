"""``PostgresSource``: a consistent baseline plus a logical-replication change stream.

Guarantees (see ARCHITECTURE §6):

* Baseline and stream line up exactly: the slot is created on the replication connection with an
  exported snapshot, the baseline reads under that snapshot, and streaming starts at the slot's
  consistent point (no gap, no duplicate).
* Every change event carries its transaction's commit end LSN (an ``int``); transactions are
  delivered only once committed, whole (in chunks of ``batch_size`` events), in commit order.
* PostgreSQL is told a position is flushed only when :meth:`PostgresSource.ack` was called with
  it: after a crash, a restart resumes strictly after the last acked position and redelivers
  everything after it. When nothing delivered is waiting for an ack, ``on_heartbeat`` passes the
  server's position so an idle slot advances.
* Values have the same Python types on baseline and stream (psycopg's loaders by type OID).
  Unchanged TOAST values are left out of ``new_values`` and named in ``unchanged_toast``.

This module is the ``SyncSource`` facade; the work is done by its parts: :mod:`.catalog`
(connections, discovery, validation), :mod:`.publication`, :mod:`.slot` (slot and lease),
:mod:`.baseline` and :mod:`.replication`, sharing one :class:`~.state.RunState`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from laredo.engine.backfill import ChunkRead
from laredo.types import (
    ColumnDefinition,
    LagInfo,
    OrderingGuarantee,
    Position,
    Row,
    SourceConfig,
    SourceState,
    TableIdentifier,
    ValidationError,
)

from .baseline import BaselineReader
from .catalog import Catalog, Connections, check_conninfo
from .chunks import ChunkReader
from .dsn import mask_dsn, mask_text
from .lsn import format_lsn, parse_lsn
from .options import PostgresSourceOptions
from .partitions import move_keys
from .publication import PublicationManager
from .replication import ReplicationStream
from .slot import Lease, SlotManager
from .state import RunState

logger = logging.getLogger(__name__)

__all__ = ["PostgresSource"]


def _coerce(position: Position) -> int:
    if isinstance(position, int) and not isinstance(position, bool):
        return position
    if isinstance(position, str):
        return parse_lsn(position)
    raise ValueError(f"not a PostgreSQL position (LSN): {position!r}")


def _options(
    options: PostgresSourceOptions | str | None, kwargs: dict[str, Any]
) -> PostgresSourceOptions:
    """The validated options of ``PostgresSource(...)`` (see its docstring)."""
    if isinstance(options, PostgresSourceOptions):
        if kwargs:
            raise TypeError(
                "PostgresSource() takes either a PostgresSourceOptions or keyword options, "
                f"not both (got {', '.join(sorted(kwargs))})"
            )
        return options
    if options is not None:
        if "connection" in kwargs:
            raise TypeError("PostgresSource() got multiple values for argument 'connection'")
        kwargs["connection"] = options
    if "connection" not in kwargs:
        raise TypeError("PostgresSource() missing 1 required argument: 'connection'")
    fields = PostgresSourceOptions.model_fields
    for name in kwargs:
        if name not in fields:
            raise TypeError(f"PostgresSource() got an unexpected keyword argument {name!r}")
    return PostgresSourceOptions.from_kwargs(**kwargs)


class PostgresSource:
    """PostgreSQL logical-replication source (plugin ``postgresql``).

    Build it from a validated :class:`PostgresSourceOptions` (``PostgresSource(options)``, what
    the plugin registry does) or from keyword options validated into one
    (``PostgresSource(connection=..., slot_mode=..., ...)``; the connection string may be the
    one positional argument). Options are validated once; every problem is listed in one
    ``ConfigError`` with passwords masked.

    ``connection``: a libpq connection string (URI or ``key=value``); the role needs LOGIN,
    REPLICATION and SELECT on the tables (and, to create the publication, CREATE on the
    database and ownership of the tables). ``slot_mode``: ``ephemeral`` (temporary slot, full
    baseline on every start; after a lost connection the stream raises ``ReBaselineRequired``
    and the next baseline re-connects and re-creates the slot) or ``stateful`` (named slot that
    survives restarts; resume from its confirmed position; reconnects with exponential
    backoff). ``publication`` and ``reconnect`` take mappings or :class:`PublicationOptions` /
    :class:`ReconnectOptions`.
    """

    def __init__(
        self, options: PostgresSourceOptions | str | None = None, /, **kwargs: Any
    ) -> None:
        opts = _options(options, kwargs)
        check_conninfo(opts.connection)
        self.options = opts
        self.slot_name = opts.slot_name
        self.publication_name = opts.publication_name
        self.stateful = opts.stateful

        self._run = RunState(opts.slot_name)
        self._conns = Connections(opts)
        self._catalog = Catalog(self._conns, opts)
        self._publication = PublicationManager(self._conns, opts)
        self._slots = SlotManager(self._conns, opts)
        self._lease = Lease(self._conns, opts, self._run.closed)
        self._baseline = BaselineReader(
            self._conns, self._catalog, self._slots, opts, self._run.closed
        )
        self._replication = ReplicationStream(
            self._conns,
            self._catalog,
            self._slots,
            opts,
            self._run,
            lease=self._lease if opts.stateful and opts.lease else None,
        )
        self._acked_in_process = False
        self._chunks = ChunkReader(self._conns, self._catalog)
        self._chunk_lock = threading.Lock()
        self._lag_cache: tuple[float, LagInfo] | None = None
        self._wal_retained: int | None = None

    def __repr__(self) -> str:
        return (
            f"PostgresSource(connection={mask_dsn(self.options.connection)!r}, slot_mode="
            f"{self.options.slot_mode!r}, slot_name={self.slot_name!r}, "
            f"publication={self.publication_name!r}, state={self._run.state})"
        )

    @property
    def reconnect_attempts_total(self) -> int:
        """Reconnect attempts since construction (for tests and metrics)."""
        return self._run.reconnect_attempts_total

    @property
    def holds_lease(self) -> bool:
        return self._lease.held

    def details(self) -> dict[str, Any]:
        """What ``laredo status`` shows of this source (``DescribedSource``): the slot, the
        server the stream reached, failovers seen, slots lost (with the last reason) and leases
        lost with their session (then taken again before streaming)."""
        run = self._run
        out: dict[str, Any] = {
            "slot": self.slot_name,
            "slot_mode": self.options.slot_mode,
            "slot_failover": self._slots.failover,
            "failovers_total": run.failovers_total,
            "slot_lost_total": run.slot_lost_total,
            "reconnect_attempts_total": run.reconnect_attempts_total,
        }
        if self.stateful and self.options.lease:
            out["lease_lost_total"] = self._lease.lost_total
        if run.server is not None:
            out["server"] = f"{run.server[2]} (timeline {run.server[1]})"
        if run.slot_lost_reason:
            out["slot_lost_reason"] = run.slot_lost_reason
        return out

    def counters(self) -> dict[str, int]:
        """Monotonic counters for metrics: ``failovers_total``, ``slot_lost_total``,
        ``reconnect_attempts_total``."""
        run = self._run
        return {
            "failovers_total": run.failovers_total,
            "slot_lost_total": run.slot_lost_total,
            "reconnect_attempts_total": run.reconnect_attempts_total,
        }

    # -- SyncSource: init, validation, baseline, stream ----------------------------------
    def init(self, config: SourceConfig) -> dict[TableIdentifier, list[ColumnDefinition]]:
        """Connect, manage the publication, look up the slot, and discover the tables' columns.

        Missing tables are left out of the result (``validate_tables`` reports them). In
        stateful mode with ``lease`` on, this blocks until this process holds the slot's lease.
        """
        run = self._run
        run.set_state(SourceState.CONNECTING)
        run.stop.clear()
        run.closed.clear()
        catalog = self._catalog
        try:
            catalog.tables = list(config.tables)
            self._conns.query()
            if self.stateful and self.options.lease:
                self._lease.acquire()
            if self.options.publication.create is not False:
                self._publication.ensure(catalog.existing(catalog.tables), catalog.tables)
            catalog.published_columns, catalog.row_filters = self._publication.published_info()
            catalog.generated = self._publication.generated_columns()
            catalog.columns = catalog.discover(catalog.tables)
            catalog.move_keys = move_keys(self._conns.query(), catalog.columns)
            self._slots.lookup()
            run.set_state(SourceState.CONNECTED)
            return {t: list(c) for t, c in catalog.columns.items()}
        except BaseException:
            run.set_state(SourceState.ERROR)
            raise

    def add_tables(
        self, tables: Sequence[TableIdentifier]
    ) -> dict[TableIdentifier, list[ColumnDefinition]]:
        """Hot reload: start delivering ``tables`` while the stream runs (``TableSetSource``).

        The tables are tracked by the stream first, then the publication gains them (when
        Laredo manages it: ``publication.create`` unset on a publication it created, or
        ``true``), so every change committed after that reaches the stream; the engine then
        baselines them from a temporary slot's exported snapshot. Returns their columns
        (missing tables are left out; ``validate_tables`` reports why)."""
        catalog = self._catalog
        new = [t for t in tables if t not in catalog.tables]
        if new:
            catalog.tables = [*catalog.tables, *new]
        self._publication.ensure(catalog.existing(catalog.tables), catalog.tables)
        catalog.published_columns, catalog.row_filters = self._publication.published_info()
        catalog.columns.update(catalog.discover(new))
        catalog.move_keys.update(move_keys(self._conns.query(), catalog.columns))
        return {t: list(catalog.columns[t]) for t in tables if t in catalog.columns}

    def describe_tables(
        self, tables: Sequence[TableIdentifier]
    ) -> dict[TableIdentifier, list[ColumnDefinition]]:
        """Hot reload check (``TableDescriber``): the columns of the existing tables among
        ``tables`` as the live catalog has them (a published column list applies), without
        changing the publication or what the stream delivers."""
        return self._catalog.discover(tables)

    def remove_tables(self, tables: Sequence[TableIdentifier]) -> None:
        """Hot reload: stop delivering ``tables``; a publication Laredo manages drops them."""
        catalog = self._catalog
        gone = set(tables)
        catalog.tables = [t for t in catalog.tables if t not in gone]
        for t in gone:
            catalog.columns.pop(t, None)
        self._publication.drop_tables([t for t in tables], catalog.tables)

    def validate_tables(self, tables: Sequence[TableIdentifier]) -> list[ValidationError]:
        """Problems that would stop the tables from syncing, each with a code:

        TABLE_NOT_FOUND, MISSING_SELECT_PRIVILEGE, MISSING_REPLICATION_PRIVILEGE,
        PUBLICATION_NOT_FOUND, TABLE_NOT_IN_PUBLICATION, REPLICA_IDENTITY, SLOT_INVALIDATED.
        """
        return self._catalog.validate_tables(tables)

    def baseline(
        self,
        tables: Sequence[TableIdentifier],
        row_callback: Callable[[TableIdentifier, Row], None],
    ) -> Position:
        """Read the tables under the slot's exported snapshot; returns the stream's start.
        Rows holding a value Python cannot hold come too, the value an
        :class:`~laredo.types.Unrepresentable` marker (``baseline_batches`` hands them over
        apart, as a batch's ``rejected``)."""

        def per_row(table: TableIdentifier, rows: Sequence[Row]) -> None:
            for r in rows:
                row_callback(table, r)
            for r in getattr(rows, "rejected", ()):
                row_callback(table, r)

        return self.baseline_batches(tables, per_row)

    def baseline_batches(
        self,
        tables: Sequence[TableIdentifier],
        batch_callback: Callable[[TableIdentifier, Sequence[Row]], None],
    ) -> Position:
        """Like :meth:`baseline`, delivering rows in chunks of up to ``batch_size``: each a
        :class:`~laredo.batches.RowBatch` (value tuples in column order; iterating or indexing
        it gives row dicts).

        When the stream is not running, a new slot is created with an exported snapshot (an
        existing stateful slot is dropped and re-created): the returned position is its
        consistent point, exactly where the stream continues. When the stream is running (a
        single-table reload), the baseline reads a fresh snapshot and returns
        ``pg_current_wal_lsn()`` taken inside it; changes streamed meanwhile overlap idempotently.
        """
        new_slot = not self._run.streaming.is_set()
        position = self._baseline.read(tables, batch_callback, new_slot=new_slot)
        if new_slot:
            self._run.restart_at(position)
        return position

    def baseline_chunk_rows(self) -> int | None:
        """``baseline.chunk_rows`` when ``baseline.mode = chunked`` (else ``None``)."""
        opts = self.options.baseline
        return opts.chunk_rows if opts.mode == "chunked" else None

    def chunk_key(self, table: TableIdentifier) -> list[str] | None:
        """The key chunked reads order by (``ChunkedSource``): the primary key, else the
        ``REPLICA IDENTITY USING INDEX`` index (``None``: neither)."""
        with self._chunk_lock:
            return self._chunks.key(table)

    def read_chunk(
        self,
        table: TableIdentifier,
        after: Sequence[Any] | None,
        limit: int,
        where: str | None = None,
    ) -> ChunkRead:
        """One key-range chunk (``ChunkedSource``, see :mod:`.chunks`); serialized."""
        with self._chunk_lock:
            return self._chunks.read(table, after, limit, where)

    def estimate_rows(self, table: TableIdentifier, where: str | None = None) -> int:
        """A backfill's row estimate (``EstimatesRows``): ``pg_class.reltuples``, ``-1`` when
        the table was never vacuumed or analyzed; with ``where`` (checked as
        :meth:`check_where` does) the planner's estimate of the rows matching it."""
        with self._chunk_lock:
            return self._chunks.estimate(table, where)

    def check_where(self, table: TableIdentifier, where: str) -> str:
        """A backfill's ``where`` condition, validated (see :meth:`.chunks.ChunkReader.check`)."""
        with self._chunk_lock:
            return self._chunks.check(table, where)

    def count_rows_at(self, table: TableIdentifier) -> tuple[int, Position]:
        """Row-count validation (``RowCounter``): ``count(*)`` of ``table`` exactly at a
        position of the stream (a temporary slot's exported snapshot), and that position."""
        return self._baseline.count_at(table)

    def stream(self, from_position: Position, handler: Any) -> None:
        """Stream changes after ``from_position`` into ``handler`` until ``stop_stream()``.

        Raises ``ReBaselineRequired`` when the changes after ``from_position`` are no longer
        available (ephemeral connection lost, invalidated or re-created slot) and ``SourceError``
        when stateful reconnects are exhausted.
        """
        start = _coerce(from_position) if from_position is not None else None
        self._replication.run(start, handler)

    # -- SyncSource: acknowledgements and positions -------------------------------------
    def ack(self, position: Position) -> None:
        """Everything at or before ``position`` is durable: PostgreSQL may confirm it."""
        if position is None:
            return
        lsn = _coerce(position)
        self._acked_in_process = True
        run = self._run
        if lsn <= run.acked:
            return
        run.acked = lsn
        times = run.unacked_times
        while times and times[0][0] <= lsn:
            times.popleft()
        if run.waiting:  # a busy reader sends the status on its own
            run.wake(b"a")

    def supports_resume(self) -> bool:
        return self.stateful

    def last_acked_position(self) -> Position | None:
        """The stateful slot's confirmed position (None: fresh slot, ephemeral, always_baseline)."""
        if not self.stateful:
            return None
        if self._acked_in_process and self._run.acked:
            return self._run.acked
        slots = self._slots
        if self.options.always_baseline or slots.fresh:
            return None
        if not slots.exists or not slots.confirmed:
            return None
        return slots.confirmed

    def compare_positions(self, a: Position, b: Position) -> int:
        x = -1 if a is None else _coerce(a)
        y = -1 if b is None else _coerce(b)
        return (x > y) - (x < y)

    def position_to_string(self, position: Position) -> str:
        return format_lsn(_coerce(position))

    def position_from_string(self, text: str) -> Position:
        return parse_lsn(text)

    # -- SyncSource: control ---------------------------------------------------------------
    def pause(self) -> None:
        self._run.paused = True

    def resume(self) -> None:
        self._run.paused = False

    def state(self) -> SourceState:
        state = self._run.state
        if self._run.paused and state in (SourceState.STREAMING, SourceState.CONNECTED):
            return SourceState.PAUSED
        return state

    def ordering_guarantee(self) -> OrderingGuarantee:
        return OrderingGuarantee.TOTAL_ORDER

    def wal_retained_bytes(self) -> int | None:
        """WAL the slot holds back on the server (``pg_current_wal_lsn() - restart_lsn``), read
        with the lag (cached for 1 s); None when there is no slot or it cannot be read."""
        self.get_lag()
        return self._wal_retained

    def get_lag(self) -> LagInfo:
        """Bytes between the server's WAL end and the slot's confirmed position; time since the
        commit of the oldest delivered change not yet acknowledged (cached for 1 s). The same
        query reads the WAL the slot retains (:meth:`wal_retained_bytes`)."""
        now = time.monotonic()
        cached = self._lag_cache
        if cached is not None and now - cached[0] < 1.0:
            return cached[1]
        run = self._run
        lag_bytes = max(0, run.server_wal_end - run.acked) if run.acked else 0
        try:
            row = self._conns.side(
                lambda conn: conn.execute(
                    "SELECT pg_current_wal_lsn() - confirmed_flush_lsn, "
                    "pg_current_wal_lsn() - restart_lsn FROM pg_replication_slots "
                    "WHERE slot_name = %s",
                    (self.slot_name,),
                ).fetchone()
            )
            if row is not None and row[0] is not None:
                lag_bytes = max(0, int(row[0]))
            self._wal_retained = (
                max(0, int(row[1])) if row is not None and row[1] is not None else None
            )
        except Exception as exc:
            logger.debug("lag query failed: %s", mask_text(str(exc)))
        lag_time: timedelta | None = None
        times = run.unacked_times
        if times:
            ts = times[0][1]
            if ts is not None:
                lag_time = max(timedelta(0), datetime.now(UTC) - ts)
        elif run.streaming.is_set():
            lag_time = timedelta(0)
        info = LagInfo(lag_bytes=lag_bytes, lag_time=lag_time)
        self._lag_cache = (now, info)
        return info

    def stop_stream(self) -> None:
        """Make a running ``stream()`` return promptly.

        The replication connection closes: a stateful source streams again from its slot; an
        ephemeral one lost its temporary slot and raises ``ReBaselineRequired`` on the next
        ``stream()``."""
        self._run.stop.set()
        self._run.wake(b"s")

    def _wait_stream_ended(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while self._run.streaming.is_set() and time.monotonic() < deadline:
            time.sleep(0.02)

    def reset_source(self, drop_publication: bool = False) -> None:
        """Drop the replication slot (and the publication if asked); the next start baselines.
        ``drop_publication`` drops only a publication Laredo manages (created by it, and not
        under ``publication.create = false``); for any other, ``ConfigError`` before anything
        is dropped or stopped."""
        if drop_publication:
            self._publication.check_droppable()
        self.stop_stream()
        self._wait_stream_ended(10)
        self._conns.close_repl()
        self._slots.drop()
        self._slots.fresh = False
        self._run.acked = self._run.delivered = 0
        self._acked_in_process = False
        if drop_publication:
            self._publication.drop()
        logger.info("reset source %s: slot dropped", self.slot_name)

    def close(self) -> None:
        """Close every connection (a temporary slot disappears with its connection)."""
        self._run.closed.set()
        self.stop_stream()
        self._wait_stream_ended(5)
        self._chunks.close()
        self._conns.close()
        self._lease.release()
        self._slots.exists = self._slots.exists and self.stateful
        self._run.set_state(SourceState.CLOSED)
