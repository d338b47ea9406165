"""``IntKeyIndex``: ``int64 key -> slot`` for the compact store, in arrays (no object per key).

Two forms, chosen by the keys themselves:

* **dense** (the start, and the usual serial primary key): one ``int32`` array indexed by
  ``key - base`` (-1: absent) while the keys span at most ``DENSE_SPREAD`` times as many
  integers as there are keys, plus ``DENSE_SLACK``. A lookup is a subtraction and an index; a
  baseline of ascending keys is stored by one slice assignment; growing is an append (nothing
  is rehashed). 4 bytes per integer spanned.
* **hash**: open addressing over two arrays (key, slot), CPython's dict probing with the key as
  its own hash (``key & mask``, perturbed by the key's bits); load at most 2/3, deletes leave
  tombstones until the next resize. 12 bytes per entry, 18 to 36 per key.

The index turns from dense to hash once, when a key would leave the dense form too sparse, and
stays hash. Thread-safety: one writer (the store's). A lock-free reader reads ``dense`` and then
``_state``: each is swapped as one tuple, and arrays are only appended to or written entry by
entry in place, so a reader always indexes one consistent table and a probe always ends (a
table always has an empty entry); what it finds may be stale, which the caller detects.
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from itertools import compress, repeat
from operator import and_, ne, sub

__all__ = ["DENSE_SLACK", "DENSE_SPREAD", "IntKeyIndex"]

DENSE_SPREAD = 4
"""The dense form holds while the keys' span is at most this many times their count (plus
:data:`DENSE_SLACK`): at worst 16 bytes per key, less than the hash form's 18 to 36."""

DENSE_SLACK = 4096
"""Integers a dense index may span beyond :data:`DENSE_SPREAD` (16 KiB): small tables of
scattered keys stay dense."""

EMPTY = -1
_GONE = -2  # a tombstone (hash form)
_U64 = (1 << 64) - 1
_ZERO = 0


def _absent(n: int) -> array[int]:
    return array("i", b"\xff" * (4 * n))  # n entries of -1


