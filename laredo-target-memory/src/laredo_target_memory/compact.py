"""``CompactStore``: packed rows in large pages, found through an array-based key index.

The default store is a dict ``key -> packed row``: per row a dict entry, the key object and a
``bytes`` object (33 bytes of header each). The compact store keeps no Python object per row:

* packed rows are copied into 1 MiB pages (``bytearray``); a row is its page, offset and length,
  packed into one ``int64`` of an ``array`` column indexed by a *slot* number (8 bytes per row);
* integer keys (the usual primary key) live in :class:`~.keyindex.IntKeyIndex`: an array
  indexed by the key while keys are dense (4 bytes per key of a serial key), else an
  open-addressing hash table over two arrays (about 18 bytes per key); either way instead of
  ~75 for a dict entry and an ``int`` object; other keys fall back to a dict ``key -> slot``;
* a baseline chunk (:meth:`CompactStore.put_batch`) of new keys is stored by C-level work: the
  keys by slice assignment or ``map`` s, one page copy per page touched, locations computed by
  iterators;
* updates write the new version at the end of the current page and leave the old bytes as
  garbage; when garbage exceeds the live bytes, live rows are copied into fresh pages.

It behaves as a mapping of key to packed row (a ``bytes``-like copy, or the packed object itself
for rows that are not plain bytes) with the methods of a dict the target uses. Iteration follows
slot order: insertion order, except that slots freed by deletes are reused. Integer keys are
matched as integers (``1`` and ``1.0`` are different keys here, unlike in a dict).

Thread-safety: one writer at a time (the target's lock). Readers may call :meth:`get` without
the lock while a write runs: they may then get an exception or a wrong value, never hang; the
caller detects the concurrent write (the target's version counter) and reads again under the
lock.
"""

from __future__ import annotations

from array import array
from bisect import bisect_right
from collections.abc import Iterable, Iterator, Sequence
from itertools import accumulate, repeat
from operator import add, mul
from typing import Any

from .keyindex import EMPTY as _EMPTY
from .keyindex import IntKeyIndex

__all__ = ["PAGE_SIZE", "CompactStore", "IntKeyIndex"]  # IntKeyIndex: re-exported

PAGE_SIZE = 1 << 20
"""Bytes per page; rows larger than an eighth of it are kept as separate objects."""

_BIG_ROW = PAGE_SIZE // 8
_BITS = 20  # a location: page << 40 | offset << 20 | length (offset, length < 2**20)
_MASK = (1 << _BITS) - 1
_UNIT = 1 << _BITS
_MIN_KEY = -(1 << 63)
_MAX_KEY = (1 << 63) - 1
_U64 = (1 << 64) - 1
_FREE = -2  # a slot whose row was deleted (in the location column)
_OBJECT = -1  # a slot whose row is kept as an object, not in a page
_MISSING: Any = object()


def _locations(first: int, lens: list[int]) -> list[int]:
    """The locations of rows of lengths ``lens`` stored one after the other from location
    ``first`` in one page: ``first + (sum(lens[:j]) << 20) + lens[j]``, by C-level iterators
    (a list: ``array.fromlist`` takes it in one go, ``extend`` from an iterator is slower)."""
    return list(map(add, accumulate(map(mul, lens, repeat(_UNIT)), initial=first), lens))


