"""Engine events as values: each event is a frozen dataclass delivered as ``on_event(ev)``.

An observer reads the fields it needs by name, so adding a field to an event (always at the end,
with a default) breaks no observer. Per-change events (``opt_in = True``: :class:`ChangeReceived`,
:class:`ChangeApplied`, :class:`BufferDepthChanged`, :class:`BaselineRowLoaded`) cost a value per
change or buffer operation, so the engine builds them only when an observer lists them in its
``opted_in`` collection (see :func:`receives`); every other event reaches every observer.

Plugins define their own events by subclassing :class:`Event` (the fan-out target's
``Fanout*`` events live in ``laredo_target_fanout.events``). :class:`Handlers` finds an
observer's handler by event class *name* along the class's MRO, so an observer can handle a
plugin's events without importing the plugin.

``legacy`` names the ``on_xxx`` method and the number of leading fields that the deprecated
method-per-event observers receive (see :class:`laredo.observers.NullObserver`); removed in 0.3.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Collection, Mapping
from dataclasses import MISSING, dataclass, fields
from datetime import timedelta
from typing import Any, ClassVar, TypeVar, cast

from .types import (
    ChangeAction,
    ChangeEvent,
    ErrorInfo,
    PipelineState,
    Position,
    SchemaChangeEvent,
    TableIdentifier,
)

__all__ = [
    "AckAdvanced",
    "BaselineCompleted",
    "BaselineRowLoaded",
    "BaselineStarted",
    "BufferDepthChanged",
    "BufferPolicyTriggered",
    "ChangeApplied",
    "ChangeError",
    "ChangeReceived",
    "ChangesApplied",
    "DeadLetterWritten",
    "Event",
    "Handlers",
    "LagUpdated",
    "PipelineAdded",
    "PipelineRemoved",
    "PipelineStateChanged",
    "RebaselineTriggered",
    "RowExpired",
    "SchemaChanged",
    "SnapshotCompleted",
    "SnapshotFailed",
    "SnapshotRestoreCompleted",
    "SnapshotRestoreStarted",
    "SnapshotStarted",
    "SourceConnected",
    "SourceDisconnected",
    "ValidationResult",
    "handles",
    "receives",
]


@dataclass(frozen=True, slots=True)
class Event:
    """Base of every engine event."""

    opt_in: ClassVar[bool] = False
    """Emitted only to observers that list the class (or a base) in ``opted_in``."""
    legacy: ClassVar[tuple[str, int]] = ("", 0)
    """``(method name, field count)`` for deprecated method-per-event observers."""

    def __init_subclass__(cls) -> None:  # no super(): its cell is the class slots=True replaced
        if "__slots__" in cls.__dict__ and "__dataclass_fields__" in cls.__dict__:
            _fast_init(cls)  # the slotted class ``dataclass(slots=True)`` makes

    def legacy_args(self) -> tuple[Any, ...]:
        """The leading fields the deprecated ``on_xxx`` method takes, in order."""
        return tuple(getattr(self, f.name) for f in fields(self)[: self.legacy[1]])


def _fast_init(cls: type) -> None:
    """Give a frozen slotted event an ``__init__`` that fills the slots directly (half the cost
    of the generated one, which goes through ``object.__setattr__``: per-change events are
    built once per change). Fields with a factory, ``init=False`` or ``__post_init__`` keep
    the generated one."""
    fs = fields(cls)
    generated = list(inspect.signature(cls).parameters)
    if (
        hasattr(cls, "__post_init__")
        or generated != [f.name for f in fs]
        or any(f.default_factory is not MISSING for f in fs)
    ):
        return
    ns: dict[str, Any] = {f"_set_{f.name}": getattr(cls, f.name).__set__ for f in fs}
    params = []
    for f in fs:
        if f.default is MISSING:
            params.append(f.name)
        else:
            ns[f"_default_{f.name}"] = f.default
            params.append(f"{f.name}=_default_{f.name}")
    body = "".join(f"    _set_{f.name}(self, {f.name})\n" for f in fs) or "    pass\n"
    exec(f"def __init__(self, {', '.join(params)}):\n{body}", ns)
    init = ns["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    cast(Any, cls).__init__ = init


def receives(observer: object, kind: type[Event]) -> bool:
    """Does ``observer`` get events of ``kind``? Always, unless ``kind`` is opt-in and the
    observer's ``opted_in`` lists neither it nor a base of it."""
    if not kind.opt_in:
        return True
    wanted: Collection[type[Event]] = getattr(observer, "opted_in", ())
    return any(issubclass(kind, w) for w in wanted)


