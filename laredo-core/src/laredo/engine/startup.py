"""Where a source starts: resume > snapshot restore > baseline, and delivering the baseline.

* **Resume** when the source supports it and has an acknowledged position. Durable targets
  already hold everything up to it; in-memory (volatile) targets must be restored from a snapshot
  at or after it, else the whole source re-baselines (never resume into an empty target).
* **Restore** the newest snapshot with a position for this source when the source has no
  acknowledged position: the stream resumes strictly after the snapshot's position, each table
  skipping what its snapshot already holds.
* **Baseline** otherwise: a consistent baseline of every table, the stream starting strictly
  after the position the source returns. Rows reach the targets through
  :mod:`laredo.engine.baseline`, the path a one-table reload takes too.
"""

from __future__ import annotations

import enum
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass

from ..contracts import SyncSource
from ..events import SourceDisconnected
from ..types import Position
from .baseline import baseline_into
from .context import EngineContext
from .pipeline_worker import PipelineWorker
from .snapshots import Restorer, RestoreResult

logger = logging.getLogger(__name__)

__all__ = [
    "BaselineFailed",
    "StartKind",
    "StartPlan",
    "plan_start",
    "run_baseline",
]


class StartKind(enum.Enum):
    RESUME = "resume"
    RESTORE = "restore"
    BASELINE = "baseline"
    REBASELINE = "rebaseline"
    """A resumable source whose in-memory targets have no usable snapshot: truncate, baseline."""


@dataclass(frozen=True, slots=True)
class StartPlan:
    kind: StartKind
    position: Position | None = None
    """RESUME: the acknowledged position; RESTORE: the snapshot's position for the source."""
    restored: RestoreResult | None = None
    """What a snapshot restore put into the targets (RESUME of volatile targets, RESTORE)."""


class BaselineFailed(Exception):
    """The source's baseline failed; ``str(exc)`` says why (the reader fails the source)."""


def _supports_resume(source: SyncSource) -> bool:
    try:
        return bool(source.supports_resume())
    except Exception:
        return False


def plan_start(
    source_id: str,
    source: SyncSource,
    active: Sequence[PipelineWorker],
    snapshots: Restorer | None,
) -> StartPlan:
    """Decide (and, for snapshots, perform the restore of) how ``source`` starts."""
    if _supports_resume(source):
        last = source.last_acked_position()
        if last is not None:
            volatile = [p for p in active if not p.keeps_state()]
            if not volatile:
                return StartPlan(StartKind.RESUME, last)
            restored = (
                snapshots.restore(source_id, source, volatile, not_before=last)
                if snapshots is not None
                else None
            )
            if restored is not None:
                return StartPlan(StartKind.RESUME, last, restored)
            return StartPlan(StartKind.REBASELINE)
        if snapshots is not None:
            restored = snapshots.restore(source_id, source, active, not_before=None)
            if restored is not None:
                return StartPlan(StartKind.RESTORE, restored.source_position, restored)
    return StartPlan(StartKind.BASELINE)


def run_baseline(
    ctx: EngineContext,
    source_id: str,
    source: SyncSource,
    pipes: Sequence[PipelineWorker],
    rebaseline: bool = False,
) -> Position:
    """Baseline every table of ``pipes`` (truncating targets first on a re-baseline) through
    :func:`~laredo.engine.baseline.baseline_into` and return the position the stream starts
    strictly after. Raises :class:`BaselineFailed`."""
    obs = ctx.observer
    active = [p for p in pipes if not p.failed]
    started = time.monotonic()
    for p in active:
        p.begin_baseline(truncate=rebaseline)
    try:
        position, loaded = baseline_into(ctx, source, active)
    except Exception as exc:
        msg = f"baseline failed: {exc}"
        obs.on_event(SourceDisconnected(source_id, msg))
        raise BaselineFailed(f"source {source_id}: {msg}") from exc
    for p in active:
        if p.failed:
            continue
        try:
            p.complete_baseline(position, loaded[p.id], started)
        except Exception as exc:
            p.fail(f"baseline completion failed: {exc}")
            continue
        p.mark_streaming()
    return position
