"""What source readers and pipeline workers may see and do upward, and nothing else.

The engine builds one :class:`EngineContext` at ``start()`` and hands it down; readers and
workers never hold the :class:`~laredo.engine.Engine` itself. Failures that reach beyond one
pipeline go up through ``escalate(scope, source_id, message)``; readiness changes through
``readiness_changed()``. A worker knows its source only through a :class:`SourceLink`.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..contracts import DeadLetterStore, Observer, SyncSource
from ..events import (
    BaselineRowLoaded,
    BufferDepthChanged,
    ChangeApplied,
    ChangeReceived,
    Event,
    receives,
)
from ..types import Position

if TYPE_CHECKING:  # a type only: snapshots.py imports nothing from here
    from .snapshots import SnapshotCoordinator

__all__ = ["EngineContext", "FailureScope", "ObserverWants", "SourceLink"]


class FailureScope(enum.Enum):
    """How far a failure reaches (the pipeline error policies ``isolate``, ``stop_source``,
    ``stop_all``)."""

    PIPELINE = "pipeline"
    SOURCE = "source"
    ALL = "all"


@dataclass(frozen=True, slots=True)
class ObserverWants:
    """Which per-change (opt-in) events the observer wants (computed once at start): the
    engine builds those values only when wanted."""

    received: bool = False
    applied: bool = False
    depth: bool = False
    baseline_progress: bool = False

    @classmethod
    def of(cls, observer: Observer) -> ObserverWants:
        return cls(
            received=receives(observer, ChangeReceived),
            applied=receives(observer, ChangeApplied),
            depth=receives(observer, BufferDepthChanged),
            baseline_progress=receives(observer, BaselineRowLoaded),
        )


@dataclass(frozen=True, slots=True)
class EngineContext:
    """Handed to every source reader and pipeline worker at ``Engine.start()``."""

    observer: Observer
    dead_letters: DeadLetterStore | None
    snapshots: SnapshotCoordinator | None
    wants: ObserverWants
    escalate: Callable[[FailureScope, str, str], None]
    """``escalate(scope, source_id, message)``: fail every pipeline of the source (SOURCE) or of
    the engine (ALL) with ``message``."""
    readiness_changed: Callable[[], None]

    def emit(self, ev: Event) -> None:
        """Hand ``ev`` to the observer."""
        self.observer.on_event(ev)


@dataclass(frozen=True, slots=True)
class SourceLink:
    """What a pipeline worker knows of its source: its id, position functions, and how to ask
    for an acknowledgement attempt after it made progress."""

    source_id: str
    source: SyncSource
    pos_str: Callable[[Position | None], str]
    request_ack: Callable[[], None]
    volatile_acks_snapshot_bound: bool
    """In-memory targets count as durable only up to their latest snapshot (the source can
    resume and a snapshot store is configured)."""

    def compare(self, a: Position, b: Position) -> int:
        return self.source.compare_positions(a, b)
