"""``IndexedTarget``: raw rows in memory, keyed by primary key, with secondary indexes."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from operator import itemgetter
from typing import Any

from laredo.errors import ConfigError, TargetError
from laredo.types import (
    ColumnDefinition,
    IndexDefinition,
    Row,
    SchemaChangeAction,
    SchemaChangeResponse,
    TableIdentifier,
    primary_key_columns,
)

from ._base import MISSING, MemoryTargetBase, Pending, key_getter
from .options import (
    LOOKUP_INDEX,
    IndexedMemoryOptions,
    index_problems,
    lookup_field_problems,
    normalize_indexes,
)

logger = logging.getLogger(__name__)


class _Dups(list[Any]):
    """Several keys under one value of a unique index (transient inside a source transaction,
    or NULLs). ``get`` answers with the most recent one."""

    __slots__ = ()


class _Index:
    """A secondary index: ``value(s) -> primary key`` (unique) or ``-> {pk: None}`` (non-unique)."""

    __slots__ = ("_get", "fields", "map", "name", "nfields", "unique")

    def __init__(self, name: str, fields: tuple[str, ...], unique: bool) -> None:
        self.name = name
        self.fields = fields
        self.nfields = len(fields)
        self.unique = unique
        self.map: dict[Any, Any] = {}
        self._get = itemgetter(*fields)

    def fresh(self) -> _Index:
        return type(self)(self.name, self.fields, self.unique)

    def key(self, row: Mapping[str, Any]) -> Any:
        """The index value of ``row``; a missing field counts as None."""
        try:
            return self._get(row)
        except KeyError:
            if self.nfields == 1:
                return row.get(self.fields[0])
            return tuple([row.get(f) for f in self.fields])

    def replace(self, pk: Any, old: Row | None, new: Row) -> None:
        """Move ``pk`` from ``old``'s index value to ``new``'s (``old`` None: add)."""
        get = self._get
        try:
            nk = get(new)
        except KeyError:
            nk = self.key(new)
        if old is not None:
            try:
                ok = get(old)
            except KeyError:
                ok = self.key(old)
            if ok == nk:
                return
            self.add(nk, pk)
            self.remove(ok, pk)
        else:
            self.add(nk, pk)

    def undo(self, pk: Any, old: Row | None, new: Row) -> None:
        """Reverse ``replace(pk, old, new)``."""
        if old is not None:
            self.replace(pk, new, old)
        else:
            self.remove(self.key(new), pk)

    def add(self, ikey: Any, pk: Any) -> None:
        raise NotImplementedError

    def remove(self, ikey: Any, pk: Any) -> None:
        raise NotImplementedError

    def keys_for(self, ikey: Any) -> list[Any]:
        raise NotImplementedError


class _UniqueIndex(_Index):
    __slots__ = ()

    def add(self, ikey: Any, pk: Any) -> None:
        cur = self.map.setdefault(ikey, pk)
        if cur is pk or cur == pk:
            return
        if type(cur) is _Dups:
            if pk not in cur:
                cur.append(pk)
        else:
            self.map[ikey] = _Dups((cur, pk))

    def remove(self, ikey: Any, pk: Any) -> None:
        m = self.map
        cur = m.get(ikey, MISSING)
        if cur is MISSING:
            return
        if type(cur) is _Dups:
            if pk in cur:
                cur.remove(pk)
                if len(cur) == 1:
                    m[ikey] = cur[0]
        elif cur == pk:
            del m[ikey]

    def get(self, ikey: Any) -> Any:
        cur = self.map.get(ikey, MISSING)
        if type(cur) is _Dups:
            return cur[-1]
        return cur

    def keys_for(self, ikey: Any) -> list[Any]:
        cur = self.map.get(ikey, MISSING)
        if cur is MISSING:
            return []
        if type(cur) is _Dups:
            return list(cur)
        return [cur]


class _MultiIndex(_Index):
    __slots__ = ()

    def add(self, ikey: Any, pk: Any) -> None:
        bucket = self.map.get(ikey)
        if bucket is None:
            self.map[ikey] = {pk: None}
        else:
            bucket[pk] = None

    def remove(self, ikey: Any, pk: Any) -> None:
        bucket = self.map.get(ikey)
        if bucket is not None:
            bucket.pop(pk, None)
            if not bucket:
                del self.map[ikey]

    def keys_for(self, ikey: Any) -> list[Any]:
        bucket = self.map.get(ikey)
        return list(bucket) if bucket else []


def _fill_indexes(indexes: Sequence[_Index], pairs: list[tuple[Any, Row]]) -> None:
    """Add ``(key, row)`` pairs (keys that hold no entry yet) to each index, one index at a
    time. Raises TypeError on an unhashable index value (the caller cleans up)."""
    for idx in indexes:
        get = idx._get
        slow = idx.key
        m = idx.map
        if idx.unique:
            setdefault = m.setdefault
            for key, row in pairs:
                try:
                    nk = get(row)
                except KeyError:
                    nk = slow(row)
                cur = setdefault(nk, key)
                if cur is not key and cur != key:
                    idx.add(nk, key)
        else:
            mget = m.get
            for key, row in pairs:
                try:
                    nk = get(row)
                except KeyError:
                    nk = slow(row)
                bucket = mget(nk)
                if bucket is None:
                    m[nk] = {key: None}
                else:
                    bucket[key] = None


def _make_index(d: IndexDefinition) -> _Index:
    cls = _UniqueIndex if d.unique else _MultiIndex
    return cls(d.name, tuple(d.fields), d.unique)


class IndexedTarget(MemoryTargetBase[Row]):
    """Keeps a table's rows in memory, keyed by primary key, with secondary indexes.

    ``IndexedTarget(lookup_fields=["email"], indexes=[laredo.Index("by_team", ["team_id"])])``

    * Key: the primary key from the column definitions, else ``lookup_fields``. A single-column
      key is stored as the raw value, a composite one as a tuple; ``get(*values)`` takes the key
      values in key order.
    * ``lookup(*values)`` finds one row by ``lookup_fields`` (a unique index; without
      ``lookup_fields`` it is ``get``). ``lookup_all(index, *values)`` lists the rows of any
      index (``"lookup"`` names the lookup index), ``lookup_by(index, *values)`` gives one.
    * Every read returns copies: mutating a returned row does not change the target. Copies are
      shallow: treat nested JSON values (dicts, lists) as read-only.
    * Reads are consistent while a writer applies changes: they see whole batches.
    * Unique indexes tolerate transient duplicates (two rows swapping a value inside one
      transaction): the most recently written row answers, and deleting one keeps the other.
    * ``listen(fn, replay_existing=False)`` calls ``fn(old, new)`` per change; truncate gives
      ``(None, None)``.
    * Not durable: the engine keeps it across restarts through snapshots.
    """

    plugin_name = "indexed-memory"

    def __init__(
        self,
        lookup_fields: Sequence[str] | str = (),
        indexes: Iterable[IndexDefinition | Mapping[str, Any] | Any] = (),
        *,
        options: IndexedMemoryOptions | None = None,
    ) -> None:
        """``IndexedTarget(lookup_fields=[...], indexes=[...])``, or ``options=`` a validated
        :class:`IndexedMemoryOptions` (what the plugin registry passes, see
        :meth:`from_options`). Bad definitions raise ``ConfigError`` listing every problem."""
        super().__init__()
        if options is not None:
            if lookup_fields or indexes:
                raise TypeError("IndexedTarget: give options= or lookup_fields/indexes, not both")
            lf = tuple(options.lookup_fields)
            defs = options.index_definitions()
        else:
            if isinstance(lookup_fields, str):
                lookup_fields = [lookup_fields]
            lf = tuple(lookup_fields or ())
            problems = lookup_field_problems(lf)
            pairs = normalize_indexes(indexes or (), problems)
            problems += index_problems(pairs)
            if problems:
                raise ConfigError([f"indexed-memory target: {p}" for p in problems])
            defs = [d for _, d in pairs]
        self._lookup_fields: tuple[str, ...] = lf
        self._index_defs: tuple[IndexDefinition, ...] = tuple(defs)
        self._lookup_index: _UniqueIndex | None = None
        self._indexes: tuple[_Index, ...] = tuple(_make_index(d) for d in defs)
        self._by_name: dict[str, _Index] = {i.name: i for i in self._indexes}

    @classmethod
    def from_options(cls, options: IndexedMemoryOptions) -> IndexedTarget:
        """A target from validated options (the plugin registry's factory)."""
        return cls(options=options)

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
        want_lookup = bool(self._lookup_fields) and self._lookup_fields != self._key_fields
        had_lookup = self._lookup_index is not None
        if want_lookup == had_lookup and (
            not had_lookup or self._lookup_index.fields == self._lookup_fields  # type: ignore[union-attr]
        ):
            return False
        self._install_indexes(*self._fresh_indexes())
        return True

    def _fresh_indexes(self) -> tuple[tuple[_Index, ...], _UniqueIndex | None]:
        lookup = None
        if self._lookup_fields and self._lookup_fields != self._key_fields:
            lookup = _UniqueIndex(LOOKUP_INDEX, self._lookup_fields, True)
        secondary = tuple(_make_index(d) for d in self._index_defs)
        return ((lookup, *secondary) if lookup else secondary), lookup

    def _install_indexes(self, indexes: tuple[_Index, ...], lookup: _UniqueIndex | None) -> None:
        self._indexes = indexes
        self._lookup_index = lookup
        self._by_name = {i.name: i for i in indexes}

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
        if old is MISSING:
            old = rows.get(key)
        indexes = self._indexes
        if indexes:
            # Hot path, inlined: per index, compute the new (and old) value and move the key.
            done = 0
            try:
                for idx in indexes:
                    get = idx._get
                    try:
                        nk = get(row)
                    except KeyError:
                        nk = idx.key(row)
                    m = idx.map
                    if old is not None:
                        try:
                            ok = get(old)
                        except KeyError:
                            ok = idx.key(old)
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
                self._undo_index(indexes, done, key, old, row)
        rows[key] = row
        if pending is not None:
            pending.append((old, row))

    def _insert_many(self, rows: Sequence[Row], pending: Pending) -> None:
        """Bulk insert (baseline chunks): store rows first, then fill each index in one pass.

        Rows replacing an existing key, listeners (ordered notifications) or an unhashable index
        value fall back to the per-row path, which gives the same result and errors."""
        indexes = self._indexes
        if pending is not None or not indexes:
            super()._insert_many(rows, pending)
            return
        store = self._rows
        key_of = self._key_of
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
                new = dict(row)
                store[key] = new
                fresh.append((key, new))
            else:
                self._index_fresh(fresh)
                fresh = []
                self._put(key, dict(row), None, MISSING, old)
        self._index_fresh(fresh)

    def _index_fresh(self, fresh: list[tuple[Any, Row]]) -> None:
        """Add index entries for rows just stored under keys that held no row (lock held)."""
        if not fresh:
            return
        indexes = self._indexes
        try:
            _fill_indexes(indexes, fresh)
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
        self._reindex(key, None, row)
        del rows[moved_from]
        for idx in self._indexes:
            idx.remove(idx.key(prev), moved_from)
        rows[key] = row
        if pending is not None:
            pending.append((prev, row))

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
        self, indexes: tuple[_Index, ...], done: int, key: Any, old: Row | None, new: Row
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
        for idx in self._indexes:
            try:
                ok = idx._get(old)
            except KeyError:
                ok = idx.key(old)
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
        self._rows = {}
        for idx in self._indexes:
            idx.map = {}
        if pending is not None:
            pending.append((None, None))

    def _build(
        self, rows: Iterable[Row], copy: bool
    ) -> tuple[dict[Any, Row], tuple[_Index, ...], _UniqueIndex | None]:
        """A complete new state from ``rows`` (later duplicates of a key win); raises
        TargetError on a row without its key or an unhashable index value."""
        key_of = self._key_of
        new_rows: dict[Any, Row] = {}
        for n, row in enumerate(rows):
            try:
                key = key_of(row)
            except (KeyError, TypeError):
                key = self._key(row, f"row {n}")
            try:
                new_rows[key] = dict(row) if copy else row
            except TypeError:
                self._check_hashable(key)
                raise
        indexes, lookup = self._fresh_indexes()
        pairs = list(new_rows.items())
        try:
            _fill_indexes(indexes, pairs)
        except TypeError:
            for idx in indexes:
                for n, (_, row) in enumerate(pairs):
                    value = idx.key(row)
                    try:
                        hash(value)
                    except TypeError:
                        raise TargetError(
                            f"table {self._table}: row {n}: index {idx.name!r} value "
                            f"{value!r} is not hashable; index only scalar columns"
                        ) from None
            raise
        return new_rows, indexes, lookup

    def _rebuild(self) -> None:
        rows, indexes, lookup = self._build(list(self._rows.values()), copy=False)
        self._rows = rows
        self._install_indexes(indexes, lookup)

    def _replace_state(self, rows: Iterable[Row]) -> Callable[[], list[Any]]:
        new_rows, indexes, lookup = self._build(rows, copy=True)

        def install() -> list[Any]:
            self._rows = new_rows
            self._install_indexes(indexes, lookup)
            return list(new_rows.values())

        return install

    def _listener_values(self) -> list[Any]:
        return list(self._rows.values())

    def _out(self, value: Any) -> Any:
        return None if value is None else value.copy()

    # ------------------------------------------------------------------ reads
    def get(self, *key_values: Any) -> Row | None:
        """The row with this primary key (values in key order), or None. A copy."""
        n = len(self._key_fields)
        if len(key_values) != n:
            self._arity("get()", self._key_fields, key_values)
        key = key_values[0] if n == 1 else key_values
        # Optimistic read: no lock unless a write ran meanwhile (see _base.MemoryTargetBase).
        v = self._version
        row = self._rows.get(key)
        if v & 1 or v != self._version:
            with self._lock:
                row = self._rows.get(key)
        return None if row is None else row.copy()

    def lookup(self, *values: Any) -> Row | None:
        """The row whose ``lookup_fields`` equal ``values``, or None. A copy."""
        v = self._version  # optimistic read, as in get()
        idx = self._lookup_index
        if idx is None:
            if len(values) != len(self._lookup_fields or self._key_fields):
                self._arity("lookup()", self._lookup_fields or self._key_fields, values)
            return self.get(*values)
        if len(values) != idx.nfields:
            self._arity("lookup()", idx.fields, values)
        ikey = values[0] if idx.nfields == 1 else values
        pk = idx.map.get(ikey, MISSING)
        if type(pk) is _Dups:
            pk = pk[-1]
        row = None if pk is MISSING else self._rows.get(pk)
        if v & 1 or v != self._version:
            with self._lock:
                idx = self._lookup_index or idx
                pk = idx.get(ikey)
                row = None if pk is MISSING else self._rows.get(pk)
        return None if row is None else row.copy()

    def lookup_all(self, index_name: str, *values: Any) -> list[Row]:
        """Every row whose index ``index_name`` fields equal ``values`` (copies, in insertion
        order). Works for unique and non-unique indexes; ``"lookup"`` is the lookup index."""
        v = self._version  # optimistic read, as in get()
        idx = self._index(index_name)
        if len(values) != idx.nfields:
            self._arity(f"lookup_all({index_name!r})", idx.fields, values)
        ikey = values[0] if idx.nfields == 1 else values
        get = self._rows.get
        found = [r for pk in idx.keys_for(ikey) if (r := get(pk)) is not None]
        if v & 1 or v != self._version:
            with self._lock:
                idx = self._index(index_name)  # a restore may have swapped the indexes
                get = self._rows.get
                found = [r for pk in idx.keys_for(ikey) if (r := get(pk)) is not None]
        return [r.copy() for r in found]

    def lookup_by(self, index_name: str, *values: Any) -> Row | None:
        """One row of index ``index_name`` (the only one for a unique index), or None."""
        found = self.lookup_all(index_name, *values)
        return found[-1] if found else None

    def all(self) -> list[Row]:
        """Copies of every row, as of one instant."""
        return self.export_snapshot()

    def _index(self, name: str) -> _Index:
        idx = self._by_name.get(name)
        if idx is None:
            if name == LOOKUP_INDEX and self._lookup_fields:
                return _KeyIndexView(self._key_fields)
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
        return schema_change_response(self, table, old_columns, new_columns, allow_added=True)


class _KeyIndexView(_Index):
    """``lookup_all("lookup", ...)`` when the lookup fields are the primary key."""

    __slots__ = ()

    def __init__(self, fields: tuple[str, ...]) -> None:
        super().__init__(LOOKUP_INDEX, fields, True)

    def keys_for(self, ikey: Any) -> list[Any]:
        return [ikey]


def schema_change_response(
    target: MemoryTargetBase[Any],
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
    if new_pk and new_pk != target.key_fields:
        reasons.append(f"key changed {', '.join(target.key_fields)} -> {', '.join(new_pk)}")
    missing = [f for _, f in target._configured_fields() if f not in new_by]
    if missing:
        reasons.append(f"configured field(s) {', '.join(missing)} no longer exist")
    if reasons:
        return SchemaChangeResponse(
            SchemaChangeAction.RE_BASELINE, f"table {table}: " + "; ".join(reasons)
        )
    with target._lock:
        target._columns = tuple(new_columns)
    msg = f"table {table}: added column(s) {', '.join(added)}" if added else ""
    return SchemaChangeResponse(SchemaChangeAction.CONTINUE, msg)


__all__ = ["LOOKUP_INDEX", "IndexedTarget", "key_getter"]
