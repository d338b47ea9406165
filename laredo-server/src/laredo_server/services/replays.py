"""Snapshot replays started by ``StartReplay``: each pipeline's worker applies the snapshot's
rows to its own target between two of its batches (one writer per target, see
:meth:`laredo.Engine.call_in_pipeline`); finished replays are kept for ``GetReplayStatus``
until :data:`KEEP_FINISHED` newer ones finished."""

from __future__ import annotations

import contextlib
import functools
import uuid
from typing import Any

from laredo.errors import EngineStateError
from laredo.replay import SnapshotReplay
from laredo.types import TableIdentifier

from .._proto.laredo_proto.v1 import oam_pb2 as oam
from ..runtime import ServerRuntime

__all__ = ["KEEP_FINISHED", "prune_replays", "start_replay"]

KEEP_FINISHED = 32
"""Finished (completed, stopped, failed) replays whose status stays readable."""


def start_replay(rt: ServerRuntime, store: Any, request: oam.StartReplayRequest) -> str:
    """Start the replay ``request`` asks for; returns its id. ValueError, KeyError or
    EngineStateError (no confirmation) before anything is written."""
    if not request.snapshot_id:
        raise ValueError("snapshot_id is required")
    desc = store.describe(request.snapshot_id)
    wanted = {TableIdentifier.parse(t) for t in request.tables}
    snap_tables = {t.table for t in desc.tables}
    missing = wanted - snap_tables
    if missing:
        raise KeyError(
            f"snapshot {request.snapshot_id} has no table(s) {', '.join(sorted(map(str, missing)))}"
        )
    eng = rt.engine
    replay = SnapshotReplay(store, eng.snapshot_serializer)
    mapped: dict[TableIdentifier, list[str]] = {}
    for cfg in eng.pipeline_configs:
        pid = cfg.pipeline_id()
        if request.target_pipeline_id and pid != request.target_pipeline_id:
            continue
        t = cfg.table_id
        if t in snap_tables and (not wanted or t in wanted):
            replay.target(t, cfg.target, call=functools.partial(eng.call_in_pipeline, pid))
            mapped.setdefault(t, []).append(pid)
    shared = {t: pids for t, pids in mapped.items() if len(pids) > 1}
    if shared:
        t, pids = next(iter(shared.items()))
        raise ValueError(
            f"table {t} has several pipelines ({', '.join(pids)}): replay into one at a time "
            "with target_pipeline_id (laredo replay start --pipeline)"
        )
    only = request.target_pipeline_id
    if not mapped:
        raise KeyError(
            "no pipeline target matches the snapshot's tables"
            + (f" and pipeline {only!r}" if only else "")
        )
    if not request.confirm:
        names = ", ".join(p for v in mapped.values() for p in v)
        raise EngineStateError(
            f"StartReplay overwrites the rows of {names} with those of snapshot "
            f"{request.snapshot_id} (changes made since stay overwritten until they change "
            "again); set confirm=true (laredo replay start asks for it)"
        )
    speed: Any = request.speed or "full"
    with contextlib.suppress(ValueError):
        speed = float(speed)
    replay.speed(speed, timestamp_field=request.timestamp_field or None)
    replay_id = f"replay-{uuid.uuid4().hex[:12]}"
    prune_replays(rt.replays)
    replay.start(request.snapshot_id)
    rt.replays[replay_id] = replay
    return replay_id


def prune_replays(replays: dict[str, SnapshotReplay], keep: int = KEEP_FINISHED) -> list[str]:
    """Forget all but the ``keep`` newest finished replays (running ones stay); returns the ids
    forgotten."""
    finished = [rid for rid, r in list(replays.items()) if r.status().state != "running"]
    gone = finished[: max(0, len(finished) - keep)]
    for rid in gone:
        replays.pop(rid, None)
    return gone
