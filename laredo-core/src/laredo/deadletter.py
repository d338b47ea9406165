"""Dead-letter stores: changes that could not be applied after every retry.

* ``MemoryDeadLetterStore`` (plugin type ``memory``): in-process, lost on exit.
* ``LocalDeadLetterStore`` (plugin type ``local``, option ``path``): one file per pipeline,
  ``<path>/<pipeline id, percent-encoded>.jsonl`` (files 0600, the folder 0700), one JSON
  entry per line (:func:`laredo.serialization.encode_dead_letter`: values keep their Python
  types). Each write is appended, flushed and fsynced before ``write`` returns.

``replay(pipeline_id, target)`` re-applies the entries oldest first through the target's
``on_insert`` / ``on_update`` / ``on_delete`` / ``on_truncate`` and removes each replayed entry.
If the target raises, replay stops there: the failed entry and every later one stay stored, and
``DeadLetterReplayError`` says how many were replayed. Positions read back from a file are the
strings written (``DeadLetter.position``), not source position objects.
"""

from __future__ import annotations

import builtins
import json
import logging
import os
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote

import pydantic
from pydantic import ConfigDict

from . import pipeline_ops
from .contracts import CountsDeadLetters, DeadLetterStore
from .errors import DeadLetterError, DeadLetterReplayError, InvalidChangeError
from .serialization import decode_dead_letter, encode_dead_letter
from .types import ChangeEvent, DeadLetter, ErrorInfo, unrepresentable_columns

logger = logging.getLogger(__name__)


def _private(path: str, flags: int) -> int:
    """``open`` opener: the file is the owner's only (0600), whatever the umask; an existing
    file is tightened too (dead letters hold whole rows)."""
    fd = os.open(path, flags, 0o600)
    os.fchmod(fd, 0o600)
    return fd


__all__ = [
    "DeadLetterError",
    "DeadLetterReplayError",
    "LocalDeadLetterStore",
    "LocalDeadLetterStoreOptions",
    "MemoryDeadLetterStore",
    "apply_change",
    "count_dead_letters",
]


class LocalDeadLetterStoreOptions(pydantic.BaseModel):
    model_config = ConfigDict(extra="forbid")
    path: str
    fsync: bool = True


def apply_change(target: Any, change: ChangeEvent) -> None:
    """Apply one dead-lettered change through the target's per-change methods
    (:func:`laredo.pipeline_ops.apply_change`). A change still holding a value no Python type
    holds (:class:`~laredo.types.Unrepresentable`) is refused: no target may store one."""
    bad = unrepresentable_columns(change.new_values) or unrepresentable_columns(change.old_values)
    if bad:
        raise InvalidChangeError(
            f"{change.table}: columns {', '.join(map(repr, bad))} hold values Python cannot "
            "represent; fix them at the source and reload the table, then purge this entry"
        )
    pipeline_ops.apply_change(target, change.table, change)


def _now() -> datetime:
    return datetime.now(UTC)


def _position_text(change: ChangeEvent, position: str | None) -> str | None:
    if position is not None:
        return position
    p = change.position
    if p is None:
        return None
    return p if isinstance(p, str) else str(p)


def _replay(
    pipeline_id: str, entries: builtins.list[DeadLetter], target: Any
) -> tuple[int, BaseException | None]:
    done = 0
    for entry in entries:
        try:
            apply_change(target, entry.change)
        except Exception as exc:
            logger.warning(
                "dead-letter replay of %s stopped at entry %d: %s",
                pipeline_id,
                done + 1,
                exc,
                extra={"pipeline": pipeline_id},
            )
            return done, exc
        done += 1
    return done, None


def _raise_replay(pipeline_id: str, done: int, total: int, exc: BaseException) -> None:
    raise DeadLetterReplayError(
        pipeline_id,
        done,
        f"dead-letter replay of {pipeline_id!r}: {done} of {total} entries replayed, entry "
        f"{done + 1} failed: {type(exc).__name__}: {exc}; it and the later ones are kept",
    ) from exc


