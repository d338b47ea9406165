"""Per-pipeline bounded change buffer between a source's demuxer and the pipeline's worker.

Capacity counts change events; a transaction's events travel as one batch item. Heartbeats and
schema changes travel in the same queue (so they stay ordered with changes) and do not count
towards capacity. Out-of-band control requests (snapshot export, reload, TTL sweep) jump the
queue: they run in the worker thread between two items.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

from .types import BufferPolicy, ChangeEvent

BATCH = 0
HEARTBEAT = 1
SCHEMA = 2
SKIP = 3  # after a stream restart: skip re-delivered changes at or before this position
PARTIAL = 4  # a chunk of a transaction that continues in the next batch (same position)


class BufferOverflow(Exception):
    """The ERROR buffer policy found the buffer full."""


class ChangeBuffer:
    def __init__(
        self,
        capacity: int,
        policy: BufferPolicy = BufferPolicy.BLOCK,
        on_policy: Callable[[str], None] | None = None,
    ) -> None:
        self.capacity = max(1, capacity)
        self.policy = policy
        self._on_policy = on_policy
        self._items: deque[tuple[int, Any]] = deque()
        self._control: deque[Any] = deque()
        self._depth = 0
        self._cond = threading.Condition()
        self._closed = False
        self._paused = False
        self.dropped = 0

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def depth(self) -> int:
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
        """Enqueue a batch. BLOCK waits for room (an oversize batch enters an empty buffer);
        DROP_OLDEST evicts the oldest changes; ERROR raises ``BufferOverflow``."""
        n = len(events)
        with self._cond:
            if self._closed:
                return
            if self._depth + n > self.capacity and self._depth > 0:
                if self.policy is BufferPolicy.BLOCK:
                    while self._depth + n > self.capacity and self._depth > 0 and not self._closed:
                        if stop is not None and stop.is_set():
                            return
                        self._cond.wait(0.1)
                    if self.closed:
                        return
                elif self.policy is BufferPolicy.DROP_OLDEST:
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
            self._items.append((BATCH if complete else PARTIAL, events))
            self._depth += n
            self._cond.notify_all()

    def _drop_oldest(self, excess: int) -> None:
        kept: list[tuple[int, Any]] = []
        while excess > 0 and self._items:
            kind, payload = self._items.popleft()
            if kind not in (BATCH, PARTIAL):
                kept.append((kind, payload))
                continue
            if len(payload) <= excess:
                excess -= len(payload)
                self._depth -= len(payload)
                self.dropped += len(payload)
            else:
                self._items.appendleft((kind, payload[excess:]))
                self._depth -= excess
                self.dropped += excess
                excess = 0
        for item in reversed(kept):
            self._items.appendleft(item)

    def put_heartbeat(self, position: Any) -> None:
        with self._cond:
            if self._closed:
                return
            if self._items and self._items[-1][0] == HEARTBEAT:
                self._items[-1] = (HEARTBEAT, position)  # coalesce
            else:
                self._items.append((HEARTBEAT, position))
            self._cond.notify_all()

    def put_item(self, kind: int, payload: Any) -> None:
        with self._cond:
            if self._closed:
                return
            self._items.append((kind, payload))
            self._cond.notify_all()

    def submit_control(self, request: Any) -> None:
        with self._cond:
            self._control.append(request)
            self._cond.notify_all()

    # -- consumer side ------------------------------------------------------------------
    def set_paused(self, paused: bool) -> None:
        with self._cond:
            self._paused = paused
            self._cond.notify_all()

    def get(self, timeout: float | None = None) -> tuple[str, Any] | None:
        """Next ``("control", req)`` or ``("item", (kind, payload))``; ``None`` when closed and
        drained (or on timeout). Data items are held back while paused; control is not."""
        with self._cond:
            while True:
                if self._control:
                    return ("control", self._control.popleft())
                if self._items and (not self._paused or self._closed):
                    kind, payload = self._items.popleft()
                    if kind in (BATCH, PARTIAL):
                        self._depth -= len(payload)
                    self._cond.notify_all()
                    return ("item", (kind, payload))
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
        with self._cond:
            n = self._depth
            self._items.clear()
            self._depth = 0
            self._cond.notify_all()
            return n
