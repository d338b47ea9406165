"""Machinery shared by the in-memory targets: keys, the write path, locking and listeners.

Concurrency model
-----------------
* One data lock (``_lock``) guards the stored state. Writers take it once per call: once per
  ``apply_changes`` batch or ``on_baseline_rows`` chunk, never once per row, and bump
  ``_version`` to odd on entry and back to even on exit. Bulk readers (``all``, export) take the
  lock; point readers (``get``, ``lookup``) read without it and check ``_version`` was even and
  unchanged around their look-ups, else read again under the lock. Either way a reader sees the
  state before or after a whole batch, never half of one. A batch is a source transaction, or
  one chunk of a transaction too big to be held (the engine then acknowledges and
  ``wait_for`` counts it only once its last chunk is applied). Results are copied (or unpacked)
  after the lock is released.
* Stored rows are never mutated in place: an update stores a new value (a packed row in
  ``IndexedTarget``, a new dict in ``CompiledTarget``). That is what lets readers copy or unpack
  outside the lock and ``export_snapshot`` be consistent.
* Rows handed in are never kept: the target stores its own copy (or packed form) before the call
  returns, so the caller may reuse them.
* Listeners run on the writer's thread *after* the data lock is released (readers are not blocked
  by slow listeners), under a re-entrant dispatch lock that every writer holds for the whole call,
  so listeners see changes in exactly the order they were applied, and a listener registered with
  ``replay_existing=True`` receives the existing rows before any later change. A listener may read
  the target; it must not write to it from another thread while being called.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from operator import itemgetter
from typing import Any, Generic, Protocol, TypeVar, overload

from laredo.errors import BatchApplyError, ConfigError, TargetError, Terminal
from laredo.types import (
    ChangeAction,
    ChangeEvent,
    ColumnDefinition,
    Position,
    Row,
    SchemaChangeAction,
    SchemaChangeResponse,
    TableIdentifier,
    TableSnapshotInfo,
    no_primary_key_problem,
    primary_key_columns,
)

logger = logging.getLogger(__name__)

V = TypeVar("V")
"""What listeners receive: a row (IndexedTarget) or a compiled object (CompiledTarget)."""

Listener = Callable[[Any, Any], None]
Pending = list[tuple[Any, Any]] | None

_INSERT = ChangeAction.INSERT
_UPDATE = ChangeAction.UPDATE
_DELETE = ChangeAction.DELETE
_TRUNCATE = ChangeAction.TRUNCATE

MISSING: Any = object()


_KEEP: Any = object()  # _store_many: leave the position as it is


class RowStore(Protocol):
    """Where a target keeps its rows, by key: a plain dict, or a compact store with the same
    methods. Values are the target's stored form of a row."""

    @overload
    def get(self, key: Any, /) -> Any: ...

    @overload
    def get(self, key: Any, default: Any, /) -> Any: ...

    def __getitem__(self, key: Any, /) -> Any: ...

    def __setitem__(self, key: Any, value: Any, /) -> None: ...

    def __delitem__(self, key: Any, /) -> None: ...

    @overload
    def pop(self, key: Any, /) -> Any: ...

    @overload
    def pop(self, key: Any, default: Any, /) -> Any: ...

    def __contains__(self, key: object, /) -> bool: ...

    def __len__(self) -> int: ...

    def __iter__(self) -> Iterator[Any]: ...

    def values(self) -> Iterable[Any]: ...

    def items(self) -> Iterable[tuple[Any, Any]]: ...


def key_getter(fields: Sequence[str]) -> Callable[[Mapping[str, Any]], Any]:
    """``row -> key``: the raw value for a one-field key, a tuple for a composite key.

    Raises ``KeyError(field)`` when the row lacks a field (callers turn it into a TargetError).
    """
    return itemgetter(*fields)


class TerminalTargetError(TargetError, Terminal):
    """A change this target can never apply (e.g. a row without its key): not worth retrying."""


class Subscription:
    """A registered listener; ``active`` turns false at unsubscribe (checked before each call)."""

    __slots__ = ("active", "fn")

    def __init__(self, fn: Listener) -> None:
        self.fn = fn
        self.active = True


