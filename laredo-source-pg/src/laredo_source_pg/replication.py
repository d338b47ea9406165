"""``ReplicationStream``: the pgoutput change stream of one source.

Guarantees:

* Only committed transactions are delivered (the server sends a transaction once it committed),
  in commit order; every event of a transaction of up to ``batch_size`` changes carries its
  commit end LSN. A larger transaction is passed on while it is received, in chunks of
  ``batch_size``, when the handler takes the ``complete`` flag: ``on_changes(chunk,
  complete=False)`` for all but the last (events at ``final_lsn + 1``, a position inside the
  transaction: not acknowledgeable), the last with ``complete=True`` at the commit end LSN. So
  nothing proportional to a transaction's size is held. A handler without the flag gets each
  transaction whole, at its commit (held in memory until then).
* After a reconnect nothing already delivered is delivered again: a transaction cut by a lost
  connection is sent again by the server from its start, and the changes already passed on are
  skipped (undecoded) before delivery resumes where it stopped. A later ``stream()`` call (the
  engine restarting its stream) gets such a transaction whole again, from its start.
* With a lease (stateful, ``lease`` on), every session starts only after the lease's session
  was probed and, when it died (a failover, a restart, a killed backend), the lease was taken
  again: while another process holds it, this one waits and does not stream.
* The standby status reports ``flush = apply = acked``: PostgreSQL may discard WAL only up to
  what the handler acknowledged through ``ack()``.
* Heartbeats: outside a transaction the reader passes the server's position to
  ``on_heartbeat`` ("no change at or before it is still to come"). It asks the server for it
  right after a burst of changes and every ``heartbeat_interval`` while idle, so an idle source
  advances (read-your-writes waits answer) and a busy one pays nothing per change.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable
from dataclasses import replace
from typing import Any, NoReturn

import psycopg
from laredo.batches import UNCHANGED, ChangeBatch
from laredo.contracts import BatchChangeHandler
from laredo.errors import ReBaselineRequired, SourceError, TransientError
from laredo.types import ChangeEvent, ColumnDefinition, SourceState, TableIdentifier
from psycopg import pq

from .catalog import Catalog, Connections, quote_ident, quote_literal
from .catalog_watch import CatalogWatch
from .dsn import mask_text
from .failover import SLOT_GONE_CAUSES, observe_server
from .lsn import format_lsn
from .options import PostgresSourceOptions
from .pacing import Lost, SessionPacer, StopStream
from .partitions import merge_moves
from .pgoutput import DecodeError, PgOutputDecoder, SchemaItem
from .slot import Lease, SlotManager
from .state import RunState
from .typmods import column_signature

logger = logging.getLogger(__name__)

__all__ = ["ReplicationStream"]


class _HandlerDialect:
    """How the handler takes changes. ``chunked``: ``on_changes(events, complete)``, the
    ``ChangeHandler`` contract; a transaction may come in chunks before its commit (``complete``
    False: not acknowledgeable yet). Not chunked: ``on_changes(events)`` and whole transactions:
    the adapter for ``on_change``-only handlers, and the deprecated dialect without
    ``complete``, found when the first call cannot bind (no signature is inspected)."""

    def __init__(self, chunked: bool) -> None:
        self.chunked = chunked


_OLD_DIALECT = (
    "{name}.on_changes(events) without the complete flag is deprecated (removed in 0.3): "
    "define on_changes(self, events, complete=True); until then it gets whole transactions"
)


class _ChunkEmitter:
    """``emit(chunk, complete)``: ``on_changes(chunk, complete)`` while the handler takes the
    flag. A handler that does not (the ``on_change`` adapter; the deprecated dialect, found when
    a first call cannot bind, which calls ``on_old`` once) gets whole transactions: a chunk with
    ``complete`` False is held and passed on with the one that completes it, every event then at
    the completing chunk's position (the commit end LSN), so neither the chunk a transaction was
    cut into before the dialect was found nor a transaction larger than ``batch_size`` reaches
    it in parts. :meth:`barrier` passes on what is held before a schema change inside the
    transaction (its events keep their place before the change)."""

    __slots__ = ("dialect", "held", "on_changes", "on_old")

    def __init__(self, on_changes: Any, dialect: _HandlerDialect, on_old: Callable[[], None]):
        self.on_changes = on_changes
        self.dialect = dialect
        self.on_old = on_old
        self.held: list[ChangeEvent] = []

    def __call__(self, chunk: list[ChangeEvent], complete: bool) -> None:
        if self.dialect.chunked:
            try:
                self.on_changes(chunk, complete)
                return
            except TypeError as exc:
                tb = exc.__traceback__
                if tb is None or tb.tb_next is not None:
                    raise  # raised inside the handler: its own error
                self.dialect.chunked = False  # the call could not bind: the old dialect
                self.on_old()
        if not complete:
            self.held.extend(chunk)
            return
        if self.held:
            end = chunk[-1].position
            chunk = [
                e if e.position == end else replace(e, position=end) for e in self.held
            ] + chunk
            self.held = []
        self.on_changes(chunk)

    def barrier(self) -> None:
        """Pass on the held events of the transaction (a schema change follows them)."""
        if self.held and not self.dialect.chunked:
            held, self.held = self.held, []
            self.on_changes(held)


class _Retry:
    """The reconnect attempts of one ``run``: their count and the next backoff."""

    def __init__(self, policy: Any) -> None:
        self.policy = policy
        self.attempts = 0
        self.backoff = policy.initial_backoff

    def reset(self) -> None:
        self.attempts = 0
        self.backoff = self.policy.initial_backoff

    def next_backoff(self) -> float | None:
        """The wait before the next attempt; None: ``max_attempts`` are used up."""
        self.attempts += 1
        if self.attempts > self.policy.max_attempts:
            return None
        wait = self.backoff
        self.backoff = min(wait * self.policy.multiplier, self.policy.max_backoff)
        return float(wait)


Deliver = Callable[[list[Any], int, bool, Any], bool]
"""``deliver(items, position, complete, tx) -> completed``: pass on events (or batch-mode ops)
and schema items of the transaction ``tx``."""


class ReplicationStream:
    """Runs the stream of one source: sessions, reconnects, delivery (see the module
    docstring)."""

    def __init__(
        self,
        conns: Connections,
        catalog: Catalog,
        slots: SlotManager,
        options: PostgresSourceOptions,
        run: RunState,
        *,
        lease: Lease | None = None,
    ) -> None:
        self._conns = conns
        self._lease = lease
        """The slot's lease (stateful with ``lease`` on): probed before every session."""
        self._catalog = catalog
        self._slots = slots
        self._options = options
        self._run = run
        self._slot_name = options.slot_name
        self._stateful = options.stateful
        self._session_started = False
        self._observed: Any = None
        """The replication connection :func:`~.failover.observe_server` last looked at."""
        self.decoder: PgOutputDecoder | None = None
        """The current session's decoder (tests look at its partial transaction)."""
        self.watch = CatalogWatch(conns, catalog, options.catalog_check_interval)

    def run(self, start: int | None, handler: Any) -> None:
        """Stream changes after ``start`` (None: the slot's confirmed position) into
        ``handler`` until ``stop_stream()``.

        Raises ``ReBaselineRequired`` when the changes after ``start`` are no longer available
        (ephemeral connection lost, invalidated or re-created slot) and ``SourceError`` when
        stateful reconnects are exhausted.
        """
        run = self._run
        run.stop.clear()
        start = self._first_position(start)
        run.acked = max(run.acked, start)
        run.delivered = max(run.delivered, start)
        # A transaction cut in an earlier stream() is sent again whole: this caller may not hold
        # its first chunks (only reconnects inside this call skip what was passed on).
        run.partial = None
        deliver, dialect = self._make_delivery(handler)
        retry = _Retry(self._options.reconnect)
        run.streaming.set()
        try:
            while True:
                self._session_started = False
                try:
                    if self._lease is not None and not self._lease.ensure(run.stop):
                        return  # stopped or closed while another process held the lease
                    run.set_state(SourceState.STREAMING)
                    self._session(deliver, dialect.chunked, handler)
                    return
                except StopStream:
                    # PostgreSQL (15) cannot restart logical streaming on a walsender whose
                    # stream ended: the connection goes (with an ephemeral source's temporary
                    # slot, so its next stream() needs a baseline; a stateful one reconnects).
                    self._slots.abandon_connection()
                    return
                except DecodeError:
                    # A message we cannot parse: the connection is mid-COPY, drop it.
                    self._slots.abandon_connection()
                    raise
                except (ReBaselineRequired, SourceError):
                    raise
                except (psycopg.OperationalError, TransientError, Lost) as exc:
                    if run.stop.is_set() or run.closed.is_set() or self._reconnect(exc, retry):
                        return
                except BaseException:
                    # e.g. the handler raised: the connection is mid-COPY, drop it.
                    self._slots.abandon_connection()
                    raise
        finally:
            run.streaming.clear()
            if run.state in (SourceState.STREAMING, SourceState.RECONNECTING):
                run.set_state(SourceState.CONNECTED)

    def _first_position(self, start: int | None) -> int:
        """Where ``run`` starts: ``start``, else the slot's confirmed position (the slot
        created first when needed). ``ReBaselineRequired`` when the changes after ``start``
        are gone (a lost slot, a position older than the slot's)."""
        slots = self._slots
        if slots.need_new:
            kind = "replication slot" if self._stateful else "temporary slot"
            raise ReBaselineRequired(
                f"postgresql source {self._slot_name!r}: the {kind} was lost; re-baseline"
            )
        if not slots.exists:
            if not self._stateful and start is None:
                raise SourceError("ephemeral postgresql source: call baseline() before stream()")
            if self._stateful and start is not None:
                # Resuming a position whose slot is not there (a restore, dropped while down).
                self._on_slot_gone("not found when the stream started", start)
            slots.create(export=False)
        consistent = slots.confirmed or 0
        if start is None:
            return consistent
        if start < consistent:
            raise ReBaselineRequired(
                f"postgresql source {self._slot_name!r}: position {format_lsn(start)} is older "
                f"than the slot's confirmed position {format_lsn(consistent)}; the changes in "
                "between are gone, re-baseline"
            )
        return start

    def _reconnect(self, exc: BaseException, retry: _Retry) -> bool:
        """After a lost connection: ``ReBaselineRequired`` for an ephemeral source or an
        invalidated slot, ``SourceError`` once the reconnects are exhausted; else wait the
        backoff (True: stopped meanwhile) before the next attempt."""
        run = self._run
        slots = self._slots
        if self._session_started:
            retry.reset()  # the last (re)connect worked: a new failure starts a new series
        msg = mask_text(str(exc)).strip()
        self._conns.close_repl()
        if slots.invalidated():
            self._on_invalidated()
        if not self._stateful:
            slots.need_new = True
            slots.exists = False
            run.set_state(SourceState.ERROR)
            raise ReBaselineRequired(
                f"postgresql source {self._slot_name!r}: replication connection "
                f"lost ({msg}); the temporary slot is gone, re-baseline"
            ) from None
        logger.warning(
            "postgresql source %s: replication connection lost (%s); reconnecting",
            self._slot_name,
            msg,
        )
        run.set_state(SourceState.RECONNECTING)
        backoff = retry.next_backoff()
        if backoff is None:
            run.set_state(SourceState.ERROR)
            raise SourceError(
                f"postgresql source {self._slot_name!r}: gave up after "
                f"{retry.policy.max_attempts} reconnect attempts: {msg}"
            ) from None
        run.reconnect_attempts_total += 1
        return run.stop.wait(backoff)

    def _on_invalidated(self) -> None:
        self._run.slot_lost_total += 1
        self._run.slot_lost_reason = "invalidated (the WAL it needed was removed)"
        if self._slots.rebaseline_invalidated:
            logger.warning("replication slot %s was invalidated; re-creating it", self._slot_name)
            self._slots.drop()
            self._slots.need_new = True
            raise ReBaselineRequired(
                f"postgresql source {self._slot_name!r}: replication slot invalidated; re-baseline"
            )
        self._run.set_state(SourceState.ERROR)
        raise SourceError(
            f"postgresql source {self._slot_name!r}: replication slot invalidated; reset the source"
        )

    def _on_slot_gone(self, detail: str, position: int) -> NoReturn:
        """The stateful slot does not exist on the server: like an invalidated slot, a
        re-baseline (``on_slot_invalidated = rebaseline``) or a clear stop (``fail``); never a
        reconnect loop. Counted and kept (``slot_lost_total``, ``slot_lost_reason``)."""
        run = self._run
        slots = self._slots
        self._conns.close_repl()
        slots.exists = slots.fresh = False
        slots.confirmed = None
        run.slot_lost_total += 1
        server = f" on {run.server[2]}" if run.server else ""
        reason = f"replication slot {self._slot_name!r} does not exist{server} ({detail})"
        run.slot_lost_reason = reason
        gone = (
            f"postgresql source {self._slot_name!r}: {reason}; it was {SLOT_GONE_CAUSES}. The "
            f"changes after {format_lsn(position)} are gone"
        )
        if slots.rebaseline_invalidated:
            logger.warning("%s: a new slot and a full baseline follow", gone)
            slots.need_new = True
            raise ReBaselineRequired(f"{gone}; re-baseline")
        run.set_state(SourceState.ERROR)
        logger.error("%s; stopping (on_slot_invalidated = fail)", gone)
        raise SourceError(
            f"{gone}: reset the source (laredo reset-source) and restart it to take a new "
            "baseline, or set on_slot_invalidated = rebaseline to do that automatically"
        )

    def _make_delivery(self, handler: Any) -> tuple[Deliver, _HandlerDialect]:
        """``(deliver, dialect)``: ``dialect.chunked`` while the handler takes the ``complete``
        flag (transactions may then be passed on before their commit). A
        :class:`~laredo.contracts.BatchChangeHandler` gets :class:`~laredo.batches.ChangeBatch`
        es (see :meth:`_batch_delivery`)."""
        if isinstance(handler, BatchChangeHandler):
            return self._batch_delivery(handler), _HandlerDialect(chunked=True)
        batch = self._options.batch_size
        on_changes = getattr(handler, "on_changes", None)
        on_change = getattr(handler, "on_change", None)
        on_schema = getattr(handler, "on_schema_change", None)
        dialect = _HandlerDialect(chunked=on_changes is not None)
        if on_changes is None:

            def on_changes(events: list[ChangeEvent]) -> None:
                for e in events:
                    on_change(e)  # type: ignore[misc]

        def on_old() -> None:
            message = _OLD_DIALECT.format(name=type(handler).__name__)
            warnings.warn(message, DeprecationWarning, stacklevel=2)
            logger.warning("%s", message)
            if self.decoder is not None:
                self.decoder.stop_chunking()

        emit = _ChunkEmitter(on_changes, dialect, on_old)
        moves = self._catalog.move_keys  # live: partitioned parents added later count too

        def deliver(items: list[Any], position: int, complete: bool, tx: Any = None) -> bool:
            """Emit ``items`` in chunks of ``batch`` events, schema changes in between; True
            when the last emit carried ``complete``."""
            if moves:
                items = merge_moves(items, moves)
            if len(items) <= batch and not any(type(it) is SchemaItem for it in items):
                if items:
                    emit(items, complete)
                return complete and bool(items)
            chunk: list[ChangeEvent] = []
            done = False
            last = len(items) - 1
            for i, item in enumerate(items):
                if type(item) is SchemaItem:
                    if chunk:
                        emit(chunk, False)
                        chunk = []
                    emit.barrier()
                    self._schema_change(item, position, on_schema)
                    continue
                chunk.append(item)
                if len(chunk) >= batch:
                    # more of this transaction follows: not acknowledgeable yet
                    done = complete and i == last
                    emit(chunk, done)
                    chunk = []
            if chunk:
                emit(chunk, complete)
                done = complete
            return done

        return deliver, dialect

    def _batch_delivery(self, handler: BatchChangeHandler) -> Deliver:
        """Delivery in batch mode: each run of one table's ops (at most ``batch_size``)
        becomes one :class:`~laredo.batches.ChangeBatch` passed to ``on_change_batch``; schema
        changes in between, in stream order; only the last batch of a complete transaction
        carries ``complete``. Partition moves (a DELETE + INSERT pair that is one UPDATE) are
        merged on events, as in the reference path."""
        size = self._options.batch_size
        on_batch = handler.on_change_batch
        on_schema = getattr(handler, "on_schema_change", None)
        moves = self._catalog.move_keys  # live: partitioned parents added later count too

        def marked(batch: ChangeBatch, complete: bool = True) -> None:
            # its transaction holds Unrepresentable values: the engine dead-letters them
            batch.unrepresentable = True
            on_batch(batch, complete)

        def deliver(items: list[Any], position: int, complete: bool, tx: Any = None) -> bool:
            ts = None if tx is None else tx.commit_time
            xid = 0 if tx is None else tx.xid
            if not items:
                return False
            send = on_batch if tx is None or not tx.unrepresentable else marked
            first = items[0]
            rel: Any = None
            if (
                not moves
                and len(items) <= size
                and type(first) is tuple
                and all(type(it) is tuple and it[4] is first[4] for it in items)
            ):
                rel = first[4]
                send(
                    ChangeBatch(rel.table, rel.names, items, position, commit_time=ts, xid=xid),
                    complete,
                )
                return complete
            out: list[Any] = []  # ChangeBatches and SchemaItems, in order
            run: list[Any] = []
            for item in items:
                if type(item) is SchemaItem:
                    if run:
                        out.append(
                            ChangeBatch(
                                rel.table, rel.names, run, position, commit_time=ts, xid=xid
                            )
                        )
                        run = []
                    out.append(item)
                    continue
                if run and (item[4] is not rel or len(run) >= size):
                    out.append(
                        ChangeBatch(rel.table, rel.names, run, position, commit_time=ts, xid=xid)
                    )
                    run = []
                rel = item[4]
                run.append(item)
            if run:
                out.append(
                    ChangeBatch(rel.table, rel.names, run, position, commit_time=ts, xid=xid)
                )
            if moves:
                keep = send is marked  # events would hide Unrepresentable values: stay a batch
                out = [_merged(it, moves, keep) if type(it) is ChangeBatch else it for it in out]
            last = len(out) - 1
            for i, it in enumerate(out):
                if type(it) is SchemaItem:
                    self._schema_change(it, position, on_schema)
                elif type(it) is ChangeBatch:
                    send(it, complete and i == last)
                else:  # merged partition moves, as events
                    handler.on_changes(it, complete and i == last)  # type: ignore[attr-defined]
            return complete and type(out[-1]) is not SchemaItem

        return deliver

    def _schema_change(self, item: SchemaItem, position: int, on_schema: Any) -> None:
        rel = item.relation
        table = rel.table
        columns = self._catalog.columns
        old = list(columns.get(table, []))
        by_name = {c.name: c for c in old}
        try:
            found = self._conns.side(lambda conn: self._catalog.discover([table], conn))
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
        columns[table] = new
        if item.previous is None and not old:
            return
        logger.info("schema of %s changed at %s", table, format_lsn(position))
        if on_schema is not None:
            on_schema(table, old, new, position)

    def _watch_reporters(
        self, decoder: PgOutputDecoder, handler: Any
    ) -> tuple[
        Callable[[TableIdentifier, list[ColumnDefinition]], None],
        Callable[[TableIdentifier, str], None],
    ]:
        """What the catalog check calls: a schema change reported like one pgoutput described
        (the decoder then takes the table's next Relation message as known), and a request to
        re-baseline a table."""
        on_schema = getattr(handler, "on_schema_change", None)
        on_resync_required = getattr(handler, "on_resync_required", None)
        run = self._run
        catalog = self._catalog

        def on_columns(table: TableIdentifier, columns: list[ColumnDefinition]) -> None:
            old = list(catalog.columns.get(table, []))
            catalog.columns[table] = columns
            decoder.known[table] = column_signature(columns)
            position = max(run.delivered, run.received)
            logger.info(
                "schema of %s changed (seen by the catalog check) at %s",
                table,
                format_lsn(position),
            )
            if on_schema is not None:
                on_schema(table, old, columns, position)

        def on_resync(table: TableIdentifier, reason: str) -> None:
            if on_resync_required is None:
                logger.warning(
                    "postgresql source %s: %s, but the handler cannot re-baseline it; reload "
                    "the table (laredo reload)",
                    self._slot_name,
                    reason,
                )
                return
            logger.warning(
                "postgresql source %s: %s; re-baselining %s", self._slot_name, reason, table
            )
            on_resync_required(table, reason)

        return on_columns, on_resync

    def _new_decoder(self, chunked: bool, handler: Any) -> PgOutputDecoder:
        """This session's decoder: the tables tracked and known now, resuming a transaction a
        lost connection cut (``run.partial``)."""
        tracked = self._catalog.tracked  # live: tables added while streaming are decoded too
        tx = self._conns.loaders()
        result_oid = self._catalog.result_oid

        def loader_for(oid: int) -> Callable[[Any], Any]:
            return tx.get_loader(result_oid(oid), pq.Format.TEXT).load

        known = {t: column_signature(cols) for t, cols in self._catalog.columns.items()}
        self.decoder = PgOutputDecoder(
            loader_for,
            lambda s, n: tracked.get((s, n)),
            known,
            chunk_size=self._options.batch_size if chunked else 0,
            resume=self._run.partial,
            batches=isinstance(handler, BatchChangeHandler),
        )
        return self.decoder

    def _start_replication(self, repl: Any, start: int) -> None:
        """``START_REPLICATION`` of the slot after ``start``; a slot that is gone or
        invalidated is a known state (``_on_slot_gone``, ``_on_invalidated``), one still held
        by a dying walsender a retry (``Lost``)."""
        pubs = quote_literal(quote_ident(self._options.publication_name))
        cmd = (
            f"START_REPLICATION SLOT {quote_ident(self._slot_name)} LOGICAL {format_lsn(start)} "
            f"(proto_version '{self._options.proto_version}', publication_names {pubs})"
        )
        try:
            repl.execute(cmd)
        except psycopg.errors.ObjectNotInPrerequisiteState as exc:
            # e.g. slot invalidated, or active in another session
            if self._slots.invalidated():
                self._conns.close_repl()
                self._on_invalidated()
            raise SourceError(
                f"postgresql source {self._slot_name!r}: START_REPLICATION failed: "
                f"{mask_text(str(exc)).strip()}"
            ) from None
        except psycopg.errors.UndefinedObject as exc:
            # The server we are connected to says so: a known state, not a retry loop.
            self._on_slot_gone(mask_text(str(exc)).strip(), start)
        except psycopg.errors.ObjectInUse as exc:
            # still held by a dying walsender: retry
            raise Lost(str(exc)) from None
        self._session_started = True
        logger.debug("streaming slot %s from %s", self._slot_name, format_lsn(start))

    def _session(self, deliver: Deliver, chunked: bool, handler: Any) -> None:
        """One replication connection's stream, until it is lost or stopped. The loop below
        is the per-message path; everything else is :class:`~.pacing.SessionPacer`'s."""
        run = self._run
        repl = self._conns.repl()
        if repl is not self._observed:  # a new connection: which server did it reach?
            self._observed = repl
            if observe_server(repl, run):
                self._conns.reset_query()  # they may still hold the old server
        decoder = self._new_decoder(chunked, handler)
        self._start_replication(repl, max(run.delivered, run.acked))
        on_heartbeat = getattr(handler, "on_heartbeat", None)
        pgconn = repl.pgconn
        pacer = SessionPacer(
            pgconn,
            run,
            decoder=decoder,
            options=self._options,
            watch=self.watch,
            reporters=self._watch_reporters(decoder, handler),
            on_heartbeat=on_heartbeat,
        )
        sock = pgconn.socket
        get = pgconn.get_copy_data
        feed = decoder.feed
        unacked_times = run.unacked_times
        delivered_skip = run.delivered
        since_check = 0
        pacer.send_status(reply=False)
        while True:
            n, data = get(1)
            if n > 0:
                since_check += 1
                kind = data[0]
                if kind == 119:  # 'w' XLogData
                    done = feed(data.tobytes(), 25)  # the frame whole: no slice, one copy
                    if done is not None:
                        pacer.fresh = True
                        if not done.committed:
                            # a big transaction, passed on while it is received
                            deliver(done.take_chunk(), done.position, False, done)
                            run.partial = (done.final_lsn, done.early)
                        else:
                            end = done.end_lsn
                            run.received = end
                            run.partial = None
                            if end <= delivered_skip:
                                pass  # delivered before a reconnect: never twice
                            elif done.items or done.early:
                                if len(unacked_times) < 10_000:  # bounded: oldest kept
                                    unacked_times.append((end, done.commit_time))
                                run.delivered = end
                                if (
                                    not deliver(done.items, end, True, done)
                                    and done.changes
                                    and on_heartbeat is not None
                                ):
                                    # no event left to carry the end of the transaction
                                    run.last_heartbeat = end
                                    on_heartbeat(end)
                            elif end > pacer.hb_candidate:
                                pacer.hb_candidate = end
                    if since_check >= 512:
                        since_check = 0
                        pacer.busy()
                elif kind == 107:  # 'k' keepalive
                    pacer.keepalive(data)
                continue
            if n == 0:  # drained: maintenance, then wait for the socket (or a wake-up)
                pacer.drained(sock)
                continue
            raise Lost(_end_message(pgconn, n))


