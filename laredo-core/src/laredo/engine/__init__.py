"""The engine and its local runner.

Module map (each imports only modules listed before it):

* ``buffer``: a pipeline's bounded buffer and its typed items.
* ``snapshots``: ``SnapshotCoordinator``: take, restore (a ``RestoreResult``), retention.
* ``context``: ``EngineContext``: what readers and workers may see and do upward.
* ``baseline``: baseline delivery, shared by start-up, re-baselines and reloads.
* ``at_position``: work armed for one source position on a worker's thread.
* ``pipeline_worker``: one pipeline's worker thread (apply, retry, dead letters, reload, TTL);
  it owns its buffer, thread, target and lifecycle (``drain``, ``flush``, ``close``).
* ``startup``: the resume > restore > baseline decision.
* ``source_reader``: one source's reader thread, demultiplexing and ACKs.
* ``membership``: pipelines joining and leaving a running source (hot reload); ``retire``, the
  end of pipelines written once (removal and engine stop).
* ``verify``: a pipeline's target compared with its source at one position (``laredo verify``).
* ``scheduler``: ACK ticks, scheduled snapshots, lag, reconnect events.
* ``queries``: ``EngineView``, the read side the engine holds and delegates to.
* ``validation``: checks of ``Engine(...)`` arguments; the cross-section rules (both front ends).
* ``engine``: ``Engine``, the public facade; nothing imports it.
"""

from __future__ import annotations

from .engine import Engine
from .verify import VerifyResult

__all__ = ["Engine", "VerifyResult"]
