from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ServiceState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    SERVICE_STATE_UNSPECIFIED: _ClassVar[ServiceState]
    SERVICE_STATE_STARTING: _ClassVar[ServiceState]
    SERVICE_STATE_BASELINING: _ClassVar[ServiceState]
    SERVICE_STATE_STREAMING: _ClassVar[ServiceState]
    SERVICE_STATE_PAUSED: _ClassVar[ServiceState]
    SERVICE_STATE_RELOADING: _ClassVar[ServiceState]
    SERVICE_STATE_ERROR: _ClassVar[ServiceState]
    SERVICE_STATE_STOPPING: _ClassVar[ServiceState]

class PipelineState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    PIPELINE_STATE_UNSPECIFIED: _ClassVar[PipelineState]
    PIPELINE_STATE_INITIALIZING: _ClassVar[PipelineState]
    PIPELINE_STATE_BASELINING: _ClassVar[PipelineState]
    PIPELINE_STATE_STREAMING: _ClassVar[PipelineState]
    PIPELINE_STATE_PAUSED: _ClassVar[PipelineState]
    PIPELINE_STATE_ERROR: _ClassVar[PipelineState]
    PIPELINE_STATE_STOPPED: _ClassVar[PipelineState]
SERVICE_STATE_UNSPECIFIED: ServiceState
SERVICE_STATE_STARTING: ServiceState
SERVICE_STATE_BASELINING: ServiceState
SERVICE_STATE_STREAMING: ServiceState
SERVICE_STATE_PAUSED: ServiceState
SERVICE_STATE_RELOADING: ServiceState
SERVICE_STATE_ERROR: ServiceState
SERVICE_STATE_STOPPING: ServiceState
PIPELINE_STATE_UNSPECIFIED: PipelineState
PIPELINE_STATE_INITIALIZING: PipelineState
PIPELINE_STATE_BASELINING: PipelineState
PIPELINE_STATE_STREAMING: PipelineState
PIPELINE_STATE_PAUSED: PipelineState
PIPELINE_STATE_ERROR: PipelineState
PIPELINE_STATE_STOPPED: PipelineState

class IndexInfo(_message.Message):
    __slots__ = ("name", "fields", "unique")
    NAME_FIELD_NUMBER: _ClassVar[int]
    FIELDS_FIELD_NUMBER: _ClassVar[int]
    UNIQUE_FIELD_NUMBER: _ClassVar[int]
    name: str
    fields: _containers.RepeatedScalarFieldContainer[str]
    unique: bool
    def __init__(self, name: _Optional[str] = ..., fields: _Optional[_Iterable[str]] = ..., unique: _Optional[bool] = ...) -> None: ...

class PipelineStatus(_message.Message):
    __slots__ = ("pipeline_id", "source_id", "schema", "table", "target_type", "state", "ready", "has_row_count", "row_count", "buffer_depth", "buffer_capacity", "error", "applied_position", "durable_position", "indexes", "changes_applied", "change_errors", "dead_letters")
    PIPELINE_ID_FIELD_NUMBER: _ClassVar[int]
    SOURCE_ID_FIELD_NUMBER: _ClassVar[int]
    SCHEMA_FIELD_NUMBER: _ClassVar[int]
    TABLE_FIELD_NUMBER: _ClassVar[int]
    TARGET_TYPE_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    READY_FIELD_NUMBER: _ClassVar[int]
    HAS_ROW_COUNT_FIELD_NUMBER: _ClassVar[int]
    ROW_COUNT_FIELD_NUMBER: _ClassVar[int]
    BUFFER_DEPTH_FIELD_NUMBER: _ClassVar[int]
    BUFFER_CAPACITY_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    APPLIED_POSITION_FIELD_NUMBER: _ClassVar[int]
    DURABLE_POSITION_FIELD_NUMBER: _ClassVar[int]
    INDEXES_FIELD_NUMBER: _ClassVar[int]
    CHANGES_APPLIED_FIELD_NUMBER: _ClassVar[int]
    CHANGE_ERRORS_FIELD_NUMBER: _ClassVar[int]
    DEAD_LETTERS_FIELD_NUMBER: _ClassVar[int]
    pipeline_id: str
    source_id: str
    schema: str
    table: str
    target_type: str
    state: PipelineState
    ready: bool
    has_row_count: bool
    row_count: int
    buffer_depth: int
    buffer_capacity: int
    error: str
    applied_position: str
    durable_position: str
    indexes: _containers.RepeatedCompositeFieldContainer[IndexInfo]
    changes_applied: int
    change_errors: int
    dead_letters: int
    def __init__(self, pipeline_id: _Optional[str] = ..., source_id: _Optional[str] = ..., schema: _Optional[str] = ..., table: _Optional[str] = ..., target_type: _Optional[str] = ..., state: _Optional[_Union[PipelineState, str]] = ..., ready: _Optional[bool] = ..., has_row_count: _Optional[bool] = ..., row_count: _Optional[int] = ..., buffer_depth: _Optional[int] = ..., buffer_capacity: _Optional[int] = ..., error: _Optional[str] = ..., applied_position: _Optional[str] = ..., durable_position: _Optional[str] = ..., indexes: _Optional[_Iterable[_Union[IndexInfo, _Mapping]]] = ..., changes_applied: _Optional[int] = ..., change_errors: _Optional[int] = ..., dead_letters: _Optional[int] = ...) -> None: ...

class SourceStatus(_message.Message):
    __slots__ = ("source_id", "source_type", "state", "ready", "error", "current_position", "acked_position", "lag_bytes", "lag_seconds", "pipeline_ids", "wal_retained_bytes")
    SOURCE_ID_FIELD_NUMBER: _ClassVar[int]
    SOURCE_TYPE_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    READY_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    CURRENT_POSITION_FIELD_NUMBER: _ClassVar[int]
    ACKED_POSITION_FIELD_NUMBER: _ClassVar[int]
    LAG_BYTES_FIELD_NUMBER: _ClassVar[int]
    LAG_SECONDS_FIELD_NUMBER: _ClassVar[int]
    PIPELINE_IDS_FIELD_NUMBER: _ClassVar[int]
    WAL_RETAINED_BYTES_FIELD_NUMBER: _ClassVar[int]
    source_id: str
    source_type: str
    state: str
    ready: bool
    error: str
    current_position: str
    acked_position: str
    lag_bytes: int
    lag_seconds: float
    pipeline_ids: _containers.RepeatedScalarFieldContainer[str]
    wal_retained_bytes: int
    def __init__(self, source_id: _Optional[str] = ..., source_type: _Optional[str] = ..., state: _Optional[str] = ..., ready: _Optional[bool] = ..., error: _Optional[str] = ..., current_position: _Optional[str] = ..., acked_position: _Optional[str] = ..., lag_bytes: _Optional[int] = ..., lag_seconds: _Optional[float] = ..., pipeline_ids: _Optional[_Iterable[str]] = ..., wal_retained_bytes: _Optional[int] = ...) -> None: ...

