"""What the server reports, as plain Python values: the service state and the status events
that ``WatchStatus`` streams.

Nothing here knows the wire: :mod:`laredo_server.services.convert` maps these values to
protobuf messages. The runtime computes them, the watch hub emits them.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Literal, TypeAlias

from laredo.types import PipelineState, TableIdentifier

__all__ = [
    "ChangesApplied",
    "PipelineStateChanged",
    "ServiceState",
    "ServiceStateChanged",
    "SnapshotActivity",
    "SnapshotEventKind",
    "SourceEventKind",
    "SourceStateChanged",
    "StatusEvent",
]


class ServiceState(enum.Enum):
    """The state of the whole server, derived from its pipelines (see ``ServerRuntime``)."""

    STARTING = "STARTING"
    BASELINING = "BASELINING"
    STREAMING = "STREAMING"
    PAUSED = "PAUSED"
    RELOADING = "RELOADING"
    ERROR = "ERROR"
    STOPPING = "STOPPING"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True, slots=True)
class PipelineStateChanged:
    """A pipeline moved from ``old`` (None: the current state, sent first to a new watcher)
    to ``new``; ``error`` is set when ``new`` is ERROR."""

    at: float
    pipeline_id: str
    old: PipelineState | None
    new: PipelineState
    error: str = ""


@dataclass(frozen=True, slots=True)
class ServiceStateChanged:
    """The service state changed; ``old`` is None for the first state a hub reports."""

    at: float
    old: ServiceState | None
    new: ServiceState


@dataclass(frozen=True, slots=True)
class ChangesApplied:
    """A batch of ``count`` changes was applied to a pipeline's target."""

    at: float
    pipeline_id: str
    table: TableIdentifier
    count: int


SourceEventKind: TypeAlias = Literal["CONNECTED", "DISCONNECTED", "ACK"]


@dataclass(frozen=True, slots=True)
class SourceStateChanged:
    """A source connected, disconnected (``reason``, secrets masked) or acknowledged
    ``position`` (the source's text form)."""

    at: float
    source_id: str
    state: SourceEventKind
    reason: str = ""
    position: str = ""


SnapshotEventKind: TypeAlias = Literal[
    "started", "completed", "failed", "restore_started", "restore_completed"
]


@dataclass(frozen=True, slots=True)
class SnapshotActivity:
    """A snapshot was started, completed (``rows``), failed (``message``) or restored."""

    at: float
    snapshot_id: str
    event: SnapshotEventKind
    message: str = ""
    rows: int = 0


StatusEvent: TypeAlias = (
    PipelineStateChanged
    | ServiceStateChanged
    | ChangesApplied
    | SourceStateChanged
    | SnapshotActivity
)
"""One event of a ``WatchStatus`` stream."""
