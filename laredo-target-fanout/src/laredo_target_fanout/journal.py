"""The change journal: every applied change under a gap-free sequence number.

Guarantees
----------
* Every appended entry gets the next sequence (1, 2, 3, ...; never reused while the journal
  lives). A journal has an id (``journal_id``); ``reset`` starts a new id and a new sequence
  space, in which clients resume only by source position.
* ``prune`` keeps at most ``max_entries`` entries no older than ``max_age`` seconds, except the
  entries at or after a *pin* (the next entry a reader still needs), unless the journal would
  then hold more than twice ``max_entries``: a stuck reader may not hold it forever. A reader
  whose next entry was pruned finds out from ``read`` (None); it never misses one silently.
* Source positions are non-decreasing along the journal, which ``resume_after`` relies on.

The journal has no lock of its own: its owner (``FanOutTarget``) calls every method with its
lock held.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable

from laredo.types import ChangeAction, ColumnDefinition, Position, Row

from .positions import PositionCodec

__all__ = ["Journal", "JournalEntry", "new_journal_id"]


def new_journal_id() -> str:
    return uuid.uuid4().hex[:16]


class JournalEntry:
    """One journaled change. ``sequence`` is gap-free within a journal."""

    __slots__ = (
        "action",
        "new_columns",
        "new_values",
        "old_columns",
        "old_values",
        "position",
        "sequence",
        "timestamp",
        "wire",
    )

    def __init__(  # noqa: PLR0917 - hot path: positional on purpose
        self,
        sequence: int,
        action: ChangeAction,
        position: Position,
        old_values: Row | None,
        new_values: Row | None,
        timestamp: float,
        old_columns: tuple[ColumnDefinition, ...] = (),
        new_columns: tuple[ColumnDefinition, ...] = (),
    ) -> None:
        self.sequence = sequence
        self.action = action
        self.position = position
        self.old_values = old_values
        self.new_values = new_values
        self.timestamp = timestamp
        self.old_columns = old_columns
        self.new_columns = new_columns
        self.wire: bytes | None = None
        """The entry's wire encoding, computed once and shared by every client (see
        ``_wire.entry_chunk``); cleared when the entry's position is filled in."""

    def __repr__(self) -> str:
        return f"JournalEntry({self.sequence}, {self.action.name}, position={self.position!r})"