class SnapshotStatus(_message.Message):
    __slots__ = ("store_configured", "last_snapshot_id", "last_snapshot_at", "last_error", "snapshots_created", "last_snapshot_size_bytes", "schedule_seconds")
    STORE_CONFIGURED_FIELD_NUMBER: _ClassVar[int]
    LAST_SNAPSHOT_ID_FIELD_NUMBER: _ClassVar[int]
    LAST_SNAPSHOT_AT_FIELD_NUMBER: _ClassVar[int]
    LAST_ERROR_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOTS_CREATED_FIELD_NUMBER: _ClassVar[int]
    LAST_SNAPSHOT_SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    SCHEDULE_SECONDS_FIELD_NUMBER: _ClassVar[int]
    store_configured: bool
    last_snapshot_id: str
    last_snapshot_at: int
    last_error: str
    snapshots_created: int
    last_snapshot_size_bytes: int
    schedule_seconds: int
    def __init__(self, store_configured: _Optional[bool] = ..., last_snapshot_id: _Optional[str] = ..., last_snapshot_at: _Optional[int] = ..., last_error: _Optional[str] = ..., snapshots_created: _Optional[int] = ..., last_snapshot_size_bytes: _Optional[int] = ..., schedule_seconds: _Optional[int] = ...) -> None: ...

class GetStatusRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetStatusResponse(_message.Message):
    __slots__ = ("state", "ready", "sources", "pipelines", "started_at", "last_change_at", "snapshot_status", "version", "config_generation", "last_reload", "last_reload_at", "security_warnings", "backfills")
    STATE_FIELD_NUMBER: _ClassVar[int]
    READY_FIELD_NUMBER: _ClassVar[int]
    SOURCES_FIELD_NUMBER: _ClassVar[int]
    PIPELINES_FIELD_NUMBER: _ClassVar[int]
    STARTED_AT_FIELD_NUMBER: _ClassVar[int]
    LAST_CHANGE_AT_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_STATUS_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    CONFIG_GENERATION_FIELD_NUMBER: _ClassVar[int]
    LAST_RELOAD_FIELD_NUMBER: _ClassVar[int]
    LAST_RELOAD_AT_FIELD_NUMBER: _ClassVar[int]
    SECURITY_WARNINGS_FIELD_NUMBER: _ClassVar[int]
    BACKFILLS_FIELD_NUMBER: _ClassVar[int]
    state: ServiceState
    ready: bool
    sources: _containers.RepeatedCompositeFieldContainer[SourceStatus]
    pipelines: _containers.RepeatedCompositeFieldContainer[PipelineStatus]
    started_at: int
    last_change_at: int
    snapshot_status: SnapshotStatus
    version: str
    config_generation: int
    last_reload: ReloadConfigResponse
    last_reload_at: int
    security_warnings: _containers.RepeatedScalarFieldContainer[str]
    backfills: _containers.RepeatedCompositeFieldContainer[BackfillStatus]
    def __init__(self, state: _Optional[_Union[ServiceState, str]] = ..., ready: _Optional[bool] = ..., sources: _Optional[_Iterable[_Union[SourceStatus, _Mapping]]] = ..., pipelines: _Optional[_Iterable[_Union[PipelineStatus, _Mapping]]] = ..., started_at: _Optional[int] = ..., last_change_at: _Optional[int] = ..., snapshot_status: _Optional[_Union[SnapshotStatus, _Mapping]] = ..., version: _Optional[str] = ..., config_generation: _Optional[int] = ..., last_reload: _Optional[_Union[ReloadConfigResponse, _Mapping]] = ..., last_reload_at: _Optional[int] = ..., security_warnings: _Optional[_Iterable[str]] = ..., backfills: _Optional[_Iterable[_Union[BackfillStatus, _Mapping]]] = ...) -> None: ...

class BackfillStatus(_message.Message):
    __slots__ = ("source_id", "schema", "table", "state", "chunks", "rows_read", "rows_applied", "rows_dropped", "rows_estimated", "started_at", "has_eta", "eta_seconds", "error", "rows_removed", "sweep")
    SOURCE_ID_FIELD_NUMBER: _ClassVar[int]
    SCHEMA_FIELD_NUMBER: _ClassVar[int]
    TABLE_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    CHUNKS_FIELD_NUMBER: _ClassVar[int]
    ROWS_READ_FIELD_NUMBER: _ClassVar[int]
    ROWS_APPLIED_FIELD_NUMBER: _ClassVar[int]
    ROWS_DROPPED_FIELD_NUMBER: _ClassVar[int]
    ROWS_ESTIMATED_FIELD_NUMBER: _ClassVar[int]
    STARTED_AT_FIELD_NUMBER: _ClassVar[int]
    HAS_ETA_FIELD_NUMBER: _ClassVar[int]
    ETA_SECONDS_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    ROWS_REMOVED_FIELD_NUMBER: _ClassVar[int]
    SWEEP_FIELD_NUMBER: _ClassVar[int]
    source_id: str
    schema: str
    table: str
    state: str
    chunks: int
    rows_read: int
    rows_applied: int
    rows_dropped: int
    rows_estimated: int
    started_at: int
    has_eta: bool
    eta_seconds: float
    error: str
    rows_removed: int
    sweep: str
    def __init__(self, source_id: _Optional[str] = ..., schema: _Optional[str] = ..., table: _Optional[str] = ..., state: _Optional[str] = ..., chunks: _Optional[int] = ..., rows_read: _Optional[int] = ..., rows_applied: _Optional[int] = ..., rows_dropped: _Optional[int] = ..., rows_estimated: _Optional[int] = ..., started_at: _Optional[int] = ..., has_eta: _Optional[bool] = ..., eta_seconds: _Optional[float] = ..., error: _Optional[str] = ..., rows_removed: _Optional[int] = ..., sweep: _Optional[str] = ...) -> None: ...

