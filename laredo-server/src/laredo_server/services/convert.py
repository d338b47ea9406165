"""Every mapping from Python values to the wire: pipeline and service states, columns,
indexes, snapshots, rows, timestamps, page tokens and status events.

Rows travel as typed JSON (``laredo-json/1``, :mod:`laredo.serialization`); timestamps as
milliseconds since the epoch (0: never); page tokens are the last key of a page, typed-JSON
encoded and base64url'd, so they survive any key type.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from datetime import datetime
from typing import Any, overload

from laredo import PipelineInfo, SourceRunInfo
from laredo.secrets import mask_text
from laredo.serialization import (
    RowEncoder,
    encode_change,
    encode_row,
    encode_value,
    object_hook,
)
from laredo.snapshots.manifest import SnapshotArtifact
from laredo.types import (
    ChangeAction,
    ColumnDefinition,
    DeadLetter,
    PipelineState,
    Row,
    SnapshotDescriptor,
    TableIdentifier,
)

from .._proto.laredo_proto.v1 import oam_pb2 as oam
from .._proto.laredo_proto.v1 import query_pb2 as qry
from ..capabilities import SecondaryIndexed, UniqueLookup
from ..metrics import PipelineCounts
from ..state import (
    ChangesApplied,
    PipelineStateChanged,
    ServiceState,
    ServiceStateChanged,
    SnapshotActivity,
    SourceStateChanged,
    StatusEvent,
)

__all__ = [
    "PIPELINE_STATES",
    "SERVICE_STATES",
    "artifact_pb",
    "column_pb",
    "dead_letter_pb",
    "decode_json_value",
    "decode_page_token",
    "encode_page_token",
    "indexes_pb",
    "ms",
    "pipeline_state_pb",
    "pipeline_status_pb",
    "reload_result_pb",
    "row_pb",
    "service_state_pb",
    "snapshot_pb",
    "sort_key",
    "source_info_pb",
    "source_status_pb",
    "status_event_pb",
    "table_id",
]

PIPELINE_STATES: dict[PipelineState, oam.PipelineState] = {
    PipelineState.INITIALIZING: oam.PIPELINE_STATE_INITIALIZING,
    PipelineState.BASELINING: oam.PIPELINE_STATE_BASELINING,
    PipelineState.STREAMING: oam.PIPELINE_STATE_STREAMING,
    PipelineState.PAUSED: oam.PIPELINE_STATE_PAUSED,
    PipelineState.ERROR: oam.PIPELINE_STATE_ERROR,
    PipelineState.STOPPED: oam.PIPELINE_STATE_STOPPED,
}

SERVICE_STATES: dict[ServiceState, oam.ServiceState] = {
    ServiceState.STARTING: oam.SERVICE_STATE_STARTING,
    ServiceState.BASELINING: oam.SERVICE_STATE_BASELINING,
    ServiceState.STREAMING: oam.SERVICE_STATE_STREAMING,
    ServiceState.PAUSED: oam.SERVICE_STATE_PAUSED,
    ServiceState.RELOADING: oam.SERVICE_STATE_RELOADING,
    ServiceState.ERROR: oam.SERVICE_STATE_ERROR,
    ServiceState.STOPPING: oam.SERVICE_STATE_STOPPING,
}


def pipeline_state_pb(state: PipelineState | None) -> oam.PipelineState:
    """The wire enum of a pipeline state (UNSPECIFIED for None)."""
    if state is None:
        return oam.PIPELINE_STATE_UNSPECIFIED
    return PIPELINE_STATES.get(state, oam.PIPELINE_STATE_UNSPECIFIED)


def service_state_pb(state: ServiceState | None) -> oam.ServiceState:
    """The wire enum of a service state (UNSPECIFIED for None)."""
    return SERVICE_STATES[state] if state is not None else oam.SERVICE_STATE_UNSPECIFIED


def ms(when: datetime | float | None) -> int:
    """Milliseconds since the epoch of a datetime or a ``time.time()`` value; 0 for None."""
    if when is None:
        return 0
    if isinstance(when, datetime):
        return int(when.timestamp() * 1000)
    return int(when * 1000)


def table_id(schema: str, table: str) -> TableIdentifier:
    """The table a request names: ``schema`` defaults to public, ``table`` may be qualified."""
    if not table:
        raise ValueError("table is required (schema defaults to public)")
    if "." in table and not schema:
        return TableIdentifier.parse(table)
    return TableIdentifier(schema or "public", table)


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


def indexes_pb(target: object) -> list[oam.IndexInfo]:
    """The target's unique lookup index (named ``lookup``) and its secondary indexes."""
    out = []
    if isinstance(target, UniqueLookup) and target.lookup_fields:
        out.append(oam.IndexInfo(name="lookup", fields=list(target.lookup_fields), unique=True))
    if isinstance(target, SecondaryIndexed):
        for idx in target.indexes or ():
            out.append(oam.IndexInfo(name=idx.name, fields=list(idx.fields), unique=idx.unique))
    return out


