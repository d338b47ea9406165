"""A pipeline's bounded change buffer, between its source's demultiplexer and its worker.

Capacity counts change events; a transaction's events travel as one :class:`Batch`. Heartbeats,
schema changes and skip markers travel in the same queue, so they stay ordered with changes, and
do not count towards capacity. Control requests (snapshot export, reload, TTL sweep, calls) jump
the queue: the worker runs them between two items, even while paused.

Policies when full: ``block`` waits for room (a batch larger than the capacity enters an empty
buffer), ``drop_oldest`` evicts the oldest changes (never heartbeats or markers), ``error``
raises :class:`~laredo.errors.BufferOverflow`. Only a streaming pipeline's full buffer applies
``drop_oldest`` or ``error``: from a pause (``pause``, a pipeline joining in a reload) until the
pipeline has caught up after the resume (its buffer empties with no change waiting), a full
buffer waits for room whatever the policy, so the source is held back and nothing is dropped
or refused. Evicted changes are counted in ``dropped`` and ``dropped_delta``
(their net row-count change), so validation sees the rows they leave missing.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Literal

from ..errors import BufferOverflow
from ..pipeline_ops import row_count_change
from ..types import BufferPolicy, ChangeEvent, ColumnDefinition, Position, TableIdentifier

__all__ = [
    "Batch",
    "Call",
    "ChangeBuffer",
    "ControlRequest",
    "Heartbeat",
    "Item",
    "SchemaItem",
    "Skip",
]


@dataclass(frozen=True, slots=True)
class Batch:
    """Changes of one transaction, in order. ``complete=False``: a chunk whose transaction
    continues in the next batch (same position), not acknowledgeable on its own."""

    events: Sequence[ChangeEvent]
    complete: bool = True


@dataclass(frozen=True, slots=True)
class Heartbeat:
    """Nothing for this pipeline up to ``position`` (lets idle pipelines acknowledge)."""

    position: Position


@dataclass(frozen=True, slots=True)
class SchemaItem:
    """A table's columns changed at ``position`` (in stream order)."""

    table: TableIdentifier
    old_columns: Sequence[ColumnDefinition]
    new_columns: Sequence[ColumnDefinition]
    position: Position


@dataclass(frozen=True, slots=True)
class Skip:
    """After a stream restart: drop re-delivered changes at or before ``position``."""

    position: Position


@dataclass(frozen=True, slots=True)
class Call:
    """Run ``work`` on the pipeline's thread once everything queued before it is applied (a
    chunked backfill's end)."""

    work: Callable[[], None]


Item = Batch | Heartbeat | SchemaItem | Skip | Call

ControlKind = Literal["export", "reload", "ttl", "call"]


@dataclass(frozen=True, slots=True)
class ControlRequest:
    """Work for the pipeline's worker thread, answered through ``future``."""

    kind: ControlKind
    future: Future[Any] = field(default_factory=Future)
    payload: Callable[[], Any] | None = None