def _end_message(pgconn: Any, n: int) -> str:
    """Why the copy stream ended (``get_copy_data`` returned ``n`` < 0)."""
    if n == -1:
        res = pgconn.get_result()
        if res is not None and res.error_message:
            return str(res.error_message.decode("utf-8", "replace").strip())
        return "server ended the replication stream"
    return pgconn.error_message.decode("utf-8", "replace").strip() or "copy failed"


def _merged(batch: ChangeBatch, moves: Any, keep_batch: bool = False) -> Any:
    """A batch of a partitioned parent with its partition moves merged (as events: the
    reference path's :func:`~.partitions.merge_moves`), or the batch as it is. ``keep_batch``:
    the merged events as a batch again (flagged ``unrepresentable``, as the batch was)."""
    if batch.table not in moves:
        return batch
    events = merge_moves(batch.events(), moves)
    if len(events) == len(batch):
        return batch
    if not keep_batch:
        return events
    names = batch.names
    ops = []
    for ev in events:
        new = ev.new_values
        values = None if new is None else tuple(new.get(n, UNCHANGED) for n in names)
        unchanged = None if new is None else frozenset(n for n in names if n not in new)
        ops.append((ev.action, values, ev.old_values, unchanged or None))
    out = ChangeBatch(
        batch.table, names, ops, batch.position, commit_time=batch.commit_time, xid=batch.xid
    )
    out.unrepresentable = batch.unrepresentable
    return out