class MemoryTargetBase(Generic[V]):
    """Base of ``IndexedTarget`` and ``CompiledTarget``: see the module docstring for locking."""

    plugin_name = "memory"

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._version = 0
        """Even when no write is in progress; bumped before and after every write (with the
        lock held), so readers can read without the lock and retry under it on a change."""
        self._dispatch_lock = threading.RLock()
        self._subs: tuple[Subscription, ...] = ()
        self._rows: RowStore = {}
        self._table: TableIdentifier | None = None
        self._columns: tuple[ColumnDefinition, ...] = ()
        self._key_fields: tuple[str, ...] = ()
        self._key_of: Callable[[Mapping[str, Any]], Any] = _not_initialised
        self._position: Position | None = None
        self._baseline_complete = False
        self._progress: str | None = None
        self._closed = False
        self.listener_errors = 0
        """How many listener calls raised (each is logged and skipped)."""

    # ------------------------------------------------------------------ subclass hooks
    def _explicit_key_fields(self) -> tuple[str, ...]:
        """Key fields that win over the primary key (CompiledTarget's ``key_fields``)."""
        return ()

    def _fallback_key_fields(self) -> tuple[str, ...]:
        """Key fields to use when the columns carry no primary key."""
        raise NotImplementedError

    def _configured_fields(self) -> list[tuple[str, str]]:
        """``(description, field)`` pairs to check against the table's columns at ``on_init``."""
        raise NotImplementedError

    def _no_key_hint(self) -> str:
        raise NotImplementedError

    def _put(
        self,
        key: Any,
        row: Row,
        pending: Pending,
        moved_from: Any = MISSING,
        old: Any = MISSING,
    ) -> None:
        """Store ``row`` under ``key``; called with the lock held. ``row`` belongs to the caller:
        store a copy (or a packed form), never ``row`` itself.

        ``moved_from`` is the row's previous key when an UPDATE changed the key; ``old`` the
        value currently stored under ``key`` when the caller already looked it up (else MISSING).
        """
        raise NotImplementedError

    def _row_of(self, stored: Any) -> Row:
        """A stored value as a row dict, for reading inside the target (never mutated)."""
        return stored  # type: ignore[no-any-return]

    def _row_copy(self, stored: Any) -> Row:
        """A stored value as a new row dict the caller owns (reads, exports)."""
        return dict(stored)

    def _covers(self, stored: Any, new: Row) -> bool:
        """True when ``new`` has every column of the stored value (no merge needed)."""
        return stored.keys() <= new.keys()  # type: ignore[no-any-return]

    def _discard(self, key: Any, pending: Pending) -> None:
        """Remove the row under ``key`` if any; called with the lock held."""
        raise NotImplementedError

    def _clear(self, pending: Pending) -> None:
        """Remove everything; called with the lock held."""
        raise NotImplementedError

    def _rebuild(self) -> None:
        """Re-key and re-index every stored row after the key definition changed (lock held)."""
        raise NotImplementedError

    def _replace_state(self, rows: Iterable[Row]) -> Callable[[], list[Any]]:
        """Build a new state from ``rows`` without the lock; return a function that installs
        it (called with the lock held) and returns the values to replay to listeners."""
        raise NotImplementedError

    def _listener_values(self) -> list[Any]:
        """Current values as listeners see them (lock held)."""
        raise NotImplementedError

    def _out(self, value: Any) -> Any:
        """What a listener receives for a stored value (rows are copied)."""
        return value

    # ------------------------------------------------------------------ lifecycle
    def on_init(self, table: TableIdentifier, columns: Sequence[ColumnDefinition]) -> None:
        """Set the table and its columns; derive the key and check configured fields.

        The key is the primary key from the column definitions (``primary_key_ordinal`` order),
        falling back to the configured fields. Raises ``ConfigError`` listing every problem.
        Stored rows are kept (the engine truncates before a re-baseline); when the key changes
        they are re-keyed.
        """
        columns = tuple(columns)
        problems: list[str] = []
        pk = tuple(primary_key_columns(columns))
        key_fields = self._explicit_key_fields() or pk or self._fallback_key_fields()
        if not key_fields:
            problems.append(no_primary_key_problem(table, self.plugin_name, self._no_key_hint()))
        names = [c.name for c in columns]
        if names:
            known = set(names)
            for what, field in self._configured_fields():
                if field not in known:
                    problems.append(
                        f"table {table}: {what} {field!r} is not a column of the table "
                        f"(columns: {', '.join(names)})"
                    )
        if problems:
            raise ConfigError(problems)
        with self._dispatch_lock, self._lock:
            self._version += 1
            saved = self._save_config()
            try:
                changed = key_fields != self._key_fields
                self._table = table
                self._columns = columns
                self._key_fields = key_fields
                self._key_of = key_getter(key_fields)
                self._baseline_complete = False
                needs_rebuild = self._on_columns(columns)
                if (changed or needs_rebuild) and self._rows:
                    self._rebuild()
            except BaseException:
                self._restore_config(saved)  # e.g. a stored row lacks the new key
                raise
            finally:
                self._version += 1

    def _save_config(self) -> dict[str, Any]:
        """The attributes ``on_init`` changes, so a failed re-key can put them back."""
        return {k: v for k, v in vars(self).items() if k != "_subs"}

    def _restore_config(self, saved: dict[str, Any]) -> None:
        subs = self._subs
        vars(self).update(saved)
        self._subs = subs

    def _on_columns(self, columns: tuple[ColumnDefinition, ...]) -> bool:
        """Hook: key and columns known (lock held). Return true to re-index stored rows."""
        return False

    def on_baseline_row(self, table: TableIdentifier, row: Row) -> None:
        self._write(self._insert, row)

    def load(self, table: TableIdentifier, rows: Sequence[Row]) -> None:
        """The engine's door for baseline rows: :meth:`on_baseline_rows`."""
        self.on_baseline_rows(table, rows)

    def apply(
        self, table: TableIdentifier, changes: Sequence[ChangeEvent], complete: bool = True
    ) -> None:
        """The engine's door for changes: :meth:`apply_changes` (a memory target applies at
        once, so the end of a transaction changes nothing)."""
        self.apply_changes(table, changes)

    def on_baseline_rows(self, table: TableIdentifier, rows: Sequence[Row]) -> None:
        """Fast path: a chunk of baseline rows under one lock acquisition."""
        self._store_many(rows)

    def _store_many(self, rows: Sequence[Row], *, at: Any = _KEEP) -> None:
        """:meth:`_insert_many` under one lock acquisition, listeners told after; ``at``: the
        position the target holds afterwards (default: unchanged)."""
        with self._dispatch_lock:
            subs = self._subs
            pending: Pending = [] if subs else None
            try:
                with self._lock:
                    self._version += 1
                    try:
                        self._insert_many(rows, pending)
                        if at is not _KEEP:
                            self._position = at
                    finally:
                        self._version += 1
            finally:
                if pending:
                    self._dispatch(subs, pending)

    def _insert_many(self, rows: Sequence[Row], pending: Pending) -> None:
        """Insert ``rows`` in order (lock held); subclasses may do it in bulk."""
        insert = self._insert
        for row in rows:
            insert(row, pending)

    def on_baseline_complete(self, table: TableIdentifier) -> None:
        self._baseline_complete = True

    def on_insert(self, table: TableIdentifier, row: Row) -> None:
        self._write(self._insert, row)

    def on_update(self, table: TableIdentifier, row: Row, identity: Row | None) -> None:
        """Replace the row. Columns absent from ``row`` keep their stored values (unchanged
        TOAST). When ``identity`` holds a different key the row moves to its new key."""
        with self._dispatch_lock:
            subs = self._subs
            pending: Pending = [] if subs else None
            try:
                with self._lock:
                    self._version += 1
                    try:
                        self._update(row, identity, pending, None)
                    finally:
                        self._version += 1
            finally:
                if pending:
                    self._dispatch(subs, pending)

    def on_delete(self, table: TableIdentifier, identity: Row) -> None:
        """Delete by the key fields in ``identity``; deleting a missing row does nothing."""
        self._write(self._delete, identity)

    def on_truncate(self, table: TableIdentifier) -> None:
        """Remove every row. Listeners receive ``(None, None)``."""
        self._write(self._truncate, None)

    def apply_changes(self, table: TableIdentifier, events: Sequence[ChangeEvent]) -> None:
        """Fast path: apply ``events`` in order under one lock acquisition.

        Readers see the state before or after the whole batch. If an event fails (e.g. a row
        without its key fields) the events before it stay applied and ``BatchApplyError(index)``
        says which one failed (its cause is the original error).
        """
        with self._dispatch_lock:
            subs = self._subs
            pending: Pending = [] if subs else None
            try:
                with self._lock:
                    self._version += 1
                    try:
                        update = self._update
                        key_of = self._key_of
                        put = self._put
                        discard = self._discard
                        i = 0
                        try:
                            # Inserts and deletes inlined (one call less per change).
                            for i, ev in enumerate(events):  # noqa: B007 - i used on error
                                action = ev.action
                                if action is _UPDATE:
                                    new = ev.new_values
                                    update(new, ev.old_values, pending, ev.unchanged_toast)  # type: ignore[arg-type]
                                elif action is _INSERT:
                                    row = ev.new_values
                                    try:
                                        key = key_of(row)  # type: ignore[arg-type]
                                    except (KeyError, TypeError):
                                        key = self._key(row, "INSERT row")
                                    put(key, row, pending)  # type: ignore[arg-type]
                                elif action is _DELETE:
                                    ident = ev.old_values or ev.new_values
                                    try:
                                        key = key_of(ident)  # type: ignore[arg-type]
                                    except (KeyError, TypeError):
                                        key = self._key(ident, "DELETE identity")
                                    discard(key, pending)
                                elif action is _TRUNCATE:
                                    self._truncate(None, pending)
                        except Exception as exc:
                            if i:
                                self._position = events[i - 1].position
                            raise BatchApplyError(
                                i,
                                f"table {self._table}: change #{i} ({events[i].action}) "
                                f"failed: {exc}",
                            ) from exc
                        if events:
                            self._position = events[-1].position
                    finally:
                        self._version += 1
            finally:
                if pending:
                    self._dispatch(subs, pending)

    def set_change_position(self, position: Position) -> None:
        """Record the source position of the changes being applied (see ``position``)."""
        self._position = position

    @property
    def position(self) -> Position | None:
        """The source position of the last change applied (None before any change)."""
        return self._position

    @property
    def table(self) -> TableIdentifier | None:
        return self._table

    @property
    def columns(self) -> tuple[ColumnDefinition, ...]:
        return self._columns

    @property
    def key_fields(self) -> tuple[str, ...]:
        """The fields that identify a row (empty before ``on_init``)."""
        return self._key_fields

    @property
    def baseline_complete(self) -> bool:
        return self._baseline_complete

    def is_durable(self) -> bool:
        """Always false: memory state survives a restart only through an engine snapshot."""
        return False

    def supports_consistent_snapshot(self) -> bool:
        return True

    def on_close(self, table: TableIdentifier) -> None:
        """Marks the target closed; stored rows stay readable."""
        self._closed = True

    # ------------------------------------------------------------------ reads
    def count(self) -> int:
        return len(self._rows)

    @property
    def version(self) -> int:
        """A counter that changes with every write (odd while a write is in progress): readers
        such as paged listings cache by it."""
        return self._version

    def keys(self) -> list[Any]:
        """The keys of every stored row, as of the call (no row copies)."""
        with self._lock:
            return list(self._rows)

    def stored_key_fields(self, table: TableIdentifier) -> tuple[str, ...]:
        """The key fields (``laredo.ListsKeys``): :attr:`key_fields`."""
        return self._key_fields

    def stored_keys(self, table: TableIdentifier) -> list[tuple[Any, ...]]:
        """Every stored row's key as a tuple of :attr:`key_fields` values, as of the call
        (``laredo.ListsKeys``: an on-demand backfill removes the keys its source lacks)."""
        with self._lock:
            keys = list(self._rows)
        if len(self._key_fields) == 1:
            return [(k,) for k in keys]
        return keys

    def items(self) -> Iterator[tuple[Any, Row]]:
        """``(key, row copy)`` pairs as of the call (the engine's TTL scan uses it)."""
        with self._lock:
            pairs = list(self._rows.items())
        copy = self._row_copy
        for key, row in pairs:
            yield key, copy(row)

    def export_snapshot(self) -> list[Row]:
        """Copies of every stored row, consistent as of one instant."""
        with self._lock:
            rows = list(self._rows.values())
        copy = self._row_copy
        return [copy(r) for r in rows]

    # ------------------------------------------------------------------ chunked baselines
    def save_progress(self, table: TableIdentifier, record: str | None) -> None:
        """Keep a chunked baseline's progress (``laredo.ProgressTarget``): it goes into this
        target's snapshots (``TableSnapshotInfo.progress``), so a restart restored from one
        continues the baseline after the record's key instead of starting over. A durable
        subclass must keep the record with its rows, or opt out (``save_progress = None``)."""
        self._progress = record

    def load_progress(self, table: TableIdentifier) -> str | None:
        """The progress record saved last or restored from a snapshot (None: none)."""
        return self._progress

    def restore_snapshot(self, info: TableSnapshotInfo, rows: Iterable[Row]) -> None:
        """Replace the whole state with ``rows`` (indexes rebuilt) and take the snapshot's
        chunked-baseline progress. All or nothing: a bad row raises ``TargetError`` naming it
        and leaves the previous state in place.

        If ``on_init`` was not called yet, the snapshot's table and columns initialise it.
        Listeners receive ``(None, None)`` then ``(None, value)`` for every restored row.
        """
        if self._table is None:
            self.on_init(info.table, info.columns)
        install = self._replace_state(rows)
        with self._dispatch_lock:
            subs = self._subs
            with self._lock:
                self._version += 1
                try:
                    values = install()
                    self._baseline_complete = True
                    self._progress = info.progress
                finally:
                    self._version += 1
            if subs:
                pending: list[tuple[Any, Any]] = [(None, None)]
                pending.extend((None, v) for v in values)
                self._dispatch(subs, pending)

    def _arity(self, what: str, fields: tuple[str, ...], values: tuple[Any, ...]) -> None:
        names = ", ".join(fields) or "<not initialised>"
        raise ValueError(
            f"table {self._table}: {what} takes {len(fields)} value(s) ({names}); got {len(values)}"
        )

    # ------------------------------------------------------------------ listeners
    def listen(self, fn: Listener, replay_existing: bool = False) -> Callable[[], None]:
        """Call ``fn(old, new)`` after every change; returns an ``unsubscribe()`` function.

        INSERT gives ``(None, new)``, UPDATE ``(old, new)``, DELETE ``(old, None)``, TRUNCATE
        ``(None, None)``. With ``replay_existing`` every current value is first delivered as an
        insert, with no gap or duplicate against later changes. Calls happen on the writer's
        thread after the data lock is released, in apply order; an exception from ``fn`` is
        logged and counted in ``listener_errors``. After ``unsubscribe()`` returns, ``fn`` is
        not called again.
        """
        sub = Subscription(fn)
        with self._dispatch_lock:
            with self._lock:
                self._subs = (*self._subs, sub)
                existing = self._listener_values() if replay_existing else []
            if existing:
                self._dispatch((sub,), [(None, v) for v in existing])
        return self._unsubscriber(sub)

    def listen_lazily(self, fn: Listener) -> tuple[Iterator[tuple[None, Any]], Callable[[], None]]:
        """``listen(fn, replay_existing=True)`` for a reader that streams: returns the current
        values as an iterator of ``(None, value)`` and ``unsubscribe()``; ``fn`` gets only the
        changes after them. The writer's locks are held just to copy the stored values'
        references; each value is decoded as the caller iterates, outside every lock. The
        iterator holds the values as of registration: the caller hands them on before any
        change ``fn`` received, and then there is no gap or duplicate."""
        sub = Subscription(fn)
        with self._dispatch_lock, self._lock:
            self._subs = (*self._subs, sub)
            existing = self._listener_values()
        out = self._out

        def values() -> Iterator[tuple[None, Any]]:
            for v in existing:
                yield None, out(v)

        return values(), self._unsubscriber(sub)

    def _unsubscriber(self, sub: Subscription) -> Callable[[], None]:
        def unsubscribe() -> None:
            with self._dispatch_lock, self._lock:
                sub.active = False
                self._subs = tuple(s for s in self._subs if s is not sub)

        return unsubscribe

    def _dispatch(self, subs: tuple[Subscription, ...], pending: list[tuple[Any, Any]]) -> None:
        out = self._out
        for old, new in pending:
            for sub in subs:
                if not sub.active:
                    continue
                try:
                    sub.fn(out(old), out(new))
                except Exception:
                    self.listener_errors += 1
                    logger.exception(
                        "listener %r of %s target for %s raised; skipped",
                        sub.fn,
                        self.plugin_name,
                        self._table,
                        extra={"table": str(self._table)},
                    )

    # ------------------------------------------------------------------ write path
    def _write(self, op: Callable[[Any, Pending], None], arg: Any) -> None:
        with self._dispatch_lock:
            subs = self._subs
            pending: Pending = [] if subs else None
            try:
                with self._lock:
                    self._version += 1
                    try:
                        op(arg, pending)
                    finally:
                        self._version += 1
            finally:
                if pending:
                    self._dispatch(subs, pending)

    def _key(self, row: Mapping[str, Any] | None, what: str) -> Any:
        try:
            return self._key_of(row)  # type: ignore[arg-type]
        except KeyError as exc:
            raise TerminalTargetError(
                f"table {self._table}: {what} is missing key field {exc.args[0]!r} "
                f"(key fields: {', '.join(self._key_fields)}; got fields: "
                f"{', '.join(map(str, row or ())) or 'none'})"
            ) from None
        except TypeError:
            if row is None:
                raise TargetError(f"table {self._table}: {what} has no values") from None
            if self._table is None:
                raise TargetError(
                    f"{self.plugin_name} target: on_init was not called before the first row"
                ) from None
            raise

    def _insert(self, row: Row, pending: Pending) -> None:
        try:
            key = self._key_of(row)
        except (KeyError, TypeError):
            key = self._key(row, "INSERT row")
        try:
            self._put(key, row, pending)
        except TypeError:
            self._check_hashable(key)
            raise

    def _update(
        self,
        new: Row,
        identity: Row | None,
        pending: Pending,
        unchanged: frozenset[str] | None,
    ) -> None:
        try:
            key = self._key_of(new)
        except (KeyError, TypeError):
            key = self._key(new, "UPDATE row")
        if identity:
            try:
                old_key = self._key_of(identity)
            except KeyError:
                old_key = key
        else:
            old_key = key
        rows = self._rows
        try:
            stored = rows.get(old_key)
        except TypeError:
            self._check_hashable(old_key)
            raise
        if stored is None:
            row = new
        elif unchanged:
            prev = self._row_of(stored)
            row = {**prev, **new}
            for col in unchanged:
                if col in prev:
                    row[col] = prev[col]
        elif self._covers(stored, new):
            row = new
        else:
            row = {**self._row_of(stored), **new}
        try:
            if old_key == key:
                self._put(key, row, pending, MISSING, stored)
            elif stored is not None:
                self._put(key, row, pending, old_key)
            else:
                self._put(key, row, pending)
        except TypeError:
            self._check_hashable(key)
            raise

    def _delete(self, identity: Row | None, pending: Pending) -> None:
        try:
            key = self._key_of(identity)  # type: ignore[arg-type]
        except (KeyError, TypeError):
            key = self._key(identity, "DELETE identity")
        try:
            self._discard(key, pending)
        except TypeError:
            self._check_hashable(key)
            raise

    def _truncate(self, _arg: Any, pending: Pending) -> None:
        self._clear(pending)

    def _schema_change_response(
        self,
        table: TableIdentifier,
        old_columns: Sequence[ColumnDefinition],
        new_columns: Sequence[ColumnDefinition],
        *,
        allow_added: bool,
    ) -> SchemaChangeResponse:
        """Shared schema-change policy; on CONTINUE the target's columns are updated."""
        old_by = {c.name: c for c in old_columns}
        new_by = {c.name: c for c in new_columns}
        reasons = []
        for name, col in old_by.items():
            nc = new_by.get(name)
            if nc is None:
                reasons.append(f"column {name!r} was dropped")
            elif (nc.type, nc.type_oid) != (col.type, col.type_oid):
                reasons.append(f"column {name!r} changed type {col.type} -> {nc.type}")
        added = [n for n in new_by if n not in old_by]
        if added and not allow_added:
            reasons.append(f"column(s) {', '.join(added)} were added")
        new_pk = tuple(primary_key_columns(tuple(new_columns)))
        if new_pk and new_pk != self.key_fields:
            reasons.append(f"key changed {', '.join(self.key_fields)} -> {', '.join(new_pk)}")
        missing = [f for _, f in self._configured_fields() if f not in new_by]
        if missing:
            reasons.append(f"configured field(s) {', '.join(missing)} no longer exist")
        if reasons:
            return SchemaChangeResponse(
                SchemaChangeAction.RE_BASELINE, f"table {table}: " + "; ".join(reasons)
            )
        with self._lock:
            self._columns = tuple(new_columns)
        msg = f"table {table}: added column(s) {', '.join(added)}" if added else ""
        return SchemaChangeResponse(SchemaChangeAction.CONTINUE, msg)

    def _check_hashable(self, key: Any) -> None:
        try:
            hash(key)
        except TypeError:
            raise TargetError(
                f"table {self._table}: key {key!r} (fields {', '.join(self._key_fields)}) is "
                f"not hashable; key fields must hold scalar values"
            ) from None


def _not_initialised(row: Mapping[str, Any]) -> Any:
    raise TypeError("not initialised")
