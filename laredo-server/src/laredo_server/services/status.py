"""The status messages of ``laredo.v1.LaredoOAMService``: a pipeline's, a source's, the
snapshots' and the whole service's (``GetStatus``, what ``laredo status`` and the status page
read), built from a :class:`~laredo_server.runtime.ServerRuntime`: its engine, its metrics'
counters, its :class:`~laredo_server.latest_snapshot.LatestSnapshot` and
:class:`~laredo_server.dead_letter_backlog.DeadLetterBacklog`."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from laredo import PipelineInfo

from .._proto.laredo_proto.v1 import oam_pb2 as oam
from ..capabilities import wal_retained
from ..runtime import ServerRuntime
from ..scrape_metrics import snapshot_schedule
from .convert import (
    ms,
    pipeline_status_pb,
    reload_result_pb,
    service_state_pb,
    source_status_pb,
)

__all__ = [
    "backfill_status",
    "pipeline_status",
    "service_status",
    "snapshot_status",
    "source_status",
]


def pipeline_status(
    rt: ServerRuntime,
    info: PipelineInfo,
    backlog: dict[str, int] | None = None,
    check: Callable[[PipelineInfo], bool] | None = None,
    targets: dict[str, Any] | None = None,
) -> oam.PipelineStatus:
    """One pipeline's status; a status of many passes the dead-letter ``backlog``, a
    ``check`` (``rt.ready_check()``) and ``targets`` (``rt.pipeline_targets()``) once."""
    if backlog is None:
        backlog = rt.dead_letter_backlog.read()
    no_store = rt.engine.dead_letter_store is None
    return pipeline_status_pb(
        info,
        ready=rt.pipeline_ready(info, check),
        target=targets.get(info.id) if targets is not None else rt.pipeline_target(info.id),
        counts=rt.metrics.pipeline_counts(info.id),
        dead_letters=0 if no_store else -1 if backlog is None else backlog.get(info.id, 0),
    )


def source_status(rt: ServerRuntime, sid: str) -> oam.SourceStatus:
    """One source's status (KeyError naming an unknown source)."""
    info = rt.engine.source_info(sid)
    if info is None:
        raise KeyError(f"unknown source {sid!r}")
    kind = rt.source_types.get(sid)
    if kind:  # the configured type (postgresql), not the class name (PostgresSource)
        info = dataclasses.replace(info, source_type=kind)
    return source_status_pb(
        info, ready=rt.engine.is_ready(sid), wal_retained=wal_retained(rt.engine.source(sid))
    )


def snapshot_status(rt: ServerRuntime) -> oam.SnapshotStatus:
    """The snapshot store, the latest snapshot and the schedule."""
    latest = rt.latest_snapshot.read()
    return oam.SnapshotStatus(
        store_configured=rt.engine.snapshot_store is not None,
        last_snapshot_id=latest.snapshot_id if latest else "",
        last_snapshot_at=ms(latest.at if latest else None),
        last_error=rt.hub.last_snapshot_error or "",
        snapshots_created=rt.hub.snapshots_created,
        last_snapshot_size_bytes=latest.size_bytes if latest else 0,
        schedule_seconds=int(snapshot_schedule(rt.engine) or 0),
    )


def backfill_status(progress: dict[str, Any]) -> oam.BackfillStatus:
    """One entry of ``Engine.backfills()`` (a table's chunked baseline or backfill)."""
    schema, _, table = str(progress["table"]).partition(".")
    eta = progress.get("eta_seconds")
    return oam.BackfillStatus(
        source_id=progress["source"],
        schema=schema,
        table=table,
        state=progress["state"],
        chunks=progress["chunks"],
        rows_read=progress["rows_read"],
        rows_applied=progress["rows_applied"],
        rows_dropped=progress["rows_dropped"],
        rows_estimated=progress["rows_estimated"],
        started_at=int(progress["started_at"] * 1000),
        has_eta=eta is not None,
        eta_seconds=eta or 0.0,
        error=progress.get("error") or "",
        rows_removed=progress.get("rows_removed", 0),
        sweep=progress.get("sweep") or "",
    )


def service_status(rt: ServerRuntime) -> oam.GetStatusResponse:
    """The answer of ``GetStatus``: the service, every source and pipeline, the snapshots and
    the last configuration reload."""
    eng = rt.engine
    backlog = rt.dead_letter_backlog.read()
    check, targets = rt.ready_check(), rt.pipeline_targets()
    out = oam.GetStatusResponse(
        state=service_state_pb(rt.service_state()),
        ready=rt.is_ready(),
        sources=[source_status(rt, s) for s in eng.source_ids()],
        pipelines=[pipeline_status(rt, p, backlog, check, targets) for p in eng.pipelines()],
        started_at=ms(rt.started_at),
        last_change_at=ms(rt.hub.last_change_at),
        snapshot_status=snapshot_status(rt),
        version=rt.version,
        config_generation=rt.config_generation,
        security_warnings=rt.security_warnings,
        backfills=[backfill_status(b) for b in eng.backfills()],
    )
    last = rt.reloader.last if rt.reloader is not None else None
    if last is not None and rt.reloader is not None:
        out.last_reload.CopyFrom(reload_result_pb(last))
        out.last_reload_at = ms(rt.reloader.last_at)
    return out
