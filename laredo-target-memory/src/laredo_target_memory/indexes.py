"""Secondary indexes of ``IndexedTarget``: unique and non-unique, single or composite fields.

An index maps the value(s) of its fields to primary keys: a unique index to one key (several,
transiently, while a source transaction swaps a value between rows), a non-unique index to an
insertion-ordered set of keys. Indexes read values from row dicts; they hold keys, never rows.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from operator import itemgetter
from typing import Any

from laredo.types import IndexDefinition, Row

from ._base import MISSING
from .options import LOOKUP_INDEX

__all__ = [
    "Dups",
    "KeyIndexView",
    "MultiIndex",
    "SecondaryIndex",
    "UniqueIndex",
    "fill_indexes",
    "make_index",
]


class Dups(list[Any]):
    """Several keys under one value of a unique index (transient inside a source transaction,
    or NULLs). ``get`` answers with the most recent one."""

    __slots__ = ()


class SecondaryIndex:
    """A secondary index: ``value(s) -> primary key`` (unique) or ``-> {pk: None}`` (non-unique)."""

    __slots__ = ("fields", "getter", "map", "name", "nfields", "unique")

    def __init__(self, name: str, fields: tuple[str, ...], unique: bool) -> None:
        self.name = name
        self.fields = fields
        self.nfields = len(fields)
        self.unique = unique
        self.map: dict[Any, Any] = {}
        self.getter = itemgetter(*fields)

    def fresh(self) -> SecondaryIndex:
        return type(self)(self.name, self.fields, self.unique)

    def key(self, row: Mapping[str, Any]) -> Any:
        """The index value of ``row``; a missing field counts as None."""
        try:
            return self.getter(row)
        except KeyError:
            if self.nfields == 1:
                return row.get(self.fields[0])
            return tuple([row.get(f) for f in self.fields])

    def replace(self, pk: Any, old: Row | None, new: Row) -> None:
        """Move ``pk`` from ``old``'s index value to ``new``'s (``old`` None: add)."""
        get = self.getter
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


class UniqueIndex(SecondaryIndex):
    __slots__ = ()

    def add(self, ikey: Any, pk: Any) -> None:
        cur = self.map.setdefault(ikey, pk)
        if cur is pk or cur == pk:
            return
        if type(cur) is Dups:
            if pk not in cur:
                cur.append(pk)
        else:
            self.map[ikey] = Dups((cur, pk))

    def remove(self, ikey: Any, pk: Any) -> None:
        m = self.map
        cur = m.get(ikey, MISSING)
        if cur is MISSING:
            return
        if type(cur) is Dups:
            if pk in cur:
                cur.remove(pk)
                if len(cur) == 1:
                    m[ikey] = cur[0]
        elif cur == pk:
            del m[ikey]

    def get(self, ikey: Any) -> Any:
        cur = self.map.get(ikey, MISSING)
        if type(cur) is Dups:
            return cur[-1]
        return cur

    def keys_for(self, ikey: Any) -> list[Any]:
        cur = self.map.get(ikey, MISSING)
        if cur is MISSING:
            return []
        if type(cur) is Dups:
            return list(cur)
        return [cur]


class MultiIndex(SecondaryIndex):
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


def fill_indexes(indexes: Sequence[SecondaryIndex], pairs: list[tuple[Any, Row]]) -> None:
    """Add ``(key, row)`` pairs (keys that hold no entry yet) to each index, one index at a
    time. Raises TypeError on an unhashable index value (the caller cleans up)."""
    for idx in indexes:
        get = idx.getter
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


def make_index(d: IndexDefinition) -> SecondaryIndex:
    cls = UniqueIndex if d.unique else MultiIndex
    return cls(d.name, tuple(d.fields), d.unique)


class KeyIndexView(SecondaryIndex):
    """``lookup_all("lookup", ...)`` when the lookup fields are the primary key."""

    __slots__ = ()

    def __init__(self, fields: tuple[str, ...]) -> None:
        super().__init__(LOOKUP_INDEX, fields, True)

    def keys_for(self, ikey: Any) -> list[Any]:
        return [ikey]