class GetTableStatusRequest(_message.Message):
    __slots__ = ("schema", "table")
    SCHEMA_FIELD_NUMBER: _ClassVar[int]
    TABLE_FIELD_NUMBER: _ClassVar[int]
    schema: str
    table: str
    def __init__(self, schema: _Optional[str] = ..., table: _Optional[str] = ...) -> None: ...

class GetTableStatusResponse(_message.Message):
    __slots__ = ("pipelines", "indexes")
    PIPELINES_FIELD_NUMBER: _ClassVar[int]
    INDEXES_FIELD_NUMBER: _ClassVar[int]
    pipelines: _containers.RepeatedCompositeFieldContainer[PipelineStatus]
    indexes: _containers.RepeatedCompositeFieldContainer[IndexInfo]
    def __init__(self, pipelines: _Optional[_Iterable[_Union[PipelineStatus, _Mapping]]] = ..., indexes: _Optional[_Iterable[_Union[IndexInfo, _Mapping]]] = ...) -> None: ...

class GetPipelineStatusRequest(_message.Message):
    __slots__ = ("pipeline_id",)
    PIPELINE_ID_FIELD_NUMBER: _ClassVar[int]
    pipeline_id: str
    def __init__(self, pipeline_id: _Optional[str] = ...) -> None: ...

class GetPipelineStatusResponse(_message.Message):
    __slots__ = ("status", "indexes")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    INDEXES_FIELD_NUMBER: _ClassVar[int]
    status: PipelineStatus
    indexes: _containers.RepeatedCompositeFieldContainer[IndexInfo]
    def __init__(self, status: _Optional[_Union[PipelineStatus, _Mapping]] = ..., indexes: _Optional[_Iterable[_Union[IndexInfo, _Mapping]]] = ...) -> None: ...

class WatchStatusRequest(_message.Message):
    __slots__ = ("tables", "pipeline_ids")
    TABLES_FIELD_NUMBER: _ClassVar[int]
    PIPELINE_IDS_FIELD_NUMBER: _ClassVar[int]
    tables: _containers.RepeatedScalarFieldContainer[str]
    pipeline_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, tables: _Optional[_Iterable[str]] = ..., pipeline_ids: _Optional[_Iterable[str]] = ...) -> None: ...

class PipelineStateChange(_message.Message):
    __slots__ = ("pipeline_id", "old_state", "new_state", "error")
    PIPELINE_ID_FIELD_NUMBER: _ClassVar[int]
    OLD_STATE_FIELD_NUMBER: _ClassVar[int]
    NEW_STATE_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    pipeline_id: str
    old_state: PipelineState
    new_state: PipelineState
    error: str
    def __init__(self, pipeline_id: _Optional[str] = ..., old_state: _Optional[_Union[PipelineState, str]] = ..., new_state: _Optional[_Union[PipelineState, str]] = ..., error: _Optional[str] = ...) -> None: ...

class ServiceStateChange(_message.Message):
    __slots__ = ("old_state", "new_state")
    OLD_STATE_FIELD_NUMBER: _ClassVar[int]
    NEW_STATE_FIELD_NUMBER: _ClassVar[int]
    old_state: ServiceState
    new_state: ServiceState
    def __init__(self, old_state: _Optional[_Union[ServiceState, str]] = ..., new_state: _Optional[_Union[ServiceState, str]] = ...) -> None: ...

class RowChange(_message.Message):
    __slots__ = ("pipeline_id", "schema", "table", "action", "count", "position")
    PIPELINE_ID_FIELD_NUMBER: _ClassVar[int]
    SCHEMA_FIELD_NUMBER: _ClassVar[int]
    TABLE_FIELD_NUMBER: _ClassVar[int]
    ACTION_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    POSITION_FIELD_NUMBER: _ClassVar[int]
    pipeline_id: str
    schema: str
    table: str
    action: str
    count: int
    position: str
    def __init__(self, pipeline_id: _Optional[str] = ..., schema: _Optional[str] = ..., table: _Optional[str] = ..., action: _Optional[str] = ..., count: _Optional[int] = ..., position: _Optional[str] = ...) -> None: ...

class SourceStateChange(_message.Message):
    __slots__ = ("source_id", "state", "reason", "position", "lag_bytes")
    SOURCE_ID_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    POSITION_FIELD_NUMBER: _ClassVar[int]
    LAG_BYTES_FIELD_NUMBER: _ClassVar[int]
    source_id: str
    state: str
    reason: str
    position: str
    lag_bytes: int
    def __init__(self, source_id: _Optional[str] = ..., state: _Optional[str] = ..., reason: _Optional[str] = ..., position: _Optional[str] = ..., lag_bytes: _Optional[int] = ...) -> None: ...

class SnapshotEvent(_message.Message):
    __slots__ = ("snapshot_id", "event", "message", "rows")
    SNAPSHOT_ID_FIELD_NUMBER: _ClassVar[int]
    EVENT_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    ROWS_FIELD_NUMBER: _ClassVar[int]
    snapshot_id: str
    event: str
    message: str
    rows: int
    def __init__(self, snapshot_id: _Optional[str] = ..., event: _Optional[str] = ..., message: _Optional[str] = ..., rows: _Optional[int] = ...) -> None: ...

class StatusEvent(_message.Message):
    __slots__ = ("timestamp", "dropped_before", "service_state_change", "pipeline_state_change", "row_change", "source_state_change", "snapshot_event")
    TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    DROPPED_BEFORE_FIELD_NUMBER: _ClassVar[int]
    SERVICE_STATE_CHANGE_FIELD_NUMBER: _ClassVar[int]
    PIPELINE_STATE_CHANGE_FIELD_NUMBER: _ClassVar[int]
    ROW_CHANGE_FIELD_NUMBER: _ClassVar[int]
    SOURCE_STATE_CHANGE_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_EVENT_FIELD_NUMBER: _ClassVar[int]
    timestamp: int
    dropped_before: int
    service_state_change: ServiceStateChange
    pipeline_state_change: PipelineStateChange
    row_change: RowChange
    source_state_change: SourceStateChange
    snapshot_event: SnapshotEvent
    def __init__(self, timestamp: _Optional[int] = ..., dropped_before: _Optional[int] = ..., service_state_change: _Optional[_Union[ServiceStateChange, _Mapping]] = ..., pipeline_state_change: _Optional[_Union[PipelineStateChange, _Mapping]] = ..., row_change: _Optional[_Union[RowChange, _Mapping]] = ..., source_state_change: _Optional[_Union[SourceStateChange, _Mapping]] = ..., snapshot_event: _Optional[_Union[SnapshotEvent, _Mapping]] = ...) -> None: ...