class Journal:
    """Entries ``(oldest_sequence - 1, current_sequence]``; see the module docstring."""

    def __init__(self, max_entries: int, max_age: float | None) -> None:
        self.max_entries = max_entries
        self.max_age = max_age
        self.journal_id = new_journal_id()
        # entries[head:] are live; entries[i].sequence == base_seq + i
        self._entries: list[JournalEntry] = []
        self._head = 0
        self._base_seq = 1
        self._seq = 0
        self.base_position: Position = None
        """Position of the state the journal started from (baseline end / restored snapshot)."""
        self.pruned_position: Position = None
        """Position of the newest pruned entry (None: nothing pruned yet)."""
        self.unpositioned_from: int | None = None
        """First entry of a re-baseline whose position is filled in when it completes."""

    def reset(self, base_position: Position) -> None:
        """Start a new, empty journal (new ``journal_id``) at ``base_position``."""
        self.journal_id = new_journal_id()
        self._entries = []
        self._head = 0
        self._base_seq = 1
        self._seq = 0
        self.base_position = base_position
        self.pruned_position = None

    # ------------------------------------------------------------------ writing
    def append(  # noqa: PLR0917 - hot path: positional on purpose
        self,
        action: ChangeAction,
        position: Position,
        old: Row | None,
        new: Row | None,
        now: float,
        old_columns: tuple[ColumnDefinition, ...] = (),
        new_columns: tuple[ColumnDefinition, ...] = (),
    ) -> None:
        self._seq += 1
        self._entries.append(
            JournalEntry(self._seq, action, position, old, new, now, old_columns, new_columns)
        )

    def append_unpositioned(self, action: ChangeAction, row: Row, now: float) -> None:
        """Journal a re-baseline row; ``fill_positions`` stamps it when the baseline ends."""
        if self.unpositioned_from is None:
            self.unpositioned_from = self._seq + 1
        self.append(action, None, None, row, now)

    def fill_positions(self, position: Position) -> None:
        """Give the re-baseline's entries the baseline's end position."""
        if self.unpositioned_from is None:
            return
        for e in self.entries_from(self.unpositioned_from):
            if e.position is None:
                e.position = position
                e.wire = None
        self.unpositioned_from = None

    # ------------------------------------------------------------------ reading
    @property
    def current_sequence(self) -> int:
        return self._seq

    @property
    def first_sequence(self) -> int:
        """Sequence of the oldest retained entry, or the next one when the journal is empty."""
        return self._base_seq + self._head

    @property
    def oldest_sequence(self) -> int:
        """Sequence of the oldest retained entry, 0 when the journal is empty."""
        return self._base_seq + self._head if len(self._entries) > self._head else 0

    def __len__(self) -> int:
        return len(self._entries) - self._head

    def entries_from(self, seq: int, limit: int | None = None) -> list[JournalEntry]:
        """Entries with sequence >= seq; ``LookupError`` when seq was pruned."""
        start = seq - self._base_seq
        if start < self._head:
            raise LookupError(seq)
        end = len(self._entries) if limit is None else min(len(self._entries), start + limit)
        return self._entries[start:end]

    def read(self, cursor: int, limit: int) -> list[JournalEntry] | None:
        """Up to ``limit`` entries after ``cursor`` (empty when there is none yet); None when
        the entry after ``cursor`` was pruned."""
        if cursor >= self._seq:
            return []
        if cursor + 1 < self.first_sequence:
            return None
        return self.entries_from(cursor + 1, limit)

    def count_at_tail(self, position: Position) -> int:
        """Entries at the end of the journal with source position ``position``."""
        if position is None:
            return 0
        n = 0
        entries = self._entries
        i = len(entries) - 1
        while i >= self._head and entries[i].position == position:
            n += 1
            i -= 1
        return n

    def resume_after(self, p: Position, applied_at: int, codec: PositionCodec) -> int | None:
        """The sequence to resume after for a reader whose last applied entry is the
        ``applied_at``-th at source position ``p``, or None when the journal does not cover it
        (the reader then needs a snapshot)."""
        if p is None or self.unpositioned_from is not None:
            return None
        if self.pruned_position is not None:
            # entries at or before the newest pruned position may be gone
            c = codec.compare(p, self.pruned_position)
            if c is None or c <= 0:
                return None
        else:
            if self.base_position is None:
                return None
            c = codec.compare(p, self.base_position)
            if c is None or c < 0:
                return None
            if c == 0:
                applied_at = 0  # the journal holds nothing at its base position
        # positions are non-decreasing along the journal: the first entry at or after p
        entries = self._entries
        lo, hi = self._head, len(entries)
        while lo < hi:
            mid = (lo + hi) // 2
            ep = entries[mid].position
            cm = codec.compare(ep, p) if ep is not None else -1
            if cm is None:
                return None
            if cm < 0:
                lo = mid + 1
            else:
                hi = mid
        # skip the entries of p's transaction the reader already applied
        skip = 0
        while skip < applied_at and lo + skip < len(entries):
            ep = entries[lo + skip].position
            if ep is None or codec.compare(ep, p) != 0:
                break
            skip += 1
        return self._base_seq + lo + skip - 1

    # ------------------------------------------------------------------ pruning
    def prune(self, now: float, pins: Iterable[int]) -> int:
        """Drop what ``max_entries`` / ``max_age`` no longer allow, never an entry at or after
        a pin (the next sequence a reader needs) unless the journal holds more than twice
        ``max_entries``. Returns how many entries were dropped; readers pinned below
        ``first_sequence`` afterwards have lost their next entry."""
        live = len(self._entries) - self._head
        if live <= 0:
            return 0
        first = self._base_seq + self._head
        cut_seq = first + max(0, live - self.max_entries)  # first kept sequence
        if self.max_age is not None:
            limit = now - self.max_age
            i = max(self._head, cut_seq - self._base_seq)
            entries = self._entries
            while i < len(entries) and entries[i].timestamp < limit:
                i += 1
            cut_seq = max(cut_seq, self._base_seq + i)
        if cut_seq <= first:
            return 0
        pinned = list(pins)
        if pinned:
            cut_seq = min(cut_seq, *pinned)
            excess = live - (cut_seq - first) - 2 * self.max_entries
            if excess > 0:  # a stuck reader may not hold the journal forever
                cut_seq += excess
        if cut_seq <= first:
            return 0
        return self._drop(cut_seq - first)

    def _drop(self, n: int) -> int:
        last = self._entries[self._head + n - 1]
        if last.position is not None:
            self.pruned_position = last.position
        self._head += n
        if self._head > 4096 and self._head * 2 > len(self._entries):
            del self._entries[: self._head]
            self._base_seq += self._head
            self._head = 0
        return n
