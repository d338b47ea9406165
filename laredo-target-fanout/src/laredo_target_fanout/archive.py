"""Cold replay: a client behind the journal catches up from a Delta archive, then the journal.

``archive { uri, storage_options }`` on a ``replication-fanout`` target names a Delta table a
``delta`` target keeps of the same table (same source, so the same positions). A connecting
client whose position is older than the journal but *equal to the position of a commit of the
archive* (a version boundary) gets the archive's changes after that commit up to its newest
one, then the journal from right after that newest commit's position. When any of that does
not hold (no such commit, the journal no longer reaches the archive's head, other columns, an
unreadable archive, more than ``archive.max_entries`` changes to replay) the client gets a full
snapshot, as without an archive. Everything is read before the handshake, so a failure never
leaves a client half-served.

Locks: :meth:`ColdArchive.prepare` reads the archive (remote I/O, the whole range) **outside**
the target's lock, at most ``archive.max_concurrent`` at once, reading at most
``max_entries`` changes; :meth:`ColdArchive.place` then checks the journal and numbers the
entries under the lock, in time independent of the archive.

Sequence numbers: the ``k`` replayed entries are numbered ``S + 1 .. S + k`` and the handshake
resumes after ``S``; the last replayed batch covers through ``R``, the journal sequence to
continue after, so the client's sequence meets the journal's exactly there. ``S`` is the
client's own last sequence when it is in this journal (it skips nothing; the plan needs
``S + k <= R``), else ``R - k``.

Needs ``pip install laredo-target-fanout[archive]`` (laredo-target-delta, imported only when an
archive is configured).
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from laredo.errors import ConfigError, MissingDependencyError
from laredo.types import ChangeAction, ColumnDefinition, primary_key_columns

from .journal import Journal, JournalEntry
from .positions import PositionCodec

logger = logging.getLogger(__name__)

__all__ = ["ArchivePlan", "ColdArchive", "Prepared"]


@dataclass(frozen=True, slots=True)
class Prepared:
    """The archive's changes after the client's commit through its newest one (read outside
    the target's lock), and the newest commit's position."""

    entries: list[JournalEntry]
    head_position: str


@dataclass(frozen=True, slots=True)
class ArchivePlan:
    """What a client replays: ``entries`` (numbered up to ``resume_at``), then the journal
    after ``resume_at``."""

    entries: list[JournalEntry] = field(default_factory=list)
    start: int = 0
    """The sequence the handshake resumes after."""
    resume_at: int = 0


class ColdArchive:
    """A Delta archive of a fan-out target's table (see the module docstring)."""

    def __init__(
        self,
        uri: str,
        storage_options: Mapping[str, str] | None = None,
        *,
        max_entries: int = 100_000,
        max_concurrent: int = 2,
    ) -> None:
        try:
            from laredo_target_delta import archive as delta  # noqa: PLC0415 - lazy: optional extra
        except ImportError:
            raise MissingDependencyError(
                "laredo-target-fanout[archive]", "the fan-out cold archive"
            ) from None
        if not uri:
            raise ConfigError("replication-fanout target: archive.uri: give the Delta table")
        self._delta = delta
        self.uri = uri
        self.storage_options = dict(storage_options or {})
        self.max_entries = max_entries
        self._slots = threading.BoundedSemaphore(max_concurrent)

    def __repr__(self) -> str:
        return f"ColdArchive(uri={self.uri!r})"

    def plan(
        self,
        last_position: str,
        journal: Journal,
        codec: PositionCodec,
        columns: tuple[ColumnDefinition, ...],
        last_sequence: int | None = None,
    ) -> ArchivePlan | None:
        """:meth:`prepare` then :meth:`place` (for a caller that holds no lock)."""
        prepared = self.prepare(last_position, codec, columns)
        return None if prepared is None else self.place(prepared, journal, codec, last_sequence)

    def prepare(
        self, last_position: str, codec: PositionCodec, columns: tuple[ColumnDefinition, ...]
    ) -> Prepared | None:
        """The archive's changes after the commit at ``last_position`` through its newest
        commit, or None (then: a full snapshot). Call it without the target's lock: it reads
        the archive. Waits for one of ``max_concurrent`` slots (None after 30 s)."""
        if not last_position:
            return None
        if not self._slots.acquire(timeout=30.0):
            logger.warning(
                "fan-out cold archive %s: %s: every replay slot stayed busy for 30 s "
                "(archive.max_concurrent); full snapshot instead",
                self.uri,
                last_position,
            )
            return None
        try:
            return self._prepare(last_position, codec, columns)
        except Exception as exc:  # an unreadable archive degrades to the full snapshot
            logger.warning(
                "fan-out cold archive %s: cannot serve a client at %s (full snapshot instead): %s",
                self.uri,
                last_position,
                exc,
            )
            return None
        finally:
            self._slots.release()

    def place(
        self,
        prepared: Prepared,
        journal: Journal,
        codec: PositionCodec,
        last_sequence: int | None = None,
    ) -> ArchivePlan | None:
        """The replay of ``prepared`` against the journal now (target lock held: cheap), or
        None when the journal no longer reaches the archive's head (no gap allowed) or the
        client's own sequence leaves no room."""
        head = codec.from_string(prepared.head_position)
        resume_at = journal.resume_after(head, sys.maxsize, codec)
        if resume_at is None:
            return None
        entries = prepared.entries  # one client's: numbered in place
        start = resume_at - len(entries) if last_sequence is None else last_sequence
        if start + len(entries) > resume_at:
            return None
        for i, e in enumerate(entries, 1):
            e.sequence = start + i
        return ArchivePlan(entries, start, resume_at)

    def _prepare(
        self, last_position: str, codec: PositionCodec, columns: tuple[ColumnDefinition, ...]
    ) -> Prepared | None:
        delta = self._delta
        dt = delta.open_table(self.uri, self.storage_options, key="archive.uri")
        desc = delta.description_of(dt, self.uri, key="archive.uri")
        if columns and [c.name for c in desc.columns] != [c.name for c in columns]:
            return None
        positioned = [c for c in delta.commits(dt) if c.position is not None]
        whole = [c for c in positioned if not c.partial]
        start = next((c for c in reversed(whole) if c.position == last_position), None)
        if start is None or not whole:
            return None
        head = whole[-1]
        entries = self._entries(
            dt,
            after=start.version,
            through=head.version,
            commits=positioned,
            codec=codec,
            columns=desc.columns,
        )
        return None if entries is None else Prepared(entries, str(head.position))

    def _entries(
        self,
        dt: Any,
        *,
        after: int,
        through: int,
        commits: list[Any],
        codec: PositionCodec,
        columns: tuple[ColumnDefinition, ...],
    ) -> list[JournalEntry] | None:
        """The changes of versions ``after + 1 .. through``; None when they are more than
        ``max_entries`` (read batch by batch, so no more than that is ever held)."""
        from laredo_target_delta.columns import codecs_for  # noqa: PLC0415 - lazy: optional extra
        from laredo_target_delta.feed import FeedTooLarge, feed  # noqa: PLC0415 - lazy: optional extra

        if through <= after:
            return []
        position_of = {c.version: codec.from_string(str(c.position)) for c in commits}
        compactions = {c.version for c in commits if c.kind == "compaction"}
        keys = primary_key_columns(columns)
        now = time.time()
        try:  # an update of a plain MERGE is two feed rows (pre- and postimage)
            changes = feed(
                dt,
                after + 1,
                through,
                codecs_for(columns),
                keys,
                skip=compactions,
                max_rows=self.max_entries * 2,
            )
        except FeedTooLarge:
            changes = None
        if changes is None or len(changes) > self.max_entries:
            logger.info(
                "fan-out cold archive %s: more than %d changes to replay "
                "(archive.max_entries); full snapshot instead",
                self.uri,
                self.max_entries,
            )
            return None
        out: list[JournalEntry] = []
        for f in changes:
            position = position_of.get(f.version)
            if f.action is ChangeAction.DELETE:
                out.append(JournalEntry(0, f.action, position, f.row, None, now))
            else:
                out.append(JournalEntry(0, f.action, position, None, f.row, now))
        return out