class CheckReadyRequest(_message.Message):
    __slots__ = ("source", "table", "pipeline_id")
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    TABLE_FIELD_NUMBER: _ClassVar[int]
    PIPELINE_ID_FIELD_NUMBER: _ClassVar[int]
    source: str
    table: str
    pipeline_id: str
    def __init__(self, source: _Optional[str] = ..., table: _Optional[str] = ..., pipeline_id: _Optional[str] = ...) -> None: ...

class CheckReadyResponse(_message.Message):
    __slots__ = ("ready", "not_ready_reasons")
    READY_FIELD_NUMBER: _ClassVar[int]
    NOT_READY_REASONS_FIELD_NUMBER: _ClassVar[int]
    ready: bool
    not_ready_reasons: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, ready: _Optional[bool] = ..., not_ready_reasons: _Optional[_Iterable[str]] = ...) -> None: ...

class GetSourceInfoRequest(_message.Message):
    __slots__ = ("source_id",)
    SOURCE_ID_FIELD_NUMBER: _ClassVar[int]
    source_id: str
    def __init__(self, source_id: _Optional[str] = ...) -> None: ...

class SourceInfo(_message.Message):
    __slots__ = ("id", "type", "supports_resume", "ordering_guarantee", "current_position", "acked_position", "lag_bytes", "lag_seconds", "details")
    class DetailsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    ID_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    SUPPORTS_RESUME_FIELD_NUMBER: _ClassVar[int]
    ORDERING_GUARANTEE_FIELD_NUMBER: _ClassVar[int]
    CURRENT_POSITION_FIELD_NUMBER: _ClassVar[int]
    ACKED_POSITION_FIELD_NUMBER: _ClassVar[int]
    LAG_BYTES_FIELD_NUMBER: _ClassVar[int]
    LAG_SECONDS_FIELD_NUMBER: _ClassVar[int]
    DETAILS_FIELD_NUMBER: _ClassVar[int]
    id: str
    type: str
    supports_resume: bool
    ordering_guarantee: str
    current_position: str
    acked_position: str
    lag_bytes: int
    lag_seconds: float
    details: _containers.ScalarMap[str, str]
    def __init__(self, id: _Optional[str] = ..., type: _Optional[str] = ..., supports_resume: _Optional[bool] = ..., ordering_guarantee: _Optional[str] = ..., current_position: _Optional[str] = ..., acked_position: _Optional[str] = ..., lag_bytes: _Optional[int] = ..., lag_seconds: _Optional[float] = ..., details: _Optional[_Mapping[str, str]] = ...) -> None: ...

class GetSourceInfoResponse(_message.Message):
    __slots__ = ("sources",)
    SOURCES_FIELD_NUMBER: _ClassVar[int]
    sources: _containers.RepeatedCompositeFieldContainer[SourceInfo]
    def __init__(self, sources: _Optional[_Iterable[_Union[SourceInfo, _Mapping]]] = ...) -> None: ...

class ReloadTableRequest(_message.Message):
    __slots__ = ("source_id", "schema", "table")
    SOURCE_ID_FIELD_NUMBER: _ClassVar[int]
    SCHEMA_FIELD_NUMBER: _ClassVar[int]
    TABLE_FIELD_NUMBER: _ClassVar[int]
    source_id: str
    schema: str
    table: str
    def __init__(self, source_id: _Optional[str] = ..., schema: _Optional[str] = ..., table: _Optional[str] = ...) -> None: ...

class ReloadAllRequest(_message.Message):
    __slots__ = ("source_id",)
    SOURCE_ID_FIELD_NUMBER: _ClassVar[int]
    source_id: str
    def __init__(self, source_id: _Optional[str] = ...) -> None: ...

class ReloadResponse(_message.Message):
    __slots__ = ("accepted", "message", "tables")
    ACCEPTED_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    TABLES_FIELD_NUMBER: _ClassVar[int]
    accepted: bool
    message: str
    tables: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, accepted: _Optional[bool] = ..., message: _Optional[str] = ..., tables: _Optional[_Iterable[str]] = ...) -> None: ...

class PauseSyncRequest(_message.Message):
    __slots__ = ("source_id",)
    SOURCE_ID_FIELD_NUMBER: _ClassVar[int]
    source_id: str
    def __init__(self, source_id: _Optional[str] = ...) -> None: ...

class PauseSyncResponse(_message.Message):
    __slots__ = ("pipelines",)
    PIPELINES_FIELD_NUMBER: _ClassVar[int]
    pipelines: _containers.RepeatedCompositeFieldContainer[PipelineStatus]
    def __init__(self, pipelines: _Optional[_Iterable[_Union[PipelineStatus, _Mapping]]] = ...) -> None: ...

class ResumeSyncRequest(_message.Message):
    __slots__ = ("source_id",)
    SOURCE_ID_FIELD_NUMBER: _ClassVar[int]
    source_id: str
    def __init__(self, source_id: _Optional[str] = ...) -> None: ...

class ResumeSyncResponse(_message.Message):
    __slots__ = ("pipelines",)
    PIPELINES_FIELD_NUMBER: _ClassVar[int]
    pipelines: _containers.RepeatedCompositeFieldContainer[PipelineStatus]
    def __init__(self, pipelines: _Optional[_Iterable[_Union[PipelineStatus, _Mapping]]] = ...) -> None: ...

class ResetSourceRequest(_message.Message):
    __slots__ = ("source_id", "confirm", "drop_publication")
    SOURCE_ID_FIELD_NUMBER: _ClassVar[int]
    CONFIRM_FIELD_NUMBER: _ClassVar[int]
    DROP_PUBLICATION_FIELD_NUMBER: _ClassVar[int]
    source_id: str
    confirm: bool
    drop_publication: bool
    def __init__(self, source_id: _Optional[str] = ..., confirm: _Optional[bool] = ..., drop_publication: _Optional[bool] = ...) -> None: ...

class ResetSourceResponse(_message.Message):
    __slots__ = ("accepted", "message")
    ACCEPTED_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    accepted: bool
    message: str
    def __init__(self, accepted: _Optional[bool] = ..., message: _Optional[str] = ...) -> None: ...

