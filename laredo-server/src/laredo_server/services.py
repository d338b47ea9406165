"""gRPC services: ``laredo.v1.LaredoOAMService`` and ``laredo.v1.LaredoQueryService``.

Both run against the server's :class:`~laredo_server.server.Runtime` (its current engine and
that engine's own snapshot and dead-letter stores). Every RPC is implemented; errors map to
gRPC status codes with :func:`laredo.errors.grpc_status_name`. Admin RPCs need the bearer token
(``authorization: Bearer <token>`` metadata) when one is configured; read-only RPCs too when
``grpc.auth.protect_reads`` is set.
"""

from __future__ import annotations

import base64
import collections
import contextlib
import functools
import hmac
import json
import logging
import queue
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeVar

import grpc
from laredo.errors import EngineStateError, grpc_status_name
from laredo.serialization import RowEncoder, encode_change, encode_row, encode_value, object_hook
from laredo.types import (
    ChangeAction,
    ColumnDefinition,
    PipelineState,
    SnapshotDescriptor,
    TableIdentifier,
    primary_key_columns,
)

from ._proto.laredo_proto.v1 import oam_pb2 as oam
from ._proto.laredo_proto.v1 import oam_pb2_grpc as oam_grpc
from ._proto.laredo_proto.v1 import query_pb2 as qry
from ._proto.laredo_proto.v1 import query_pb2_grpc as qry_grpc

if TYPE_CHECKING:
    from .server import Runtime

logger = logging.getLogger(__name__)
F = TypeVar("F", bound=Callable[..., Any])

OAM_SERVICE = "laredo.v1.LaredoOAMService"
QUERY_SERVICE = "laredo.v1.LaredoQueryService"

_PSTATE: dict[PipelineState, Any] = {
    PipelineState.INITIALIZING: oam.PIPELINE_STATE_INITIALIZING,
    PipelineState.BASELINING: oam.PIPELINE_STATE_BASELINING,
    PipelineState.STREAMING: oam.PIPELINE_STATE_STREAMING,
    PipelineState.PAUSED: oam.PIPELINE_STATE_PAUSED,
    PipelineState.ERROR: oam.PIPELINE_STATE_ERROR,
    PipelineState.STOPPED: oam.PIPELINE_STATE_STOPPED,
}


def _ms(dt: datetime | float | None) -> int:
    if dt is None:
        return 0
    if isinstance(dt, datetime):
        return int(dt.timestamp() * 1000)
    return int(dt * 1000)


def _table(schema: str, table: str) -> TableIdentifier:
    if not table:
        raise ValueError("table is required (schema defaults to public)")
    if "." in table and not schema:
        return TableIdentifier.parse(table)
    return TableIdentifier(schema or "public", table)


