"""``laredo.v1.LaredoOAMService``: status, readiness, admin, snapshots, dead letters, replay.

Runs against the server's :class:`~laredo_server.runtime.ServerRuntime` (its current engine
and that engine's own snapshot and dead-letter stores). Admin RPCs need the bearer token
(``authorization: Bearer <token>`` metadata) when one is configured; read-only RPCs too when
``grpc.auth.protect_reads`` is in force (the default off loopback); the read token opens those.
"""

from __future__ import annotations

import functools
import json
import logging
import time
from collections.abc import Iterator
from typing import Any

import grpc
from laredo.errors import ConfigError, EngineStateError
from laredo.secrets import mask_secrets, mask_text
from laredo.serialization import object_hook
from laredo.types import TableIdentifier

from .._proto.laredo_proto.v1 import oam_pb2 as oam
from .._proto.laredo_proto.v1 import oam_pb2_grpc as oam_grpc
from ..capabilities import DescribedSource
from ..runtime import ServerRuntime
from ..state import PipelineStateChanged
from ._rpc import RpcStatusError, rpc, stream
from .convert import (
    artifact_pb,
    column_pb,
    dead_letter_pb,
    reload_result_pb,
    snapshot_pb,
    source_info_pb,
    status_event_pb,
    table_id,
)
from .replays import start_replay
from .status import backfill_status, pipeline_status, service_status

logger = logging.getLogger(__name__)

__all__ = ["OAM_SERVICE", "OamService"]

OAM_SERVICE = "laredo.v1.LaredoOAMService"

DEFAULT_DRAIN_DEADLINE = 30.0
"""Seconds fan-out clients get to hand off on DrainReplication without a deadline, when
``shutdown.drain`` is 0."""