class TableInfo(_message.Message):
    __slots__ = ("schema", "table", "source_id", "target_types", "pipeline_ids", "ready", "row_count")
    SCHEMA_FIELD_NUMBER: _ClassVar[int]
    TABLE_FIELD_NUMBER: _ClassVar[int]
    SOURCE_ID_FIELD_NUMBER: _ClassVar[int]
    TARGET_TYPES_FIELD_NUMBER: _ClassVar[int]
    PIPELINE_IDS_FIELD_NUMBER: _ClassVar[int]
    READY_FIELD_NUMBER: _ClassVar[int]
    ROW_COUNT_FIELD_NUMBER: _ClassVar[int]
    schema: str
    table: str
    source_id: str
    target_types: _containers.RepeatedScalarFieldContainer[str]
    pipeline_ids: _containers.RepeatedScalarFieldContainer[str]
    ready: bool
    row_count: int
    def __init__(self, schema: _Optional[str] = ..., table: _Optional[str] = ..., source_id: _Optional[str] = ..., target_types: _Optional[_Iterable[str]] = ..., pipeline_ids: _Optional[_Iterable[str]] = ..., ready: _Optional[bool] = ..., row_count: _Optional[int] = ...) -> None: ...

class ListTablesRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListTablesResponse(_message.Message):
    __slots__ = ("tables",)
    TABLES_FIELD_NUMBER: _ClassVar[int]
    tables: _containers.RepeatedCompositeFieldContainer[TableInfo]
    def __init__(self, tables: _Optional[_Iterable[_Union[TableInfo, _Mapping]]] = ...) -> None: ...

class ColumnDefinition(_message.Message):
    __slots__ = ("ordinal_position", "column_name", "data_type", "not_null", "is_primary_key", "primary_key_ordinal", "type_oid")
    ORDINAL_POSITION_FIELD_NUMBER: _ClassVar[int]
    COLUMN_NAME_FIELD_NUMBER: _ClassVar[int]
    DATA_TYPE_FIELD_NUMBER: _ClassVar[int]
    NOT_NULL_FIELD_NUMBER: _ClassVar[int]
    IS_PRIMARY_KEY_FIELD_NUMBER: _ClassVar[int]
    PRIMARY_KEY_ORDINAL_FIELD_NUMBER: _ClassVar[int]
    TYPE_OID_FIELD_NUMBER: _ClassVar[int]
    ordinal_position: int
    column_name: str
    data_type: str
    not_null: bool
    is_primary_key: bool
    primary_key_ordinal: int
    type_oid: int
    def __init__(self, ordinal_position: _Optional[int] = ..., column_name: _Optional[str] = ..., data_type: _Optional[str] = ..., not_null: _Optional[bool] = ..., is_primary_key: _Optional[bool] = ..., primary_key_ordinal: _Optional[int] = ..., type_oid: _Optional[int] = ...) -> None: ...

class GetTableSchemaRequest(_message.Message):
    __slots__ = ("schema", "table", "source_id")
    SCHEMA_FIELD_NUMBER: _ClassVar[int]
    TABLE_FIELD_NUMBER: _ClassVar[int]
    SOURCE_ID_FIELD_NUMBER: _ClassVar[int]
    schema: str
    table: str
    source_id: str
    def __init__(self, schema: _Optional[str] = ..., table: _Optional[str] = ..., source_id: _Optional[str] = ...) -> None: ...

class GetTableSchemaResponse(_message.Message):
    __slots__ = ("columns",)
    COLUMNS_FIELD_NUMBER: _ClassVar[int]
    columns: _containers.RepeatedCompositeFieldContainer[ColumnDefinition]
    def __init__(self, columns: _Optional[_Iterable[_Union[ColumnDefinition, _Mapping]]] = ...) -> None: ...

class TableSnapshot(_message.Message):
    __slots__ = ("schema", "table", "row_count", "target_type", "position", "pipeline_id", "columns")
    SCHEMA_FIELD_NUMBER: _ClassVar[int]
    TABLE_FIELD_NUMBER: _ClassVar[int]
    ROW_COUNT_FIELD_NUMBER: _ClassVar[int]
    TARGET_TYPE_FIELD_NUMBER: _ClassVar[int]
    POSITION_FIELD_NUMBER: _ClassVar[int]
    PIPELINE_ID_FIELD_NUMBER: _ClassVar[int]
    COLUMNS_FIELD_NUMBER: _ClassVar[int]
    schema: str
    table: str
    row_count: int
    target_type: str
    position: str
    pipeline_id: str
    columns: _containers.RepeatedCompositeFieldContainer[ColumnDefinition]
    def __init__(self, schema: _Optional[str] = ..., table: _Optional[str] = ..., row_count: _Optional[int] = ..., target_type: _Optional[str] = ..., position: _Optional[str] = ..., pipeline_id: _Optional[str] = ..., columns: _Optional[_Iterable[_Union[ColumnDefinition, _Mapping]]] = ...) -> None: ...

class SnapshotInfo(_message.Message):
    __slots__ = ("snapshot_id", "created_at", "format", "size_bytes", "tables", "source_positions", "user_meta_json")
    class SourcePositionsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    SNAPSHOT_ID_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    FORMAT_FIELD_NUMBER: _ClassVar[int]
    SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    TABLES_FIELD_NUMBER: _ClassVar[int]
    SOURCE_POSITIONS_FIELD_NUMBER: _ClassVar[int]
    USER_META_JSON_FIELD_NUMBER: _ClassVar[int]
    snapshot_id: str
    created_at: int
    format: str
    size_bytes: int
    tables: _containers.RepeatedCompositeFieldContainer[TableSnapshot]
    source_positions: _containers.ScalarMap[str, str]
    user_meta_json: str
    def __init__(self, snapshot_id: _Optional[str] = ..., created_at: _Optional[int] = ..., format: _Optional[str] = ..., size_bytes: _Optional[int] = ..., tables: _Optional[_Iterable[_Union[TableSnapshot, _Mapping]]] = ..., source_positions: _Optional[_Mapping[str, str]] = ..., user_meta_json: _Optional[str] = ...) -> None: ...

class CreateSnapshotRequest(_message.Message):
    __slots__ = ("user_meta_json",)
    USER_META_JSON_FIELD_NUMBER: _ClassVar[int]
    user_meta_json: str
    def __init__(self, user_meta_json: _Optional[str] = ...) -> None: ...

