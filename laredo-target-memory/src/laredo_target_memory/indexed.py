"""``IndexedTarget``: a table's rows in memory, keyed by primary key, with secondary indexes."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from laredo.batches import ChangeBatch, RowBatch
from laredo.errors import BatchApplyError, ConfigError, TargetError
from laredo.types import (
    ChangeAction,
    ChangeEvent,
    ColumnDefinition,
    IndexDefinition,
    Position,
    Row,
    SchemaChangeAction,
    SchemaChangeResponse,
    TableIdentifier,
)

from ._base import MISSING, MemoryTargetBase, Pending, RowStore, key_getter
from .codec import RowCodec
from .compact import CompactStore
from .indexes import (
    Dups,
    KeyIndexView,
    SecondaryIndex,
    UniqueIndex,
    fill_indexes,
    make_index,
)
from .options import (
    LOOKUP_INDEX,
    STORAGES,
    IndexedMemoryOptions,
    Storage,
    index_problems,
    lookup_field_problems,
    normalize_indexes,
)
from .tuples import put_all, tuple_key_getter
from .view import Loader, RowView

logger = logging.getLogger(__name__)

_INSERT = ChangeAction.INSERT
_UPDATE = ChangeAction.UPDATE
_DELETE = ChangeAction.DELETE
_TRUNCATE = ChangeAction.TRUNCATE


class IndexedTarget(MemoryTargetBase[Row]):
    """Keeps a table's rows in memory, keyed by primary key, with secondary indexes.

    ``IndexedTarget(lookup_fields=["email"], indexes=[laredo.Index("by_team", ["team_id"])])``

    * Key: the primary key from the column definitions, else ``lookup_fields``. A single-column
      key is stored as the raw value, a composite one as a tuple; ``get(*values)`` takes the key
      values in key order.
    * ``lookup(*values)`` finds one row by ``lookup_fields`` (a unique index; without
      ``lookup_fields`` it is ``get``). ``lookup_all(index, *values)`` lists the rows of any
      index (``"lookup"`` names the lookup index), ``lookup_by(index, *values)`` gives one.
    * ``get``/``lookup``/``lookup_all`` return read-only row views (:class:`~.view.RowView`,
      packed and compact storage: built without unpacking the row, values converted when read,
      a snapshot of the row as it was read); ``dict(row)`` gives a dict you own. ``all()``,
      exports and listeners give new dicts. Nested values kept by reference (JSON
      ``dict``/``list``) are shared: treat them as read-only.
    * Reads are consistent while a writer applies changes: they see whole batches (a whole
      source transaction, or one chunk of a transaction too big to hold; see the README).
    * Unique indexes tolerate transient duplicates (two rows swapping a value inside one
      transaction): the most recently written row answers, and deleting one keeps the other.
    * ``listen(fn, replay_existing=False)`` calls ``fn(old, new)`` per change; truncate gives
      ``(None, None)``.
    * ``storage``: ``"packed"`` (default) keeps each row as one packed ``bytes`` object
      (:mod:`laredo_target_memory.codec`: about a quarter of a dict row's memory, invisible to
      the garbage collector; a read unpacks it). ``"compact"`` also packs rows into pages found
      through an array-based key index (:mod:`laredo_target_memory.compact`): least memory with
      integer primary keys, slower writes. ``"dict"`` keeps row dicts (fastest writes, most
      memory). Values come back with the same types in every mode.
    * Not durable: the engine keeps it across restarts through snapshots.
    """

    plugin_name = "indexed-memory"

    def __init__(
        self,
        lookup_fields: Sequence[str] | str = (),
        indexes: Iterable[IndexDefinition | Mapping[str, Any] | Any] = (),
        storage: Storage = "packed",
        *,
        options: IndexedMemoryOptions | None = None,
    ) -> None:
        """``IndexedTarget(lookup_fields=[...], indexes=[...], storage="packed")``, or
        ``options=`` a validated :class:`IndexedMemoryOptions` (what the plugin registry
        passes, see :meth:`from_options`). Bad definitions raise ``ConfigError`` listing every
        problem."""
        super().__init__()
        if options is not None:
            if lookup_fields or indexes:
                raise TypeError("IndexedTarget: give options= or lookup_fields/indexes, not both")
            lf = tuple(options.lookup_fields)
            defs = options.index_definitions()
            storage = options.storage
        else:
            if isinstance(lookup_fields, str):
                lookup_fields = [lookup_fields]
            lf = tuple(lookup_fields or ())
            problems = lookup_field_problems(lf)
            pairs = normalize_indexes(indexes or (), problems)
            problems += index_problems(pairs)
            if storage not in STORAGES:
                problems.append(f"storage: use one of {', '.join(STORAGES)} (got {storage!r})")
            if problems:
                raise ConfigError([f"indexed-memory target: {p}" for p in problems])
            defs = [d for _, d in pairs]
        self._lookup_fields: tuple[str, ...] = lf
        self._index_defs: tuple[IndexDefinition, ...] = tuple(defs)
        self._lookup_index: UniqueIndex | None = None
        self._indexes: tuple[SecondaryIndex, ...] = tuple(make_index(d) for d in defs)
        self._by_name: dict[str, SecondaryIndex] = {i.name: i for i in self._indexes}
        self.storage: Storage = storage
        self._codec = RowCodec(detach=storage != "compact")
        if storage == "dict":
            self._pack: Callable[[Row], Any] = dict
            self._unpack: Callable[[Any], Row] = dict
            self._view: Callable[[Any], Row] = _stored_dict
            self._read_view: Callable[[Any], Mapping[str, Any]] = dict
            self._loader: Loader | None = None
        else:
            self._pack = self._codec.pack
            self._unpack = self._view = self._codec.unpack
            self._read_view = self._codec.view
            self._loader = self._codec.load
        self._rows = self._new_store()

    @classmethod
    def from_options(cls, options: IndexedMemoryOptions) -> IndexedTarget:
        """A target from validated options (the plugin registry's factory)."""
        return cls(options=options)

    def _new_store(self) -> RowStore:
        return CompactStore() if self.storage == "compact" else {}

    # ------------------------------------------------------------------ configuration
    @property
    def lookup_fields(self) -> tuple[str, ...]:
        return self._lookup_fields

    @property
    def indexes(self) -> tuple[IndexDefinition, ...]:
        """The configured secondary index definitions (snapshot headers record them)."""
        return self._index_defs

    def index_names(self) -> list[str]:
        return list(self._by_name)

    def _fallback_key_fields(self) -> tuple[str, ...]:
        return self._lookup_fields

    def _no_key_hint(self) -> str:
        return "lookup_fields"

    def _configured_fields(self) -> list[tuple[str, str]]:
        out = [("lookup field", f) for f in self._lookup_fields]
        for d in self._index_defs:
            out.extend((f"index {d.name!r} field", f) for f in d.fields)
        return out

    def _on_columns(self, columns: tuple[ColumnDefinition, ...]) -> bool:
        if columns:
            self._codec.set_names([c.name for c in columns])
        want_lookup = bool(self._lookup_fields) and self._lookup_fields != self._key_fields
        had_lookup = self._lookup_index is not None
        if want_lookup == had_lookup and (
            not had_lookup or self._lookup_index.fields == self._lookup_fields  # type: ignore[union-attr]
        ):
            return False
        self._install_indexes(*self._fresh_indexes())
        return True

    def _fresh_indexes(self) -> tuple[tuple[SecondaryIndex, ...], UniqueIndex | None]:
        lookup = None
        if self._lookup_fields and self._lookup_fields != self._key_fields:
            lookup = UniqueIndex(LOOKUP_INDEX, self._lookup_fields, True)
        secondary = tuple(make_index(d) for d in self._index_defs)
        return ((lookup, *secondary) if lookup else secondary), lookup

    def _install_indexes(
        self, indexes: tuple[SecondaryIndex, ...], lookup: UniqueIndex | None
    ) -> None:
        self._indexes = indexes
        self._lookup_index = lookup
        self._by_name = {i.name: i for i in indexes}

    # ------------------------------------------------------------------ stored form
    def _row_of(self, stored: Any) -> Row:
        return self._view(stored)

    def _row_copy(self, stored: Any) -> Row:
        return self._unpack(stored)

    def _covers(self, stored: Any, new: Row) -> bool:
        if self.storage == "dict":
            return stored.keys() <= new.keys()  # type: ignore[no-any-return]
        codec = self._codec
        # Every stored row has only table columns unless a row with others was stored.
        return not codec.irregular and codec.names_set <= new.keys()

    def _out(self, value: Any) -> Any:
        return None if value is None else self._unpack(value)

    def _update(
        self,
        new: Row,
        identity: Row | None,
        pending: Pending,
        unchanged: frozenset[str] | None,
    ) -> None:
        # Fast path of the stream (packed storage, no index, no listener): a complete new row
        # under an unchanged key replaces the stored one without reading it.
        codec = self._codec
        if (
            pending is None
            and not unchanged
            and not self._indexes
            and not codec.irregular
            and self.storage != "dict"
            and codec.names_set <= new.keys()
        ):
            key_of = self._key_of
            try:
                key = key_of(new)
                same = not identity or key_of(identity) == key
            except (KeyError, TypeError):
                same = False
            if same:
                packed = codec.fast(new)
                if packed is None:
                    packed = codec.pack(new)
                try:
                    self._rows[key] = packed
                except TypeError:
                    self._check_hashable(key)
                    raise
                return
        super()._update(new, identity, pending, unchanged)

    # ------------------------------------------------------------------ batches
    def _tuple_key(
        self, names: tuple[str, ...], raw: frozenset[int] = frozenset()
    ) -> Callable[[Sequence[Any]], Any] | None:
        """``values -> key`` for value tuples in ``names`` order, when those are exactly the
        codec's columns and hold the key (packed or compact storage) at positions not in
        ``raw`` (a ``RowBatch``'s raw columns: their tuple values are not the row's); else
        None."""
        if self.storage == "dict" or names != self._codec.names or not self._key_fields:
            return None
        found = tuple_key_getter(names, self._key_fields)
        return None if found is None or found[0] & raw else found[1]

    def apply(
        self, table: TableIdentifier, changes: Sequence[ChangeEvent], complete: bool = True
    ) -> None:
        """The engine's door: a :class:`~laredo.batches.ChangeBatch` through
        :meth:`apply_change_batch` (value tuples), anything else through :meth:`apply_changes`."""
        if type(changes) is ChangeBatch:
            self.apply_change_batch(table, changes)
        else:
            self.apply_changes(table, changes)

    def apply_change_batch(self, table: TableIdentifier, batch: ChangeBatch) -> None:
        """Apply a :class:`~laredo.batches.ChangeBatch` from its value tuples (the
        ``ChangeBatchTarget`` fast path): same result, atomicity and errors as
        :meth:`apply_changes` on its events. Inserts, updates under an unchanged key and deletes
        are stored without building a row dict; updates with unchanged TOAST values or a key
        change, truncates, secondary indexes, listeners and dict storage take the reference
        path (events built for them), and so does a subclass that overrides
        :meth:`apply_changes` (its override sees every change, as before batches). A chunk of
        rows (``batch.rows``) is stored like a baseline chunk, each row an upsert."""
        reference = type(self).apply_changes is _REFERENCE_APPLY  # a subclass's override wins
        if batch.rows is not None and reference:
            self._upsert_rows(batch.rows, batch.position)
            return
        keyget = None
        if reference and not self._indexes and not self._subs and not self._codec.irregular:
            keyget = self._tuple_key(batch.names)
        if keyget is None:
            self.apply_changes(table, batch)
            return
        codec = self._codec
        ops = batch.ops
        with self._dispatch_lock, self._lock:
            self._version += 1
            try:
                rows = self._rows
                enc = codec.fast_values
                key_of = self._key_of
                i = 0
                try:
                    for i, op in enumerate(ops):  # noqa: B007 - i used on error
                        action = op[0]
                        if action is _DELETE:
                            try:
                                key = key_of(op[2])
                            except (KeyError, TypeError):
                                key = self._key(op[2], "DELETE identity")
                            rows.pop(key, None)
                            continue
                        new = op[1]
                        if (action is _INSERT or action is _UPDATE) and op[3] is None:
                            key = keyget(new)
                            old = op[2]
                            if not old or key_of(old) == key:
                                packed = enc(new)
                                if packed is not None:
                                    rows[key] = packed
                                    continue
                        # the reference path (it may change the layout, and a truncate
                        # replaces the store: read both again)
                        self._apply_event(batch.event(op))
                        enc = codec.fast_values
                        rows = self._rows
                except Exception as exc:
                    if i:
                        self._position = batch.position
                    raise BatchApplyError(
                        i, f"table {self._table}: change #{i} ({ops[i][0]}) failed: {exc}"
                    ) from exc
                self._position = batch.position
            finally:
                self._version += 1

    def _upsert_rows(self, chunk: RowBatch, position: Position) -> None:
        """A chunked backfill's rows (``ChangeBatch.rows``), stored as a baseline chunk is
        (:meth:`_insert_many`: in bulk where no key is held, else each row an upsert, listeners
        told as for the INSERTs); the same result as applying them as INSERT events."""
        self._store_many(chunk, at=position)

    def _apply_event(self, ev: ChangeEvent) -> None:
        """One change through the reference write path (lock held, no listeners)."""
        action = ev.action
        if action is _UPDATE:
            self._update(ev.new_values, ev.old_values, None, ev.unchanged_toast)  # type: ignore[arg-type]
        elif action is _INSERT:
            self._insert(ev.new_values, None)  # type: ignore[arg-type]
        elif action is _DELETE:
            self._delete(ev.old_values or ev.new_values, None)
        elif action is _TRUNCATE:
            self._truncate(None, None)

    # ------------------------------------------------------------------ storage (lock held)
    def _put(
        self,
        key: Any,
        row: Row,
        pending: Pending,
        moved_from: Any = MISSING,
        old: Any = MISSING,
    ) -> None:
        rows = self._rows
        if moved_from is not MISSING:
            self._move(key, row, pending, moved_from)
            return
        indexes = self._indexes
        if old is MISSING:
            if not indexes and pending is None:
                rows[key] = self._pack(row)  # nothing needs the row it replaces
                return
            old = rows.get(key)
        if indexes:
            prev = None if old is None else self._view(old)
            # Hot path, inlined: per index, compute the new (and old) value and move the key.
            done = 0
            try:
                for idx in indexes:
                    get = idx.getter
                    try:
                        nk = get(row)
                    except KeyError:
                        nk = idx.key(row)
                    m = idx.map
                    if prev is not None:
                        try:
                            ok = get(prev)
                        except KeyError:
                            ok = idx.key(prev)
                        if ok == nk:
                            done += 1
                            continue
                        if idx.unique:
                            idx.add(nk, key)
                            idx.remove(ok, key)
                        else:
                            bucket = m.get(nk)
                            if bucket is None:
                                m[nk] = {key: None}
                            else:
                                bucket[key] = None
                            bucket = m.get(ok)
                            if bucket is not None:
                                bucket.pop(key, None)
                                if not bucket:
                                    del m[ok]
                    elif idx.unique:
                        cur = m.setdefault(nk, key)
                        if cur is not key and cur != key:
                            idx.add(nk, key)
                    else:
                        bucket = m.get(nk)
                        if bucket is None:
                            m[nk] = {key: None}
                        else:
                            bucket[key] = None
                    done += 1
            except TypeError:
                self._undo_index(indexes, done, key, prev, row)
        packed = self._pack(row)
        rows[key] = packed
        if pending is not None:
            pending.append((old, packed))

    def _insert_many(self, rows: Sequence[Row], pending: Pending) -> None:
        """Bulk insert (baseline chunks): store rows first, then fill each index in one pass.

        Rows replacing an existing key, listeners (ordered notifications) or an unhashable index
        value fall back to the per-row path, which gives the same result and errors. A
        :class:`~laredo.batches.RowBatch` of the table's columns is packed from its value
        tuples (no row dict is built)."""
        if pending is not None:
            super()._insert_many(rows, pending)
            return
        store = self._rows
        key_of = self._key_of
        pack = self._pack
        indexes = self._indexes
        if not indexes and type(rows) is RowBatch:
            keyget = self._tuple_key(rows.names, rows.raw)
            if keyget is not None:
                keys = list(map(keyget, rows.values))
                put_all(store, keys, self._codec.pack_batch(rows), self._check_hashable)
                return
        if not indexes:
            codec = self._codec
            fast = dict if self.storage == "dict" else codec.fast
            row_keys: list[Any] = []
            row_packed: list[Any] = []
            for row in rows:
                try:
                    key = key_of(row)
                except (KeyError, TypeError):
                    key = self._key(row, "INSERT row")
                packed = fast(row)
                if packed is None:  # not the current layout's shape
                    packed = pack(row)
                    fast = codec.fast
                row_keys.append(key)
                row_packed.append(packed)
            put_all(store, row_keys, row_packed, self._check_hashable)
            return
        fresh: list[tuple[Any, Row]] = []
        for row in rows:
            try:
                key = key_of(row)
            except (KeyError, TypeError):
                key = self._key(row, "INSERT row")
            try:
                old = store.get(key)
            except TypeError:
                self._check_hashable(key)
                raise
            if old is None:
                store[key] = pack(row)
                fresh.append((key, row))
            else:
                self._index_fresh(fresh)
                fresh = []
                self._put(key, row, None, MISSING, old)
        self._index_fresh(fresh)

    def _index_fresh(self, fresh: list[tuple[Any, Row]]) -> None:
        """Add index entries for rows just stored under keys that held no row (lock held);
        ``fresh`` pairs each key with the row dict it was packed from."""
        if not fresh:
            return
        indexes = self._indexes
        try:
            fill_indexes(indexes, fresh)
        except TypeError:
            # An unhashable index value: take the chunk back out and redo it row by row, so
            # the rows before the bad one stay applied and the error names the index.
            for idx in indexes:
                for key, row in fresh:
                    with contextlib.suppress(TypeError):
                        idx.remove(idx.key(row), key)
            store = self._rows
            for key, _ in fresh:
                del store[key]
            for key, row in fresh:
                self._put(key, row, None)

    def _move(self, key: Any, row: Row, pending: Pending, moved_from: Any) -> None:
        rows = self._rows
        prev = rows[moved_from]
        if rows.get(key) is not None:  # another row already lives under the new key
            self._discard(key, pending)
        indexes = self._indexes
        if indexes:
            self._reindex(key, None, row)
            prev_row = self._view(prev)
            for idx in indexes:
                idx.remove(idx.key(prev_row), moved_from)
        del rows[moved_from]
        packed = self._pack(row)
        rows[key] = packed
        if pending is not None:
            pending.append((prev, packed))

    def _reindex(self, key: Any, old: Row | None, new: Row) -> None:
        indexes = self._indexes
        done = 0
        try:
            for idx in indexes:
                idx.replace(key, old, new)
                done += 1
        except TypeError:
            self._undo_index(indexes, done, key, old, new)

    def _undo_index(
        self,
        indexes: tuple[SecondaryIndex, ...],
        done: int,
        key: Any,
        old: Row | None,
        new: Row,
    ) -> None:
        """Roll back the first ``done`` indexes after ``indexes[done]`` met an unhashable value,
        then raise a TargetError naming it (the row is not stored)."""
        for undo in indexes[:done]:
            undo.undo(key, old, new)
        bad = indexes[done]
        raise TargetError(
            f"table {self._table}: index {bad.name!r} on {', '.join(bad.fields)}: value "
            f"{bad.key(new)!r} is not hashable; index only scalar columns"
        ) from None

    def _discard(self, key: Any, pending: Pending) -> None:
        old = self._rows.pop(key, None)
        if old is None:
            return
        indexes = self._indexes
        if indexes:
            prev = self._view(old)
            for idx in indexes:
                try:
                    ok = idx.getter(prev)
                except KeyError:
                    ok = idx.key(prev)
                if idx.unique:
                    idx.remove(ok, key)
                else:
                    m = idx.map
                    bucket = m.get(ok)
                    if bucket is not None:
                        bucket.pop(key, None)
                        if not bucket:
                            del m[ok]
        if pending is not None:
            pending.append((old, None))

    def _clear(self, pending: Pending) -> None:
        self._rows = self._new_store()
        for idx in self._indexes:
            idx.map = {}
        if pending is not None:
            pending.append((None, None))

    def _build(
        self, rows: Iterable[Row]
    ) -> tuple[RowStore, tuple[SecondaryIndex, ...], UniqueIndex | None]:
        """A complete new state from ``rows`` (later duplicates of a key win); raises
        TargetError on a row without its key or an unhashable index value. Indexes are
        filled chunk by chunk, so no copy of the rows is held."""
        key_of = self._key_of
        pack = self._pack
        store = self._new_store()
        indexes, lookup = self._fresh_indexes()
        chunk: list[tuple[Any, Row]] = []
        duplicates = False
        n = -1
        for n, row in enumerate(rows):
            try:
                key = key_of(row)
            except (KeyError, TypeError):
                key = self._key(row, f"row {n}")
            try:
                if key in store:
                    duplicates = True
                store[key] = pack(row)
            except TypeError:
                self._check_hashable(key)
                raise
            if indexes:
                chunk.append((key, row))
                if len(chunk) >= 10_000:
                    self._fill_new(indexes, chunk, n)
                    chunk = []
        if chunk:
            self._fill_new(indexes, chunk, n)
        if duplicates and indexes:
            # A key seen twice: its first row's index entries are stale; index again.
            indexes, lookup = self._fresh_indexes()
            unpack = self._unpack
            self._fill_new(indexes, [(k, unpack(v)) for k, v in store.items()], n)
        return store, indexes, lookup

    def _fill_new(
        self, indexes: tuple[SecondaryIndex, ...], pairs: list[tuple[Any, Row]], last: int
    ) -> None:
        try:
            fill_indexes(indexes, pairs)
        except TypeError:
            first = last - len(pairs) + 1
            for idx in indexes:
                for n, (_, row) in enumerate(pairs, start=first):
                    value = idx.key(row)
                    try:
                        hash(value)
                    except TypeError:
                        raise TargetError(
                            f"table {self._table}: row {n}: index {idx.name!r} value "
                            f"{value!r} is not hashable; index only scalar columns"
                        ) from None
            raise

    def _rebuild(self) -> None:
        unpack = self._unpack
        rows, indexes, lookup = self._build([unpack(v) for v in list(self._rows.values())])
        self._rows = rows
        self._install_indexes(indexes, lookup)

    def _replace_state(self, rows: Iterable[Row]) -> Callable[[], list[Any]]:
        new_rows, indexes, lookup = self._build(rows)

        def install() -> list[Any]:
            self._rows = new_rows
            self._install_indexes(indexes, lookup)
            return list(new_rows.values())

        return install

    def _listener_values(self) -> list[Any]:
        return list(self._rows.values())

    # ------------------------------------------------------------------ reads
    def get(self, *key_values: Any) -> Row | None:
        """The row with this primary key (values in key order), or None: a read-only
        :class:`~.view.RowView` (packed and compact storage), a new dict (dict storage)."""
        n = len(self._key_fields)
        if len(key_values) != n:
            self._arity("get()", self._key_fields, key_values)
        key = key_values[0] if n == 1 else key_values
        # an optimistic read (see ``_base.MemoryTargetBase``) and codec.view() inlined: this is
        # the hottest read (one call, not three)
        v = self._version
        try:
            stored = self._rows.get(key)
        except TypeError:
            raise
        except Exception:  # a compact store read while a writer changes it
            stored = MISSING
        if v & 1 or v != self._version or stored is MISSING:
            with self._lock:
                stored = self._rows.get(key)
        if stored is None:
            return None
        load = self._loader
        if load is None or type(stored) is dict:
            return self._read_view(stored)  # type: ignore[return-value]
        view = _new_view(RowView)  # RowView(load, stored) without its __init__ frame
        view._load = load
        view._packed = stored
        view._t = view._layout = None
        return view  # type: ignore[return-value]

    def lookup(self, *values: Any) -> Row | None:
        """The row whose ``lookup_fields`` equal ``values``, or None. A new dict."""
        v = self._version  # optimistic read, as in get()
        idx = self._lookup_index
        if idx is None:
            if len(values) != len(self._lookup_fields or self._key_fields):
                self._arity("lookup()", self._lookup_fields or self._key_fields, values)
            return self.get(*values)
        if len(values) != idx.nfields:
            self._arity("lookup()", idx.fields, values)
        ikey = values[0] if idx.nfields == 1 else values
        try:
            pk = idx.map.get(ikey, MISSING)
            if type(pk) is Dups:
                pk = pk[-1]
            row = None if pk is MISSING else self._rows.get(pk)
        except TypeError:
            raise
        except Exception:
            v = -1
        if v & 1 or v != self._version:
            with self._lock:
                idx = self._lookup_index or idx
                pk = idx.get(ikey)
                row = None if pk is MISSING else self._rows.get(pk)
        return None if row is None else self._read_view(row)  # type: ignore[return-value]

    def lookup_all(self, index_name: str, *values: Any) -> list[Row]:
        """Every row whose index ``index_name`` fields equal ``values`` (new dicts, in
        insertion order). Works for unique and non-unique indexes; ``"lookup"`` is the lookup
        index."""
        v = self._version  # optimistic read, as in get()
        idx = self._index(index_name)
        if len(values) != idx.nfields:
            self._arity(f"lookup_all({index_name!r})", idx.fields, values)
        ikey = values[0] if idx.nfields == 1 else values
        try:
            get = self._rows.get
            found = [r for pk in idx.keys_for(ikey) if (r := get(pk)) is not None]
        except TypeError:
            raise
        except Exception:
            v = -1
        if v & 1 or v != self._version:
            with self._lock:
                idx = self._index(index_name)  # a restore may have swapped the indexes
                get = self._rows.get
                found = [r for pk in idx.keys_for(ikey) if (r := get(pk)) is not None]
        view = self._read_view
        return [view(r) for r in found]  # type: ignore[misc]

    def lookup_by(self, index_name: str, *values: Any) -> Row | None:
        """One row of index ``index_name`` (the only one for a unique index), or None."""
        found = self.lookup_all(index_name, *values)
        return found[-1] if found else None

    def all(self) -> list[Row]:
        """Every row (new dicts), as of one instant."""
        return self.export_snapshot()

    def _index(self, name: str) -> SecondaryIndex:
        idx = self._by_name.get(name)
        if idx is None:
            if name == LOOKUP_INDEX and self._lookup_fields:
                return KeyIndexView(self._key_fields)
            known = ", ".join(self._by_name) or "none"
            raise LookupError(
                f"table {self._table}: indexed-memory target has no index {name!r} "
                f"(indexes: {known})"
            )
        return idx

    # ------------------------------------------------------------------ schema
    def on_schema_change(
        self,
        table: TableIdentifier,
        old_columns: Sequence[ColumnDefinition],
        new_columns: Sequence[ColumnDefinition],
    ) -> SchemaChangeResponse:
        """Added columns: CONTINUE. A dropped or retyped column, or a changed key: RE_BASELINE."""
        resp = self._schema_change_response(table, old_columns, new_columns, allow_added=True)
        if resp.action is SchemaChangeAction.CONTINUE and new_columns:
            self._codec.set_names([c.name for c in new_columns])
        return resp


_REFERENCE_APPLY = IndexedTarget.apply_changes
_new_view = object.__new__


def _stored_dict(stored: Any) -> Row:
    """A stored dict row as it is (``storage="dict"``), for reading only."""
    return stored  # type: ignore[no-any-return]


__all__ = ["LOOKUP_INDEX", "STORAGES", "IndexedTarget", "Storage", "key_getter"]