H = TypeVar("H")
F = TypeVar("F", bound=Callable[..., Any])


def handles(*kinds: type[Event] | str) -> Callable[[F], F]:
    """Mark an observer method as the handler of events of ``kinds`` (classes, or class names
    for a plugin's events the observer cannot import); see :class:`laredo.NullObserver`."""

    def mark(fn: F) -> F:
        names = tuple(k if isinstance(k, str) else k.__name__ for k in kinds)
        cast(Any, fn).__laredo_handles__ = names
        return fn

    return mark


class Handlers(dict[type, H | None]):
    """An observer's handlers by event class name, looked up by event class
    (``handlers[type(ev)]``). A class without its own entry gets the handler of the nearest base
    that has one (a later version or subclass of an event reaches the same handler), or None;
    the answer is kept per class."""

    def __init__(self, by_name: Mapping[str, H]) -> None:
        super().__init__()
        self._by_name = dict(by_name)

    def __missing__(self, kind: type) -> H | None:
        names = (c.__name__ for c in kind.__mro__)
        found = next((self._by_name[n] for n in names if n in self._by_name), None)
        self[kind] = found
        return found


# -- lifecycle --------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class SourceConnected(Event):
    legacy: ClassVar[tuple[str, int]] = ("on_source_connected", 2)
    source_id: str
    source_type: str


@dataclass(frozen=True, slots=True)
class SourceDisconnected(Event):
    legacy: ClassVar[tuple[str, int]] = ("on_source_disconnected", 2)
    source_id: str
    reason: str


@dataclass(frozen=True, slots=True)
class PipelineStateChanged(Event):
    legacy: ClassVar[tuple[str, int]] = ("on_pipeline_state_changed", 3)
    pipeline_id: str
    old: PipelineState
    new: PipelineState


@dataclass(frozen=True, slots=True)
class PipelineAdded(Event):
    """A pipeline joined a running engine (``Engine.add_pipeline``)."""

    legacy: ClassVar[tuple[str, int]] = ("on_pipeline_added", 3)
    pipeline_id: str
    source_id: str
    table: TableIdentifier


@dataclass(frozen=True, slots=True)
class PipelineRemoved(Event):
    """A pipeline left a running engine (``Engine.remove_pipeline``)."""

    legacy: ClassVar[tuple[str, int]] = ("on_pipeline_removed", 3)
    pipeline_id: str
    source_id: str
    reason: str


# -- baseline ---------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class BaselineStarted(Event):
    legacy: ClassVar[tuple[str, int]] = ("on_baseline_started", 2)
    pipeline_id: str
    table: TableIdentifier


@dataclass(frozen=True, slots=True)
class BaselineRowLoaded(Event):
    """Baseline progress: ``row_count`` rows loaded so far (opt-in)."""

    opt_in: ClassVar[bool] = True
    legacy: ClassVar[tuple[str, int]] = ("on_baseline_row_loaded", 3)
    pipeline_id: str
    table: TableIdentifier
    row_count: int


@dataclass(frozen=True, slots=True)
class BaselineCompleted(Event):
    legacy: ClassVar[tuple[str, int]] = ("on_baseline_completed", 4)
    pipeline_id: str
    table: TableIdentifier
    total_rows: int
    duration: timedelta


@dataclass(frozen=True, slots=True)
class RebaselineTriggered(Event):
    legacy: ClassVar[tuple[str, int]] = ("on_rebaseline_triggered", 1)
    source_id: str


# -- streaming --------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class ChangeReceived(Event):
    """One change taken from the pipeline buffer (opt-in)."""

    opt_in: ClassVar[bool] = True
    legacy: ClassVar[tuple[str, int]] = ("on_change_received", 4)
    pipeline_id: str
    table: TableIdentifier
    action: ChangeAction
    position: Position