class CreateSnapshotResponse(_message.Message):
    __slots__ = ("accepted", "snapshot_id", "message")
    ACCEPTED_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_ID_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    accepted: bool
    snapshot_id: str
    message: str
    def __init__(self, accepted: _Optional[bool] = ..., snapshot_id: _Optional[str] = ..., message: _Optional[str] = ...) -> None: ...

class ListSnapshotsRequest(_message.Message):
    __slots__ = ("table", "limit")
    TABLE_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    table: str
    limit: int
    def __init__(self, table: _Optional[str] = ..., limit: _Optional[int] = ...) -> None: ...

class ListSnapshotsResponse(_message.Message):
    __slots__ = ("snapshots",)
    SNAPSHOTS_FIELD_NUMBER: _ClassVar[int]
    snapshots: _containers.RepeatedCompositeFieldContainer[SnapshotInfo]
    def __init__(self, snapshots: _Optional[_Iterable[_Union[SnapshotInfo, _Mapping]]] = ...) -> None: ...

class InspectSnapshotRequest(_message.Message):
    __slots__ = ("snapshot_id",)
    SNAPSHOT_ID_FIELD_NUMBER: _ClassVar[int]
    snapshot_id: str
    def __init__(self, snapshot_id: _Optional[str] = ...) -> None: ...

class SnapshotPartInfo(_message.Message):
    __slots__ = ("path", "format", "rows", "size_bytes", "sha256")
    PATH_FIELD_NUMBER: _ClassVar[int]
    FORMAT_FIELD_NUMBER: _ClassVar[int]
    ROWS_FIELD_NUMBER: _ClassVar[int]
    SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    SHA256_FIELD_NUMBER: _ClassVar[int]
    path: str
    format: str
    rows: int
    size_bytes: int
    sha256: str
    def __init__(self, path: _Optional[str] = ..., format: _Optional[str] = ..., rows: _Optional[int] = ..., size_bytes: _Optional[int] = ..., sha256: _Optional[str] = ...) -> None: ...

class SnapshotArtifactInfo(_message.Message):
    __slots__ = ("kind", "schema", "table", "pipeline_id", "from_position", "to_position", "parts")
    KIND_FIELD_NUMBER: _ClassVar[int]
    SCHEMA_FIELD_NUMBER: _ClassVar[int]
    TABLE_FIELD_NUMBER: _ClassVar[int]
    PIPELINE_ID_FIELD_NUMBER: _ClassVar[int]
    FROM_POSITION_FIELD_NUMBER: _ClassVar[int]
    TO_POSITION_FIELD_NUMBER: _ClassVar[int]
    PARTS_FIELD_NUMBER: _ClassVar[int]
    kind: str
    schema: str
    table: str
    pipeline_id: str
    from_position: str
    to_position: str
    parts: _containers.RepeatedCompositeFieldContainer[SnapshotPartInfo]
    def __init__(self, kind: _Optional[str] = ..., schema: _Optional[str] = ..., table: _Optional[str] = ..., pipeline_id: _Optional[str] = ..., from_position: _Optional[str] = ..., to_position: _Optional[str] = ..., parts: _Optional[_Iterable[_Union[SnapshotPartInfo, _Mapping]]] = ...) -> None: ...

class InspectSnapshotResponse(_message.Message):
    __slots__ = ("snapshot", "layout", "artifacts")
    SNAPSHOT_FIELD_NUMBER: _ClassVar[int]
    LAYOUT_FIELD_NUMBER: _ClassVar[int]
    ARTIFACTS_FIELD_NUMBER: _ClassVar[int]
    snapshot: SnapshotInfo
    layout: int
    artifacts: _containers.RepeatedCompositeFieldContainer[SnapshotArtifactInfo]
    def __init__(self, snapshot: _Optional[_Union[SnapshotInfo, _Mapping]] = ..., layout: _Optional[int] = ..., artifacts: _Optional[_Iterable[_Union[SnapshotArtifactInfo, _Mapping]]] = ...) -> None: ...

class RestoreSnapshotRequest(_message.Message):
    __slots__ = ("snapshot_id", "confirm")
    SNAPSHOT_ID_FIELD_NUMBER: _ClassVar[int]
    CONFIRM_FIELD_NUMBER: _ClassVar[int]
    snapshot_id: str
    confirm: bool
    def __init__(self, snapshot_id: _Optional[str] = ..., confirm: _Optional[bool] = ...) -> None: ...

class RestoreSnapshotResponse(_message.Message):
    __slots__ = ("accepted", "message")
    ACCEPTED_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    accepted: bool
    message: str
    def __init__(self, accepted: _Optional[bool] = ..., message: _Optional[str] = ...) -> None: ...

class DeleteSnapshotRequest(_message.Message):
    __slots__ = ("snapshot_id",)
    SNAPSHOT_ID_FIELD_NUMBER: _ClassVar[int]
    snapshot_id: str
    def __init__(self, snapshot_id: _Optional[str] = ...) -> None: ...

class DeleteSnapshotResponse(_message.Message):
    __slots__ = ("deleted",)
    DELETED_FIELD_NUMBER: _ClassVar[int]
    deleted: bool
    def __init__(self, deleted: _Optional[bool] = ...) -> None: ...

class PruneSnapshotsRequest(_message.Message):
    __slots__ = ("keep", "table")
    KEEP_FIELD_NUMBER: _ClassVar[int]
    TABLE_FIELD_NUMBER: _ClassVar[int]
    keep: int
    table: str
    def __init__(self, keep: _Optional[int] = ..., table: _Optional[str] = ...) -> None: ...

class PruneSnapshotsResponse(_message.Message):
    __slots__ = ("deleted_count", "deleted_ids")
    DELETED_COUNT_FIELD_NUMBER: _ClassVar[int]
    DELETED_IDS_FIELD_NUMBER: _ClassVar[int]
    deleted_count: int
    deleted_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, deleted_count: _Optional[int] = ..., deleted_ids: _Optional[_Iterable[str]] = ...) -> None: ...