class ChangeBuffer:
    """Thread-safe: one producer (the source reader) and one consumer (the pipeline worker)."""

    def __init__(
        self,
        capacity: int,
        policy: BufferPolicy = BufferPolicy.BLOCK,
        on_policy: Callable[[str], None] | None = None,
    ) -> None:
        self.capacity = max(1, capacity)
        self.policy = policy
        self._on_policy = on_policy
        self._items: deque[Item] = deque()
        self._control: deque[ControlRequest] = deque()
        self._depth = 0
        self._cond = threading.Condition()
        self._closed = False
        self._paused = False
        self._held = False  # paused, or resumed and not caught up yet: policy is block
        self._waiting = 0  # producers waiting for room
        self.dropped = 0
        self._dropped_delta = 0

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def paused(self) -> bool:
        return self._paused

    @property
    def depth(self) -> int:
        """Change events queued (heartbeats and markers not counted)."""
        return self._depth

    def __len__(self) -> int:
        return self._depth

    # -- producer side ------------------------------------------------------------------
    def put_batch(
        self,
        events: Sequence[ChangeEvent],
        stop: threading.Event | None = None,
        complete: bool = True,
    ) -> None:
        """Enqueue a batch under the buffer's policy (see the module docstring). Returns
        without enqueuing when the buffer is closed or ``stop`` is set while waiting."""
        n = len(events)
        with self._cond:
            if self._closed:
                return
            if self._depth + n > self.capacity and self._depth > 0:
                # paused, or catching up after a pause: wait for room (never drop or refuse)
                policy = BufferPolicy.BLOCK if self._held else self.policy
                if policy is BufferPolicy.BLOCK:
                    self._waiting += 1
                    try:
                        while (
                            self._depth + n > self.capacity and self._depth > 0 and not self._closed
                        ):
                            if stop is not None and stop.is_set():
                                return
                            self._cond.wait(0.1)
                    finally:
                        self._waiting -= 1
                    if self.closed:  # the property: mypy must not narrow across wait()
                        return
                elif policy is BufferPolicy.DROP_OLDEST:
                    self._drop_oldest(self._depth + n - self.capacity)
                    if self._on_policy:
                        self._on_policy(self.policy.value)
                else:
                    if self._on_policy:
                        self._on_policy(self.policy.value)
                    raise BufferOverflow(
                        f"buffer full ({self._depth}/{self.capacity} changes); raise "
                        f"buffer_size or use buffer_policy='block'"
                    )
            self._items.append(Batch(events, complete))
            self._depth += n
            self._cond.notify_all()

    def _drop_oldest(self, excess: int) -> None:
        kept: list[Item] = []
        while excess > 0 and self._items:
            item = self._items.popleft()
            if not isinstance(item, Batch):
                kept.append(item)
                continue
            n = len(item.events)
            if n <= excess:
                excess -= n
                self._depth -= n
                self.dropped += n
                self._dropped_delta += row_count_change(item.events, 0)
            else:
                self._items.appendleft(Batch(item.events[excess:], item.complete))
                self._depth -= excess
                self.dropped += excess
                self._dropped_delta += row_count_change(item.events[:excess], 0)
                excess = 0
        for item in reversed(kept):
            self._items.appendleft(item)

    def take_dropped_delta(self) -> int:
        """The net row-count change (+1 per INSERT, -1 per DELETE) of the changes evicted since
        the last call: what the target misses (validation adds it to the expected count)."""
        with self._cond:
            delta, self._dropped_delta = self._dropped_delta, 0
            return delta

    def put_heartbeat(self, position: Position) -> None:
        """Enqueue a heartbeat; consecutive heartbeats coalesce into the latest."""
        with self._cond:
            if self._closed:
                return
            if self._items and type(self._items[-1]) is Heartbeat:
                self._items[-1] = Heartbeat(position)
            else:
                self._items.append(Heartbeat(position))
            self._cond.notify_all()

    def put(self, item: SchemaItem | Skip | Call) -> None:
        """Enqueue a marker (schema change, skip, call) in stream order."""
        with self._cond:
            if self._closed:
                return
            self._items.append(item)
            self._cond.notify_all()

    def submit(self, request: ControlRequest) -> None:
        """Queue a control request ahead of every data item."""
        with self._cond:
            self._control.append(request)
            self._cond.notify_all()

    # -- consumer side ------------------------------------------------------------------
    def set_paused(self, paused: bool) -> None:
        """Hold data items back (control requests still run). From the pause until the
        pipeline has caught up after the resume (its buffer empties with no change waiting),
        a full buffer waits for room whatever the policy: a pause and its catch-up never drop
        or refuse changes."""
        with self._cond:
            self._paused = paused
            if paused or self._depth:
                self._held = True
            self._cond.notify_all()

    def get(self, timeout: float | None = None) -> Item | ControlRequest | None:
        """The next control request, else the next data item (held back while paused);
        ``None`` on timeout or when closed and drained."""
        with self._cond:
            while True:
                if self._control:
                    return self._control.popleft()
                if self._items and (not self._paused or self._closed):
                    item = self._items.popleft()
                    if type(item) is Batch:
                        self._depth -= len(item.events)
                        if not (self._depth or self._paused or self._waiting):
                            self._held = False  # caught up after a pause
                        self._cond.notify_all()
                    return item
                if self._closed and not self._items:
                    return None
                if not self._cond.wait(timeout):
                    return None

    def close(self) -> None:
        """Stop accepting; the consumer drains what is queued, then gets ``None``."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    def clear(self) -> int:
        """Drop every queued data item; returns the number of changes dropped."""
        with self._cond:
            n = self._depth
            self._items.clear()
            self._depth = 0
            self._cond.notify_all()
            return n
