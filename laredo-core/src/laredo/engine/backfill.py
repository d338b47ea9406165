"""Chunked backfills merged with the live stream by watermarks (DBLog, Andreakis &
Papapanagiotou 2019), with snapshot brackets instead of written watermarks.

A backfill reads a table in key-range chunks (``WHERE key > last ORDER BY key LIMIT n``), each
in its own short REPEATABLE READ transaction. With the rows the source returns the
transaction's snapshot (``pg_current_snapshot()``: ``xmin``, ``xmax``, in-progress ``xip``) and
a *high mark*: a stream position at or after the commit of every transaction the snapshot
sees. The stream is never paused; :class:`ChunkMerger` sits where the stream is demultiplexed:

* every change of the table the stream delivers while the backfill runs is remembered as
  ``(xid, key)`` (old and new key of an UPDATE, so key changes count);
* a chunk is applied once the stream has passed its high mark (so every change the chunk
  already holds was delivered before it), at that point of the stream, without the rows whose
  key a delivered transaction the chunk's snapshot does *not* see touched: those changes are
  newer than the chunk and were applied already (or come later, after the chunk).

So a chunk row never overwrites a newer change, and no change is lost: the target ends equal
to the source for every key the source has. A whole-table on-demand backfill also removes the
keys the source lacks: with ``sweep`` the merger keeps every chunk row's key and every key the
stream touched while it ran (:meth:`ChunkMerger.take_kept`), and at its end the target's other
keys are deleted (:mod:`laredo.engine.backfill_sweep` argues why that is safe). Targets need
upsert semantics (an UPDATE of a missing key inserts it; a DELETE of a missing key does
nothing), which every Laredo target has. Remembered changes older than
every pending snapshot's ``xmin`` are visible to every later chunk and are dropped.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from ..batches import RowBatch, tuple_maker
from ..types import ChangeEvent, Position, Row, TableIdentifier

logger = logging.getLogger(__name__)

__all__ = [
    "BackfillProgress",
    "ChunkMerger",
    "ChunkRead",
    "ChunkedSource",
    "EstimatesRows",
    "KeptKeys",
    "TxSnapshot",
    "key_of",
]

_EPOCH = 1 << 32
_HALF = 1 << 31


@dataclass(frozen=True, slots=True)
class TxSnapshot:
    """A transaction snapshot (``pg_current_snapshot()``): full 64-bit transaction ids."""

    xmin: int
    xmax: int
    xip: frozenset[int] = frozenset()

    @classmethod
    def parse(cls, text: str) -> TxSnapshot:
        """``'xmin:xmax:xip,xip'`` (the ``pg_snapshot`` text form)."""
        xmin, xmax, xip = text.split(":")
        return cls(int(xmin), int(xmax), frozenset(int(x) for x in xip.split(",") if x))

    def full(self, xid: int) -> int:
        """A 32-bit stream xid as the 64-bit id nearest this snapshot's ``xmax``."""
        if xid >= _EPOCH:
            return xid
        full = (self.xmax & ~(_EPOCH - 1)) | xid
        if full - self.xmax > _HALF:
            full -= _EPOCH
        elif self.xmax - full > _HALF:
            full += _EPOCH
        return full

    def sees(self, xid: int) -> bool:
        """Does this snapshot see the (committed) transaction ``xid``? ``0`` (unknown): no."""
        if xid == 0:
            return False
        x = self.full(xid)
        return x < self.xmin or (x < self.xmax and x not in self.xip)