class IntKeyIndex:
    """``int64 key -> slot`` (see the module docstring)."""

    __slots__ = ("_state", "dense", "live", "used")

    def __init__(self) -> None:
        self.dense: tuple[int, array[int]] | None = (0, array("i"))
        """``(base, slots)`` of the dense form (``slots[key - base]``), or None (hash)."""
        self._state = _table(8)
        self.live = 0
        self.used = 0
        """Hash entries holding a key or a tombstone."""

    # -- reads -----------------------------------------------------------------------------
    def get(self, key: int) -> int:
        """The slot of ``key``, or -1."""
        dense = self.dense
        if dense is not None:
            base, slots = dense
            j = key - base
            return slots[j] if 0 <= j < len(slots) else EMPTY
        i, hslots = self._find(key)
        return EMPTY if i < 0 else hslots[i]

    def _find(self, key: int) -> tuple[int, array[int]]:
        """The hash table entry holding ``key`` (or -1) and the slot column of that table (the
        table read once: a lock-free reader must not mix two)."""
        keys, hslots, mask = self._state
        perturb = key & _U64
        i = key & mask
        while True:
            s = hslots[i]
            if s == EMPTY:
                return -1, hslots
            if s >= 0 and keys[i] == key:
                return i, hslots
            perturb >>= 5
            i = (i * 5 + perturb + 1) & mask

    def __len__(self) -> int:
        return self.live

    def entries(self) -> list[tuple[int, int]]:
        """Every ``(key, slot)``: in key order (dense), table order (hash)."""
        dense = self.dense
        if dense is not None:
            base, slots = dense
            held = list(map(_ZERO.__le__, slots))
            return list(
                zip(
                    compress(range(base, base + len(slots)), held),
                    compress(slots, held),
                    strict=True,
                )
            )
        keys, hslots, _ = self._state
        return [(keys[i], s) for i, s in enumerate(hslots) if s >= 0]

    def nbytes(self) -> int:
        keys, hslots, _ = self._state
        size = keys.itemsize * len(keys) + hslots.itemsize * len(hslots)
        return size + (0 if self.dense is None else 4 * len(self.dense[1]))

    # -- writes ----------------------------------------------------------------------------
    def add(self, key: int, slot: int) -> None:
        """Insert ``key`` (not present) with ``slot``."""
        self.setdefault(key, slot)

    def setdefault(self, key: int, slot: int) -> int:
        """The slot of ``key``; when absent, insert it with ``slot`` (one probe for both)."""
        if self.dense is not None and self._cover(key, key, 1):
            base, slots = self.dense
            s = slots[key - base]
            if s >= 0:
                return s
            slots[key - base] = slot
            self.live += 1
            return slot
        self.reserve(1)
        keys, hslots, mask = self._state
        perturb = key & _U64
        i = key & mask
        free = -1
        while True:
            s = hslots[i]
            if s == EMPTY:
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
        hslots[i] = slot
        self.live += 1
        return slot

    def remove(self, key: int) -> int:
        """Remove ``key``; returns its slot, or -1 when absent."""
        dense = self.dense
        if dense is not None:
            base, slots = dense
            j = key - base
            if not 0 <= j < len(slots) or slots[j] < 0:
                return EMPTY
            s = slots[j]
            slots[j] = EMPTY
            self.live -= 1
            return s
        i, hslots = self._find(key)
        if i < 0:
            return EMPTY
        s = hslots[i]
        hslots[i] = _GONE
        self.live -= 1
        return s

    def put_new(self, keys: Sequence[int], first: int) -> bool:
        """Insert ``keys[j]`` with slot ``first + j`` for every ``j`` when every key is absent
        and no two are equal (a baseline chunk), by C-level operations; False, with nothing
        changed, otherwise (then insert them one by one)."""
        n = len(keys)
        if not n or len(set(keys)) != n:
            return False
        lo, hi = min(keys), max(keys)
        if self.dense is not None and self._cover(lo, hi, n):
            base, slots = self.dense
            if hi - lo == n - 1 and keys[0] == lo and keys[-1] == hi and _ascending(keys, lo):
                start = lo - base
                if slots[start : start + n].count(EMPTY) != n:
                    return False
                slots[start : start + n] = array("i", range(first, first + n))
            else:
                at = list(map(sub, keys, repeat(base)))
                if list(map(slots.__getitem__, at)).count(EMPTY) != n:
                    return False
                list(map(slots.__setitem__, at, range(first, first + n)))
            self.live += n
            return True
        self.reserve(n)
        hkeys, hslots, mask = self._state
        at = list(map(and_, keys, repeat(mask)))
        # every key's first probe is free (so the key is absent) and no two keys share one
        if len(set(at)) != n or list(map(hslots.__getitem__, at)).count(EMPTY) != n:
            return False
        list(map(hkeys.__setitem__, at, keys))
        list(map(hslots.__setitem__, at, range(first, first + n)))
        self.live += n
        self.used += n
        return True

    def reserve(self, n: int) -> None:
        """Room in the hash form for ``n`` more keys without a resize."""
        if (self.used + n) * 3 > (self._state[2] + 1) * 2:
            self._resize(self.live + n)  # to a load of 1/3 to 4/9 (grows up to 2/3)

    # -- growth ----------------------------------------------------------------------------
    def _cover(self, lo: int, hi: int, adding: int) -> bool:
        """Grow the dense form to hold keys ``lo..hi`` (``adding`` of them new), with room to
        grow further on the side it grew; or, when that would leave it too sparse, turn to the
        hash form and return False."""
        assert self.dense is not None
        base, slots = self.dense
        n = len(slots)
        if n and lo >= base and hi < base + n:
            return True
        new_lo, new_hi = (min(lo, base), max(hi, base + n - 1)) if n else (lo, hi)
        limit = DENSE_SPREAD * (self.live + adding) + DENSE_SLACK
        if new_hi - new_lo + 1 > limit:
            self._to_hash()
            return False
        room = max(n // 2, 64)
        if not n:
            self.dense = (lo, _absent(min(hi - lo + 1 + room, limit)))
            return True
        if new_hi >= base + n:  # up: in place (a reader's copy of the pair stays valid)
            end = min(new_hi + 1 + room, new_lo + limit)
            slots.frombytes(b"\xff" * (4 * (end - base - n)))
        if new_lo < base:  # down: a new array, swapped in with its base
            start = max(new_lo - room, base + len(slots) - limit)
            self.dense = (start, _absent(base - start) + slots)
        return True

    def _to_hash(self) -> None:
        """Move every key into the hash form (for good)."""
        entries = self.entries()
        table = _table(max(8, len(entries) * 3 // 2))
        _fill(table, [k for k, _ in entries], [s for _, s in entries])
        self._state = table
        self.used = len(entries)
        self.dense = None

    def _resize(self, live: int) -> None:
        keys, slots, _ = self._state
        held = list(map(_ZERO.__le__, slots))
        table = _table(max(8, live * 3 // 2))
        _fill(table, list(compress(keys, held)), list(compress(slots, held)))
        self._state = table
        self.used = self.live


def _table(capacity: int) -> tuple[array[int], array[int], int]:
    size = 8
    while size * 2 < capacity * 3:
        size *= 2
    return array("q", bytes(8 * size)), _absent(size), size - 1


def _fill(table: tuple[array[int], array[int], int], keys: list[int], slots: list[int]) -> None:
    """Insert distinct ``keys`` with their ``slots`` into an empty table: each at its first
    probe by C-level maps, except keys whose first probe another one took; those probe on in
    Python afterwards."""
    tkeys, tslots, mask = table
    first = list(map(and_, keys, repeat(mask)))
    owner = dict(zip(first, range(len(first)), strict=True))  # first probe -> the last key on it
    later: list[int] = []
    if len(owner) != len(first):
        later = list(
            compress(range(len(first)), map(ne, map(owner.__getitem__, first), range(len(first))))
        )
        for j in later:
            first[j] = -1
        winners = list(map(_ZERO.__le__, first))
        keys_w, slots_w = list(compress(keys, winners)), list(compress(slots, winners))
        first = list(compress(first, winners))
    else:
        keys_w, slots_w = keys, slots
    list(map(tkeys.__setitem__, first, keys_w))
    list(map(tslots.__setitem__, first, slots_w))
    for j in later:
        key = keys[j]
        i = key & mask
        perturb = key & _U64
        while tslots[i] != EMPTY:
            perturb >>= 5
            i = (i * 5 + perturb + 1) & mask
        tkeys[i] = key
        tslots[i] = slots[j]


def _ascending(keys: Sequence[int], lo: int) -> bool:
    """``keys`` are ``lo, lo + 1, ...`` (given that they are distinct and span ``len(keys)``)."""
    return list(keys) == list(range(lo, lo + len(keys)))