class OamService(oam_grpc.LaredoOAMServiceServicer):
    """The OAM service of one runtime."""

    def __init__(self, rt: ServerRuntime) -> None:
        self.rt = rt

    # status -----------------------------------------------------------------------------
    @rpc()
    def GetStatus(
        self, request: oam.GetStatusRequest, context: grpc.ServicerContext
    ) -> oam.GetStatusResponse:
        return service_status(self.rt)

    @rpc()
    def GetTableStatus(
        self, request: oam.GetTableStatusRequest, context: grpc.ServicerContext
    ) -> oam.GetTableStatusResponse:
        table = table_id(request.schema, request.table)
        pipes = [p for p in self.rt.engine.pipelines() if p.table == table]
        if not pipes:
            raise KeyError(f"no pipeline for table {table}; see ListTables")
        out = [pipeline_status(self.rt, p) for p in pipes]
        idx: list[oam.IndexInfo] = []
        for p in out:
            idx.extend(p.indexes)
        return oam.GetTableStatusResponse(pipelines=out, indexes=idx)

    @rpc()
    def GetPipelineStatus(
        self, request: oam.GetPipelineStatusRequest, context: grpc.ServicerContext
    ) -> oam.GetPipelineStatusResponse:
        for p in self.rt.engine.pipelines():
            if p.id == request.pipeline_id:
                st = pipeline_status(self.rt, p)
                return oam.GetPipelineStatusResponse(status=st, indexes=list(st.indexes))
        known = ", ".join(p.id for p in self.rt.engine.pipelines())
        raise KeyError(f"unknown pipeline {request.pipeline_id!r} (pipelines: {known})")

    @stream()
    def WatchStatus(
        self, request: oam.WatchStatusRequest, context: grpc.ServicerContext
    ) -> Iterator[oam.StatusEvent]:
        tables = {str(TableIdentifier.parse(t)) for t in request.tables}
        pids = set(request.pipeline_ids)
        watcher = self.rt.hub.watch(tables, pids)
        try:
            # start with the current state of every matching pipeline
            for p in self.rt.engine.pipelines():
                if watcher.matches(p.id, str(p.table)):
                    yield status_event_pb(
                        PipelineStateChanged(time.time(), p.id, None, p.state, p.error or "")
                    )
            while context.is_active() and not self.rt.stopping.is_set():
                ev = watcher.next(timeout=0.25)
                if ev is not None:
                    yield status_event_pb(ev, dropped_before=watcher.take_dropped())
        finally:
            self.rt.hub.unwatch(watcher)

    @rpc()
    def CheckReady(
        self, request: oam.CheckReadyRequest, context: grpc.ServicerContext
    ) -> oam.CheckReadyResponse:
        ready, reasons = self.rt.readiness(
            source=request.source or None,
            table=request.table or None,
            pipeline_id=request.pipeline_id or None,
        )
        return oam.CheckReadyResponse(ready=ready, not_ready_reasons=reasons)

    @rpc()
    def GetSourceInfo(
        self, request: oam.GetSourceInfoRequest, context: grpc.ServicerContext
    ) -> oam.GetSourceInfoResponse:
        eng = self.rt.engine
        ids = [request.source_id] if request.source_id else eng.source_ids()
        out = []
        for sid in ids:
            info = eng.source_info(sid)
            if info is None:
                raise KeyError(f"unknown source {sid!r} (sources: {', '.join(eng.source_ids())})")
            details = {"state": info.state, "pipelines": ",".join(info.pipelines)}
            if info.error:
                details["error"] = mask_text(info.error)
            src = eng.source(sid)
            if isinstance(src, DescribedSource):
                try:
                    shown = mask_secrets(dict(src.details() or {}))
                    details.update({str(k): str(v) for k, v in shown.items()})
                except Exception:
                    logger.debug("details() of source %s failed", sid, exc_info=True)
            type_name = self.rt.source_types.get(sid, info.source_type)
            out.append(source_info_pb(info, type_name=type_name, details=details))
        return oam.GetSourceInfoResponse(sources=out)

    # admin ----------------------------------------------------------------------------------
    @rpc(admin=True)
    def ReloadTable(
        self, request: oam.ReloadTableRequest, context: grpc.ServicerContext
    ) -> oam.ReloadResponse:
        table = table_id(request.schema, request.table)
        sid = request.source_id or self.rt.source_of(table)
        with self.rt.reloading():
            self.rt.engine.reload(sid, table)
        return oam.ReloadResponse(
            accepted=True, message=f"reloaded {table} from {sid}", tables=[str(table)]
        )

    @rpc(admin=True)
    def ReloadConfig(
        self, request: oam.ReloadConfigRequest, context: grpc.ServicerContext
    ) -> oam.ReloadConfigResponse:
        """Re-read the configuration and apply the difference (see laredo_server.reload)."""
        return reload_result_pb(self.rt.reload_config(dry_run=request.dry_run))

    @rpc(admin=True)
    def VerifyTable(
        self, request: oam.VerifyTableRequest, context: grpc.ServicerContext
    ) -> oam.VerifyTableResponse:
        """Compare a pipeline's target with its source at one position (``Engine.verify``)."""
        if request.max_keys < 0 or request.timeout_seconds < 0:
            raise ValueError("max_keys and timeout_seconds must be >= 0 (0: the default)")
        pid = request.pipeline_id or self._table_pipeline(request.schema, request.table)
        result = self.rt.engine.verify(
            pid, timeout=float(request.timeout_seconds or 300), max_keys=request.max_keys or 100
        )
        return oam.VerifyTableResponse(
            match=result.match,
            pipeline_id=result.pipeline_id,
            position=result.position,
            source_rows=result.source_rows,
            target_rows=result.target_rows,
            missing_keys=result.missing,
            extra_keys=result.extra,
            different_keys=result.different,
            missing_count=result.missing_count,
            extra_count=result.extra_count,
            different_count=result.different_count,
            message=result.summary(),
        )

    @rpc(admin=True)
    def BackfillTable(
        self, request: oam.BackfillTableRequest, context: grpc.ServicerContext
    ) -> oam.BackfillTableResponse:
        """Re-sync one table in chunks while streaming (``Engine.backfill``)."""
        if request.chunk_rows < 0 or request.wait_seconds < 0:
            raise ValueError("chunk_rows and wait_seconds must be >= 0 (0: the default)")
        table = table_id(request.schema, request.table)
        sid = request.source_id or self.rt.source_of(table)
        p = self.rt.engine.backfill(
            sid,
            table,
            request.where or None,
            chunk_rows=request.chunk_rows or None,
            timeout=float(request.wait_seconds),
        )
        state = p["state"]
        return oam.BackfillTableResponse(
            status=backfill_status({"source": sid, **p}),
            table=p["table"],
            chunks=p["chunks"],
            rows_read=p["rows_read"],
            rows_applied=p["rows_applied"],
            rows_dropped=p["rows_dropped"],
            rows_removed=p.get("rows_removed", 0),
            done=p["done"],
            error=p["error"] or "",
            message=(
                f"backfill of {p['table']} from {sid}: {state}, {p['chunks']} chunk(s), "
                f"{p['rows_applied']} row(s) applied" + (f": {p['error']}" if p["error"] else "")
            ),
        )

    def _table_pipeline(self, schema: str, table: str) -> str:
        """The one pipeline of a table (``ValueError`` naming them when there are several)."""
        if not table:
            raise ValueError("give the table (schema and table) or pipeline_id")
        tid = table_id(schema, table)
        pids = [c.pipeline_id() for c in self.rt.engine.pipeline_configs if c.table_id == tid]
        if not pids:
            raise KeyError(f"no pipeline for table {tid}")
        if len(pids) > 1:
            raise ValueError(
                f"table {tid} has several pipelines ({', '.join(pids)}): give pipeline_id"
            )
        return str(pids[0])

    @rpc(admin=True)
    def ReloadAll(
        self, request: oam.ReloadAllRequest, context: grpc.ServicerContext
    ) -> oam.ReloadResponse:
        eng = self.rt.engine
        sids = [request.source_id] if request.source_id else eng.source_ids()
        tables: list[str] = []
        with self.rt.reloading():
            for sid in sids:
                if sid not in eng.source_ids():
                    raise KeyError(f"unknown source {sid!r}")
                seen = []
                for p in eng.pipelines():
                    if p.source_id == sid and p.table not in seen:
                        seen.append(p.table)
                for t in seen:
                    eng.reload(sid, t)
                    tables.append(str(t))
        return oam.ReloadResponse(
            accepted=True, message=f"reloaded {len(tables)} table(s)", tables=tables
        )

    def _pipes_of(self, sid: str) -> list[oam.PipelineStatus]:
        pipes = self.rt.engine.pipelines()
        return [pipeline_status(self.rt, p) for p in pipes if p.source_id == sid]

    @rpc(admin=True)
    def PauseSync(
        self, request: oam.PauseSyncRequest, context: grpc.ServicerContext
    ) -> oam.PauseSyncResponse:
        self.rt.engine.pause(self.rt.require_source(request.source_id))
        return oam.PauseSyncResponse(pipelines=self._pipes_of(request.source_id))

    @rpc(admin=True)
    def ResumeSync(
        self, request: oam.ResumeSyncRequest, context: grpc.ServicerContext
    ) -> oam.ResumeSyncResponse:
        self.rt.engine.resume(self.rt.require_source(request.source_id))
        return oam.ResumeSyncResponse(pipelines=self._pipes_of(request.source_id))

    @rpc(admin=True)
    def ResetSource(
        self, request: oam.ResetSourceRequest, context: grpc.ServicerContext
    ) -> oam.ResetSourceResponse:
        sid = self.rt.require_source(request.source_id)
        if not request.confirm:
            raise EngineStateError(
                f"ResetSource drops the replication state of {sid!r}; set confirm=true "
                "(laredo reset-source asks for it)"
            )
        try:
            running = self.rt.engine.reset_source(sid, drop_publication=request.drop_publication)
        except ConfigError as exc:  # refused before anything changed (a foreign publication)
            raise RpcStatusError(grpc.StatusCode.FAILED_PRECONDITION, str(exc)) from exc
        what = " and publication" if request.drop_publication else ""
        after = (
            "its pipelines re-baseline now (not ready until done)"
            if running
            else "the next start re-baselines"
        )
        return oam.ResetSourceResponse(
            accepted=True, message=f"source {sid}: replication slot{what} reset; {after}"
        )

    @rpc(admin=True)
    def DrainReplication(
        self, request: oam.DrainReplicationRequest, context: grpc.ServicerContext
    ) -> oam.DrainReplicationResponse:
        """Fan-out clients of one table (schema and table) or of every table (neither) get
        GoAway with the deadline and hand off; those targets refuse new clients from now on
        (until the server restarts). Nothing to drain: ``accepted = false``."""
        if bool(request.schema) and not request.table:
            raise ValueError("give schema and table together, or neither (every fan-out table)")
        if request.drain_deadline_seconds < 0:
            raise ValueError("drain_deadline_seconds must be >= 0 (0: the server's default)")
        table = table_id(request.schema, request.table) if request.table else None
        deadline = float(request.drain_deadline_seconds) or self.rt.drain or DEFAULT_DRAIN_DEADLINE
        drained = self.rt.drain_replication(table, deadline)
        if not drained:
            where = f" for {table}" if table is not None else ""
            return oam.DrainReplicationResponse(
                accepted=False, message=f"no replication-fanout target{where}: nothing to drain"
            )
        return oam.DrainReplicationResponse(
            accepted=True,
            message=f"draining {len(drained)} fan-out target(s): clients got GoAway and have "
            f"{deadline:g}s to hand off; new clients are refused",
            drained_targets=drained,
        )

    @rpc()
    def ListTables(
        self, request: oam.ListTablesRequest, context: grpc.ServicerContext
    ) -> oam.ListTablesResponse:
        by: dict[tuple[str, TableIdentifier], list[Any]] = {}
        for p in self.rt.engine.pipelines():
            by.setdefault((p.source_id, p.table), []).append(p)
        out = []
        for (sid, t), pipes in by.items():
            counts = [p.row_count for p in pipes if p.row_count is not None]
            out.append(
                oam.TableInfo(
                    schema=t.schema,
                    table=t.table,
                    source_id=sid,
                    target_types=[p.target_type for p in pipes],
                    pipeline_ids=[p.id for p in pipes],
                    ready=self.rt.engine.is_ready(sid, t),
                    row_count=counts[0] if counts else 0,
                )
            )
        return oam.ListTablesResponse(tables=out)

    @rpc()
    def GetTableSchema(
        self, request: oam.GetTableSchemaRequest, context: grpc.ServicerContext
    ) -> oam.GetTableSchemaResponse:
        table = table_id(request.schema, request.table)
        cols = self.rt.engine.table_schema(table, request.source_id or None)
        if not cols:
            raise KeyError(f"no schema known for table {table} (is it configured and initialised?)")
        return oam.GetTableSchemaResponse(columns=[column_pb(c) for c in cols])

    # snapshots ------------------------------------------------------------------------------
    def _store(self) -> Any:
        store = self.rt.engine.snapshot_store
        if store is None:
            raise EngineStateError(
                "no snapshot store configured: add snapshot { store = local, "
                "store_config { path = ... } } to the config"
            )
        return store

    @rpc(admin=True)
    def CreateSnapshot(
        self, request: oam.CreateSnapshotRequest, context: grpc.ServicerContext
    ) -> oam.CreateSnapshotResponse:
        meta: dict[str, Any] = {}
        if request.user_meta_json:
            meta = json.loads(request.user_meta_json, object_hook=object_hook)
            if not isinstance(meta, dict):
                raise ValueError("user_meta_json must be a JSON object")
        self._store()
        snap_id = self.rt.engine.create_snapshot(meta)
        return oam.CreateSnapshotResponse(
            accepted=True, snapshot_id=snap_id, message=f"snapshot {snap_id} created"
        )

    @rpc()
    def ListSnapshots(
        self, request: oam.ListSnapshotsRequest, context: grpc.ServicerContext
    ) -> oam.ListSnapshotsResponse:
        table = TableIdentifier.parse(request.table) if request.table else None
        listed = self._store().list(table)
        if request.limit > 0:
            listed = listed[: request.limit]
        return oam.ListSnapshotsResponse(snapshots=[snapshot_pb(d) for d in listed])

    @rpc()
    def InspectSnapshot(
        self, request: oam.InspectSnapshotRequest, context: grpc.ServicerContext
    ) -> oam.InspectSnapshotResponse:
        if not request.snapshot_id:
            raise ValueError("snapshot_id is required")
        store = self._store()
        desc = store.describe(request.snapshot_id)
        manifest = getattr(store, "manifest", None)  # layout-aware stores list their parts
        if callable(manifest):
            m = manifest(request.snapshot_id)
            return oam.InspectSnapshotResponse(
                snapshot=snapshot_pb(desc),
                layout=m.layout,
                artifacts=[artifact_pb(a) for a in m.artifacts],
            )
        return oam.InspectSnapshotResponse(snapshot=snapshot_pb(desc))

    @rpc(admin=True)
    def RestoreSnapshot(
        self, request: oam.RestoreSnapshotRequest, context: grpc.ServicerContext
    ) -> oam.RestoreSnapshotResponse:
        if not request.snapshot_id:
            raise ValueError("snapshot_id is required")
        self._store().describe(request.snapshot_id)  # NOT_FOUND early
        if not request.confirm:
            raise EngineStateError(
                "RestoreSnapshot replaces every target's state and restarts the engine; "
                "set confirm=true"
            )
        self.rt.restore_snapshot(request.snapshot_id)
        return oam.RestoreSnapshotResponse(
            accepted=True,
            message=f"engine restarted from snapshot {request.snapshot_id}",
        )

    @rpc(admin=True)
    def DeleteSnapshot(
        self, request: oam.DeleteSnapshotRequest, context: grpc.ServicerContext
    ) -> oam.DeleteSnapshotResponse:
        store = self._store()
        store.describe(request.snapshot_id)
        store.delete(request.snapshot_id)
        return oam.DeleteSnapshotResponse(deleted=True)

    @rpc(admin=True)
    def PruneSnapshots(
        self, request: oam.PruneSnapshotsRequest, context: grpc.ServicerContext
    ) -> oam.PruneSnapshotsResponse:
        if request.keep < 1:
            raise ValueError("keep must be >= 1 (the newest snapshot is never pruned)")
        table = TableIdentifier.parse(request.table) if request.table else None
        deleted = list(self._store().prune(request.keep, table))
        return oam.PruneSnapshotsResponse(deleted_count=len(deleted), deleted_ids=deleted)

    # dead letters ---------------------------------------------------------------------------
    def _dls(self) -> Any:
        dls = self.rt.engine.dead_letter_store
        if dls is None:
            raise EngineStateError(
                "no dead-letter store configured: add dead_letter { store = local, "
                "store_config { path = ... } } (or store = memory)"
            )
        return dls

    @rpc()
    def ListDeadLetters(
        self, request: oam.ListDeadLettersRequest, context: grpc.ServicerContext
    ) -> oam.ListDeadLettersResponse:
        dls = self._dls()
        pids = [request.pipeline_id] if request.pipeline_id else dls.pipelines()
        out = []
        for pid in pids:
            for d in dls.read(pid, max(0, request.limit)):
                out.append(dead_letter_pb(d))
                if request.limit and len(out) >= request.limit:
                    return oam.ListDeadLettersResponse(entries=out)
        return oam.ListDeadLettersResponse(entries=out)

    @rpc(admin=True)
    def ReplayDeadLetters(
        self, request: oam.ReplayDeadLettersRequest, context: grpc.ServicerContext
    ) -> oam.ReplayDeadLettersResponse:
        dls = self._dls()
        pid = request.pipeline_id
        target = self.rt.pipeline_config(pid).target
        # applied by the pipeline's worker between two batches: the target has one writer
        n = self.rt.engine.call_in_pipeline(pid, functools.partial(dls.replay, pid, target))
        return oam.ReplayDeadLettersResponse(
            replayed=n, message=f"replayed {n} dead letter(s) into {pid}"
        )

    @rpc(admin=True)
    def PurgeDeadLetters(
        self, request: oam.PurgeDeadLettersRequest, context: grpc.ServicerContext
    ) -> oam.PurgeDeadLettersResponse:
        dls = self._dls()
        pids = [request.pipeline_id] if request.pipeline_id else dls.pipelines()
        return oam.PurgeDeadLettersResponse(purged=sum(dls.purge(p) for p in pids))

    # replay ---------------------------------------------------------------------------------
    @rpc(admin=True)
    def StartReplay(
        self, request: oam.StartReplayRequest, context: grpc.ServicerContext
    ) -> oam.StartReplayResponse:
        """Play a snapshot into the pipelines' targets, applied by each pipeline's worker
        between its batches; needs ``confirm`` (see laredo_server.services.replays)."""
        return oam.StartReplayResponse(replay_id=start_replay(self.rt, self._store(), request))

    def _replay(self, replay_id: str) -> Any:
        r = self.rt.replays.get(replay_id)
        if r is None:
            raise KeyError(f"unknown replay {replay_id!r}")
        return r

    @rpc()
    def GetReplayStatus(
        self, request: oam.GetReplayStatusRequest, context: grpc.ServicerContext
    ) -> oam.GetReplayStatusResponse:
        st = self._replay(request.replay_id).status()
        return oam.GetReplayStatusResponse(
            replay_id=request.replay_id,
            state=st.state,
            rows_replayed=st.rows_replayed,
            elapsed_seconds=st.elapsed.total_seconds(),
            current_table=str(st.current_table or ""),
            tables_completed=st.tables_completed,
            error=st.error or "",
            snapshot_id=st.snapshot_id or "",
        )

    @rpc(admin=True)
    def StopReplay(
        self, request: oam.StopReplayRequest, context: grpc.ServicerContext
    ) -> oam.StopReplayResponse:
        r = self._replay(request.replay_id)
        running = r.status().state == "running"
        r.stop()
        r.join(10)
        return oam.StopReplayResponse(stopped=running)
