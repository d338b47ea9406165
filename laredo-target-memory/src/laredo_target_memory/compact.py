"""``CompactStore``: packed rows in large pages, found through an array-based key index.

The default store is a dict ``key -> packed row``: per row a dict entry, the key object and a
``bytes`` object (33 bytes of header each). The compact store keeps no Python object per row:

* packed rows are copied into 1 MiB pages (``bytearray``); a row is its page, offset and length,
  packed into one ``int64`` of an ``array`` column indexed by a *slot* number (8 bytes per row);
* integer keys (the usual primary key) live in :class:`IntKeyIndex`, an open-addressing hash
  table over two arrays (key, slot): about 18 bytes per row instead of ~75 for a dict entry and
  an ``int`` object; other keys fall back to a dict ``key -> slot``;
* a baseline chunk (:meth:`CompactStore.put_batch`) is stored with one probe per key and
  C-level work for the rest: one page copy per page touched, locations computed by iterators;
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
from itertools import accumulate, compress, repeat
from operator import add, mul
from typing import Any

__all__ = ["PAGE_SIZE", "CompactStore", "IntKeyIndex"]

PAGE_SIZE = 1 << 20
"""Bytes per page; rows larger than an eighth of it are kept as separate objects."""

_BIG_ROW = PAGE_SIZE // 8
_BITS = 20  # a location: page << 40 | offset << 20 | length (offset, length < 2**20)
_MASK = (1 << _BITS) - 1
_UNIT = 1 << _BITS
_MIN_KEY = -(1 << 63)
_MAX_KEY = (1 << 63) - 1
_U64 = (1 << 64) - 1
_EMPTY = -1
_GONE = -2
_FREE = -2  # a slot whose row was deleted (in the location column)
_OBJECT = -1  # a slot whose row is kept as an object, not in a page
_MISSING: Any = object()
_ZERO = 0


class IntKeyIndex:
    """``int64 key -> slot`` by open addressing (CPython's dict probing), in two arrays.

    A key is its own hash (as CPython's ``int`` hash, without the call): probing starts at
    ``key & mask`` and perturbs with the key's bits. Load stays at or below 2/3; deletes leave
    tombstones until the next resize. The arrays and their mask are swapped together as one
    tuple, so a lock-free reader always probes one consistent table (and a probe always ends:
    there is always an empty entry)."""

    __slots__ = ("_state", "live", "used")

    def __init__(self, capacity: int = 8) -> None:
        self._state = self._table(capacity)
        self.live = 0
        self.used = 0
        """Entries holding a key or a tombstone."""

    @staticmethod
    def _table(capacity: int) -> tuple[array[int], array[int], int]:
        size = 8
        while size * 2 < capacity * 3:
            size *= 2
        return array("q", bytes(8 * size)), array("i", [_EMPTY]) * size, size - 1

    def get(self, key: int) -> int:
        """The slot of ``key``, or -1."""
        keys, slots, mask = self._state
        h = key
        perturb = h & _U64
        i = h & mask
        while True:
            s = slots[i]
            if s == _EMPTY:
                return -1
            if s >= 0 and keys[i] == key:
                return s
            perturb >>= 5
            i = (i * 5 + perturb + 1) & mask

    def add(self, key: int, slot: int) -> None:
        """Insert ``key`` (not present) with ``slot``."""
        if (self.used + 1) * 3 > (self._state[2] + 1) * 2:
            self._resize(self.live + 1)  # to a load of 1/3 to 4/9 (grows up to 2/3)
        keys, slots, mask = self._state
        h = key
        perturb = h & _U64
        i = h & mask
        while True:
            s = slots[i]
            if s < 0:
                keys[i] = key
                slots[i] = slot
                if s == _EMPTY:
                    self.used += 1
                self.live += 1
                return
            perturb >>= 5
            i = (i * 5 + perturb + 1) & mask

    def setdefault(self, key: int, slot: int) -> int:
        """The slot of ``key``; when absent, insert it with ``slot`` (one probe for both)."""
        if (self.used + 1) * 3 > (self._state[2] + 1) * 2:
            self._resize(self.live + 1)
        keys, slots, mask = self._state
        h = key
        perturb = h & _U64
        i = h & mask
        free = -1
        while True:
            s = slots[i]
            if s == _EMPTY:
                break
            if s >= 0:
                if keys[i] == key:
                    return s
            elif free < 0:
                free = i  # a tombstone: reuse it if the key is absent
            perturb >>= 5
            i = (i * 5 + perturb + 1) & mask
        if free >= 0:
            i = free
        else:
            self.used += 1
        keys[i] = key
        slots[i] = slot
        self.live += 1
        return slot

    def remove(self, key: int) -> int:
        """Remove ``key``; returns its slot, or -1 when absent."""
        keys, slots, mask = self._state
        h = key
        perturb = h & _U64
        i = h & mask
        while True:
            s = slots[i]
            if s == _EMPTY:
                return -1
            if s >= 0 and keys[i] == key:
                slots[i] = _GONE
                self.live -= 1
                return s
            perturb >>= 5
            i = (i * 5 + perturb + 1) & mask

    def _resize(self, live: int) -> None:
        old_keys, old_slots, _ = self._state
        new = self._table(max(8, live * 3 // 2))
        keys, slots, mask = new
        # the live entries, selected by C-level iterators; then one probe each (no tombstones
        # in the new table; the first probe is usually free)
        held = list(map(_ZERO.__le__, old_slots))
        for key, s in zip(compress(old_keys, held), compress(old_slots, held), strict=True):
            i = key & mask
            if slots[i] != _EMPTY:
                perturb = key & _U64
                while slots[i] != _EMPTY:
                    perturb >>= 5
                    i = (i * 5 + perturb + 1) & mask
            keys[i] = key
            slots[i] = s
        self._state = new
        self.used = self.live

    def __len__(self) -> int:
        return self.live

    def entries(self) -> list[tuple[int, int]]:
        """Every ``(key, slot)``, in table order."""
        keys, slots, _ = self._state
        return [(keys[i], s) for i, s in enumerate(slots) if s >= 0]

    def nbytes(self) -> int:
        keys, slots, _ = self._state
        return keys.itemsize * len(keys) + slots.itemsize * len(slots)


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
        # _slot() and _value() inlined (the read path of IndexedTarget.get). The probe reads
        # one consistent table, as IntKeyIndex.get does, so it always ends. An int outside
        # int64 is never in the table (no entry equals it) and is looked up in _other.
        if type(key) is int:
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
        if (ints.used + n) * 3 > (ints._state[2] + 1) * 2:
            ints._resize(ints.live + n)  # room for the whole chunk: no check per key
        tkeys, tslots, mask = ints._state
        base = slot = len(self._loc)
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
