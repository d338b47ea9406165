"""Fan-out snapshots: consistent copies of a table's state at a journal sequence, their
retention, and their persistence through a ``SnapshotStore`` on a background thread.

Guarantees
----------
* A ``FanOutSnapshot`` never changes: its rows are the state at ``sequence`` (plus how many
  entries at its source position it contains, ``applied_at_position``).
* Retention keeps the newest snapshot always, then at most ``keep_count`` (0: unlimited) no
  older than ``max_age``; the store keeps ``keep_count`` of this target's snapshots.
* Persistence never blocks the writer: snapshots are queued and saved in order by one thread;
  at ``close`` the queue is saved before the thread ends. A failed save is logged.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import re
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from laredo.plugins import serializer as build_serializer
from laredo.plugins import snapshot_store as build_snapshot_store
from laredo.types import (
    ColumnDefinition,
    Position,
    Row,
    SnapshotMetadata,
    TableIdentifier,
    TableSnapshotInfo,
)

from .journal import Journal
from .options import SnapshotOptions

logger = logging.getLogger(__name__)

__all__ = ["FanOutSnapshot", "SnapshotKeeper", "snapshot_id"]

TARGET_TYPE = "replication-fanout"

_SAFE = re.compile(r"[^A-Za-z0-9_.-]+")


@dataclass(frozen=True, slots=True)
class FanOutSnapshot:
    """A consistent copy of the state at journal ``sequence`` (rows are never mutated)."""

    snapshot_id: str
    sequence: int
    journal_id: str
    position: str
    rows: tuple[Row, ...]
    columns: tuple[ColumnDefinition, ...]
    created_at: datetime
    persisted: bool = False
    size_bytes: int = 0
    applied_at_position: int = 0
    """Journal entries at ``position`` contained in the snapshot (a transaction may span
    several entries and a snapshot may fall inside it)."""
    _cache: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    def encoded_rows(self, encode: Callable[[Row], bytes]) -> list[bytes]:
        """Every row encoded with ``encode`` (always the wire's row encoding), computed once
        and shared by all clients."""
        rows: list[bytes] | None = self._cache.get("rows")
        if rows is None:
            with _ENCODE_LOCK:
                rows = self._cache.get("rows")
                if rows is None:
                    rows = [encode(r) for r in self.rows]
                    self._cache["rows"] = rows
        return rows


_ENCODE_LOCK = threading.Lock()


def snapshot_id(table: TableIdentifier | None, journal_id: str, seq: int, kind: str) -> str:
    """``<kind>-<schema.table>-<journal>-<sequence>-<ms>``, safe as a file name."""
    name = _SAFE.sub("_", f"{table.schema}.{table.table}") if table is not None else "table"
    return f"{kind}-{name}-{journal_id[:8]}-{seq}-{int(time.time() * 1000)}"


def open_store(options: SnapshotOptions) -> tuple[Any, Any]:
    """The configured ``(SnapshotStore, serializer)``, or ``(None, None)``."""
    spec = options.store
    if spec is None:
        return None, None
    if isinstance(spec, Mapping):
        cfg = dict(spec)
        kind = cfg.pop("type", "local")
        store = build_snapshot_store(kind, **cfg)
    else:
        store = spec
    ser = options.serializer
    return store, build_serializer(ser) if isinstance(ser, str) else ser


class SnapshotKeeper:
    """Retained snapshots, newest first, and their persistence.

    The list is guarded by the owner's lock (``lock``): ``latest``, ``find``, ``add``,
    ``retain`` and ``clear`` are called with it held; the persistence thread takes it to mark
    a snapshot persisted."""

    def __init__(self, options: SnapshotOptions, lock: threading.Condition) -> None:
        self.options = options
        self._lock = lock
        self._snapshots: list[FanOutSnapshot] = []
        self.store: Any = None
        self.serializer: Any = None
        self._queue: list[tuple[FanOutSnapshot, TableIdentifier, str]] = []
        self._queue_cond = threading.Condition()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------------ the list (lock held)
    @property
    def latest(self) -> FanOutSnapshot | None:
        return self._snapshots[0] if self._snapshots else None

    def find(self, snapshot_id: str) -> FanOutSnapshot | None:
        for s in self._snapshots:
            if s.snapshot_id == snapshot_id:
                return s
        return None

    def add(self, snap: FanOutSnapshot) -> None:
        self._snapshots.insert(0, snap)
        self.retain()

    def retain(self) -> None:
        keep = self.options.keep_count
        max_age = self.options.max_age
        snaps = self._snapshots
        if max_age is not None:
            limit = datetime.now(UTC) - timedelta(seconds=max_age)
            snaps = [snaps[0], *[s for s in snaps[1:] if s.created_at >= limit]] if snaps else []
        if keep and len(snaps) > keep:
            snaps = snaps[:keep]
        self._snapshots = snaps

    def clear(self) -> None:
        self._snapshots = []

    def retained(self) -> list[FanOutSnapshot]:
        return list(self._snapshots)

    def take_locked(  # noqa: PLR0917 - the state a snapshot copies
        self,
        journal: Journal,
        table: TableIdentifier | None,
        columns: tuple[ColumnDefinition, ...],
        rows: Callable[[], tuple[Row, ...]],
        position_text: str,
        position: Position,
        *,
        kind: str,
    ) -> tuple[FanOutSnapshot, bool]:
        """The retained snapshot at the journal's current sequence, made (from ``rows()``,
        at ``position``) and retained if there is none; true when it was made now."""
        seq = journal.current_sequence
        latest = self.latest
        if (
            latest is not None
            and latest.sequence == seq
            and latest.journal_id == journal.journal_id
        ):
            return latest, False
        snap = FanOutSnapshot(
            snapshot_id=snapshot_id(table, journal.journal_id, seq, kind),
            sequence=seq,
            journal_id=journal.journal_id,
            position=position_text,
            rows=rows(),
            columns=columns,
            created_at=datetime.now(UTC),
            applied_at_position=journal.count_at_tail(position),
        )
        self.add(snap)
        return snap, True

    # ------------------------------------------------------------------ the store
    def start(self, name: str) -> None:
        """Open the configured store (once) and start the persistence thread."""
        if self.store is None:
            self.store, self.serializer = open_store(self.options)
        if self.store is not None and self._thread is None:
            self._stop.clear()
            self._thread = threading.Thread(
                target=self._persist_loop, name=f"fanout-persist-{name}", daemon=True
            )
            self._thread.start()

    def persist(self, snap: FanOutSnapshot, table: TableIdentifier, pipeline_id: str) -> None:
        """Queue ``snap`` for the store (nothing without a store)."""
        if self.store is None:
            return
        with self._queue_cond:
            self._queue.append((snap, table, pipeline_id))
            self._queue_cond.notify_all()

    def close(self, timeout: float = 5.0) -> None:
        """Save what is queued, then stop the persistence thread."""
        self._stop.set()
        with self._queue_cond:
            self._queue_cond.notify_all()
        if self._thread is not None:
            self._thread.join(timeout=timeout)
            self._thread = None

    def load(self, snapshot_id: str, table: TableIdentifier | None) -> FanOutSnapshot | None:
        """A snapshot of ``table`` from the store, or None (no store, not found, unreadable,
        or not a fan-out snapshot of ``table``: an engine snapshot in a shared store is never
        served, and is not read to find out)."""
        if self.store is None:
            return None
        try:
            desc = self.store.describe(snapshot_id)
            if "fanout_journal_id" not in (desc.user_meta or {}) or not any(
                t.table == table and t.target_type == TARGET_TYPE for t in desc.tables
            ):
                return None
            meta, tables = self.store.load(snapshot_id, self.serializer)
        except Exception as exc:
            logger.debug("fan-out snapshot %s is not loadable: %s", snapshot_id, exc)
            return None
        rows: tuple[Row, ...] = ()
        info = meta.tables[0] if meta.tables else None
        for t, it in tables.items():
            if t == table:
                rows = tuple(it)
        um = meta.user_meta
        return FanOutSnapshot(
            snapshot_id=meta.snapshot_id,
            sequence=int(um.get("fanout_sequence", 0)),
            journal_id=str(um.get("fanout_journal_id", "")),
            position=(info.position or "") if info else "",
            rows=rows,
            columns=info.columns if info else (),
            created_at=meta.created_at,
            persisted=True,
            applied_at_position=int(um.get("fanout_applied_at_position", 0)),
        )

    def _persist_loop(self) -> None:
        while True:
            with self._queue_cond:
                while not self._queue and not self._stop.is_set():
                    self._queue_cond.wait(0.5)
                if not self._queue:
                    return
                snap, table, pipeline_id = self._queue.pop(0)
            try:
                self._save(snap, table, pipeline_id)
            except Exception:
                logger.exception("fan-out snapshot %s could not be saved", snap.snapshot_id)

    def _save(self, snap: FanOutSnapshot, table: TableIdentifier, pipeline_id: str) -> None:
        info = TableSnapshotInfo(
            table=table,
            row_count=len(snap.rows),
            columns=snap.columns,
            target_type=TARGET_TYPE,
            position=snap.position or None,
            pipeline_id=pipeline_id,
        )
        meta = SnapshotMetadata(
            snapshot_id=snap.snapshot_id,
            created_at=snap.created_at,
            source_positions={"fanout": snap.position} if snap.position else {},
            tables=(info,),
            user_meta={
                "fanout_sequence": snap.sequence,
                "fanout_journal_id": snap.journal_id,
                "fanout_applied_at_position": snap.applied_at_position,
            },
        )
        desc = self.store.save(snap.snapshot_id, meta, {table: snap.rows}, self.serializer)
        size = int(getattr(desc, "size_bytes", 0) or 0)
        with self._lock:
            for i, s in enumerate(self._snapshots):
                if s.snapshot_id == snap.snapshot_id:
                    self._snapshots[i] = dataclasses.replace(s, persisted=True, size_bytes=size)
        self._prune_store(table)

    def _prune_store(self, table: TableIdentifier) -> None:
        keep = self.options.keep_count
        if not keep:
            return
        mine = [
            d
            for d in self.store.list(table)
            if "fanout_journal_id" in (getattr(d, "user_meta", None) or {})
        ]
        for d in mine[keep:]:
            with contextlib.suppress(Exception):
                self.store.delete(d.snapshot_id)
