"""Taking, restoring and retaining snapshots for the engine.

:meth:`SnapshotCoordinator.take` saves every pipeline's export under one snapshot id; each table
carries its pipeline's applied position and the snapshot's position for a source is the lowest
of its tables' (a restart resumes from there and each table skips what it already holds).
:meth:`SnapshotCoordinator.restore` loads the newest snapshot usable for a source into the
targets and returns a :class:`RestoreResult`; it never writes into the engine's workers: the
caller applies the result. A snapshot that fails to load leaves the targets it touched truncated
and the caller falls back (resume without it, or baseline). Retention by count and age runs after
each snapshot.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

from ..contracts import EngineObserver, SnapshotSerializer, SnapshotStore, SyncSource
from ..errors import SnapshotError
from ..events import (
    SnapshotCompleted,
    SnapshotFailed,
    SnapshotRestoreCompleted,
    SnapshotRestoreStarted,
    SnapshotStarted,
)
from ..snapshots.schedule import apply_retention
from ..types import (
    ColumnDefinition,
    ErrorInfo,
    IndexDefinition,
    Position,
    Row,
    SnapshotMetadata,
    TableIdentifier,
    TableSnapshotInfo,
)

logger = logging.getLogger(__name__)

__all__ = [
    "Export",
    "RestoreResult",
    "Restorer",
    "SnapshotCoordinator",
    "TableRestore",
    "TakeResult",
]


@dataclass(frozen=True, slots=True)
class Export:
    """One pipeline's share of a snapshot: its target's rows at ``position``."""

    pipeline_id: str
    source_id: str
    table: TableIdentifier
    columns: Sequence[ColumnDefinition]
    target_type: str
    indexes: Sequence[IndexDefinition]
    rows: list[Row]
    position: Position | None
    progress: str | None = None
    """The target's chunked-baseline progress record (a baseline part way through)."""


@dataclass(frozen=True, slots=True)
class TakeResult:
    snapshot_id: str
    exports: Sequence[Export]


@dataclass(frozen=True, slots=True)
class TableRestore:
    """What one pipeline's target now holds: the table as of ``position``."""

    pipeline_id: str
    position: Position
    row_count: int


@dataclass(frozen=True, slots=True)
class RestoreResult:
    """A snapshot restored into a source's pipelines."""

    snapshot_id: str
    source_position: Position
    """The source's position in the snapshot: the stream resumes strictly after it."""
    tables: Mapping[str, TableRestore]
    """By pipeline id."""


class RestoreTarget(Protocol):
    """What restoring needs of a pipeline."""

    @property
    def id(self) -> str: ...

    @property
    def table(self) -> TableIdentifier: ...

    def restore_snapshot(self, info: TableSnapshotInfo, rows: Iterable[Row]) -> None: ...

    def truncate(self) -> None: ...


class Restorer(Protocol):
    """The restore half of :class:`SnapshotCoordinator` (what the startup decision needs)."""

    def restore(
        self,
        source_id: str,
        source: SyncSource,
        pipes: Sequence[RestoreTarget],
        not_before: Position | None,
    ) -> RestoreResult | None: ...


def _pos_str(source: SyncSource, position: Position) -> str:
    try:
        return str(source.position_to_string(position))
    except Exception:
        return repr(position)