@dataclass(frozen=True, slots=True)
class ChunkRead:
    """One chunk as the source read it: rows in key order, the snapshot they were read under,
    the high mark (a stream position at or after every commit the snapshot sees) and the
    chunk's last key (``None``: the range was empty, the table is done). With ``names`` the
    rows are value tuples in that column order (the fast path: no dicts), else row dicts."""

    rows: Sequence[Any]
    snapshot: TxSnapshot
    high: Position
    last_key: tuple[Any, ...] | None
    names: tuple[str, ...] | None = None
    unrepresentable: bool = False
    """Some row may hold an :class:`~laredo.types.Unrepresentable` marker (dead-lettered)."""
    raw: RowBatch | None = None
    """The rows as a :class:`~laredo.batches.RowBatch` (``rows`` is its ``values``): raw
    columns as its ``decimals``, ``stamps`` and ``days`` say (a binary read); handed on as one
    batch (``ChangeBatch.of_rows``), so a target may store it like a baseline chunk."""

    def row_key(self, key: Sequence[str]) -> Callable[[Any], tuple[Any, ...]]:
        """``row -> key tuple`` for this chunk's rows (raw key columns converted)."""
        if self.names is None:
            return key_of(key)
        idx = tuple(self.names.index(k) for k in key)
        raw = self.raw
        if raw is not None and raw.raw.intersection(idx):
            make = tuple_maker(len(self.names), raw.decimals, raw.stamps, raw.days)
            return lambda row: tuple(make(row)[i] for i in idx)
        if len(idx) == 1:
            i = idx[0]
            return lambda row: (row[i],)
        return lambda row: tuple(row[i] for i in idx)

    def batch(self, rows: list[Any]) -> RowBatch | None:
        """``rows`` (some of this chunk's) as a batch of its layout, when read raw."""
        return None if self.raw is None else self.raw.with_values(rows)


@runtime_checkable
class ChunkedSource(Protocol):
    """A source that can read a table in key-range chunks for a backfill while it streams."""

    def chunk_key(self, table: TableIdentifier) -> list[str] | None:
        """The key columns chunks are ordered by (``None``: the table has no usable key)."""
        ...

    def read_chunk(
        self,
        table: TableIdentifier,
        after: tuple[Any, ...] | None,
        limit: int,
        where: str | None = None,
    ) -> ChunkRead:
        """Up to ``limit`` rows with key ``> after`` (all when ``None``), in key order, in one
        short transaction; ``where`` an extra SQL condition (validated by the source)."""
        ...


@runtime_checkable
class EstimatesRows(Protocol):
    """A source that can estimate a table's row count cheaply (a backfill's ETA)."""

    def estimate_rows(self, table: TableIdentifier, where: str | None = None) -> int:
        """The table's approximate row count (PostgreSQL: ``pg_class.reltuples``), of the rows
        matching ``where`` when given (PostgreSQL: the planner's estimate); ``-1`` when
        unknown. A source whose method takes no ``where`` is asked for the whole table."""
        ...


def estimate_rows(source: object, table: TableIdentifier, where: str | None = None) -> int:
    """``source``'s estimate of ``table``'s rows, or of those matching ``where``
    (:class:`EstimatesRows`), ``-1`` when it has none or it fails (logged at DEBUG: the ETA
    is then unknown)."""
    if not isinstance(source, EstimatesRows):
        return -1
    try:
        if where is not None:
            try:
                return int(source.estimate_rows(table, where))
            except TypeError:  # a source written before ``where``: the whole table's
                logger.debug("%s estimates whole tables only", type(source).__name__)
        return int(source.estimate_rows(table))
    except Exception:
        logger.debug("estimating the rows of %s failed", table, exc_info=True)
        return -1


def key_of(columns: Sequence[str]) -> Callable[[Row], tuple[Any, ...]]:
    """``row -> key tuple`` for these key columns."""
    cols = tuple(columns)
    return lambda row: tuple(row[c] for c in cols)


def touched_keys(
    ev: ChangeEvent, key: Callable[[Row], tuple[Any, ...]]
) -> Iterable[tuple[Any, ...]]:
    """The keys a change touches: its new row's and its old identity's (a key change: both)."""
    for row in (ev.new_values, ev.old_values):
        if row:
            try:
                yield key(row)
            except KeyError:
                continue