class MemoryDeadLetterStore:
    """Dead letters in memory (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: dict[str, builtins.list[DeadLetter]] = {}

    def write(
        self,
        pipeline_id: str,
        change: ChangeEvent,
        error: ErrorInfo,
        position: str | None = None,
    ) -> None:
        entry = DeadLetter(pipeline_id, change, error, _now(), _position_text(change, position))
        with self._lock:
            self._entries.setdefault(pipeline_id, []).append(entry)

    def read(self, pipeline_id: str, limit: int = 0) -> builtins.list[DeadLetter]:
        """Oldest first; ``limit`` > 0 returns at most that many."""
        with self._lock:
            items = list(self._entries.get(pipeline_id, ()))
        return items[:limit] if limit > 0 else items

    def replay(self, pipeline_id: str, target: Any) -> int:
        entries = self.read(pipeline_id)
        done, exc = _replay(pipeline_id, entries, target)
        with self._lock:
            current = self._entries.get(pipeline_id, [])
            replayed = entries[:done]
            # remove exactly the replayed entries (writes may have been appended meanwhile)
            remaining = [e for e in current if not any(e is r for r in replayed)]
            if remaining:
                self._entries[pipeline_id] = remaining
            else:
                self._entries.pop(pipeline_id, None)
        if exc is not None:
            _raise_replay(pipeline_id, done, len(entries), exc)
        return done

    def purge(self, pipeline_id: str) -> int:
        with self._lock:
            return len(self._entries.pop(pipeline_id, []))

    def count(self, pipeline_id: str) -> int:
        """Entries of the pipeline (:class:`~laredo.contracts.CountsDeadLetters`)."""
        with self._lock:
            return len(self._entries.get(pipeline_id, ()))

    def pipelines(self) -> builtins.list[str]:
        with self._lock:
            return sorted(k for k, v in self._entries.items() if v)


def count_dead_letters(store: DeadLetterStore, pipeline_id: str) -> int:
    """Entries ``store`` holds for ``pipeline_id``: its ``count`` (:class:`CountsDeadLetters`),
    else ``len(read(pipeline_id))``."""
    if isinstance(store, CountsDeadLetters):
        return store.count(pipeline_id)
    return len(store.read(pipeline_id))


def _file_stem(pipeline_id: str) -> str:
    stem = quote(pipeline_id, safe="")
    if stem.startswith("."):
        stem = "%2E" + stem[1:]
    return stem


class LocalDeadLetterStore:
    """Dead letters in ``<path>/<pipeline>.jsonl`` files (thread-safe within one process)."""

    SUFFIX = ".jsonl"

    def __init__(
        self,
        path: str | os.PathLike[str],
        fsync: bool = True,
        parse_position: Callable[[str], Any] | None = None,
    ) -> None:
        self.base = Path(path)
        self.fsync = fsync
        self.parse_position = parse_position
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"LocalDeadLetterStore({str(self.base)!r})"

    def path_for(self, pipeline_id: str) -> Path:
        if not isinstance(pipeline_id, str) or not pipeline_id:
            raise DeadLetterError(f"invalid pipeline id {pipeline_id!r}")
        return self.base / (_file_stem(pipeline_id) + self.SUFFIX)

    def write(
        self,
        pipeline_id: str,
        change: ChangeEvent,
        error: ErrorInfo,
        position: str | None = None,
    ) -> None:
        """Append one entry; durable (flushed and fsynced) when this returns.

        ``position`` is the serialised source position (``source.position_to_string``); without
        it a ``str``/``int`` position is kept as text and others as ``str(position)``.
        """
        entry = DeadLetter(pipeline_id, change, error, _now(), _position_text(change, position))
        try:
            line = json.dumps(encode_dead_letter(entry), separators=(",", ":"), ensure_ascii=False)
        except TypeError as exc:
            raise DeadLetterError(
                f"cannot write dead letter of pipeline {pipeline_id!r}: {exc}"
            ) from None
        data = line.encode("utf-8") + b"\n"
        path = self.path_for(pipeline_id)
        with self._lock:
            try:
                self.base.mkdir(mode=0o700, parents=True, exist_ok=True)
                with open(path, "ab+", opener=_private) as f:
                    if f.tell() > 0:
                        f.seek(-1, os.SEEK_END)
                        if f.read(1) != b"\n":
                            self._drop_torn_tail(f, path)
                    f.write(data)
                    f.flush()
                    if self.fsync:
                        os.fsync(f.fileno())
            except OSError as exc:
                raise DeadLetterError(f"{path}: cannot write dead letter: {exc}") from exc

    @staticmethod
    def _drop_torn_tail(f: Any, path: Path) -> None:
        """Cut a last line that a crash left without its newline (it was never acknowledged:
        ``write`` returns only after the whole line is fsynced)."""
        f.seek(0)
        data = f.read()
        keep = data.rfind(b"\n") + 1
        logger.warning(
            "%s: removing a torn last line of %d bytes (a write interrupted by a crash)",
            path,
            len(data) - keep,
        )
        f.truncate(keep)
        f.seek(0, os.SEEK_END)

    def _lines(self, path: Path) -> builtins.list[str]:
        try:
            with open(path, encoding="utf-8") as f:
                text = f.read()
        except FileNotFoundError:
            return []
        except (OSError, UnicodeDecodeError) as exc:
            raise DeadLetterError(f"{path}: cannot read dead letters: {exc}") from exc
        lines = text.split("\n")
        complete, last = lines[:-1], lines[-1]
        if last:
            logger.warning("%s: ignoring a torn last line (a write interrupted by a crash)", path)
        return [ln for ln in complete if ln]

    def _decode(self, path: Path, lines: builtins.list[str]) -> builtins.list[DeadLetter]:
        out = []
        for i, ln in enumerate(lines, 1):
            try:
                out.append(decode_dead_letter(json.loads(ln), self.parse_position))
            except (ValueError, KeyError, TypeError, AttributeError, RecursionError) as exc:
                raise DeadLetterError(f"{path}: entry {i}: malformed dead letter: {exc}") from None
        return out

    def read(self, pipeline_id: str, limit: int = 0) -> builtins.list[DeadLetter]:
        """Oldest first; ``limit`` > 0 returns at most that many."""
        path = self.path_for(pipeline_id)
        with self._lock:
            lines = self._lines(path)
        if limit > 0:
            lines = lines[:limit]
        return self._decode(path, lines)

    def replay(self, pipeline_id: str, target: Any) -> int:
        path = self.path_for(pipeline_id)
        with self._lock:
            lines = self._lines(path)
        entries = self._decode(path, lines)
        done, exc = _replay(pipeline_id, entries, target)
        if done:
            with self._lock:
                current = self._lines(path)
                if current[:done] == lines[:done]:
                    remaining = current[done:]
                else:  # purged or rewritten meanwhile: drop the replayed lines by value
                    pending = list(lines[:done])
                    remaining = []
                    for ln in current:
                        if ln in pending:
                            pending.remove(ln)
                        else:
                            remaining.append(ln)
                self._rewrite(path, remaining)
        if exc is not None:
            _raise_replay(pipeline_id, done, len(entries), exc)
        return done

    def _rewrite(self, path: Path, lines: builtins.list[str]) -> None:
        if not lines:
            path.unlink(missing_ok=True)
            return
        tmp = path.with_name(".tmp-" + path.name)
        with open(tmp, "w", encoding="utf-8", opener=_private) as f:
            f.write("\n".join(lines) + "\n")
            f.flush()
            if self.fsync:
                os.fsync(f.fileno())
        os.replace(tmp, path)

    def purge(self, pipeline_id: str) -> int:
        path = self.path_for(pipeline_id)
        with self._lock:
            n = len(self._lines(path))
            path.unlink(missing_ok=True)
        return n

    def count(self, pipeline_id: str) -> int:
        """Entries of the pipeline's file, counted by line without decoding them (a torn last
        line, which ``read`` ignores, is not counted) (:class:`CountsDeadLetters`)."""
        path = self.path_for(pipeline_id)
        with self._lock:
            try:
                with open(path, "rb") as f:
                    return sum(1 for ln in f if ln.endswith(b"\n") and ln.strip())
            except FileNotFoundError:
                return 0
            except OSError as exc:
                raise DeadLetterError(f"{path}: cannot count dead letters: {exc}") from exc

    def pipelines(self) -> builtins.list[str]:
        """Pipeline ids that have a dead-letter file with at least one entry."""
        if not self.base.is_dir():
            return []
        out = []
        for entry in self.base.iterdir():
            name = entry.name
            if name.startswith(".") or not name.endswith(self.SUFFIX) or not entry.is_file():
                continue
            if entry.stat().st_size == 0:
                continue
            out.append(unquote(name[: -len(self.SUFFIX)]))
        return sorted(out)