class RpcStatusError(Exception):
    """Raised inside an RPC to answer with a specific status code."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code


def _abort(context: grpc.ServicerContext, exc: BaseException) -> None:
    if isinstance(exc, RpcStatusError):
        context.abort(exc.code, str(exc))
    code = getattr(grpc.StatusCode, grpc_status_name(exc), grpc.StatusCode.INTERNAL)
    msg = str(exc.args[0]) if isinstance(exc, KeyError) and exc.args else str(exc)
    context.abort(code, msg or type(exc).__name__)


def _rpc(admin: bool = False) -> Callable[[F], F]:
    """Auth check + error mapping for unary RPCs."""

    def deco(fn: F) -> F:
        @functools.wraps(fn)
        def wrapper(self: Any, request: Any, context: grpc.ServicerContext) -> Any:
            self.rt.check_auth(context, admin)
            try:
                return fn(self, request, context)
            except grpc.RpcError:
                raise
            except Exception as exc:
                logger.debug("%s failed", fn.__name__, exc_info=True)
                _abort(context, exc)
                raise  # pragma: no cover - abort raises

        return wrapper  # type: ignore[return-value]

    return deco


def _stream(admin: bool = False) -> Callable[[F], F]:
    def deco(fn: F) -> F:
        @functools.wraps(fn)
        def wrapper(self: Any, request: Any, context: grpc.ServicerContext) -> Iterator[Any]:
            self.rt.check_auth(context, admin)
            try:
                yield from fn(self, request, context)
            except grpc.RpcError:
                raise
            except Exception as exc:
                _abort(context, exc)

        return wrapper  # type: ignore[return-value]

    return deco


def check_token(context: grpc.ServicerContext, token: str) -> None:
    for key, value in context.invocation_metadata() or ():
        if key.lower() == "authorization":
            given = value.split(" ", 1)[1] if value.lower().startswith("bearer ") else value
            if hmac.compare_digest(given.strip().encode(), token.encode()):
                return
            context.abort(grpc.StatusCode.UNAUTHENTICATED, "invalid admin token")
    context.abort(
        grpc.StatusCode.UNAUTHENTICATED,
        "this RPC needs the admin token: send metadata 'authorization: Bearer <token>' "
        "(laredo --token / LAREDO_TOKEN)",
    )


# -- conversions ---------------------------------------------------------------------------------


def column_pb(c: ColumnDefinition) -> oam.ColumnDefinition:
    return oam.ColumnDefinition(
        ordinal_position=c.ordinal_position,
        column_name=c.name,
        data_type=c.type,
        not_null=not c.nullable,
        is_primary_key=c.primary_key,
        primary_key_ordinal=c.primary_key_ordinal,
        type_oid=c.type_oid or 0,
    )


def indexes_pb(target: Any) -> list[oam.IndexInfo]:
    out = []
    lookup = getattr(target, "lookup_fields", None)
    if lookup:
        out.append(oam.IndexInfo(name="lookup", fields=list(lookup), unique=True))
    for idx in getattr(target, "indexes", ()) or ():
        out.append(oam.IndexInfo(name=idx.name, fields=list(idx.fields), unique=idx.unique))
    return out


def snapshot_pb(d: SnapshotDescriptor | Any) -> oam.SnapshotInfo:
    return oam.SnapshotInfo(
        snapshot_id=d.snapshot_id,
        created_at=_ms(d.created_at),
        format=getattr(d, "format", ""),
        size_bytes=int(getattr(d, "size_bytes", 0) or 0),
        tables=[
            oam.TableSnapshot(
                schema=t.table.schema,
                table=t.table.table,
                row_count=t.row_count,
                target_type=t.target_type,
                position=t.position or "",
                pipeline_id=t.pipeline_id,
                columns=[column_pb(c) for c in t.columns],
            )
            for t in d.tables
        ],
        source_positions=dict(d.source_positions or {}),
        user_meta_json=json.dumps(encode_row(dict(d.user_meta or {}))),
    )


_ENCODER = RowEncoder()


def row_pb(row: dict[str, Any] | None) -> Any:
    if row is None:
        return None
    try:
        return qry.Row(json=_ENCODER.dumps(row))
    except (TypeError, ValueError) as exc:
        raise TypeError(f"row cannot be encoded for the wire: {exc}") from exc


def decode_json_value(text: str) -> Any:
    """A typed-JSON value; text that is not JSON is taken as a plain string."""
    try:
        return json.loads(text, object_hook=object_hook)
    except ValueError:
        return text


def _sort_key(key: Any) -> tuple[Any, ...]:
    if isinstance(key, tuple):
        return tuple(_sort_key(k) for k in key)
    if key is None:
        return (0, "")
    if isinstance(key, bool):
        return (1, int(key))
    if isinstance(key, int | float):
        return (2, key)
    if isinstance(key, str):
        return (3, key)
    return (4, type(key).__name__, str(key))


def _encode_token(key: Any) -> str:
    raw = json.dumps(encode_value(list(key) if isinstance(key, tuple) else [key]))
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def _decode_token(token: str) -> Any:
    try:
        pad = "=" * (-len(token) % 4)
        values = json.loads(base64.urlsafe_b64decode(token + pad), object_hook=object_hook)
    except Exception as exc:
        raise ValueError(f"invalid page_token {token!r}: pass next_page_token unchanged") from exc
    if not isinstance(values, list) or not values:
        raise ValueError(f"invalid page_token {token!r}")
    return values[0] if len(values) == 1 else tuple(values)


# -- OAM -----------------------------------------------------------------------------------------


class OamService(oam_grpc.LaredoOAMServiceServicer):
    def __init__(self, rt: Runtime) -> None:
        self.rt = rt

    # status -----------------------------------------------------------------------------
    def _pipeline_pb(self, info: Any) -> oam.PipelineStatus:
        target = self.rt.pipeline_target(info.id)
        return oam.PipelineStatus(
            pipeline_id=info.id,
            source_id=info.source_id,
            schema=info.table.schema,
            table=info.table.table,
            target_type=info.target_type,
            state=_PSTATE.get(info.state, oam.PIPELINE_STATE_UNSPECIFIED),
            ready=self.rt.engine.is_ready(info.source_id, info.table)
            if info.state in (PipelineState.STREAMING, PipelineState.PAUSED)
            else False,
            has_row_count=info.row_count is not None,
            row_count=info.row_count or 0,
            buffer_depth=info.buffer_depth,
            buffer_capacity=info.buffer_capacity,
            error=info.error or "",
            applied_position=info.applied_position or "",
            durable_position=info.durable_position or "",
            indexes=indexes_pb(target) if target is not None else [],
        )

    def _source_pb(self, sid: str) -> oam.SourceStatus:
        info = self.rt.engine.source_info(sid)
        if info is None:
            raise KeyError(f"unknown source {sid!r}")
        return oam.SourceStatus(
            source_id=sid,
            source_type=info.source_type,
            state=info.state,
            ready=self.rt.engine.is_ready(sid),
            error=info.error or "",
            current_position=info.current_position or "",
            acked_position=info.acked_position or "",
            lag_bytes=int(info.lag_bytes or 0),
            lag_seconds=info.lag_time.total_seconds() if info.lag_time is not None else -1.0,
            pipeline_ids=list(info.pipelines),
        )

    @_rpc()
    def GetStatus(self, request: Any, context: Any) -> oam.GetStatusResponse:
        rt = self.rt
        eng = rt.engine
        return oam.GetStatusResponse(
            state=rt.service_state(),
            ready=rt.is_ready(),
            sources=[self._source_pb(s) for s in eng.source_ids()],
            pipelines=[self._pipeline_pb(p) for p in eng.pipelines()],
            started_at=_ms(rt.started_at),
            last_change_at=_ms(rt.hub.last_change_at),
            snapshot_status=oam.SnapshotStatus(
                store_configured=eng.snapshot_store is not None,
                last_snapshot_id=rt.hub.last_snapshot_id or "",
                last_snapshot_at=_ms(rt.hub.last_snapshot_at),
                last_error=rt.hub.last_snapshot_error or "",
                snapshots_created=rt.hub.snapshots_created,
            ),
            version=rt.version,
        )

    @_rpc()
    def GetTableStatus(self, request: Any, context: Any) -> oam.GetTableStatusResponse:
        table = _table(request.schema, request.table)
        pipes = [p for p in self.rt.engine.pipelines() if p.table == table]
        if not pipes:
            raise KeyError(f"no pipeline for table {table}; see ListTables")
        out = [self._pipeline_pb(p) for p in pipes]
        idx: list[oam.IndexInfo] = []
        for p in out:
            idx.extend(p.indexes)
        return oam.GetTableStatusResponse(pipelines=out, indexes=idx)

    @_rpc()
    def GetPipelineStatus(self, request: Any, context: Any) -> oam.GetPipelineStatusResponse:
        for p in self.rt.engine.pipelines():
            if p.id == request.pipeline_id:
                st = self._pipeline_pb(p)
                return oam.GetPipelineStatusResponse(status=st, indexes=list(st.indexes))
        known = ", ".join(p.id for p in self.rt.engine.pipelines())
        raise KeyError(f"unknown pipeline {request.pipeline_id!r} (pipelines: {known})")

    @_stream()
    def WatchStatus(self, request: Any, context: Any) -> Iterator[oam.StatusEvent]:
        tables = {str(TableIdentifier.parse(t)) for t in request.tables}
        pids = set(request.pipeline_ids)
        watcher = self.rt.hub.watch(tables, pids)
        try:
            # start with the current state of every matching pipeline
            for p in self.rt.engine.pipelines():
                if watcher.matches(p.id, str(p.table)):
                    yield oam.StatusEvent(
                        timestamp=_ms(time.time()),
                        pipeline_state_change=oam.PipelineStateChange(
                            pipeline_id=p.id,
                            old_state=oam.PIPELINE_STATE_UNSPECIFIED,
                            new_state=_PSTATE.get(p.state, 0),
                            error=p.error or "",
                        ),
                    )
            while context.is_active() and not self.rt.stopping.is_set():
                try:
                    ev = watcher.queue.get(timeout=0.25)
                except queue.Empty:
                    continue
                dropped = watcher.take_dropped()
                if dropped:
                    ev.dropped_before = dropped
                yield ev
        finally:
            self.rt.hub.unwatch(watcher)

    @_rpc()
    def CheckReady(self, request: Any, context: Any) -> oam.CheckReadyResponse:
        ready, reasons = self.rt.readiness(
            source=request.source or None,
            table=request.table or None,
            pipeline_id=request.pipeline_id or None,
        )
        return oam.CheckReadyResponse(ready=ready, not_ready_reasons=reasons)

    @_rpc()
    def GetSourceInfo(self, request: Any, context: Any) -> oam.GetSourceInfoResponse:
        eng = self.rt.engine
        ids = [request.source_id] if request.source_id else eng.source_ids()
        out = []
        for sid in ids:
            info = eng.source_info(sid)
            if info is None:
                raise KeyError(f"unknown source {sid!r} (sources: {', '.join(eng.source_ids())})")
            details = {"state": info.state, "pipelines": ",".join(info.pipelines)}
            if info.error:
                details["error"] = info.error
            src = eng.source(sid)
            extra = getattr(src, "details", None)
            if callable(extra):
                try:
                    details.update({str(k): str(v) for k, v in (extra() or {}).items()})
                except Exception:
                    logger.debug("details() of source %s failed", sid, exc_info=True)
            out.append(
                oam.SourceInfo(
                    id=sid,
                    type=self.rt.source_types.get(sid, info.source_type),
                    supports_resume=info.supports_resume,
                    ordering_guarantee=info.ordering_guarantee,
                    current_position=info.current_position or "",
                    acked_position=info.acked_position or "",
                    lag_bytes=int(info.lag_bytes or 0),
                    lag_seconds=info.lag_time.total_seconds()
                    if info.lag_time is not None
                    else -1.0,
                    details=details,
                )
            )
        return oam.GetSourceInfoResponse(sources=out)

    # admin ----------------------------------------------------------------------------------
    @_rpc(admin=True)
    def ReloadTable(self, request: Any, context: Any) -> oam.ReloadResponse:
        table = _table(request.schema, request.table)
        sid = request.source_id or self.rt.source_of(table)
        with self.rt.reloading():
            self.rt.engine.reload(sid, table)
        return oam.ReloadResponse(
            accepted=True, message=f"reloaded {table} from {sid}", tables=[str(table)]
        )

    @_rpc(admin=True)
    def ReloadAll(self, request: Any, context: Any) -> oam.ReloadResponse:
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
        return [self._pipeline_pb(p) for p in self.rt.engine.pipelines() if p.source_id == sid]

    @_rpc(admin=True)
    def PauseSync(self, request: Any, context: Any) -> oam.PauseSyncResponse:
        self.rt.engine.pause(self.rt.require_source(request.source_id))
        return oam.PauseSyncResponse(pipelines=self._pipes_of(request.source_id))

    @_rpc(admin=True)
    def ResumeSync(self, request: Any, context: Any) -> oam.ResumeSyncResponse:
        self.rt.engine.resume(self.rt.require_source(request.source_id))
        return oam.ResumeSyncResponse(pipelines=self._pipes_of(request.source_id))

    @_rpc(admin=True)
    def ResetSource(self, request: Any, context: Any) -> oam.ResetSourceResponse:
        sid = self.rt.require_source(request.source_id)
        if not request.confirm:
            raise EngineStateError(
                f"ResetSource drops the replication state of {sid!r}; set confirm=true "
                "(laredo reset-source asks for it)"
            )
        self.rt.engine.reset_source(sid, drop_publication=request.drop_publication)
        what = " and publication" if request.drop_publication else ""
        return oam.ResetSourceResponse(
            accepted=True,
            message=f"source {sid}: replication slot{what} reset; the next start re-baselines",
        )

    @_rpc()
    def ListTables(self, request: Any, context: Any) -> oam.ListTablesResponse:
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

    @_rpc()
    def GetTableSchema(self, request: Any, context: Any) -> oam.GetTableSchemaResponse:
        table = _table(request.schema, request.table)
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

    @_rpc(admin=True)
    def CreateSnapshot(self, request: Any, context: Any) -> oam.CreateSnapshotResponse:
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

    @_rpc()
    def ListSnapshots(self, request: Any, context: Any) -> oam.ListSnapshotsResponse:
        table = TableIdentifier.parse(request.table) if request.table else None
        listed = self._store().list(table)
        if request.limit > 0:
            listed = listed[: request.limit]
        return oam.ListSnapshotsResponse(snapshots=[snapshot_pb(d) for d in listed])

    @_rpc()
    def InspectSnapshot(self, request: Any, context: Any) -> oam.InspectSnapshotResponse:
        if not request.snapshot_id:
            raise ValueError("snapshot_id is required")
        return oam.InspectSnapshotResponse(
            snapshot=snapshot_pb(self._store().describe(request.snapshot_id))
        )

    @_rpc(admin=True)
    def RestoreSnapshot(self, request: Any, context: Any) -> oam.RestoreSnapshotResponse:
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

    @_rpc(admin=True)
    def DeleteSnapshot(self, request: Any, context: Any) -> oam.DeleteSnapshotResponse:
        store = self._store()
        store.describe(request.snapshot_id)
        store.delete(request.snapshot_id)
        return oam.DeleteSnapshotResponse(deleted=True)

    @_rpc(admin=True)
    def PruneSnapshots(self, request: Any, context: Any) -> oam.PruneSnapshotsResponse:
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

    @_rpc()
    def ListDeadLetters(self, request: Any, context: Any) -> oam.ListDeadLettersResponse:
        dls = self._dls()
        pids = [request.pipeline_id] if request.pipeline_id else dls.pipelines()
        out = []
        for pid in pids:
            for d in dls.read(pid, max(0, request.limit)):
                ch = d.change
                out.append(
                    oam.DeadLetterEntry(
                        pipeline_id=d.pipeline_id,
                        schema=ch.table.schema,
                        table=ch.table.table,
                        action=ChangeAction(ch.action).name,
                        position=d.position or "",
                        error=d.error.message,
                        error_type=d.error.error_type,
                        written_at=_ms(d.written_at),
                        change_json=json.dumps(encode_change(ch, d.position)),
                    )
                )
                if request.limit and len(out) >= request.limit:
                    return oam.ListDeadLettersResponse(entries=out)
        return oam.ListDeadLettersResponse(entries=out)

    @_rpc(admin=True)
    def ReplayDeadLetters(self, request: Any, context: Any) -> oam.ReplayDeadLettersResponse:
        dls = self._dls()
        pid = request.pipeline_id
        cfg = self.rt.pipeline_config(pid)
        eng = self.rt.engine
        eng.pause(cfg.source_id)
        try:
            n = dls.replay(pid, cfg.target)
        finally:
            eng.resume(cfg.source_id)
        return oam.ReplayDeadLettersResponse(
            replayed=n, message=f"replayed {n} dead letter(s) into {pid}"
        )

    @_rpc(admin=True)
    def PurgeDeadLetters(self, request: Any, context: Any) -> oam.PurgeDeadLettersResponse:
        dls = self._dls()
        pids = [request.pipeline_id] if request.pipeline_id else dls.pipelines()
        return oam.PurgeDeadLettersResponse(purged=sum(dls.purge(p) for p in pids))

    # replay ---------------------------------------------------------------------------------
    @_rpc(admin=True)
    def StartReplay(self, request: Any, context: Any) -> oam.StartReplayResponse:
        from laredo.replay import SnapshotReplay

        store = self._store()
        if not request.snapshot_id:
            raise ValueError("snapshot_id is required")
        desc = store.describe(request.snapshot_id)
        wanted = {TableIdentifier.parse(t) for t in request.tables}
        snap_tables = {t.table for t in desc.tables}
        missing = wanted - snap_tables
        if missing:
            raise KeyError(
                f"snapshot {request.snapshot_id} has no table(s) "
                f"{', '.join(sorted(map(str, missing)))}"
            )
        replay = SnapshotReplay(store, self.rt.engine.snapshot_serializer)
        mapped = 0
        for cfg in self.rt.engine.pipeline_configs:
            if request.target_pipeline_id and cfg.pipeline_id() != request.target_pipeline_id:
                continue
            t = cfg.table_id
            if t in snap_tables and (not wanted or t in wanted):
                replay.target(t, cfg.target)
                mapped += 1
        if not mapped:
            raise KeyError(
                "no pipeline target matches the snapshot's tables"
                + (
                    f" and pipeline {request.target_pipeline_id!r}"
                    if request.target_pipeline_id
                    else ""
                )
            )
        speed: Any = request.speed or "full"
        with contextlib.suppress(ValueError):
            speed = float(speed)
        replay.speed(speed, timestamp_field=request.timestamp_field or None)
        replay_id = f"replay-{uuid.uuid4().hex[:12]}"
        replay.start(request.snapshot_id)
        self.rt.replays[replay_id] = replay
        return oam.StartReplayResponse(replay_id=replay_id)

    def _replay(self, replay_id: str) -> Any:
        r = self.rt.replays.get(replay_id)
        if r is None:
            raise KeyError(f"unknown replay {replay_id!r}")
        return r

    @_rpc()
    def GetReplayStatus(self, request: Any, context: Any) -> oam.GetReplayStatusResponse:
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

    @_rpc(admin=True)
    def StopReplay(self, request: Any, context: Any) -> oam.StopReplayResponse:
        r = self._replay(request.replay_id)
        running = r.status().state == "running"
        r.stop()
        r.join(10)
        return oam.StopReplayResponse(stopped=running)


# -- Query ---------------------------------------------------------------------------------------

MAX_PAGE = 10_000
SUBSCRIBE_BATCH = 1000


class QueryService(qry_grpc.LaredoQueryServiceServicer):
    def __init__(self, rt: Runtime) -> None:
        self.rt = rt
        self._keys: dict[int, tuple[int, list[tuple[Any, Any]]]] = {}

    def _target(self, ref: Any) -> tuple[Any, Any]:
        """(target, pipeline config) of the first queryable target of the table."""
        table = _table(ref.schema, ref.table)
        found = []
        for cfg in self.rt.engine.pipeline_configs:
            if cfg.table_id != table:
                continue
            if ref.pipeline_id and cfg.pipeline_id() != ref.pipeline_id:
                continue
            found.append(cfg)
            t = cfg.target
            if callable(getattr(t, "get", None)) and callable(getattr(t, "items", None)):
                return t, cfg
        if not found:
            raise KeyError(
                f"no pipeline for table {table}"
                + (f" with id {ref.pipeline_id!r}" if ref.pipeline_id else "")
            )
        raise EngineStateError(
            f"table {table} has no queryable target (use an indexed-memory target); "
            f"its targets: {', '.join(c.resolved_target_type() for c in found)}"
        )

    @_rpc()
    def Lookup(self, request: Any, context: Any) -> qry.LookupResponse:
        target, _ = self._target(request.table)
        values = [decode_json_value(v) for v in request.key_values]
        if request.index_name:
            rows = target.lookup_all(request.index_name, *values)
            row = rows[0] if rows else None
        else:
            row = target.lookup(*values)
        return qry.LookupResponse(found=row is not None, row=row_pb(row))

    @_rpc()
    def LookupAll(self, request: Any, context: Any) -> qry.LookupAllResponse:
        if not request.index_name:
            raise ValueError("index_name is required (see GetTableStatus for the indexes)")
        target, _ = self._target(request.table)
        values = [decode_json_value(v) for v in request.key_values]
        rows = target.lookup_all(request.index_name, *values)
        return qry.LookupAllResponse(rows=[row_pb(r) for r in rows])

    @_rpc()
    def GetRow(self, request: Any, context: Any) -> qry.GetRowResponse:
        target, _ = self._target(request.table)
        values = [decode_json_value(v) for v in request.primary_key]
        if not values:
            raise ValueError("primary_key is required (one value per key column, in key order)")
        row = target.get(*values)
        return qry.GetRowResponse(found=row is not None, row=row_pb(row))

    @_rpc()
    def ListRows(self, request: Any, context: Any) -> qry.ListRowsResponse:
        target, _ = self._target(request.table)
        size = request.page_size or 100
        if size < 0 or size > MAX_PAGE:
            raise ValueError(f"page_size must be 1..{MAX_PAGE}")
        keys = self._sorted_keys(target)
        start = 0
        if request.page_token:
            after = _sort_key(_decode_token(request.page_token))
            lo, hi = 0, len(keys)
            while lo < hi:  # first key strictly greater than the token's key
                mid = (lo + hi) // 2
                if keys[mid][0] <= after:
                    lo = mid + 1
                else:
                    hi = mid
            start = lo
        rows: list[Any] = []
        last: Any = None
        i = start
        while len(rows) < size and i < len(keys):
            key = keys[i][1]
            r = target.get(*key) if isinstance(key, tuple) else target.get(key)
            if r is not None:  # deleted since the key list was taken
                rows.append(r)
                last = key
            i += 1
        token = _encode_token(last) if rows and i < len(keys) else ""
        return qry.ListRowsResponse(
            rows=[row_pb(r) for r in rows], next_page_token=token, total_count=int(target.count())
        )

    def _sorted_keys(self, target: Any) -> list[tuple[Any, Any]]:
        """``(sort key, key)`` of every row, sorted; cached until the target changes."""
        version = getattr(target, "version", None)
        cached = self._keys.get(id(target))
        if cached is not None and version is not None and cached[0] == version:
            return cached[1]
        keys_of = getattr(target, "keys", None)  # memory targets: keys without copying rows
        raw = list(keys_of()) if callable(keys_of) else [k for k, _ in target.items()]
        if getattr(target, "version", None) != version:
            version = None  # a write ran meanwhile: use, but do not cache
        keys = [(_sort_key(k), k) for k in raw]
        try:
            keys.sort(key=lambda kv: kv[0])
        except TypeError:
            keys.sort(key=lambda kv: repr(kv[1]))
        if isinstance(version, int) and not version & 1:
            self._keys[id(target)] = (version, keys)
        return keys

    @_rpc()
    def CountRows(self, request: Any, context: Any) -> qry.CountRowsResponse:
        target, _ = self._target(request.table)
        return qry.CountRowsResponse(count=int(target.count()))

    @_stream()
    def Subscribe(self, request: Any, context: Any) -> Iterator[qry.SubscribeResponse]:
        target, cfg = self._target(request.table)
        listen = getattr(target, "listen", None)
        if not callable(listen):
            raise EngineStateError(f"target of {cfg.table_id} does not support listeners")
        limit = self.rt.watch_buffer
        pending: collections.deque[Any] = collections.deque()
        has_data = threading.Event()
        overflow = threading.Event()
        replaying = threading.local()
        source = self.rt.engine.sources.get(cfg.source_id)

        def on_change(old: Any, new: Any) -> None:
            # Runs on the pipeline's writer thread: keep it to an append.
            if len(pending) >= limit:
                overflow.set()
                has_data.set()
                return
            pending.append(
                (old, new, getattr(target, "position", None), getattr(replaying, "on", False))
            )
            has_data.set()

        replaying.on = bool(request.replay_existing)
        unsubscribe = listen(on_change, replay_existing=bool(request.replay_existing))
        replaying.on = False
        context.add_callback(unsubscribe)
        last_pos: Any = None
        last_text = ""
        try:
            while context.is_active() and not self.rt.stopping.is_set():
                if overflow.is_set():
                    raise RpcStatusError(
                        grpc.StatusCode.RESOURCE_EXHAUSTED,
                        f"subscriber fell more than {limit} changes behind; "
                        "resubscribe with replay_existing=true",
                    )
                if not has_data.wait(0.25):
                    continue
                has_data.clear()
                while pending:
                    events: list[Any] = []
                    now = _ms(time.time())
                    while pending and len(events) < SUBSCRIBE_BATCH:
                        old, new, pos, replayed = pending.popleft()
                        if pos is not last_pos:
                            last_pos = pos
                            last_text = _pos_text(source, pos)
                        if old is None:
                            action = "TRUNCATE" if new is None else "INSERT"
                        else:
                            action = "DELETE" if new is None else "UPDATE"
                        events.append(
                            qry.RowEvent(
                                action=action,
                                old_values=row_pb(old),
                                new_values=row_pb(new),
                                position=last_text,
                                timestamp=now,
                                replayed=replayed,
                            )
                        )
                    yield qry.SubscribeResponse(events=events)
        finally:
            unsubscribe()


def _pos_text(source: Any, pos: Any) -> str:
    if pos is None or source is None:
        return ""
    try:
        return str(source.position_to_string(pos))
    except Exception:
        return str(pos)


def primary_key_of(columns: list[ColumnDefinition]) -> list[str]:
    return primary_key_columns(columns)
