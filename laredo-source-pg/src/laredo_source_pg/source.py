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
"""

from __future__ import annotations

import contextlib
import hashlib
import inspect
import logging
import os
import select
import socket
import struct
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import psycopg
import pydantic
from laredo.errors import ConfigError, ReBaselineRequired, SourceError, TransientError
from laredo.plugins import format_validation_error
from laredo.types import (
    ChangeAction,
    ChangeEvent,
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
from psycopg import pq, sql
from psycopg.adapt import Transformer
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from .dsn import mask_dsn, mask_text
from .lsn import format_lsn, parse_lsn
from .options import (
    PUBLISH_OPERATIONS,
    PostgresSourceOptions,
    PublicationOptions,
    PublicationTableOptions,
    ReconnectOptions,
)
from .pgoutput import PgOutputDecoder, SchemaItem, Transaction

logger = logging.getLogger(__name__)

__all__ = ["PostgresSource"]

_KEEPALIVE = struct.Struct(">Qqb")
_STATUS = struct.Struct(">cQQQqb")
_PG_EPOCH_US = 946_684_800_000_000
_MANAGED_COMMENT = "managed by laredo"
_STREAM_OPTIONS = "-c datestyle=ISO,YMD -c intervalstyle=postgres -c extra_float_digits=3"


def _now_pg_us() -> int:
    return int(time.time() * 1_000_000) - _PG_EPOCH_US


def _quote_literal(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def _quote_ident(value: str) -> str:
    return '"' + value.replace('"', '""') + '"'


def _table_sql(table: TableIdentifier) -> sql.Composable:
    return sql.SQL("{}.{}").format(sql.Identifier(table.schema), sql.Identifier(table.table))


_EVENT_FIELDS = (
    "table",
    "action",
    "position",
    "timestamp",
    "new_values",
    "old_values",
    "xid",
    "commit_timestamp",
    "unchanged_toast",
)


def _event_factory() -> Callable[..., ChangeEvent]:
    """``ChangeEvent(...)`` by position, about twice as fast as the frozen dataclass ``__init__``
    (slot descriptors set directly). Falls back to the constructor if the type changes shape."""
    import dataclasses

    try:
        names = tuple(f.name for f in dataclasses.fields(ChangeEvent))
        if names != _EVENT_FIELDS or not hasattr(ChangeEvent, "__slots__"):
            return ChangeEvent
        env: dict[str, Any] = {"new": object.__new__, "CE": ChangeEvent}
        body = ["def make(" + ", ".join(names) + "):", "    e = new(CE)"]
        for i, name in enumerate(names):
            env[f"s{i}"] = ChangeEvent.__dict__[name].__set__
            body.append(f"    s{i}(e, {name})")
        body.append("    return e")
        exec("\n".join(body), env)
        make: Callable[..., ChangeEvent] = env["make"]
        args: tuple[Any, ...] = (
            TableIdentifier("s", "t"),
            ChangeAction.INSERT,
            1,
            None,
            {"a": 1},
            None,
            2,
            None,
            frozenset(),
        )
        if make(*args) != ChangeEvent(*args):
            return ChangeEvent
        return make
    except Exception:
        return ChangeEvent


_make_event = _event_factory()
_NO_TOAST: frozenset[str] = frozenset()


class _StopStream(Exception):
    """Internal: ``stop_stream()`` was called."""


class PostgresSource:
    """PostgreSQL logical-replication source (plugin ``postgresql``).

    ``connection``: a libpq connection string (URI or ``key=value``); the role needs LOGIN,
    REPLICATION and SELECT on the tables (and CREATE on the database if the publication is
    created). ``slot_mode``: ``ephemeral`` (temporary slot, full baseline on every start; after a
    lost connection the stream raises ``ReBaselineRequired`` and the next baseline re-connects
    and re-creates the slot) or ``stateful`` (named slot that survives restarts; resume from its
    confirmed position; reconnects with exponential backoff). ``publication`` and ``reconnect``
    take mappings or :class:`PublicationOptions` / :class:`ReconnectOptions`.
    """

    def __init__(
        self,
        connection: str,
        *,
        slot_mode: str = "ephemeral",
        slot_name: str = "laredo_slot",
        publication: PublicationOptions | Mapping[str, Any] | None = None,
        reconnect: ReconnectOptions | Mapping[str, Any] | None = None,
        always_baseline: bool = False,
        lease: bool = True,
        lease_timeout: float | None = None,
        status_interval: float = 10.0,
        batch_size: int = 10_000,
        proto_version: int = 1,
        on_slot_invalidated: str = "rebaseline",
        connect_timeout: float = 10.0,
    ) -> None:
        try:
            opts = PostgresSourceOptions.model_validate(
                {
                    "connection": connection,
                    "slot_mode": slot_mode,
                    "slot_name": slot_name,
                    "publication": publication if publication is not None else {},
                    "reconnect": reconnect if reconnect is not None else {},
                    "always_baseline": always_baseline,
                    "lease": lease,
                    "lease_timeout": lease_timeout,
                    "status_interval": status_interval,
                    "batch_size": batch_size,
                    "proto_version": proto_version,
                    "on_slot_invalidated": on_slot_invalidated,
                    "connect_timeout": connect_timeout,
                }
            )
        except pydantic.ValidationError as exc:
            problems = [f"postgresql source: {p}" for p in format_validation_error(exc)]
            raise ConfigError([mask_text(p) for p in problems]) from None
        try:
            conninfo_to_dict(opts.connection)
        except Exception:
            raise ConfigError(
                f"postgresql source: connection: invalid connection string "
                f"{mask_dsn(opts.connection)!r}; use a URI (postgresql://user@host:5432/db) or "
                "key=value pairs (host=... dbname=...)"
            ) from None
        self.options = opts
        self._dsn = opts.connection
        self.slot_name = opts.slot_name
        self.publication_name = opts.publication.name or f"{opts.slot_name}_pub"
        self.stateful = opts.slot_mode == "stateful"

        self._state = SourceState.CLOSED
        self._state_lock = threading.RLock()
        self._query: psycopg.Connection[Any] | None = None
        self._repl: psycopg.Connection[Any] | None = None
        self._monitor: psycopg.Connection[Any] | None = None
        self._monitor_lock = threading.Lock()
        self._lease_conn: psycopg.Connection[Any] | None = None
        self._tables: list[TableIdentifier] = []
        self._columns: dict[TableIdentifier, list[ColumnDefinition]] = {}
        self._row_filters: dict[TableIdentifier, str] = {}
        self._published_columns: dict[TableIdentifier, set[str]] = {}
        self._session_started = False
        self._acked_in_process = False
        self._decoder: PgOutputDecoder | None = None
        self.reconnect_attempts_total = 0
        """Reconnect attempts since construction (for tests and metrics)."""
        self._tx: Any = None
        self._server_version = 0

        # slot bookkeeping
        self._slot_exists = False
        self._slot_fresh = False
        self._slot_confirmed: int | None = None
        self._consistent_point: int | None = None
        self._need_new_slot = False

        # stream bookkeeping (reader thread writes, others read)
        self._acked: int = 0
        self._ack_sent: int = -1
        self._delivered: int = 0
        self._received: int = 0
        self._server_wal_end: int = 0
        self._last_heartbeat: int = 0
        self._unacked_times: deque[tuple[int, datetime | None]] = deque()
        self._streaming = threading.Event()
        self._stop = threading.Event()
        self._closed = threading.Event()
        self._paused = False
        self._waiting = False
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._lag_cache: tuple[float, LagInfo] | None = None

    # -- representation ------------------------------------------------------------------
    def __repr__(self) -> str:
        return (
            f"PostgresSource(connection={mask_dsn(self._dsn)!r}, slot_mode="
            f"{self.options.slot_mode!r}, slot_name={self.slot_name!r}, "
            f"publication={self.publication_name!r}, state={self._state})"
        )

    # -- connections ---------------------------------------------------------------------
    def _connect(self, *, replication: bool = False) -> psycopg.Connection[Any]:
        params = conninfo_to_dict(self._dsn)
        kwargs: dict[str, Any] = {}
        if "application_name" not in params:
            kwargs["application_name"] = f"laredo:{self.slot_name}"
        if "connect_timeout" not in params:
            kwargs["connect_timeout"] = max(1, round(self.options.connect_timeout))
        if replication:
            kwargs["replication"] = "database"
            existing = str(params.get("options", "") or "")
            kwargs["options"] = f"{existing} {_STREAM_OPTIONS}".strip()
        try:
            conninfo = make_conninfo(self._dsn, **kwargs)
            return psycopg.connect(conninfo, autocommit=True)
        except psycopg.Error as exc:
            kind = "replication" if replication else "query"
            raise TransientError(
                f"postgresql source {self.slot_name!r}: {kind} connection to "
                f"{mask_dsn(self._dsn)!r} failed: {mask_text(str(exc)).strip()}"
            ) from None

    def _qconn(self) -> psycopg.Connection[Any]:
        conn = self._query
        if conn is None or conn.closed or conn.broken:
            if conn is not None:
                with contextlib.suppress(Exception):
                    conn.close()
            conn = self._query = self._connect()
            self._tx = Transformer(conn)
        return conn

    def _set_state(self, state: SourceState) -> None:
        with self._state_lock:
            if self._state != state:
                logger.debug("source %s: %s -> %s", self.slot_name, self._state, state)
            self._state = state

    # -- SyncSource: init ------------------------------------------------------------------
    def init(self, config: SourceConfig) -> dict[TableIdentifier, list[ColumnDefinition]]:
        """Connect, manage the publication, look up the slot, and discover the tables' columns.

        Missing tables are left out of the result (``validate_tables`` reports them). In
        stateful mode with ``lease`` on, this blocks until this process holds the slot's lease.
        """
        self._set_state(SourceState.CONNECTING)
        self._stop.clear()
        self._closed.clear()
        try:
            self._tables = list(config.tables)
            conn = self._qconn()
            self._server_version = conn.info.server_version
            if self.stateful and self.options.lease:
                self._acquire_lease()
            if self.options.publication.create:
                self._sync_publication(self._existing(self._tables))
            self._load_publication_info()
            self._columns = self._discover(self._tables)
            self._lookup_slot()
            self._set_state(SourceState.CONNECTED)
            return {t: list(c) for t, c in self._columns.items()}
        except BaseException:
            self._set_state(SourceState.ERROR)
            raise

    def _existing(self, tables: Sequence[TableIdentifier]) -> list[TableIdentifier]:
        conn = self._qconn()
        out = []
        for t in tables:
            row = conn.execute(
                "SELECT to_regclass(format('%%I.%%I', %s::text, %s::text)) IS NOT NULL",
                (t.schema, t.table),
            ).fetchone()
            if row and row[0]:
                out.append(t)
        return out

    def _discover(
        self, tables: Sequence[TableIdentifier], conn: psycopg.Connection[Any] | None = None
    ) -> dict[TableIdentifier, list[ColumnDefinition]]:
        conn = conn or self._qconn()
        out: dict[TableIdentifier, list[ColumnDefinition]] = {}
        query = """
            SELECT a.attname, t.typname, a.atttypid, a.attnum, NOT a.attnotnull,
                   pg_get_expr(d.adbin, d.adrelid),
                   coalesce((SELECT k.ord FROM pg_index i,
                                  unnest(i.indkey) WITH ORDINALITY AS k(attnum, ord)
                             WHERE i.indrelid = a.attrelid AND i.indisprimary
                               AND k.attnum = a.attnum), 0),
                   CASE WHEN a.atttypmod > 4 AND t.typname IN ('varchar', 'bpchar')
                        THEN a.atttypmod - 4 ELSE 0 END
            FROM pg_attribute a
            JOIN pg_type t ON t.oid = a.atttypid
            LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
            WHERE a.attrelid = to_regclass(format('%%I.%%I', %s::text, %s::text))
              AND a.attnum > 0 AND NOT a.attisdropped
            ORDER BY a.attnum
        """
        for t in tables:
            rows = conn.execute(query, (t.schema, t.table)).fetchall()
            if not rows:
                continue
            published = self._published_columns.get(t)
            cols = []
            for name, typname, oid, attnum, nullable, default, pk_ord, maxlen in rows:
                if published is not None and name not in published:
                    continue
                cols.append(
                    ColumnDefinition(
                        name=name,
                        type=typname,
                        ordinal_position=int(attnum),
                        nullable=bool(nullable),
                        primary_key=bool(pk_ord),
                        primary_key_ordinal=int(pk_ord),
                        type_oid=int(oid),
                        default_value=default,
                        max_length=int(maxlen),
                    )
                )
            out[t] = cols
        return out

    # -- publication ---------------------------------------------------------------------
    def _publication_exists(self) -> bool:
        row = (
            self._qconn()
            .execute("SELECT 1 FROM pg_publication WHERE pubname = %s", (self.publication_name,))
            .fetchone()
        )
        return row is not None

    def _load_publication_info(self) -> None:
        """Explicit column lists and row filters (PG15+), used by baseline and discovery."""
        self._published_columns = {}
        self._row_filters = {}
        if self._server_version < 150000 or not self._publication_exists():
            return
        for t, (cols, row_filter) in self._publication_tables_detail().items():
            if cols is not None:
                self._published_columns[t] = set(cols)
            if row_filter:
                self._row_filters[t] = row_filter

    def _table_spec(self, table: TableIdentifier) -> sql.Composable:
        opts = self.options.publication.tables.get(str(table))
        parts: list[sql.Composable] = [_table_sql(table)]
        if opts is not None and opts.columns:
            parts.append(
                sql.SQL(" ({})").format(sql.SQL(", ").join(sql.Identifier(c) for c in opts.columns))
            )
        if opts is not None and opts.row_filter:
            parts.append(sql.SQL(" WHERE ({})").format(sql.SQL(opts.row_filter)))
        return sql.Composed(parts)

    def _sync_publication(self, tables: Sequence[TableIdentifier]) -> None:
        """Create the publication, or bring an existing one in line with the configuration."""
        pub_opts = self.options.publication
        conn = self._qconn()
        pub = sql.Identifier(self.publication_name)
        publish = sql.Literal(", ".join(pub_opts.publish))
        for key in pub_opts.tables:
            t = TableIdentifier.parse(key)
            if t not in self._tables:
                raise ConfigError(
                    f"postgresql source {self.slot_name!r}: publication.tables names {key!r}, "
                    "which is not one of the configured tables "
                    f"({', '.join(map(str, self._tables))})"
                )
        row = conn.execute(
            "SELECT p.puballtables, p.pubinsert, p.pubupdate, p.pubdelete, p.pubtruncate, "
            "obj_description(p.oid, 'pg_publication') FROM pg_publication p WHERE pubname = %s",
            (self.publication_name,),
        ).fetchone()
        try:
            if row is None:
                if not tables:
                    conn.execute(
                        sql.SQL("CREATE PUBLICATION {} WITH (publish = {})").format(pub, publish)
                    )
                else:
                    conn.execute(
                        sql.SQL("CREATE PUBLICATION {} FOR TABLE {} WITH (publish = {})").format(
                            pub, sql.SQL(", ").join(self._table_spec(t) for t in tables), publish
                        )
                    )
                conn.execute(
                    sql.SQL("COMMENT ON PUBLICATION {} IS {}").format(
                        pub, sql.Literal(_MANAGED_COMMENT)
                    )
                )
                logger.info(
                    "created publication %s for %d table(s)", self.publication_name, len(tables)
                )
                return
            all_tables, ins, upd, dele, trunc, comment = row
            current_ops = tuple(
                op for op, on in zip(PUBLISH_OPERATIONS, (ins, upd, dele, trunc), strict=True) if on
            )
            if current_ops != tuple(pub_opts.publish):
                conn.execute(
                    sql.SQL("ALTER PUBLICATION {} SET (publish = {})").format(pub, publish)
                )
                logger.info(
                    "publication %s now publishes %s", self.publication_name, pub_opts.publish
                )
            if all_tables:
                return
            published = self._publication_tables_detail()
            managed = comment == _MANAGED_COMMENT or pub_opts.drop_unconfigured
            with conn.transaction():
                for t in tables:
                    want = self.options.publication.tables.get(str(t), PublicationTableOptions())
                    have = published.get(t)
                    if have is None:
                        conn.execute(
                            sql.SQL("ALTER PUBLICATION {} ADD TABLE {}").format(
                                pub, self._table_spec(t)
                            )
                        )
                        logger.info("added %s to publication %s", t, self.publication_name)
                    elif self._server_version >= 150000 and not self._same_spec(t, want, have):
                        conn.execute(
                            sql.SQL("ALTER PUBLICATION {} DROP TABLE {}").format(pub, _table_sql(t))
                        )
                        conn.execute(
                            sql.SQL("ALTER PUBLICATION {} ADD TABLE {}").format(
                                pub, self._table_spec(t)
                            )
                        )
                        logger.info("updated %s in publication %s", t, self.publication_name)
                if managed:
                    for t in published:
                        if t not in self._tables:
                            conn.execute(
                                sql.SQL("ALTER PUBLICATION {} DROP TABLE {}").format(
                                    pub, _table_sql(t)
                                )
                            )
                            logger.info("dropped %s from publication %s", t, self.publication_name)
        except psycopg.Error as exc:
            raise SourceError(
                f"postgresql source {self.slot_name!r}: could not create or update publication "
                f"{self.publication_name!r}: {mask_text(str(exc)).strip()}"
            ) from None

    def _publication_tables_detail(
        self,
    ) -> dict[TableIdentifier, tuple[tuple[str, ...] | None, str | None]]:
        """Published tables with (explicit column list or None, row filter or None)."""
        conn = self._qconn()
        if self._server_version < 150000:
            rows = conn.execute(
                "SELECT schemaname, tablename FROM pg_publication_tables WHERE pubname = %s",
                (self.publication_name,),
            ).fetchall()
            return {TableIdentifier(s, t): (None, None) for s, t in rows}
        rows = conn.execute(
            """
            SELECT n.nspname, c.relname,
                   (SELECT array_agg(a.attname ORDER BY a.attnum) FROM pg_attribute a
                     WHERE a.attrelid = pr.prrelid AND a.attnum = ANY(pr.prattrs)),
                   pg_get_expr(pr.prqual, pr.prrelid)
            FROM pg_publication p
            JOIN pg_publication_rel pr ON pr.prpubid = p.oid
            JOIN pg_class c ON c.oid = pr.prrelid
            JOIN pg_namespace n ON n.oid = c.relnamespace
            WHERE p.pubname = %s
            """,
            (self.publication_name,),
        ).fetchall()
        return {
            TableIdentifier(s, t): (tuple(cols) if cols else None, qual)
            for s, t, cols, qual in rows
        }

    def _same_spec(
        self,
        table: TableIdentifier,
        want: PublicationTableOptions,
        have: tuple[tuple[str, ...] | None, str | None],
    ) -> bool:
        have_cols, have_filter = have
        if (set(want.columns) if want.columns else None) != (set(have_cols) if have_cols else None):
            return False
        if bool(want.row_filter) != bool(have_filter):
            return False
        if want.row_filter and have_filter:
            return self._deparse_filter(table, want.row_filter) == have_filter
        return True

    def _deparse_filter(self, table: TableIdentifier, expr: str) -> str | None:
        """PostgreSQL's own text for a row filter: a publication created and rolled back."""
        conn = self._qconn()
        name = f"laredo_probe_{os.getpid()}"
        try:
            with conn.transaction(force_rollback=True):
                conn.execute(
                    sql.SQL("CREATE PUBLICATION {} FOR TABLE {} WHERE ({})").format(
                        sql.Identifier(name),
                        _table_sql(table),
                        sql.SQL(expr),
                    )
                )
                row = conn.execute(
                    "SELECT pg_get_expr(pr.prqual, pr.prrelid) FROM pg_publication_rel pr "
                    "JOIN pg_publication p ON p.oid = pr.prpubid WHERE p.pubname = %s",
                    (name,),
                ).fetchone()
        except psycopg.Error:
            return None
        return row[0] if row else None

    # -- slot ------------------------------------------------------------------------------
    def _slot_row(self, conn: psycopg.Connection[Any] | None = None) -> tuple[Any, ...] | None:
        cols = (
            "slot_type, temporary, active, confirmed_flush_lsn::text, wal_status, database, plugin"
        )
        row = (
            (conn or self._qconn())
            .execute(
                f"SELECT {cols} FROM pg_replication_slots WHERE slot_name = %s",
                (self.slot_name,),
            )
            .fetchone()
        )
        return tuple(row) if row else None

    def _lookup_slot(self) -> None:
        if not self.stateful:
            return
        row = self._slot_row()
        if row is None:
            self._slot_exists = False
            self._slot_confirmed = None
            return
        slot_type, _temporary, _active, confirmed, wal_status, database, plugin = row
        dbname = self._qconn().info.dbname
        if slot_type != "logical" or database != dbname or plugin != "pgoutput":
            raise ConfigError(
                f"postgresql source: replication slot {self.slot_name!r} exists but is "
                + (
                    "a physical slot"
                    if slot_type != "logical"
                    else f"for database {database!r}"
                    if database != dbname
                    else f"using output plugin {plugin!r}, not pgoutput"
                )
                + f"; choose another slot_name or drop it (SELECT pg_drop_replication_slot("
                f"{_quote_literal(self.slot_name)}))"
            )
        if wal_status == "lost":
            if self.options.on_slot_invalidated == "rebaseline":
                logger.warning(
                    "replication slot %s was invalidated (WAL it needed was removed); dropping "
                    "it, a new slot and a full baseline follow",
                    self.slot_name,
                )
                self._drop_slot()
                return
            self._slot_exists = True
            self._slot_confirmed = None
            return
        self._slot_exists = True
        self._slot_fresh = False
        self._slot_confirmed = parse_lsn(confirmed) if confirmed else None

    def _drop_slot(self) -> None:
        conn = self._qconn()
        for _ in range(100):
            row = conn.execute(
                "SELECT active_pid FROM pg_replication_slots WHERE slot_name = %s",
                (self.slot_name,),
            ).fetchone()
            if row is None:
                break
            if row[0] is not None:
                if self._repl is not None and not self._repl.closed:
                    # Our own walsender: closing our replication connection frees the slot.
                    self._close_repl()
                time.sleep(0.05)
                continue
            with contextlib.suppress(psycopg.errors.UndefinedObject):
                conn.execute("SELECT pg_drop_replication_slot(%s)", (self.slot_name,))
            break
        else:
            raise SourceError(
                f"replication slot {self.slot_name!r} stays active in another session; stop "
                "the other consumer first"
            )
        self._slot_exists = False
        self._slot_confirmed = None

    def _close_repl(self) -> None:
        repl, self._repl = self._repl, None
        if repl is not None:
            with contextlib.suppress(Exception):
                repl.close()

    def _repl_conn(self) -> psycopg.Connection[Any]:
        repl = self._repl
        if repl is None or repl.closed or repl.broken:
            self._close_repl()
            repl = self._repl = self._connect(replication=True)
        return repl

    def _create_slot(self, export: bool) -> tuple[int, str | None]:
        """``CREATE_REPLICATION_SLOT`` on the replication connection.

        Returns (consistent point, exported snapshot name or None)."""
        temp = "" if self.stateful else " TEMPORARY"
        snap = " EXPORT_SNAPSHOT" if export else " NOEXPORT_SNAPSHOT"
        deadline = time.monotonic() + 10.0
        while True:
            repl = self._repl_conn()
            try:
                row = repl.execute(
                    f"CREATE_REPLICATION_SLOT {_quote_ident(self.slot_name)}{temp} LOGICAL "
                    f"pgoutput{snap}"
                ).fetchone()
                break
            except psycopg.errors.DuplicateObject as exc:
                # A temporary slot lives until its old session has fully exited on the
                # server, which can trail our close() of that connection: wait for it.
                if self.stateful or time.monotonic() > deadline:
                    raise SourceError(
                        f"postgresql source: could not create replication slot "
                        f"{self.slot_name!r}: {mask_text(str(exc)).strip()}"
                    ) from None
                time.sleep(0.05)
            except psycopg.Error as exc:
                raise SourceError(
                    f"postgresql source: could not create replication slot {self.slot_name!r}: "
                    f"{mask_text(str(exc)).strip()}"
                ) from None
        assert row is not None
        lsn = parse_lsn(row[1])
        self._slot_exists = True
        self._slot_fresh = True
        self._slot_confirmed = lsn
        self._consistent_point = lsn
        self._need_new_slot = False
        logger.info(
            "created %s replication slot %s at %s",
            "stateful" if self.stateful else "temporary",
            self.slot_name,
            format_lsn(lsn),
        )
        return lsn, (row[2] if export else None)

    # -- lease -----------------------------------------------------------------------------
    def _lease_key(self) -> int:
        digest = hashlib.blake2b(f"laredo-slot:{self.slot_name}".encode(), digest_size=8).digest()
        return int.from_bytes(digest, "big", signed=True)

    def _acquire_lease(self) -> None:
        if self._lease_conn is not None and not self._lease_conn.closed:
            return
        conn = self._connect()
        key = self._lease_key()
        deadline = (
            None
            if self.options.lease_timeout is None
            else time.monotonic() + self.options.lease_timeout
        )
        logged = False
        while True:
            row = conn.execute("SELECT pg_try_advisory_lock(%s)", (key,)).fetchone()
            if row and row[0]:
                self._lease_conn = conn
                if logged:
                    logger.info("acquired the lease of slot %s; taking over", self.slot_name)
                return
            if not logged:
                logger.info(
                    "slot %s is leased by another process; waiting to take over", self.slot_name
                )
                logged = True
            if self._closed.is_set() or (deadline is not None and time.monotonic() > deadline):
                conn.close()
                raise SourceError(
                    f"postgresql source: slot {self.slot_name!r} is held by another Laredo "
                    "process (advisory-lock lease); it was not released in time"
                )
            self._closed.wait(0.2)

    @property
    def holds_lease(self) -> bool:
        return self._lease_conn is not None and not self._lease_conn.closed

    # -- SyncSource: validation ----------------------------------------------------------
    def validate_tables(self, tables: Sequence[TableIdentifier]) -> list[ValidationError]:
        """Problems that would stop the tables from syncing, each with a code:

        TABLE_NOT_FOUND, MISSING_SELECT_PRIVILEGE, MISSING_REPLICATION_PRIVILEGE,
        PUBLICATION_NOT_FOUND, TABLE_NOT_IN_PUBLICATION, REPLICA_IDENTITY, SLOT_INVALIDATED.
        """
        conn = self._qconn()
        errors: list[ValidationError] = []
        row = conn.execute(
            "SELECT rolsuper, rolreplication, current_user FROM pg_roles "
            "WHERE rolname = current_user"
        ).fetchone()
        if row is not None and not (row[0] or row[1]):
            errors.append(
                ValidationError(
                    None,
                    "MISSING_REPLICATION_PRIVILEGE",
                    f"role {row[2]!r} lacks REPLICATION; run ALTER ROLE {_quote_ident(row[2])} "
                    "REPLICATION",
                )
            )
        pub = conn.execute(
            "SELECT puballtables, pubupdate OR pubdelete FROM pg_publication WHERE pubname = %s",
            (self.publication_name,),
        ).fetchone()
        if pub is None:
            hint = (
                "set publication.create = true to let Laredo create it"
                if not self.options.publication.create
                else "it could not be created"
            )
            errors.append(
                ValidationError(
                    None,
                    "PUBLICATION_NOT_FOUND",
                    f"publication {self.publication_name!r} does not exist; create it "
                    f"(CREATE PUBLICATION {_quote_ident(self.publication_name)} FOR TABLE ...) "
                    f"or {hint}",
                )
            )
        published: set[TableIdentifier] = set()
        if pub is not None:
            published = {
                TableIdentifier(s, t)
                for s, t in conn.execute(
                    "SELECT schemaname, tablename FROM pg_publication_tables WHERE pubname = %s",
                    (self.publication_name,),
                ).fetchall()
            }
        needs_identity = pub is None or bool(pub[1])
        for t in tables:
            info = conn.execute(
                """
                SELECT c.relreplident,
                       EXISTS (SELECT 1 FROM pg_index i
                               WHERE i.indrelid = c.oid AND i.indisprimary),
                       has_table_privilege(c.oid, 'SELECT'), c.relkind
                FROM pg_class c WHERE c.oid = to_regclass(format('%%I.%%I', %s::text, %s::text))
                """,
                (t.schema, t.table),
            ).fetchone()
            if info is None:
                errors.append(
                    ValidationError(
                        t,
                        "TABLE_NOT_FOUND",
                        f"table {t} does not exist (or is not visible to this role); check the "
                        "schema and table name",
                    )
                )
                continue
            replident, has_pk, can_select, _relkind = info
            if not can_select:
                errors.append(
                    ValidationError(
                        t,
                        "MISSING_SELECT_PRIVILEGE",
                        f"no SELECT privilege on {t}; run GRANT SELECT ON {_quote_ident(t.schema)}."
                        f"{_quote_ident(t.table)} TO <role>",
                    )
                )
            if pub is not None and not pub[0] and t not in published:
                errors.append(
                    ValidationError(
                        t,
                        "TABLE_NOT_IN_PUBLICATION",
                        f"table {t} is not in publication {self.publication_name!r}; run ALTER "
                        f"PUBLICATION {_quote_ident(self.publication_name)} ADD TABLE "
                        f"{_quote_ident(t.schema)}.{_quote_ident(t.table)} (or set "
                        "publication.create = true)",
                    )
                )
            if needs_identity and (replident == "n" or (replident == "d" and not has_pk)):
                why = "REPLICA IDENTITY NOTHING" if replident == "n" else "no primary key"
                errors.append(
                    ValidationError(
                        t,
                        "REPLICA_IDENTITY",
                        f"table {t} has {why}: its updates and deletes cannot be replicated "
                        f"(and fail on the source); add a primary key or run ALTER TABLE "
                        f"{_quote_ident(t.schema)}.{_quote_ident(t.table)} REPLICA IDENTITY FULL",
                    )
                )
        if self.stateful:
            slot = self._slot_row()
            if slot is not None and slot[4] == "lost":
                errors.append(
                    ValidationError(
                        None,
                        "SLOT_INVALIDATED",
                        f"replication slot {self.slot_name!r} was invalidated (the WAL it "
                        "needed was removed, e.g. max_slot_wal_keep_size); reset the source "
                        "(laredo reset-source) or set on_slot_invalidated = rebaseline",
                    )
                )
        return errors

    # -- SyncSource: baseline ------------------------------------------------------------
    def baseline(
        self,
        tables: Sequence[TableIdentifier],
        row_callback: Callable[[TableIdentifier, Row], None],
    ) -> Position:
        """Read the tables under the slot's exported snapshot; returns the stream's start."""

        def per_row(table: TableIdentifier, rows: list[Row]) -> None:
            for r in rows:
                row_callback(table, r)

        return self.baseline_batches(tables, per_row)

    def baseline_batches(
        self,
        tables: Sequence[TableIdentifier],
        batch_callback: Callable[[TableIdentifier, list[Row]], None],
    ) -> Position:
        """Like :meth:`baseline`, delivering rows in lists of up to ``batch_size``.

        When the stream is not running, a new slot is created with an exported snapshot (an
        existing stateful slot is dropped and re-created): the returned position is its
        consistent point, exactly where the stream continues. When the stream is running (a
        single-table reload), the baseline reads a fresh snapshot and returns
        ``pg_current_wal_lsn()`` taken inside it; changes streamed meanwhile overlap idempotently.
        """
        tables = list(tables)
        missing = [t for t in tables if t not in self._columns]
        if missing:
            self._columns.update(self._discover(missing))
            still = [t for t in tables if t not in self._columns]
            if still:
                raise SourceError(
                    f"postgresql source: cannot baseline {', '.join(map(str, still))}: table not "
                    "found"
                )
        snapshot: str | None = None
        position: int | None = None
        helper: psycopg.Connection[Any] | None = None
        new_slot = not self._streaming.is_set()
        copy_from: str | None = None
        if new_slot and not self.stateful:
            if self._slot_exists:
                self._drop_slot()
            self._close_repl()  # a fresh connection: the snapshot must be exported by it
            position, snapshot = self._create_slot(export=True)
        elif new_slot:
            # Stateful: the named slot appears only once the baseline is complete (copied from
            # a temporary one), so a crash mid-baseline never leaves a slot to resume from.
            if self._slot_exists:
                self._drop_slot()
            self._close_repl()
            helper, position, snapshot, copy_from = self._helper_snapshot()
        else:
            # The stream is running (a single-table reload): a temporary slot on a helper
            # connection exports a snapshot whose consistent point splits the stream exactly.
            helper, position, snapshot, _name = self._helper_snapshot()
        conn = self._qconn()
        started = time.monotonic()
        total = 0
        try:
            assert snapshot is not None
            conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
            conn.execute(f"SET TRANSACTION SNAPSHOT {_quote_literal(snapshot)}")
            if helper is not None and copy_from is None:
                helper.close()  # the snapshot is imported; the temporary slot may go
                helper = None
            for table in tables:
                total += self._copy_table(conn, table, batch_callback)
            conn.execute("COMMIT")
            if copy_from is not None:
                conn.execute(
                    "SELECT pg_copy_logical_replication_slot(%s, %s, false)",
                    (copy_from, self.slot_name),
                )
                self._slot_exists = self._slot_fresh = True
                self._slot_confirmed = self._consistent_point = position
                self._need_new_slot = False
                logger.info(
                    "created replication slot %s at %s", self.slot_name, format_lsn(position)
                )
        except psycopg.Error as exc:
            with contextlib.suppress(Exception):
                conn.execute("ROLLBACK")
            raise SourceError(
                f"postgresql source: baseline failed: {mask_text(str(exc)).strip()}"
            ) from None
        except BaseException:
            with contextlib.suppress(Exception):
                conn.execute("ROLLBACK")
            raise
        finally:
            if helper is not None:
                helper.close()
        assert position is not None
        elapsed = time.monotonic() - started
        logger.info(
            "baseline of %d table(s), %d rows in %.2fs at %s",
            len(tables),
            total,
            elapsed,
            format_lsn(position),
        )
        if new_slot:
            # A new slot: the stream continues from its consistent point.
            self._acked = self._delivered = self._received = position
            self._unacked_times.clear()
        return position

    def _helper_snapshot(self) -> tuple[psycopg.Connection[Any], int, str, str]:
        helper = self._connect(replication=True)
        name = f"{self.slot_name[:40]}_r{os.getpid()}_{int(time.time() * 1000) % 10**8}"
        try:
            row = helper.execute(
                f"CREATE_REPLICATION_SLOT {_quote_ident(name)} TEMPORARY LOGICAL pgoutput "
                "EXPORT_SNAPSHOT"
            ).fetchone()
        except BaseException:
            helper.close()
            raise
        assert row is not None
        return helper, parse_lsn(row[1]), str(row[2]), name

    def _copy_table(
        self,
        conn: psycopg.Connection[Any],
        table: TableIdentifier,
        batch_callback: Callable[[TableIdentifier, list[Row]], None],
    ) -> int:
        cols = self._columns[table]
        names = [c.name for c in cols]
        query = sql.SQL("SELECT {} FROM {}").format(
            sql.SQL(", ").join(sql.Identifier(n) for n in names), _table_sql(table)
        )
        rf = self._row_filters.get(table)
        if rf:
            query = sql.SQL("{} WHERE {}").format(query, sql.SQL(rf))
        size = self.options.batch_size
        count = 0
        closed = self._closed

        def make_row(_cur: Any) -> Callable[[Sequence[Any]], Row]:
            return lambda values: dict(zip(names, values, strict=True))

        # Cursor.stream() in chunks of ``size`` rows: one query, no DECLARE/FETCH round trips.
        with conn.cursor(row_factory=make_row) as cur:
            batch: list[Row] = []
            append = batch.append
            for r in cur.stream(query, size=size):
                append(r)
                if len(batch) >= size:
                    count += len(batch)
                    batch_callback(table, batch)
                    batch = []
                    append = batch.append
                    if closed.is_set():
                        raise SourceError("postgresql source closed during baseline")
            if batch:
                count += len(batch)
                batch_callback(table, batch)
        return count

    # -- SyncSource: stream --------------------------------------------------------------
    def stream(self, from_position: Position, handler: Any) -> None:
        """Stream changes after ``from_position`` into ``handler`` until ``stop_stream()``.

        Raises ``ReBaselineRequired`` when the changes after ``from_position`` are no longer
        available (ephemeral connection lost, invalidated or re-created slot) and ``SourceError``
        when stateful reconnects are exhausted.
        """
        start = self._coerce(from_position) if from_position is not None else None
        self._stop.clear()
        if self._need_new_slot:
            raise ReBaselineRequired(
                f"postgresql source {self.slot_name!r}: the temporary slot was lost; re-baseline"
            )
        if not self._slot_exists:
            if not self.stateful and start is None:
                raise SourceError("ephemeral postgresql source: call baseline() before stream()")
            self._create_slot(export=False)
        consistent = self._slot_confirmed or 0
        if start is None:
            start = consistent
        elif start < consistent:
            raise ReBaselineRequired(
                f"postgresql source {self.slot_name!r}: position {format_lsn(start)} is older "
                f"than the slot's confirmed position {format_lsn(consistent)}; the changes in "
                "between are gone, re-baseline"
            )
        self._acked = max(self._acked, start)
        self._delivered = max(self._delivered, start)
        deliver = self._make_delivery(handler)
        reconnect = self.options.reconnect
        attempts = 0
        backoff = reconnect.initial_backoff
        self._streaming.set()
        try:
            while True:
                self._session_started = False
                try:
                    self._set_state(SourceState.STREAMING)
                    self._stream_session(deliver, handler)
                    return
                except _StopStream:
                    # PostgreSQL (15) cannot restart logical streaming on a walsender whose
                    # stream ended: the connection goes (with an ephemeral source's temporary
                    # slot, so its next stream() needs a baseline; a stateful one reconnects).
                    self._abandon_repl()
                    return
                except (ReBaselineRequired, SourceError):
                    raise
                except (psycopg.OperationalError, TransientError, _Lost) as exc:
                    if self._stop.is_set() or self._closed.is_set():
                        return
                    if self._session_started:
                        # The last (re)connect worked: a new failure starts a new series.
                        attempts = 0
                        backoff = reconnect.initial_backoff
                    msg = mask_text(str(exc)).strip()
                    self._close_repl()
                    if self._slot_invalidated():
                        self._on_invalidated()
                    if not self.stateful:
                        self._need_new_slot = True
                        self._slot_exists = False
                        self._set_state(SourceState.ERROR)
                        raise ReBaselineRequired(
                            f"postgresql source {self.slot_name!r}: replication connection lost "
                            f"({msg}); the temporary slot is gone, re-baseline"
                        ) from None
                    logger.warning(
                        "postgresql source %s: replication connection lost (%s); reconnecting",
                        self.slot_name,
                        msg,
                    )
                    self._set_state(SourceState.RECONNECTING)
                    attempts += 1
                    if attempts > reconnect.max_attempts:
                        self._set_state(SourceState.ERROR)
                        raise SourceError(
                            f"postgresql source {self.slot_name!r}: gave up after "
                            f"{reconnect.max_attempts} reconnect attempts: {msg}"
                        ) from None
                    self.reconnect_attempts_total += 1
                    if self._stop.wait(backoff):
                        return
                    backoff = min(backoff * reconnect.multiplier, reconnect.max_backoff)
                except BaseException:
                    # e.g. the handler raised: the connection is mid-COPY, drop it.
                    self._abandon_repl()
                    raise
        finally:
            self._streaming.clear()
            if self._state in (SourceState.STREAMING, SourceState.RECONNECTING):
                self._set_state(SourceState.CONNECTED)

    def _side(self, fn: Callable[[psycopg.Connection[Any]], Any]) -> Any:
        """Run ``fn`` on the side connection (reader thread and ``get_lag``): never blocked by a
        baseline holding the query connection."""
        with self._monitor_lock:
            mon = self._monitor
            if mon is None or mon.closed or mon.broken:
                mon = self._monitor = self._connect()
            return fn(mon)

    def _abandon_repl(self) -> None:
        self._close_repl()
        if not self.stateful:
            # The temporary slot went with the connection.
            self._need_new_slot = True
            self._slot_exists = False

    def _slot_invalidated(self) -> bool:
        try:
            row = self._side(self._slot_row)
        except Exception:
            return False
        return row is not None and row[4] == "lost"

    def _on_invalidated(self) -> None:
        if self.options.on_slot_invalidated == "rebaseline":
            logger.warning("replication slot %s was invalidated; re-creating it", self.slot_name)
            self._drop_slot()
            self._need_new_slot = True
            raise ReBaselineRequired(
                f"postgresql source {self.slot_name!r}: replication slot invalidated; re-baseline"
            )
        self._set_state(SourceState.ERROR)
        raise SourceError(
            f"postgresql source {self.slot_name!r}: replication slot invalidated; reset the source"
        )

    def _make_delivery(self, handler: Any) -> Callable[[Transaction], None]:
        batch = self.options.batch_size
        on_changes = getattr(handler, "on_changes", None)
        on_change = getattr(handler, "on_change", None)
        on_schema = getattr(handler, "on_schema_change", None)
        if on_changes is None:

            def on_changes(events: list[ChangeEvent]) -> None:
                for e in events:
                    on_change(e)  # type: ignore[misc]

        make = _make_event
        no_toast = _NO_TOAST
        emit = _chunk_emitter(on_changes)

        def deliver(tx: Transaction) -> None:
            pos = tx.end_lsn
            ts = tx.commit_time
            xid = tx.xid
            chunk: list[ChangeEvent] = []
            append = chunk.append
            items = tx.items
            last = len(items) - 1
            for i, item in enumerate(items):
                if type(item) is tuple:
                    table, action, new, old, unch = item
                    append(make(table, action, pos, ts, new, old, xid, ts, unch or no_toast))
                    if len(chunk) >= batch:
                        # more of this transaction follows: not acknowledgeable yet
                        emit(chunk, i == last)
                        chunk = []
                        append = chunk.append
                elif isinstance(item, SchemaItem):
                    if chunk:
                        emit(chunk, False)
                        chunk = []
                        append = chunk.append
                    self._schema_change(item, pos, on_schema)
            if chunk:
                emit(chunk, True)

        return deliver

    def _schema_change(self, item: SchemaItem, position: int, on_schema: Any) -> None:
        rel = item.relation
        table = rel.table
        old = list(self._columns.get(table, []))
        by_name = {c.name: c for c in old}
        try:
            found = self._side(lambda conn: self._discover([table], conn))
            fresh = {c.name: c for c in found.get(table, [])}
        except Exception:
            fresh = {}
        new: list[ColumnDefinition] = []
        for i, col in enumerate(rel.columns, start=1):
            base = fresh.get(col.name) or by_name.get(col.name)
            if base is not None and base.type_oid == col.type_oid:
                new.append(base)
            else:
                new.append(
                    ColumnDefinition(
                        name=col.name,
                        type=str(col.type_oid) if base is None else base.type,
                        ordinal_position=i,
                        type_oid=col.type_oid,
                        primary_key=bool(base and base.primary_key),
                        primary_key_ordinal=base.primary_key_ordinal if base else 0,
                    )
                )
        self._columns[table] = new
        if item.previous is None and not old:
            return
        logger.info("schema of %s changed at %s", table, format_lsn(position))
        if on_schema is not None:
            on_schema(table, old, new, position)

    def _stream_session(self, deliver: Callable[[Transaction], None], handler: Any) -> None:
        repl = self._repl_conn()
        tracked = {(t.schema, t.table): t for t in self._tables}
        tx = self._tx
        if tx is None:
            self._qconn()
            tx = self._tx
        assert tx is not None

        def loader_for(oid: int) -> Callable[[Any], Any]:
            return tx.get_loader(self._result_oid(oid), pq.Format.TEXT).load  # type: ignore[no-any-return]

        known = {t: tuple((c.name, c.type_oid) for c in cols) for t, cols in self._columns.items()}
        decoder = PgOutputDecoder(loader_for, lambda s, n: tracked.get((s, n)), known)
        self._decoder = decoder
        start = max(self._delivered, self._acked)
        pubs = _quote_literal(_quote_ident(self.publication_name))
        cmd = (
            f"START_REPLICATION SLOT {_quote_ident(self.slot_name)} LOGICAL {format_lsn(start)} "
            f"(proto_version '{self.options.proto_version}', publication_names {pubs})"
        )
        try:
            repl.execute(cmd)
        except psycopg.errors.ObjectNotInPrerequisiteState as exc:
            # e.g. slot invalidated, or active in another session
            if self._slot_invalidated():
                self._close_repl()
                self._on_invalidated()
            raise SourceError(
                f"postgresql source {self.slot_name!r}: START_REPLICATION failed: "
                f"{mask_text(str(exc)).strip()}"
            ) from None
        except (psycopg.errors.UndefinedObject, psycopg.errors.ObjectInUse) as exc:
            # slot missing (dropped meanwhile) or still held by a dying walsender: retry
            raise _Lost(str(exc)) from None
        self._session_started = True
        logger.debug("streaming slot %s from %s", self.slot_name, format_lsn(start))
        on_heartbeat = getattr(handler, "on_heartbeat", None)
        pgconn = repl.pgconn
        sock = pgconn.socket
        wake = self._wake_r
        wake_fd = wake.fileno()
        interval = self.options.status_interval
        ack_interval = min(0.2, interval)
        last_status = 0.0
        last_io = time.monotonic()
        hb_candidate = 0
        get = pgconn.get_copy_data
        feed = decoder.feed
        unacked_times = self._unacked_times
        stop = self._stop
        delivered_skip = self._delivered
        since_check = 0
        self._send_status(pgconn, reply=False)
        last_status = time.monotonic()
        while True:
            n, data = get(1)
            if n > 0:
                since_check += 1
                kind = data[0]
                if kind == 119:  # 'w' XLogData
                    done = feed(bytes(data[25:]))
                    if done is not None:
                        end = done.end_lsn
                        self._received = end
                        if end <= delivered_skip:
                            pass  # delivered before a reconnect: never twice
                        elif done.items:
                            if len(unacked_times) < 10_000:  # bounded: oldest kept
                                unacked_times.append((end, done.commit_time))
                            self._delivered = end
                            deliver(done)
                        elif end > hb_candidate:
                            hb_candidate = end
                    if since_check >= 512:
                        since_check = 0
                        if stop.is_set():
                            raise _StopStream
                        now = time.monotonic()
                        due = now - last_status
                        if (self._acked != self._ack_sent and due > ack_interval) or due > interval:
                            self._send_status(pgconn, reply=False)
                            last_status = now
                elif kind == 107:  # 'k' keepalive
                    wal_end, _ts, reply = _KEEPALIVE.unpack_from(data, 1)
                    self._server_wal_end = max(self._server_wal_end, wal_end)
                    if not decoder.in_transaction and wal_end > hb_candidate:
                        hb_candidate = wal_end
                    if reply:
                        self._send_status(pgconn, reply=False)
                        last_status = time.monotonic()
                continue
            if n == 0:
                # Drained: maintenance, then wait for the socket (or a wake-up).
                if stop.is_set():
                    raise _StopStream
                now = time.monotonic()
                if (
                    on_heartbeat is not None
                    and hb_candidate > max(self._last_heartbeat, self._acked)
                    and not decoder.in_transaction
                    and self._delivered <= self._acked
                ):
                    self._last_heartbeat = hb_candidate
                    on_heartbeat(hb_candidate)
                if self._acked != self._ack_sent and now - last_status > ack_interval / 4:
                    self._send_status(pgconn, reply=False)
                    last_status = now
                elif now - last_status > interval or (
                    now - last_io > interval and now - last_status > interval / 2
                ):
                    # Idle: ask the server for a keepalive carrying its current position.
                    self._send_status(pgconn, reply=True)
                    last_status = now
                timeout = max(0.01, min(interval - (now - last_status), 1.0))
                self._waiting = True
                try:
                    readable, _, _ = select.select([sock, wake_fd], [], [], timeout)
                finally:
                    self._waiting = False
                if wake_fd in readable:
                    with contextlib.suppress(BlockingIOError):
                        wake.recv(4096)
                if sock in readable:
                    pgconn.consume_input()
                    last_io = time.monotonic()
                continue
            if n == -1:
                res = pgconn.get_result()
                msg = "server ended the replication stream"
                if res is not None and res.error_message:
                    msg = res.error_message.decode("utf-8", "replace").strip()
                raise _Lost(msg)
            raise _Lost(pgconn.error_message.decode("utf-8", "replace").strip() or "copy failed")

    def _result_oid(self, oid: int) -> int:
        """The type OID a query result reports for a column of type ``oid``: a domain's base
        type (pgoutput sends the domain, a SELECT the base type), so both paths load alike."""
        tx = self._tx
        if tx is None or tx.adapters.get_loader(oid, pq.Format.TEXT) is not None:
            return oid
        try:
            row = self._side(
                lambda conn: conn.execute(
                    "SELECT typtype, typbasetype FROM pg_type WHERE oid = %s", (oid,)
                ).fetchone()
            )
        except Exception:
            return oid
        if row is not None and row[0] == "d" and row[1]:
            return self._result_oid(int(row[1]))
        return oid

    def _send_status(self, pgconn: Any, *, reply: bool) -> None:
        acked = self._acked
        write = max(self._received, acked)
        msg = _STATUS.pack(b"r", write, acked, acked, _now_pg_us(), 1 if reply else 0)
        if pgconn.put_copy_data(msg) != 1:
            raise _Lost("could not send standby status")
        pgconn.flush()
        self._ack_sent = acked

    # -- SyncSource: acknowledgements and positions -------------------------------------
    def ack(self, position: Position) -> None:
        """Everything at or before ``position`` is durable: PostgreSQL may confirm it."""
        if position is None:
            return
        lsn = self._coerce(position)
        self._acked_in_process = True
        if lsn <= self._acked:
            return
        self._acked = lsn
        times = self._unacked_times
        while times and times[0][0] <= lsn:
            times.popleft()
        if self._waiting:  # a busy reader sends the status on its own
            with contextlib.suppress(OSError):
                self._wake_w.send(b"a")

    def supports_resume(self) -> bool:
        return self.stateful

    def last_acked_position(self) -> Position | None:
        """The stateful slot's confirmed position (None: fresh slot, ephemeral, always_baseline)."""
        if not self.stateful:
            return None
        if self._acked_in_process and self._acked:
            return self._acked
        if self.options.always_baseline or self._slot_fresh:
            return None
        if not self._slot_exists or not self._slot_confirmed:
            return None
        return self._slot_confirmed

    def compare_positions(self, a: Position, b: Position) -> int:
        x = -1 if a is None else self._coerce(a)
        y = -1 if b is None else self._coerce(b)
        return (x > y) - (x < y)

    def position_to_string(self, position: Position) -> str:
        return format_lsn(self._coerce(position))

    def position_from_string(self, text: str) -> Position:
        return parse_lsn(text)

    @staticmethod
    def _coerce(position: Position) -> int:
        if isinstance(position, int) and not isinstance(position, bool):
            return position
        if isinstance(position, str):
            return parse_lsn(position)
        raise ValueError(f"not a PostgreSQL position (LSN): {position!r}")

    # -- SyncSource: control ---------------------------------------------------------------
    def pause(self) -> None:
        self._paused = True

    def resume(self) -> None:
        self._paused = False

    def state(self) -> SourceState:
        if self._paused and self._state in (SourceState.STREAMING, SourceState.CONNECTED):
            return SourceState.PAUSED
        return self._state

    def ordering_guarantee(self) -> OrderingGuarantee:
        return OrderingGuarantee.TOTAL_ORDER

    def get_lag(self) -> LagInfo:
        """Bytes between the server's WAL end and the slot's confirmed position; time since the
        commit of the oldest delivered change not yet acknowledged (cached for 1 s)."""
        now = time.monotonic()
        cached = self._lag_cache
        if cached is not None and now - cached[0] < 1.0:
            return cached[1]
        lag_bytes = max(0, self._server_wal_end - self._acked) if self._acked else 0
        try:
            row = self._side(
                lambda conn: conn.execute(
                    "SELECT pg_current_wal_lsn() - confirmed_flush_lsn FROM pg_replication_slots "
                    "WHERE slot_name = %s",
                    (self.slot_name,),
                ).fetchone()
            )
            if row is not None and row[0] is not None:
                lag_bytes = max(0, int(row[0]))
        except Exception as exc:
            logger.debug("lag query failed: %s", mask_text(str(exc)))
        lag_time: timedelta | None = None
        times = self._unacked_times
        if times:
            ts = times[0][1]
            if ts is not None:
                lag_time = max(timedelta(0), datetime.now(UTC) - ts)
        elif self._streaming.is_set():
            lag_time = timedelta(0)
        info = LagInfo(lag_bytes=lag_bytes, lag_time=lag_time)
        self._lag_cache = (now, info)
        return info

    def stop_stream(self) -> None:
        """Make a running ``stream()`` return promptly.

        The replication connection closes: a stateful source streams again from its slot; an
        ephemeral one lost its temporary slot and raises ``ReBaselineRequired`` on the next
        ``stream()``."""
        self._stop.set()
        with contextlib.suppress(OSError):
            self._wake_w.send(b"s")

    def reset_source(self, drop_publication: bool = False) -> None:
        """Drop the replication slot (and the publication if asked); the next start baselines."""
        self.stop_stream()
        deadline = time.monotonic() + 10
        while self._streaming.is_set() and time.monotonic() < deadline:
            time.sleep(0.02)
        self._close_repl()
        self._drop_slot()
        self._slot_fresh = False
        self._acked = self._delivered = 0
        self._acked_in_process = False
        if drop_publication:
            self._qconn().execute(
                sql.SQL("DROP PUBLICATION IF EXISTS {}").format(
                    sql.Identifier(self.publication_name)
                )
            )
            logger.info("dropped publication %s", self.publication_name)
        logger.info("reset source %s: slot dropped", self.slot_name)

    def close(self) -> None:
        """Close every connection (a temporary slot disappears with its connection)."""
        self._closed.set()
        self.stop_stream()
        deadline = time.monotonic() + 5
        while self._streaming.is_set() and time.monotonic() < deadline:
            time.sleep(0.02)
        self._close_repl()
        for attr in ("_query", "_monitor", "_lease_conn"):
            conn = getattr(self, attr)
            setattr(self, attr, None)
            if conn is not None:
                with contextlib.suppress(Exception):
                    conn.close()
        self._slot_exists = self._slot_exists and self.stateful
        self._set_state(SourceState.CLOSED)


class _Lost(Exception):
    """The replication stream ended or the connection failed."""


def _chunk_emitter(on_changes: Any) -> Callable[[list[ChangeEvent], bool], None]:
    """Call ``on_changes(chunk, complete)`` when the handler takes the flag (the engine does:
    a chunk that is not the end of its transaction must not be acknowledged); older handlers
    get ``on_changes(chunk)``."""
    try:
        params = inspect.signature(on_changes).parameters
    except (TypeError, ValueError):
        params = {}  # type: ignore[assignment]
    if "complete" in params or any(
        p.kind is inspect.Parameter.VAR_POSITIONAL for p in params.values()
    ):
        return cast(Callable[[list[ChangeEvent], bool], None], on_changes)

    def emit(chunk: list[ChangeEvent], complete: bool) -> None:
        on_changes(chunk)

    return emit