class CompactStore:
    """Packed rows by key (see the module docstring)."""

    def __init__(self) -> None:
        self._reset()

    def _reset(self) -> None:
        self._ints = IntKeyIndex()
        self._other: dict[Any, int] = {}
        self._loc = array("q")  # page << 40 | offset << 20 | length; _OBJECT; _FREE
        self._objects: dict[int, Any] = {}  # slot -> packed row kept as an object
        self._free: list[int] = []
        self._pages: list[bytearray] = [bytearray(PAGE_SIZE)]
        self._page = 0
        self._off = 0
        self.live_bytes = 0
        self.garbage = 0
        """Page bytes no longer referenced (replaced or deleted rows, page tails)."""

    # -- lookups ---------------------------------------------------------------------------
    def _slot(self, key: Any) -> int:
        if type(key) is int and _MIN_KEY <= key <= _MAX_KEY:
            return self._ints.get(key)
        return self._other.get(key, -1)

    def _value(self, slot: int) -> Any:
        loc = self._loc[slot]
        if loc >= 0:
            off = (loc >> _BITS) & _MASK
            return self._pages[loc >> 40][off : off + (loc & _MASK)]
        return self._objects.get(slot)

    def get(self, key: Any, default: Any = None) -> Any:
        # _slot() and _value() inlined (the read path of IndexedTarget.get), as is
        # IntKeyIndex.get: one consistent table is read, so a probe always ends. An int
        # outside int64 is never in the index (no entry equals it) and is looked up in _other.
        if type(key) is int and (dense := self._ints.dense) is not None:
            base, column = dense
            j = key - base
            s = column[j] if 0 <= j < len(column) else _EMPTY
            if s < 0:
                s = self._other.get(key, -1) if self._other else -1
                if s < 0:
                    return default
        elif type(key) is int:
            keys, slots, mask = self._ints._state
            i = key & mask
            s = slots[i]
            if s < 0 or keys[i] != key:
                perturb = key & _U64
                while True:
                    if s == _EMPTY:
                        s = self._other.get(key, -1) if self._other else -1
                        if s < 0:
                            return default
                        break
                    if s >= 0 and keys[i] == key:
                        break
                    perturb >>= 5
                    i = (i * 5 + perturb + 1) & mask
                    s = slots[i]
        else:
            s = self._other.get(key, -1)
            if s < 0:
                return default
        loc = self._loc[s]
        if loc >= 0:
            off = (loc >> _BITS) & _MASK
            return self._pages[loc >> 40][off : off + (loc & _MASK)]
        value = self._objects.get(s)
        return default if value is None else value

    def __getitem__(self, key: Any) -> Any:
        value = self.get(key, _MISSING)
        if value is _MISSING:
            raise KeyError(key)
        return value

    def __contains__(self, key: object) -> bool:
        return self._slot(key) >= 0

    def __len__(self) -> int:
        return self._ints.live + len(self._other)

    # -- writes ----------------------------------------------------------------------------
    def __setitem__(self, key: Any, value: Any) -> None:
        if type(key) is int and _MIN_KEY <= key <= _MAX_KEY:
            free = self._free
            candidate = free[-1] if free else len(self._loc)
            s = self._ints.setdefault(key, candidate)
            if s == candidate:  # a new key (no key holds an unallocated slot)
                if free:
                    free.pop()
                else:
                    self._loc.append(_FREE)
        else:
            s = self._other.get(key, -1)
            if s < 0:
                s = self._new_slot()
                self._other[key] = s
        if self._loc[s] != _FREE:
            self._release(s)
        self._write(s, value)

    def put_many(self, items: Iterable[tuple[Any, Any]]) -> None:
        """``self[key] = value`` for each pair, in order: see :meth:`put_batch`."""
        pairs = list(items)
        self.put_batch([k for k, _ in pairs], [v for _, v in pairs])

    def put_batch(self, keys: Sequence[Any], values: Sequence[Any]) -> None:
        """``self[keys[j]] = values[j]`` for each ``j``, in order (a baseline chunk): the same
        state as that loop, faster. When every key is an int64, every value a small ``bytes``
        and no deleted slot awaits reuse, new keys get consecutive slots in one pass of probes
        and their rows are copied with one slice assignment per page (locations computed by
        C-level iterators); keys already present (or repeated in the chunk) are then stored in
        order through ``__setitem__``. Anything else goes through ``__setitem__`` row by row."""
        n = len(keys)
        if n != len(values):
            raise ValueError("put_batch: keys and values differ in length")
        if not n:
            return
        lens = list(map(len, values)) if set(map(type, values)) == {bytes} else None
        if (
            lens is None
            or self._free
            or set(map(type, keys)) != {int}
            or min(keys) < _MIN_KEY
            or max(keys) > _MAX_KEY
            or max(lens) > _BIG_ROW
        ):
            for key, value in zip(keys, values, strict=True):
                self[key] = value
            return
        ints = self._ints
        base = slot = len(self._loc)
        if ints.put_new(keys, base):  # the usual baseline: every key new
            self._append_rows(values, lens)
            return
        if ints.dense is not None:
            for key, value in zip(keys, values, strict=True):
                self[key] = value
            return
        ints.reserve(n)  # room for the whole chunk: no check per key
        tkeys, tslots, mask = ints._state
        reused = 0  # tombstones reused (they were counted in ``used`` already)
        again: list[int] = []  # positions whose key holds a row already
        for j, key in enumerate(keys):
            i = key & mask
            s = tslots[i]
            if s == _EMPTY:  # the usual case: a free entry at the first probe
                tkeys[i] = key
                tslots[i] = slot
                slot += 1
                continue
            perturb = key & _U64
            tomb = -1
            while True:
                if s == _EMPTY:
                    if tomb >= 0:
                        i = tomb
                        reused += 1
                    tkeys[i] = key
                    tslots[i] = slot
                    slot += 1
                    break
                if s >= 0:
                    if tkeys[i] == key:
                        again.append(j)
                        break
                elif tomb < 0:
                    tomb = i
                perturb >>= 5
                i = (i * 5 + perturb + 1) & mask
                s = tslots[i]
        fresh = slot - base
        ints.live += fresh
        ints.used += fresh - reused
        if again:
            skip = set(again)
            new_values: Sequence[Any] = [v for j, v in enumerate(values) if j not in skip]
            lens = [ln for j, ln in enumerate(lens) if j not in skip]
        else:
            new_values = values
        self._append_rows(new_values, lens)
        for j in again:
            self[keys[j]] = values[j]

    def _append_rows(self, values: Sequence[bytes], lens: list[int]) -> None:
        """Copy ``values`` (small ``bytes`` of lengths ``lens``) to the pages and append their
        locations to the slot column, in order."""
        m = len(values)
        if not m:
            return
        loc = self._loc
        pages = self._pages
        page, off = self._page, self._off
        total = sum(lens)
        if off + total <= PAGE_SIZE:  # the usual case: the chunk fits in the current page
            pages[page][off : off + total] = b"".join(values)
            loc.fromlist(_locations((page << 40) | (off << _BITS), lens))
            self._off = off + total
        else:
            cum = list(accumulate(lens, initial=0))
            start = 0
            while start < m:
                # the rows [start, end) that fit in the current page
                end = bisect_right(cum, cum[start] + PAGE_SIZE - off, start) - 1
                if end <= start:
                    self.garbage += PAGE_SIZE - off
                    pages.append(bytearray(PAGE_SIZE))
                    page += 1
                    off = 0
                    continue
                size = cum[end] - cum[start]
                pages[page][off : off + size] = b"".join(values[start:end])
                loc.fromlist(_locations((page << 40) | (off << _BITS), lens[start:end]))
                off += size
                start = end
            self._page, self._off = page, off
        self.live_bytes += total
        if self.garbage > max(self.live_bytes, 8 * PAGE_SIZE):
            self._compact()

    def _new_slot(self) -> int:
        if self._free:
            return self._free.pop()
        self._loc.append(_FREE)
        return len(self._loc) - 1

    def _release(self, slot: int) -> None:
        loc = self._loc[slot]
        if loc >= 0:
            n = loc & _MASK
            self.live_bytes -= n
            self.garbage += n
        else:
            self._objects.pop(slot, None)

    def _write(self, slot: int, value: Any) -> None:
        if type(value) is not bytes or len(value) > _BIG_ROW:
            self._objects[slot] = value
            self._loc[slot] = _OBJECT
            return
        n = len(value)
        off = self._off
        if off + n > PAGE_SIZE:
            self.garbage += PAGE_SIZE - off
            self._pages.append(bytearray(PAGE_SIZE))
            self._page = len(self._pages) - 1
            off = 0
        self._pages[self._page][off : off + n] = value
        self._loc[slot] = (self._page << 40) | (off << _BITS) | n
        self._off = off + n
        self.live_bytes += n
        if self.garbage > max(self.live_bytes, 8 * PAGE_SIZE):
            self._compact()

    def __delitem__(self, key: Any) -> None:
        if self.pop(key, _MISSING) is _MISSING:
            raise KeyError(key)

    def pop(self, key: Any, default: Any = _MISSING) -> Any:
        if type(key) is int and _MIN_KEY <= key <= _MAX_KEY:
            s = self._ints.remove(key)
        else:
            s = self._other.pop(key, -1)
        if s < 0:
            if default is _MISSING:
                raise KeyError(key)
            return default
        value = self._value(s)
        self._release(s)
        self._loc[s] = _FREE
        self._free.append(s)
        return value

    def clear(self) -> None:
        self._reset()

    def _compact(self) -> None:
        """Copy every live row into fresh pages (rows keep their slots)."""
        old = self._pages
        pages = [bytearray(PAGE_SIZE)]
        page = off = 0
        loc = self._loc
        for s, where in enumerate(loc):
            if where < 0:
                continue
            n = where & _MASK
            src = (where >> _BITS) & _MASK
            if off + n > PAGE_SIZE:
                pages.append(bytearray(PAGE_SIZE))
                page += 1
                off = 0
            pages[page][off : off + n] = old[where >> 40][src : src + n]
            loc[s] = (page << 40) | (off << _BITS) | n
            off += n
        self._pages = pages
        self._page = page
        self._off = off
        self.garbage = 0

    # -- iteration (slot order) ------------------------------------------------------------
    def _keys_by_slot(self) -> list[Any]:
        by_slot: list[Any] = [_MISSING] * len(self._loc)
        for key, s in self._ints.entries():
            by_slot[s] = key
        for key, s in self._other.items():
            by_slot[s] = key
        return by_slot

    def __iter__(self) -> Iterator[Any]:
        return iter(self.keys())

    def keys(self) -> list[Any]:
        return [k for k in self._keys_by_slot() if k is not _MISSING]

    def values(self) -> list[Any]:
        value = self._value
        return [value(s) for s, where in enumerate(self._loc) if where != _FREE]

    def items(self) -> list[tuple[Any, Any]]:
        value = self._value
        return [(k, value(s)) for s, k in enumerate(self._keys_by_slot()) if k is not _MISSING]

    def nbytes(self) -> int:
        """Bytes held by pages, the slot column and the integer key index (not the objects)."""
        cols = self._loc.itemsize * len(self._loc)
        return len(self._pages) * PAGE_SIZE + cols + self._ints.nbytes()