@dataclass
class BackfillProgress:
    """Per-table progress (shown by status, metrics and the status page): chunks and rows
    read, applied and dropped, the row estimate at the start and the ETA it gives.

    ``rows_estimated`` is the source's estimate when the backfill started (PostgreSQL:
    ``pg_class.reltuples``; ``-1``: unknown); with ``--where`` or a resumed baseline it is the
    whole table's, so the ETA is then an upper bound."""

    table: TableIdentifier
    chunks: int = 0
    rows_read: int = 0
    rows_applied: int = 0
    rows_dropped: int = 0
    rows_removed: int = 0
    """Rows the end-of-backfill sweep removed (keys the source lacks), over the table's
    pipelines."""
    sweep: str = "no"
    """The sweep of a whole-table on-demand backfill: ``pending`` (at the end), ``done``,
    ``skipped: <reason>``; ``no`` for an initial chunked baseline (the target starts empty)."""
    done: bool = False
    error: str | None = None
    rows_estimated: int = -1
    started_at: float = field(default_factory=time.time)
    """Wall-clock start (seconds since the epoch)."""
    ended_at: float | None = None
    _started: float = field(default_factory=time.monotonic, repr=False)
    _ended: float | None = field(default=None, repr=False)

    @property
    def state(self) -> str:
        """``running``, ``done``, ``stopped`` (the engine stopped it) or ``failed``."""
        if self.done:
            return "done"
        if self.error is None:
            return "running" if self._ended is None else "failed"
        return "stopped" if self.error == "stopped" else "failed"

    def end(self) -> None:
        """The backfill ended (``done`` and ``error`` set before)."""
        if self._ended is None:
            self._ended = time.monotonic()
            self.ended_at = time.time()

    def elapsed(self) -> float:
        """Seconds since the start (until the end, once ended)."""
        return (self._ended if self._ended is not None else time.monotonic()) - self._started

    def eta_seconds(self) -> float | None:
        """Seconds left at the rate so far (rows read per second) for the rows estimated not
        read yet; ``0.0`` once done; ``None`` when unknown (no estimate, nothing read yet, or
        the backfill ended without finishing)."""
        if self.done:
            return 0.0
        if self._ended is not None or self.rows_estimated < 0 or self.rows_read <= 0:
            return None
        rate = self.rows_read / max(self.elapsed(), 1e-3)
        return max(0, self.rows_estimated - self.rows_read) / rate

    def as_dict(self) -> dict[str, Any]:
        return {
            "table": str(self.table),
            "state": self.state,
            "chunks": self.chunks,
            "rows_read": self.rows_read,
            "rows_applied": self.rows_applied,
            "rows_dropped": self.rows_dropped,
            "rows_removed": self.rows_removed,
            "sweep": self.sweep,
            "rows_estimated": self.rows_estimated,
            "started_at": self.started_at,
            "eta_seconds": self.eta_seconds(),
            "done": self.done,
            "error": self.error,
        }


@dataclass(frozen=True, slots=True)
class KeptKeys:
    """Keys a backfill kept for its sweep: key tuples, or a one-column key's values themselves
    (``single``: no tuple per row held). ``key in kept`` takes a key tuple either way."""

    values: set[Any]
    single: bool

    def __contains__(self, key: object) -> bool:
        if self.single:
            return isinstance(key, tuple) and len(key) == 1 and key[0] in self.values
        return key in self.values

    def __len__(self) -> int:
        return len(self.values)

    def __iter__(self) -> Iterator[tuple[Any, ...]]:
        return ((v,) for v in self.values) if self.single else iter(self.values)


@dataclass
class _Pending:
    chunk: ChunkRead
    number: int