@dataclass(frozen=True, slots=True)
class ChangeApplied(Event):
    """One change applied; ``duration`` is its share of the batch (opt-in)."""

    opt_in: ClassVar[bool] = True
    legacy: ClassVar[tuple[str, int]] = ("on_change_applied", 4)
    pipeline_id: str
    table: TableIdentifier
    action: ChangeAction
    duration: timedelta


@dataclass(frozen=True, slots=True)
class ChangesApplied(Event):
    """A batch of ``count`` changes applied in ``duration``."""

    legacy: ClassVar[tuple[str, int]] = ("on_changes_applied", 4)
    pipeline_id: str
    table: TableIdentifier
    count: int
    duration: timedelta


@dataclass(frozen=True, slots=True)
class ChangeError(Event):
    """One failed attempt to apply a change."""

    legacy: ClassVar[tuple[str, int]] = ("on_change_error", 4)
    pipeline_id: str
    table: TableIdentifier
    action: ChangeAction
    error: ErrorInfo


# -- acknowledgement, backpressure ------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class AckAdvanced(Event):
    legacy: ClassVar[tuple[str, int]] = ("on_ack_advanced", 2)
    source_id: str
    position: Position


@dataclass(frozen=True, slots=True)
class BufferDepthChanged(Event):
    """One buffer operation (opt-in)."""

    opt_in: ClassVar[bool] = True
    legacy: ClassVar[tuple[str, int]] = ("on_buffer_depth_changed", 3)
    pipeline_id: str
    depth: int
    capacity: int


@dataclass(frozen=True, slots=True)
class BufferPolicyTriggered(Event):
    legacy: ClassVar[tuple[str, int]] = ("on_buffer_policy_triggered", 2)
    pipeline_id: str
    policy: str


# -- snapshots --------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class SnapshotStarted(Event):
    legacy: ClassVar[tuple[str, int]] = ("on_snapshot_started", 1)
    snapshot_id: str


@dataclass(frozen=True, slots=True)
class SnapshotCompleted(Event):
    legacy: ClassVar[tuple[str, int]] = ("on_snapshot_completed", 5)
    snapshot_id: str
    tables: int
    rows: int
    size_bytes: int
    duration: timedelta


@dataclass(frozen=True, slots=True)
class SnapshotFailed(Event):
    legacy: ClassVar[tuple[str, int]] = ("on_snapshot_failed", 2)
    snapshot_id: str
    error: ErrorInfo


@dataclass(frozen=True, slots=True)
class SnapshotRestoreStarted(Event):
    legacy: ClassVar[tuple[str, int]] = ("on_snapshot_restore_started", 1)
    snapshot_id: str


@dataclass(frozen=True, slots=True)
class SnapshotRestoreCompleted(Event):
    legacy: ClassVar[tuple[str, int]] = ("on_snapshot_restore_completed", 2)
    snapshot_id: str
    duration: timedelta


# -- schema, lag, dead letters, TTL, validation -----------------------------------------------
@dataclass(frozen=True, slots=True)
class SchemaChanged(Event):
    legacy: ClassVar[tuple[str, int]] = ("on_schema_change", 3)
    source_id: str
    table: TableIdentifier
    event: SchemaChangeEvent


@dataclass(frozen=True, slots=True)
class LagUpdated(Event):
    legacy: ClassVar[tuple[str, int]] = ("on_lag_updated", 3)
    source_id: str
    lag_bytes: int
    lag_time: timedelta | None


@dataclass(frozen=True, slots=True)
class DeadLetterWritten(Event):
    legacy: ClassVar[tuple[str, int]] = ("on_dead_letter_written", 3)
    pipeline_id: str
    change: ChangeEvent
    error: ErrorInfo


@dataclass(frozen=True, slots=True)
class RowExpired(Event):
    legacy: ClassVar[tuple[str, int]] = ("on_row_expired", 3)
    pipeline_id: str
    table: TableIdentifier
    key: str


@dataclass(frozen=True, slots=True)
class ValidationResult(Event):
    legacy: ClassVar[tuple[str, int]] = ("on_validation_result", 5)
    pipeline_id: str
    table: TableIdentifier
    source_count: int
    target_count: int
    match: bool
