"""Cold replay: a client behind the journal catches up from a Delta archive, then the journal.

``archive { uri, storage_options }`` on a ``replication-fanout`` target names a Delta table a
``delta`` target keeps of the same table (same source, so the same positions). A connecting
client whose position is older than the journal but *equal to the position of a commit of the
archive* (a version boundary) gets the archive's changes after that commit up to its newest
one, then the journal from right after that newest commit's position. When any of that does
not hold (no such commit, the journal no longer reaches the archive's head, other columns, an
unreadable archive) :meth:`ColdArchive.plan` returns None and the client gets a full snapshot,
as without an archive. Everything is read before the handshake, so a failure never leaves a
client half-served.

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
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from laredo.errors import ConfigError, MissingDependencyError
from laredo.types import ChangeAction, ColumnDefinition

from .journal import Journal, JournalEntry
from .positions import PositionCodec

logger = logging.getLogger(__name__)

__all__ = ["ArchivePlan", "ColdArchive"]


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

    def __init__(self, uri: str, storage_options: Mapping[str, str] | None = None) -> None:
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
        """The replay for a client at ``last_position`` (``last_sequence``: its sequence when
        it is in this journal), or None (then: a full snapshot)."""
        if not last_position:
            return None
        try:
            return self._plan(last_position, journal, codec, columns, last_sequence)
        except Exception as exc:  # an unreadable archive degrades to the full snapshot
            logger.warning(
                "fan-out cold archive %s: cannot serve a client at %s (full snapshot instead): %s",
                self.uri,
                last_position,
                exc,
            )
            return None

    def _plan(
        self,
        last_position: str,
        journal: Journal,
        codec: PositionCodec,
        columns: tuple[ColumnDefinition, ...],
        last_sequence: int | None,
    ) -> ArchivePlan | None:
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
        resume_at = journal.resume_after(codec.from_string(str(head.position)), sys.maxsize, codec)
        if resume_at is None:
            return None  # the journal no longer reaches the archive's head: no gap allowed
        entries = self._entries(
            dt,
            after=start.version,
            through=head.version,
            commits=positioned,
            codec=codec,
            columns=desc.columns,
        )
        start = resume_at - len(entries) if last_sequence is None else last_sequence
        if start + len(entries) > resume_at:
            return None
        for i, e in enumerate(entries, 1):
            e.sequence = start + i
        return ArchivePlan(entries, start, resume_at)

    def _entries(
        self,
        dt: Any,
        *,
        after: int,
        through: int,
        commits: list[Any],
        codec: PositionCodec,
        columns: tuple[ColumnDefinition, ...],
    ) -> list[JournalEntry]:
        from laredo_target_delta.columns import codecs_for  # noqa: PLC0415 - lazy: optional extra
        from laredo_target_delta.feed import feed  # noqa: PLC0415 - lazy: optional extra

        if through <= after:
            return []
        position_of = {c.version: codec.from_string(str(c.position)) for c in commits}
        compactions = {c.version for c in commits if c.kind == "compaction"}
        keys = [c.name for c in columns if c.primary_key]
        now = time.time()
        out: list[JournalEntry] = []
        for f in feed(dt, after + 1, through, codecs_for(columns), keys, skip=compactions):
            position = position_of.get(f.version)
            if f.action is ChangeAction.DELETE:
                out.append(JournalEntry(0, f.action, position, f.row, None, now))
            else:
                out.append(JournalEntry(0, f.action, position, None, f.row, now))
        return out