def snapshot_pb(d: SnapshotDescriptor) -> oam.SnapshotInfo:
    return oam.SnapshotInfo(
        snapshot_id=d.snapshot_id,
        created_at=ms(d.created_at),
        format=d.format,
        size_bytes=int(d.size_bytes or 0),
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


def artifact_pb(a: SnapshotArtifact) -> oam.SnapshotArtifactInfo:
    """One artifact of a snapshot's manifest with its parts."""
    return oam.SnapshotArtifactInfo(
        kind=a.kind,
        schema=a.table.schema,
        table=a.table.table,
        pipeline_id=a.pipeline_id,
        from_position=a.from_position or "",
        to_position=a.to_position or "",
        parts=[
            oam.SnapshotPartInfo(
                path=p.path,
                format=p.format,
                rows=p.rows,
                size_bytes=p.size_bytes,
                sha256=p.sha256 or "",
            )
            for p in a.parts
        ],
    )


def pipeline_status_pb(
    info: PipelineInfo,
    *,
    ready: bool,
    target: object,
    counts: PipelineCounts | None = None,
    dead_letters: int = 0,
) -> oam.PipelineStatus:
    """A pipeline's status; ``target`` (None when unknown) contributes its indexes, ``counts``
    the totals since the server started, ``dead_letters`` the backlog (-1: unknown)."""
    counts = counts or PipelineCounts()
    return oam.PipelineStatus(
        pipeline_id=info.id,
        source_id=info.source_id,
        schema=info.table.schema,
        table=info.table.table,
        target_type=info.target_type,
        state=pipeline_state_pb(info.state),
        ready=ready,
        has_row_count=info.row_count is not None,
        row_count=info.row_count or 0,
        buffer_depth=info.buffer_depth,
        buffer_capacity=info.buffer_capacity,
        error=mask_text(info.error or ""),
        applied_position=info.applied_position or "",
        durable_position=info.durable_position or "",
        indexes=indexes_pb(target) if target is not None else [],
        changes_applied=counts.changes_applied,
        change_errors=counts.change_errors,
        dead_letters=dead_letters,
    )


def _lag_seconds(info: SourceRunInfo) -> float:
    return info.lag_time.total_seconds() if info.lag_time is not None else -1.0


def source_status_pb(
    info: SourceRunInfo, *, ready: bool, wal_retained: int | None = None
) -> oam.SourceStatus:
    """A source's status (``lag_seconds`` and ``wal_retained_bytes`` -1: unknown)."""
    return oam.SourceStatus(
        source_id=info.id,
        source_type=info.source_type,
        state=info.state,
        ready=ready,
        error=mask_text(info.error or ""),
        current_position=info.current_position or "",
        acked_position=info.acked_position or "",
        lag_bytes=int(info.lag_bytes or 0),
        lag_seconds=_lag_seconds(info),
        pipeline_ids=list(info.pipelines),
        wal_retained_bytes=-1 if wal_retained is None else wal_retained,
    )


def reload_result_pb(result: Any) -> oam.ReloadConfigResponse:
    """A configuration reload's answer (``laredo_server.reload.ReloadResult``)."""
    return oam.ReloadConfigResponse(
        accepted=result.accepted,
        message=result.message,
        generation=result.generation,
        changes=[oam.ConfigChange(kind=c.kind, id=c.id, detail=c.detail) for c in result.changes],
        errors=list(result.errors),
    )


def source_info_pb(
    info: SourceRunInfo, *, type_name: str, details: Mapping[str, str]
) -> oam.SourceInfo:
    """A source's details; ``type_name`` is the configured type (``postgresql``, ...)."""
    return oam.SourceInfo(
        id=info.id,
        type=type_name,
        supports_resume=info.supports_resume,
        ordering_guarantee=info.ordering_guarantee,
        current_position=info.current_position or "",
        acked_position=info.acked_position or "",
        lag_bytes=int(info.lag_bytes or 0),
        lag_seconds=_lag_seconds(info),
        details=dict(details),
    )


def dead_letter_pb(d: DeadLetter) -> oam.DeadLetterEntry:
    """A dead letter; ``change_json`` is the change in the typed-JSON change encoding."""
    ch = d.change
    return oam.DeadLetterEntry(
        pipeline_id=d.pipeline_id,
        schema=ch.table.schema,
        table=ch.table.table,
        action=ChangeAction(ch.action).name,
        position=d.position or "",
        error=d.error.message,
        error_type=d.error.error_type,
        written_at=ms(d.written_at),
        change_json=json.dumps(encode_change(ch, d.position)),
    )


_ENCODER = RowEncoder()


@overload
def row_pb(row: Row) -> qry.Row: ...
@overload
def row_pb(row: None) -> None: ...
@overload
def row_pb(row: Row | None) -> qry.Row | None: ...


def row_pb(row: Row | None) -> qry.Row | None:
    """A row as typed JSON; ``TypeError`` naming the problem when a value cannot be encoded."""
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


def sort_key(key: Any) -> tuple[Any, ...]:
    """A total order over row keys of mixed types: None < bools < numbers < text < others."""
    if isinstance(key, tuple):
        return tuple(sort_key(k) for k in key)
    if key is None:
        return (0, "")
    if isinstance(key, bool):
        return (1, int(key))
    if isinstance(key, int | float):
        return (2, key)
    if isinstance(key, str):
        return (3, key)
    return (4, type(key).__name__, str(key))


def encode_page_token(key: Any) -> str:
    """The page token that resumes a listing after ``key``."""
    raw = json.dumps(encode_value(list(key) if isinstance(key, tuple) else [key]))
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def decode_page_token(token: str) -> Any:
    """The key a page token was made from; ``ValueError`` for a token not made here."""
    try:
        pad = "=" * (-len(token) % 4)
        values = json.loads(base64.urlsafe_b64decode(token + pad), object_hook=object_hook)
    except Exception as exc:
        raise ValueError(f"invalid page_token {token!r}: pass next_page_token unchanged") from exc
    if not isinstance(values, list) or not values:
        raise ValueError(f"invalid page_token {token!r}")
    return values[0] if len(values) == 1 else tuple(values)


def status_event_pb(ev: StatusEvent, dropped_before: int = 0) -> oam.StatusEvent:
    """A watch event on the wire; ``dropped_before`` counts the events the watcher lost just
    before this one."""
    at = ms(ev.at)
    match ev:
        case PipelineStateChanged():
            return oam.StatusEvent(
                timestamp=at,
                dropped_before=dropped_before,
                pipeline_state_change=oam.PipelineStateChange(
                    pipeline_id=ev.pipeline_id,
                    old_state=pipeline_state_pb(ev.old),
                    new_state=pipeline_state_pb(ev.new),
                    error=mask_text(ev.error),
                ),
            )
        case ServiceStateChanged():
            return oam.StatusEvent(
                timestamp=at,
                dropped_before=dropped_before,
                service_state_change=oam.ServiceStateChange(
                    old_state=service_state_pb(ev.old), new_state=service_state_pb(ev.new)
                ),
            )
        case ChangesApplied():
            return oam.StatusEvent(
                timestamp=at,
                dropped_before=dropped_before,
                row_change=oam.RowChange(
                    pipeline_id=ev.pipeline_id,
                    schema=ev.table.schema,
                    table=ev.table.table,
                    action="BATCH",
                    count=ev.count,
                ),
            )
        case SourceStateChanged():
            return oam.StatusEvent(
                timestamp=at,
                dropped_before=dropped_before,
                source_state_change=oam.SourceStateChange(
                    source_id=ev.source_id,
                    state=ev.state,
                    reason=ev.reason,
                    position=ev.position,
                ),
            )
        case SnapshotActivity():
            return oam.StatusEvent(
                timestamp=at,
                dropped_before=dropped_before,
                snapshot_event=oam.SnapshotEvent(
                    snapshot_id=ev.snapshot_id, event=ev.event, message=ev.message, rows=ev.rows
                ),
            )