class DeadLetterEntry(_message.Message):
    __slots__ = ("pipeline_id", "schema", "table", "action", "position", "error", "error_type", "written_at", "change_json")
    PIPELINE_ID_FIELD_NUMBER: _ClassVar[int]
    SCHEMA_FIELD_NUMBER: _ClassVar[int]
    TABLE_FIELD_NUMBER: _ClassVar[int]
    ACTION_FIELD_NUMBER: _ClassVar[int]
    POSITION_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    ERROR_TYPE_FIELD_NUMBER: _ClassVar[int]
    WRITTEN_AT_FIELD_NUMBER: _ClassVar[int]
    CHANGE_JSON_FIELD_NUMBER: _ClassVar[int]
    pipeline_id: str
    schema: str
    table: str
    action: str
    position: str
    error: str
    error_type: str
    written_at: int
    change_json: str
    def __init__(self, pipeline_id: _Optional[str] = ..., schema: _Optional[str] = ..., table: _Optional[str] = ..., action: _Optional[str] = ..., position: _Optional[str] = ..., error: _Optional[str] = ..., error_type: _Optional[str] = ..., written_at: _Optional[int] = ..., change_json: _Optional[str] = ...) -> None: ...

class ListDeadLettersRequest(_message.Message):
    __slots__ = ("pipeline_id", "limit")
    PIPELINE_ID_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    pipeline_id: str
    limit: int
    def __init__(self, pipeline_id: _Optional[str] = ..., limit: _Optional[int] = ...) -> None: ...

class ListDeadLettersResponse(_message.Message):
    __slots__ = ("entries",)
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    entries: _containers.RepeatedCompositeFieldContainer[DeadLetterEntry]
    def __init__(self, entries: _Optional[_Iterable[_Union[DeadLetterEntry, _Mapping]]] = ...) -> None: ...

class ReplayDeadLettersRequest(_message.Message):
    __slots__ = ("pipeline_id",)
    PIPELINE_ID_FIELD_NUMBER: _ClassVar[int]
    pipeline_id: str
    def __init__(self, pipeline_id: _Optional[str] = ...) -> None: ...

class ReplayDeadLettersResponse(_message.Message):
    __slots__ = ("replayed", "message")
    REPLAYED_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    replayed: int
    message: str
    def __init__(self, replayed: _Optional[int] = ..., message: _Optional[str] = ...) -> None: ...

class PurgeDeadLettersRequest(_message.Message):
    __slots__ = ("pipeline_id",)
    PIPELINE_ID_FIELD_NUMBER: _ClassVar[int]
    pipeline_id: str
    def __init__(self, pipeline_id: _Optional[str] = ...) -> None: ...

class PurgeDeadLettersResponse(_message.Message):
    __slots__ = ("purged",)
    PURGED_FIELD_NUMBER: _ClassVar[int]
    purged: int
    def __init__(self, purged: _Optional[int] = ...) -> None: ...

class StartReplayRequest(_message.Message):
    __slots__ = ("snapshot_id", "target_pipeline_id", "speed", "tables", "timestamp_field", "confirm")
    SNAPSHOT_ID_FIELD_NUMBER: _ClassVar[int]
    TARGET_PIPELINE_ID_FIELD_NUMBER: _ClassVar[int]
    SPEED_FIELD_NUMBER: _ClassVar[int]
    TABLES_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_FIELD_FIELD_NUMBER: _ClassVar[int]
    CONFIRM_FIELD_NUMBER: _ClassVar[int]
    snapshot_id: str
    target_pipeline_id: str
    speed: str
    tables: _containers.RepeatedScalarFieldContainer[str]
    timestamp_field: str
    confirm: bool
    def __init__(self, snapshot_id: _Optional[str] = ..., target_pipeline_id: _Optional[str] = ..., speed: _Optional[str] = ..., tables: _Optional[_Iterable[str]] = ..., timestamp_field: _Optional[str] = ..., confirm: _Optional[bool] = ...) -> None: ...

class StartReplayResponse(_message.Message):
    __slots__ = ("replay_id",)
    REPLAY_ID_FIELD_NUMBER: _ClassVar[int]
    replay_id: str
    def __init__(self, replay_id: _Optional[str] = ...) -> None: ...

class GetReplayStatusRequest(_message.Message):
    __slots__ = ("replay_id",)
    REPLAY_ID_FIELD_NUMBER: _ClassVar[int]
    replay_id: str
    def __init__(self, replay_id: _Optional[str] = ...) -> None: ...

class GetReplayStatusResponse(_message.Message):
    __slots__ = ("replay_id", "state", "rows_replayed", "elapsed_seconds", "current_table", "tables_completed", "error", "snapshot_id")
    REPLAY_ID_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    ROWS_REPLAYED_FIELD_NUMBER: _ClassVar[int]
    ELAPSED_SECONDS_FIELD_NUMBER: _ClassVar[int]
    CURRENT_TABLE_FIELD_NUMBER: _ClassVar[int]
    TABLES_COMPLETED_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_ID_FIELD_NUMBER: _ClassVar[int]
    replay_id: str
    state: str
    rows_replayed: int
    elapsed_seconds: float
    current_table: str
    tables_completed: int
    error: str
    snapshot_id: str
    def __init__(self, replay_id: _Optional[str] = ..., state: _Optional[str] = ..., rows_replayed: _Optional[int] = ..., elapsed_seconds: _Optional[float] = ..., current_table: _Optional[str] = ..., tables_completed: _Optional[int] = ..., error: _Optional[str] = ..., snapshot_id: _Optional[str] = ...) -> None: ...

class StopReplayRequest(_message.Message):
    __slots__ = ("replay_id",)
    REPLAY_ID_FIELD_NUMBER: _ClassVar[int]
    replay_id: str
    def __init__(self, replay_id: _Optional[str] = ...) -> None: ...

class StopReplayResponse(_message.Message):
    __slots__ = ("stopped",)
    STOPPED_FIELD_NUMBER: _ClassVar[int]
    stopped: bool
    def __init__(self, stopped: _Optional[bool] = ...) -> None: ...

class DrainReplicationRequest(_message.Message):
    __slots__ = ("schema", "table", "drain_deadline_seconds")
    SCHEMA_FIELD_NUMBER: _ClassVar[int]
    TABLE_FIELD_NUMBER: _ClassVar[int]
    DRAIN_DEADLINE_SECONDS_FIELD_NUMBER: _ClassVar[int]
    schema: str
    table: str
    drain_deadline_seconds: int
    def __init__(self, schema: _Optional[str] = ..., table: _Optional[str] = ..., drain_deadline_seconds: _Optional[int] = ...) -> None: ...

class DrainReplicationResponse(_message.Message):
    __slots__ = ("accepted", "message", "drained_targets")
    ACCEPTED_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    DRAINED_TARGETS_FIELD_NUMBER: _ClassVar[int]
    accepted: bool
    message: str
    drained_targets: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, accepted: _Optional[bool] = ..., message: _Optional[str] = ..., drained_targets: _Optional[_Iterable[str]] = ...) -> None: ...

