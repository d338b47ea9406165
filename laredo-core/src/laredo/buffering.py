"""A base class for targets that buffer changes and make them durable in batches.

:class:`BufferingTarget` owns, once for every such target (HTTP, Delta, the next database):

* **Whole transactions only.** A transaction is complete when the engine says so
  (``apply(..., complete=True)``), or when a change or ``set_change_position`` of a different
  position arrives. A timed or size flush writes complete transactions only; ``flush()`` and
  close write everything, the incomplete tail marked ``partial``.
* **On time.** A complete transaction is written within ``flush_interval`` of becoming complete,
  whether or not anything follows it, or at once when ``flush_rows`` complete changes wait. The
  writes run on a flusher thread; the engine's thread waits only when ``4 * flush_rows`` changes
  are buffered (back-pressure).
* **Durability.** ``durable_position()`` is what the last successful ``write`` returned: the end
  of the last whole transaction written, so the engine acknowledges nothing that is not durable.
  A crash loses only buffered changes, which the source redelivers; after
  :meth:`BufferingTarget.resume_after` redelivered changes at or before that position are
  skipped (nothing is applied twice).
* **Chunked-baseline progress.** :meth:`BufferingTarget.queue_progress` puts a progress
  record (:class:`~laredo.contracts.ProgressTarget`) behind the changes buffered so far: the
  ``write`` that holds the last of them gets it in ``WriteBatch.progress``, so a subclass commits
  it with those rows (never before them); with nothing buffered a write of no changes carries
  it. A subclass that can read its record back at a restart declares ``ProgressTarget``
  (``save_progress``/``load_progress`` over ``queue_progress``/``durable_progress``).
* **Errors.** A failed write is retried by the flusher with exponential backoff; the next
  ``apply`` first writes again synchronously and raises if that still fails, so the engine's
  retry and error policy act. A call that raises leaves none of its changes buffered.

A subclass implements ``write(batch) -> position`` and ``load`` (baseline rows), plus the
lifecycle methods of :class:`~laredo.contracts.SyncTarget` it needs.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from .batches import ChangeBatch
from .errors import BatchApplyError, TargetError
from .types import ChangeAction, ChangeEvent, Position, Row, TableIdentifier

logger = logging.getLogger(__name__)

__all__ = ["BufferingTarget", "WriteBatch"]

_NOTHING: Any = object()


def _compare(a: Any, b: Any) -> int:
    return int((a > b) - (a < b))


@dataclass(frozen=True, slots=True)
class WriteBatch:
    """Changes to make durable, in source order.

    ``changes``: what :meth:`BufferingTarget.prepare` made of each change (the
    :class:`~laredo.types.ChangeEvent` itself unless a subclass encodes it on the engine's
    thread). ``position``: the last change's position (``position_text`` its text).
    ``committed``: the end of the last whole transaction the batch completes (None: it
    completes none), what ``write`` normally returns. ``partial``: the batch ends inside a
    transaction (``flush()`` or close wrote a transaction not known to be complete).
    ``progress``: the chunked baseline's progress record these changes complete, to commit with
    them (``""``: the baseline finished, none is left; ``None``: no baseline in progress); every
    write while a baseline runs carries the latest one written. ``changes`` may be empty then."""

    table: TableIdentifier
    changes: Sequence[Any]
    position: Position
    position_text: str
    committed: Position | None
    partial: bool
    progress: str | None = None


class BufferingTarget:
    """Buffers changes and writes whole transactions on time (see the module docstring)."""

    target_label = "target"
    """How log and error messages name this kind of target (``"delta target"``)."""
    write_on_caller = False
    """True: a write due because ``flush_rows`` complete changes wait runs on the engine's
    thread inside ``apply``, and its failure fails that call (``BatchApplyError(k)`` when ``k``
    of its changes were written): the engine retries and dead-letters change by change. False:
    every write runs on the flusher thread (the engine's thread is never held up by one)."""

    def __init__(
        self,
        *,
        flush_rows: int,
        flush_interval: float,
        max_write: int | None = None,
        backoff: float = 0.5,
        max_backoff: float = 30.0,
    ) -> None:
        """``flush_rows``: complete changes that trigger a write at once; ``flush_interval``
        (seconds, 0: none): the longest a complete transaction waits; ``max_write``: the most
        changes per ``write`` (None: every complete change at once)."""
        self.flush_rows = max(1, flush_rows)
        self.flush_interval = flush_interval
        self.max_write = max_write
        self._backoff = (backoff, max_backoff)
        self.to_string: Callable[[Position], str] = str
        self.from_string: Callable[[str], Position] = lambda s: s
        self.compare: Callable[[Position, Position], int] = _compare
        self.buffer_table: TableIdentifier | None = None
        self._cond = threading.Condition(threading.Lock())
        self._write_lock = threading.Lock()  # one write at a time
        self._written = 0  # changes written so far
        self._events: list[Any] = []  # prepared changes
        self._positions: list[Position] = []  # their positions
        self._ends: list[tuple[int, Position]] = []  # (changes so far, position): a txn's end
        self._complete_since = 0.0
        self._last_received: Any = _NOTHING
        self._change_position: Position = None
        self._committed: Position | None = None
        self._partial: Any = _NOTHING  # the open transaction a partial write ended in
        self._skip_until: Position | None = None
        self._marks: list[tuple[int, str]] = []  # (changes before it, progress record; "": done)
        self._progress: str | None = None  # the progress record written last (None: none)
        self._error: BaseException | None = None
        self._stop = threading.Event()
        self._flusher: threading.Thread | None = None
        self._closed = False

    # -- what a subclass implements --------------------------------------------------------
    def write(self, batch: WriteBatch) -> Position | None:
        """Make ``batch`` durable (raise if it is not); return the position now durable
        (normally ``batch.committed``). Called on one thread at a time."""
        raise NotImplementedError

    def load(self, table: TableIdentifier, rows: Sequence[Row]) -> None:
        raise NotImplementedError

    def prepare(self, changes: Sequence[ChangeEvent]) -> Sequence[Any]:
        """What to buffer for ``changes`` (one item each, in order), on the engine's thread: a
        subclass may encode them here so a change it cannot take fails the engine's call, not
        a later write. Default: the changes themselves."""
        return changes

    # -- engine hooks ----------------------------------------------------------------------
    def bind_pipeline(self, context: Any) -> None:
        """Take the source's position functions (``laredo.PipelineAware``)."""
        self.to_string = context.position_to_string
        self.from_string = context.position_from_string
        self.compare = context.compare_positions

    def is_durable(self) -> bool:
        return True

    def durable_position(self) -> Position | None:
        """The end of the last whole transaction written (None before the first)."""
        return self._committed

    def pending_changes(self) -> int:
        return len(self._events)

    @property
    def change_position(self) -> Position:
        """The position given by the last ``set_change_position`` (baseline, per-change calls)."""
        return self._change_position

    def set_change_position(self, position: Position) -> None:
        """The position of what follows (a baseline's, or per-change calls'); a position
        different from the last change's completes the buffered transaction."""
        with self._cond:
            self._change_position = position
            self._see(position)

    def resume_after(self, position: Position | None) -> None:
        """Everything up to ``position`` is already durable (a restart): it becomes the durable
        position, and redelivered changes at or before it are skipped."""
        with self._cond:
            self._committed = position
            self._skip_until = position

    def committed_baseline(self, position: Position | None) -> None:
        """A baseline (or restore) at ``position`` replaced everything: drop what is
        buffered; ``position`` is durable."""
        with self._cond:
            self._events.clear()
            self._positions.clear()
            self._ends.clear()
            self._complete_since = 0.0
            self._last_received = _NOTHING
            self._partial = _NOTHING
            self._marks.clear()
            self._committed = position
            self._skip_until = None

    # -- chunked-baseline progress ---------------------------------------------------------
    def queue_progress(self, record: str | None) -> None:
        """Commit ``record`` (``None``: the baseline finished) with the changes buffered so
        far: the write that holds the last of them carries it (see ``WriteBatch.progress``)."""
        with self._cond:
            self._check_open()
            self._marks.append((len(self._events), record or ""))
            if self._flusher is None:
                self._start_flusher()
            self._cond.notify_all()

    def durable_progress(self) -> str | None:
        """The progress record of the last write (or :meth:`restore_progress`); None: none."""
        return self._progress

    def restore_progress(self, record: str | None) -> None:
        """A restart found ``record`` durable (a subclass reads it at ``on_init``). While one is
        held, redelivered changes are applied again instead of skipped: a resumed chunked
        baseline's rows come at stream positions that may lie before the last write's."""
        with self._cond:
            self._progress = record or None
            if self._progress is not None:
                self._skip_until = None

    # -- the door: changes -----------------------------------------------------------------
    def apply(
        self, table: TableIdentifier, changes: Sequence[ChangeEvent], complete: bool = True
    ) -> None:
        """Buffer ``changes``; ``complete``: the last one ends its transaction. Raises the
        error of a failed write (after writing again) before buffering anything."""
        self._raise_pending()
        changes = self._skip(changes)
        items = self.prepare(changes) if changes else ()
        cond = self._cond
        with cond:
            self._check_open()
            if self.buffer_table is None:
                self.buffer_table = table
            events, positions = self._events, self._positions
            before, written = len(events), self._written
            if type(changes) is ChangeBatch and changes:
                self._see(changes.position)
                events.extend(items)
                positions.extend([changes.position] * len(items))
            else:
                see = self._see
                for ev, item in zip(changes, items, strict=True):
                    see(ev.position)
                    events.append(item)
                    positions.append(ev.position)
            if complete and self._last_received is not _NOTHING:
                self._complete_at(len(events), self._last_received)
            limit = 4 * self.flush_rows
            if self._flusher is None and events:
                self._start_flusher()
            due = bool(self._ends) and self._ends[-1][0] >= self.flush_rows
            while not self.write_on_caller and len(events) >= limit and self._ends:
                if self._error is not None:
                    break
                cond.wait(1.0)  # back-pressure: the flusher is behind
        if due and self.write_on_caller:
            self._write_now(len(items), before, written)

    def _write_now(self, mine: int, before: int, written: int) -> None:
        """Write what is complete on the caller's thread; on failure drop the caller's
        ``mine`` changes still buffered (``before`` were buffered ahead of them and ``written``
        written when they arrived) and raise (see ``write_on_caller``)."""
        try:
            self._write_all(everything=False)
        except BaseException as exc:
            with self._cond:
                done = max(0, self._written - written - before)
                unsent = mine - done
                if unsent > 0:
                    del self._events[-unsent:]
                    del self._positions[-unsent:]
                    n = len(self._events)
                    self._ends = [e for e in self._ends if e[0] <= n]
                    self._marks = [m for m in self._marks if m[0] <= n]
                    if not self._ends:
                        self._complete_since = 0.0
                    self._last_received = self._positions[-1] if n else _NOTHING
            if done and isinstance(exc, Exception):
                raise BatchApplyError(done, str(exc)) from exc
            raise

    def apply_changes(self, table: TableIdentifier, events: Sequence[ChangeEvent]) -> None:
        """``apply`` without the end-of-transaction signal (the per-change protocol's batch)."""
        self.apply(table, events, complete=False)

    def _one(self, action: ChangeAction, new: Row | None, old: Row | None) -> None:
        table = self._need_table()
        ev = ChangeEvent(table, action, self._change_position, new_values=new, old_values=old)
        self.apply(table, (ev,), complete=False)

    def on_insert(self, table: TableIdentifier, row: Row) -> None:
        self._one(ChangeAction.INSERT, row, None)

    def on_update(self, table: TableIdentifier, row: Row, identity: Row | None) -> None:
        self._one(ChangeAction.UPDATE, row, identity)

    def on_delete(self, table: TableIdentifier, identity: Row) -> None:
        self._one(ChangeAction.DELETE, None, identity)

    def on_truncate(self, table: TableIdentifier) -> None:
        self._one(ChangeAction.TRUNCATE, None, None)

    def on_baseline_row(self, table: TableIdentifier, row: Row) -> None:
        self.load(table, (row,))

    def flush(self) -> None:
        """Write everything buffered now (engine stop, pipeline removal); raises if a write
        fails. An incomplete transaction is written ``partial`` and not made durable."""
        self._write_all(everything=True)

    def close_buffer(self) -> None:
        """Stop the flusher and write what is buffered (for ``on_close``). What cannot be
        written stays unacknowledged (the source redelivers it); never raises for it."""
        if self._closed:
            return
        self._stop.set()
        with self._cond:
            self._cond.notify_all()
        if self._flusher is not None:
            self._flusher.join()
        try:
            self._write_all(everything=True)
        except Exception as exc:
            logger.warning(
                "%s %s: %d change(s) could not be written at close and are not acknowledged "
                "(the source redelivers them): %s",
                self.target_label,
                self.buffer_table,
                len(self._events),
                exc,
                extra={"table": str(self.buffer_table)},
            )
        self._closed = True

    # -- bookkeeping (under the lock) ------------------------------------------------------
    def _see(self, position: Position) -> None:
        last = self._last_received
        if last is not _NOTHING and position != last:
            self._complete_at(len(self._events), last)
        self._last_received = position

    def _complete_at(self, n: int, position: Position) -> None:
        ends = self._ends
        done = ends[-1][0] if ends else 0
        if n <= done:
            if not n and position == self._partial:
                # a partial write (flush) held all of it: that transaction is durable now
                self._committed = position
                self._partial = _NOTHING
            return
        ends.append((n, position))
        if not self._complete_since:
            self._complete_since = time.monotonic()
        if n >= self.flush_rows or self.flush_interval > 0:
            self._cond.notify_all()

    def _skip(self, changes: Sequence[ChangeEvent]) -> Sequence[ChangeEvent]:
        skip = self._skip_until
        if skip is None or not changes:
            return changes
        compare = self.compare
        if type(changes) is ChangeBatch:
            kept: Sequence[ChangeEvent] = changes if compare(changes.position, skip) > 0 else ()
        else:
            kept = [e for e in changes if compare(e.position, skip) > 0]
        if kept:
            self._skip_until = None  # redelivery has passed the last write
        return kept

    def _check_open(self) -> None:
        if self._closed:
            raise TargetError(f"{self.target_label} {self.buffer_table}: closed")

    def _need_table(self) -> TableIdentifier:
        if self.buffer_table is None:
            raise TargetError(f"{self.target_label}: on_init was not called")
        return self.buffer_table

    # -- writing ---------------------------------------------------------------------------
    def _write_once(self, everything: bool) -> bool:
        """One ``write`` of the complete changes (all of them with ``everything``), at most
        ``max_write``, with the progress records they complete; False when there was nothing
        to write."""
        with self._write_lock:
            with self._cond:
                ends = self._ends
                n = len(self._events) if everything else (ends[-1][0] if ends else 0)
                if self.max_write is not None:
                    n = min(n, self.max_write)
                marks = [m for m in self._marks if m[0] <= n]
                if not n and not marks:
                    return False
                batch = self._events[:n]
                if n:
                    position = self._positions[n - 1]
                    whole = [e for e in ends if e[0] <= n]
                    committed = whole[-1][1] if whole else None
                    partial = not whole or whole[-1][0] < n
                else:  # progress only: nothing changes, the durable position stays
                    position = committed = self._committed
                    partial = False
                progress = marks[-1][1] if marks else self._progress
            text = "" if position is None else self.to_string(position)
            wb = WriteBatch(self._need_table(), batch, position, text, committed, partial, progress)
            durable = self.write(wb)
            with self._cond:
                del self._events[:n]
                del self._positions[:n]
                self._written += n
                self._ends = [(i - n, p) for i, p in self._ends if i > n]
                # the marks written are the first ones (one queued during the write stays)
                self._marks = [(i - n, r) for i, r in self._marks[len(marks) :]]
                if marks:
                    self._progress = marks[-1][1] or None
                self._complete_since = time.monotonic() if self._ends else 0.0
                if durable is not None:
                    self._committed = durable
                if n:
                    self._partial = position if partial else _NOTHING
                self._error = None
                self._cond.notify_all()
            return True

    def _write_all(self, everything: bool) -> None:
        while self._write_once(everything):
            pass

    def _raise_pending(self) -> None:
        if self._error is not None:
            self._write_all(everything=False)  # raises when it still fails

    def _due(self) -> float:
        """Seconds until the next write is due (0: now); called under the lock."""
        ends = self._ends
        if not ends:
            return 0.0 if self._marks and not self._marks[0][0] else 3600.0
        if ends[-1][0] >= self.flush_rows and not self.write_on_caller:
            return 0.0  # (with write_on_caller the engine's thread writes these)
        if self.flush_interval <= 0:
            return 3600.0
        return max(0.0, self._complete_since + self.flush_interval - time.monotonic())

    def _start_flusher(self) -> None:
        name = f"laredo-flusher-{self.target_label}-{self.buffer_table}"
        self._flusher = threading.Thread(target=self._run_flusher, name=name, daemon=True)
        self._flusher.start()

    def _run_flusher(self) -> None:
        first, cap = self._backoff
        backoff = first
        while not self._stop.is_set():
            with self._cond:
                wait = self._due()
                if wait > 0:
                    self._cond.wait(min(wait, 1.0))
                    continue
            try:
                self._write_all(everything=False)
                backoff = first
            except Exception as exc:
                with self._cond:
                    self._error = exc
                    self._cond.notify_all()
                logger.warning(
                    "%s %s: write failed, %d change(s) stay buffered (retry in %.1f s): %s",
                    self.target_label,
                    self.buffer_table,
                    len(self._events),
                    backoff,
                    exc,
                    extra={"table": str(self.buffer_table)},
                )
                self._stop.wait(backoff)
                backoff = min(backoff * 2, cap)