@dataclass
class ChunkMerger:
    """The watermark merge of one table's backfill (see the module docstring).

    ``observe`` and ``due`` run on the stream's thread, ``offer`` on the backfill's; all three
    are safe together. ``compare`` orders source positions. With ``sweep`` it also keeps the
    key of every chunk row and every key the stream touched, until :meth:`take_kept`."""

    table: TableIdentifier
    key_columns: Sequence[str]
    compare: Callable[[Position, Position], int]
    sweep: bool = False
    progress: BackfillProgress = field(init=False)
    _seen: list[tuple[int, tuple[Any, ...]]] = field(default_factory=list, init=False)
    _pending: list[_Pending] = field(default_factory=list, init=False)
    key: Callable[[Row], tuple[Any, ...]] = field(init=False)
    _floor: TxSnapshot | None = field(default=None, init=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False)
    _space: threading.Condition = field(init=False)
    _offered: int = field(default=0, init=False)
    _kept: set[Any] | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        self.key = key_of(self.key_columns)
        self.progress = BackfillProgress(self.table)
        self._space = threading.Condition(self._lock)
        if self.sweep:
            self._kept = set()

    def observe(self, events: Iterable[ChangeEvent]) -> None:
        """The stream delivered these changes of the table (before anything queued after)."""
        key = self.key
        with self._lock:
            seen = self._seen
            kept = self._kept
            single = len(self.key_columns) == 1
            for ev in events:
                for k in touched_keys(ev, key):
                    seen.append((ev.xid, k))
                    if kept is not None:
                        kept.add(k[0] if single else k)

    def offer(self, chunk: ChunkRead, max_pending: int = 4, timeout: float | None = None) -> bool:
        """Queue a chunk read by the backfill; it is applied by a later :meth:`due`. Blocks
        while ``max_pending`` chunks wait (False when ``timeout`` passed first)."""
        with self._space:
            if not self._space.wait_for(lambda: len(self._pending) < max_pending, timeout):
                return False
            self._offered += 1
            self._pending.append(_Pending(chunk, self._offered))
            self.progress.chunks += 1
            self.progress.rows_read += len(chunk.rows)
            self._floor = chunk.snapshot
            self._prune()
            return True

    def pending(self) -> int:
        with self._lock:
            return len(self._pending)

    def due(self, position: Position, force: bool = False) -> list[tuple[ChunkRead, list[Any]]]:
        """The chunks whose high mark the stream passed at ``position`` (everything up to it
        delivered and observed; every pending one when ``force``), each without the rows a
        change newer than it touched."""
        out: list[tuple[ChunkRead, list[Any]]] = []
        with self._space:
            while self._pending and (
                force or self.compare(self._pending[0].chunk.high, position) <= 0
            ):
                chunk = self._pending.pop(0).chunk
                snap = chunk.snapshot
                newer = {k for xid, k in self._seen if not snap.sees(xid)}
                key = chunk.row_key(self.key_columns)
                rows = [r for r in chunk.rows if key(r) not in newer] if newer else list(chunk.rows)
                if self._kept is not None:
                    keys = map(key, chunk.rows)
                    single = len(self.key_columns) == 1
                    self._kept.update((k[0] for k in keys) if single else keys)
                self.progress.rows_applied += len(rows)
                self.progress.rows_dropped += len(chunk.rows) - len(rows)
                out.append((chunk, rows))
            if out:
                self._prune()
                self._space.notify_all()
        return out

    def take_kept(self) -> KeptKeys | None:
        """The keys kept for the sweep (``None`` without ``sweep``): every chunk row's so far
        and every key the stream touched so far; keeping stops here (what the stream delivers
        next is applied after the sweep)."""
        with self._lock:
            kept, self._kept = self._kept, None
        return None if kept is None else KeptKeys(kept, len(self.key_columns) == 1)

    def _prune(self) -> None:
        """Drop remembered changes every pending and future chunk sees (lock held)."""
        snaps = [p.chunk.snapshot for p in self._pending]
        if self._floor is not None:
            snaps.append(self._floor)
        if not snaps:
            return
        low = min(snaps, key=lambda s: s.xmin)
        self._seen = [(x, k) for x, k in self._seen if x == 0 or low.full(x) >= low.xmin]