class ReloadConfigRequest(_message.Message):
    __slots__ = ("dry_run",)
    DRY_RUN_FIELD_NUMBER: _ClassVar[int]
    dry_run: bool
    def __init__(self, dry_run: _Optional[bool] = ...) -> None: ...

class ConfigChange(_message.Message):
    __slots__ = ("kind", "id", "detail")
    KIND_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    kind: str
    id: str
    detail: str
    def __init__(self, kind: _Optional[str] = ..., id: _Optional[str] = ..., detail: _Optional[str] = ...) -> None: ...

class ReloadConfigResponse(_message.Message):
    __slots__ = ("accepted", "message", "generation", "changes", "errors")
    ACCEPTED_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    CHANGES_FIELD_NUMBER: _ClassVar[int]
    ERRORS_FIELD_NUMBER: _ClassVar[int]
    accepted: bool
    message: str
    generation: int
    changes: _containers.RepeatedCompositeFieldContainer[ConfigChange]
    errors: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, accepted: _Optional[bool] = ..., message: _Optional[str] = ..., generation: _Optional[int] = ..., changes: _Optional[_Iterable[_Union[ConfigChange, _Mapping]]] = ..., errors: _Optional[_Iterable[str]] = ...) -> None: ...

class VerifyTableRequest(_message.Message):
    __slots__ = ("schema", "table", "pipeline_id", "max_keys", "timeout_seconds")
    SCHEMA_FIELD_NUMBER: _ClassVar[int]
    TABLE_FIELD_NUMBER: _ClassVar[int]
    PIPELINE_ID_FIELD_NUMBER: _ClassVar[int]
    MAX_KEYS_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_SECONDS_FIELD_NUMBER: _ClassVar[int]
    schema: str
    table: str
    pipeline_id: str
    max_keys: int
    timeout_seconds: int
    def __init__(self, schema: _Optional[str] = ..., table: _Optional[str] = ..., pipeline_id: _Optional[str] = ..., max_keys: _Optional[int] = ..., timeout_seconds: _Optional[int] = ...) -> None: ...

class VerifyTableResponse(_message.Message):
    __slots__ = ("match", "pipeline_id", "position", "source_rows", "target_rows", "missing_keys", "extra_keys", "different_keys", "missing_count", "extra_count", "different_count", "message")
    MATCH_FIELD_NUMBER: _ClassVar[int]
    PIPELINE_ID_FIELD_NUMBER: _ClassVar[int]
    POSITION_FIELD_NUMBER: _ClassVar[int]
    SOURCE_ROWS_FIELD_NUMBER: _ClassVar[int]
    TARGET_ROWS_FIELD_NUMBER: _ClassVar[int]
    MISSING_KEYS_FIELD_NUMBER: _ClassVar[int]
    EXTRA_KEYS_FIELD_NUMBER: _ClassVar[int]
    DIFFERENT_KEYS_FIELD_NUMBER: _ClassVar[int]
    MISSING_COUNT_FIELD_NUMBER: _ClassVar[int]
    EXTRA_COUNT_FIELD_NUMBER: _ClassVar[int]
    DIFFERENT_COUNT_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    match: bool
    pipeline_id: str
    position: str
    source_rows: int
    target_rows: int
    missing_keys: _containers.RepeatedScalarFieldContainer[str]
    extra_keys: _containers.RepeatedScalarFieldContainer[str]
    different_keys: _containers.RepeatedScalarFieldContainer[str]
    missing_count: int
    extra_count: int
    different_count: int
    message: str
    def __init__(self, match: _Optional[bool] = ..., pipeline_id: _Optional[str] = ..., position: _Optional[str] = ..., source_rows: _Optional[int] = ..., target_rows: _Optional[int] = ..., missing_keys: _Optional[_Iterable[str]] = ..., extra_keys: _Optional[_Iterable[str]] = ..., different_keys: _Optional[_Iterable[str]] = ..., missing_count: _Optional[int] = ..., extra_count: _Optional[int] = ..., different_count: _Optional[int] = ..., message: _Optional[str] = ...) -> None: ...

class BackfillTableRequest(_message.Message):
    __slots__ = ("source_id", "schema", "table", "where", "chunk_rows", "wait_seconds")
    SOURCE_ID_FIELD_NUMBER: _ClassVar[int]
    SCHEMA_FIELD_NUMBER: _ClassVar[int]
    TABLE_FIELD_NUMBER: _ClassVar[int]
    WHERE_FIELD_NUMBER: _ClassVar[int]
    CHUNK_ROWS_FIELD_NUMBER: _ClassVar[int]
    WAIT_SECONDS_FIELD_NUMBER: _ClassVar[int]
    source_id: str
    schema: str
    table: str
    where: str
    chunk_rows: int
    wait_seconds: int
    def __init__(self, source_id: _Optional[str] = ..., schema: _Optional[str] = ..., table: _Optional[str] = ..., where: _Optional[str] = ..., chunk_rows: _Optional[int] = ..., wait_seconds: _Optional[int] = ...) -> None: ...

class BackfillTableResponse(_message.Message):
    __slots__ = ("table", "chunks", "rows_read", "rows_applied", "rows_dropped", "done", "error", "message", "status", "rows_removed")
    TABLE_FIELD_NUMBER: _ClassVar[int]
    CHUNKS_FIELD_NUMBER: _ClassVar[int]
    ROWS_READ_FIELD_NUMBER: _ClassVar[int]
    ROWS_APPLIED_FIELD_NUMBER: _ClassVar[int]
    ROWS_DROPPED_FIELD_NUMBER: _ClassVar[int]
    DONE_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    ROWS_REMOVED_FIELD_NUMBER: _ClassVar[int]
    table: str
    chunks: int
    rows_read: int
    rows_applied: int
    rows_dropped: int
    done: bool
    error: str
    message: str
    status: BackfillStatus
    rows_removed: int
    def __init__(self, table: _Optional[str] = ..., chunks: _Optional[int] = ..., rows_read: _Optional[int] = ..., rows_applied: _Optional[int] = ..., rows_dropped: _Optional[int] = ..., done: _Optional[bool] = ..., error: _Optional[str] = ..., message: _Optional[str] = ..., status: _Optional[_Union[BackfillStatus, _Mapping]] = ..., rows_removed: _Optional[int] = ...) -> None: ...
