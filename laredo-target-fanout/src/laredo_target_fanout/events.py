"""The fan-out target's observer events (values of :mod:`laredo.events`, emitted only here).

Observers handle them like the engine's events; an observer that cannot import this package
(the server's metrics) marks its handlers with the class names
(``@laredo.events.handles("FanoutClientConnected")``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from laredo.events import Event
from laredo.types import SyncMode

__all__ = [
    "FanoutClientBackpressure",
    "FanoutClientCaughtUp",
    "FanoutClientConnected",
    "FanoutClientDisconnected",
    "FanoutJournalPruned",
    "FanoutSnapshotCreated",
]


@dataclass(frozen=True, slots=True)
class FanoutClientConnected(Event):
    legacy: ClassVar[tuple[str, int]] = ("on_fanout_client_connected", 3)
    pipeline_id: str
    client_id: str
    mode: SyncMode


@dataclass(frozen=True, slots=True)
class FanoutClientDisconnected(Event):
    legacy: ClassVar[tuple[str, int]] = ("on_fanout_client_disconnected", 3)
    pipeline_id: str
    client_id: str
    reason: str


@dataclass(frozen=True, slots=True)
class FanoutClientCaughtUp(Event):
    """The client's cursor reached the journal head at sequence ``seq``."""

    legacy: ClassVar[tuple[str, int]] = ("on_fanout_client_caught_up", 3)
    pipeline_id: str
    client_id: str
    seq: int


@dataclass(frozen=True, slots=True)
class FanoutClientBackpressure(Event):
    """The client's send queue holds ``depth`` entries and is full."""

    legacy: ClassVar[tuple[str, int]] = ("on_fanout_client_backpressure", 3)
    pipeline_id: str
    client_id: str
    depth: int


@dataclass(frozen=True, slots=True)
class FanoutSnapshotCreated(Event):
    legacy: ClassVar[tuple[str, int]] = ("on_fanout_snapshot_created", 4)
    pipeline_id: str
    snapshot_id: str
    seq: int
    rows: int


@dataclass(frozen=True, slots=True)
class FanoutJournalPruned(Event):
    legacy: ClassVar[tuple[str, int]] = ("on_fanout_journal_pruned", 3)
    pipeline_id: str
    pruned: int
    oldest_seq: int