class SnapshotCoordinator:
    """The engine's snapshot policy over one store and serializer. Thread-safe: one snapshot
    at a time."""

    def __init__(
        self,
        store: SnapshotStore,
        serializer: SnapshotSerializer,
        *,
        observer: EngineObserver,
        user_meta: Mapping[str, Any] | None = None,
        meta_policy: str = "warn",
        keep_count: int | None = None,
        max_age: float | None = None,
    ) -> None:
        self.store = store
        self.serializer = serializer
        self.observer = observer
        self.user_meta = dict(user_meta or {})
        self.meta_policy = meta_policy
        self.keep_count = keep_count
        self.max_age = max_age
        self.last_taken_at = time.monotonic()
        self._lock = threading.Lock()

    # -- taking -------------------------------------------------------------------------------
    def take(
        self,
        collect: Callable[[], Sequence[Export]],
        sources: Mapping[str, SyncSource],
        user_meta: Mapping[str, Any] | None = None,
    ) -> TakeResult:
        """Collect the exports (under the snapshot lock) and save them as one snapshot."""
        snap_id = datetime.now(UTC).strftime("snap-%Y%m%dT%H%M%S%fZ-") + uuid.uuid4().hex[:6]
        obs = self.observer
        with self._lock:
            started = time.monotonic()
            obs.on_event(SnapshotStarted(snap_id))
            try:
                exports = list(collect())
                meta, tables, total = self._metadata(snap_id, exports, sources, user_meta or {})
                desc = self.store.save(snap_id, meta, tables, self.serializer)
            except Exception as exc:
                obs.on_event(SnapshotFailed(snap_id, ErrorInfo.of(exc)))
                raise
            self.last_taken_at = time.monotonic()
            obs.on_event(
                SnapshotCompleted(
                    snap_id,
                    len(meta.tables),
                    total,
                    int(getattr(desc, "size_bytes", 0) or 0),
                    timedelta(seconds=time.monotonic() - started),
                )
            )
            self._apply_retention()
        return TakeResult(snap_id, exports)

    def _metadata(
        self,
        snap_id: str,
        exports: Sequence[Export],
        sources: Mapping[str, SyncSource],
        user_meta: Mapping[str, Any],
    ) -> tuple[SnapshotMetadata, dict[TableIdentifier, list[Row]], int]:
        tables: dict[TableIdentifier, list[Row]] = {}
        infos: list[TableSnapshotInfo] = []
        per_source: dict[str, list[Position | None]] = {}
        total = 0
        for e in exports:
            key = e.table
            if key in tables:  # a second pipeline on the same table
                key = TableIdentifier(e.table.schema, f"{e.table.table}~{len(tables)}")
            tables[key] = e.rows
            total += len(e.rows)
            source = sources[e.source_id]
            infos.append(
                TableSnapshotInfo(
                    table=key,
                    row_count=len(e.rows),
                    columns=tuple(e.columns),
                    target_type=e.target_type,
                    indexes=tuple(e.indexes),
                    position=_pos_str(source, e.position) if e.position is not None else None,
                    pipeline_id=e.pipeline_id,
                    progress=e.progress,
                )
            )
            per_source.setdefault(e.source_id, []).append(e.position)
        positions: dict[str, str] = {}
        for sid, plist in per_source.items():
            known = [p for p in plist if p is not None]
            if len(known) != len(plist):
                continue  # a table without a position: no usable position for this source
            source = sources[sid]
            low = known[0]
            for p in known[1:]:
                if source.compare_positions(p, low) < 0:
                    low = p
            positions[sid] = _pos_str(source, low)
        meta = SnapshotMetadata(
            snapshot_id=snap_id,
            created_at=datetime.now(UTC),
            source_positions=positions,
            tables=tuple(infos),
            format=self.serializer.format_id(),
            user_meta={**self.user_meta, **user_meta},
        )
        return meta, tables, total

    def _apply_retention(self) -> None:
        if not (self.max_age or self.keep_count):
            return
        try:
            apply_retention(self.store, keep_count=self.keep_count, max_age=self.max_age)
        except Exception:
            logger.warning("snapshot retention failed", exc_info=True)

    # -- restoring ----------------------------------------------------------------------------
    def restore(
        self,
        source_id: str,
        source: SyncSource,
        pipes: Sequence[RestoreTarget],
        not_before: Position | None,
    ) -> RestoreResult | None:
        """Restore ``pipes`` from the newest snapshot that has a position for ``source_id``.

        With ``not_before`` (a resume position) every restored table must be at or after it,
        or the snapshot is not usable. ``None`` when nothing was restored (no snapshot, or the
        newest one is unusable: its partly restored targets are truncated again)."""
        if not pipes:
            return None
        try:
            listed = self.store.list()
        except Exception as exc:
            logger.warning("snapshot store list failed: %s", exc)
            return None
        for desc in listed:
            if desc.source_positions and source_id not in desc.source_positions:
                continue  # descriptors without positions are decided after load()
            return self._restore_one(desc.snapshot_id, source_id, source, pipes, not_before)
        return None

    def _restore_one(
        self,
        snap_id: str,
        source_id: str,
        source: SyncSource,
        pipes: Sequence[RestoreTarget],
        not_before: Position | None,
    ) -> RestoreResult | None:
        obs = self.observer
        restored: list[RestoreTarget] = []
        started = time.monotonic()
        obs.on_event(SnapshotRestoreStarted(snap_id))
        try:
            meta, data = self.store.load(snap_id, self.serializer)
            if source_id not in meta.source_positions:
                raise SnapshotError(f"snapshot {snap_id} has no position for source {source_id}")
            self.check_user_meta(meta)
            src_pos = source.position_from_string(meta.source_positions[source_id])
            by_pid = {i.pipeline_id: i for i in meta.tables if i.pipeline_id}
            by_table: dict[TableIdentifier, TableSnapshotInfo] = {}
            for i in meta.tables:
                by_table.setdefault(i.table, i)
            plan: list[tuple[RestoreTarget, TableSnapshotInfo, Position]] = []
            for p in pipes:
                info = by_pid.get(p.id) or by_table.get(p.table)
                if info is None or info.position is None:
                    raise SnapshotError(f"snapshot {snap_id} has no data for pipeline {p.id}")
                pos = source.position_from_string(info.position)
                if not_before is not None and source.compare_positions(pos, not_before) < 0:
                    raise SnapshotError(
                        f"snapshot {snap_id} table {p.table} is at {info.position}, before "
                        f"the resume position {_pos_str(source, not_before)}"
                    )
                plan.append((p, info, pos))
            tables: dict[str, TableRestore] = {}
            for p, info, pos in plan:
                rows = data.get(info.table)
                if rows is None:
                    raise SnapshotError(f"snapshot {snap_id} misses table file for {info.table}")
                restored.append(p)
                p.restore_snapshot(info, rows)
                tables[p.id] = TableRestore(p.id, pos, info.row_count)
        except Exception as exc:
            logger.warning("snapshot %s unusable, falling back: %s", snap_id, exc)
            obs.on_event(SnapshotFailed(snap_id, ErrorInfo.of(exc, "restore failed: ")))
            for p in restored:
                with contextlib.suppress(Exception):
                    p.truncate()
            return None
        obs.on_event(
            SnapshotRestoreCompleted(snap_id, timedelta(seconds=time.monotonic() - started))
        )
        return RestoreResult(snap_id, src_pos, tables)

    def check_user_meta(self, meta: SnapshotMetadata) -> None:
        """Compare the snapshot's user metadata with the engine's: warn, or raise
        ``SnapshotError`` under the ``reject`` policy."""
        diffs = [
            f"{k}: snapshot has {meta.user_meta.get(k)!r}, engine expects {v!r}"
            for k, v in self.user_meta.items()
            if meta.user_meta.get(k) != v
        ]
        if not diffs:
            return
        msg = f"snapshot {meta.snapshot_id} user metadata mismatch: " + "; ".join(diffs)
        if self.meta_policy == "reject":
            raise SnapshotError(msg)
        logger.warning("%s (snapshot_meta_policy=warn: restoring anyway)", msg)
