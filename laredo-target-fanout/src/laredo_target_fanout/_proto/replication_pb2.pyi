from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class SyncMode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    SYNC_MODE_UNSPECIFIED: _ClassVar[SyncMode]
    SYNC_MODE_FULL_SNAPSHOT: _ClassVar[SyncMode]
    SYNC_MODE_DELTA: _ClassVar[SyncMode]
    SYNC_MODE_DELTA_FROM_SNAPSHOT: _ClassVar[SyncMode]

class Action(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ACTION_UNSPECIFIED: _ClassVar[Action]
    ACTION_INSERT: _ClassVar[Action]
    ACTION_UPDATE: _ClassVar[Action]
    ACTION_DELETE: _ClassVar[Action]
    ACTION_TRUNCATE: _ClassVar[Action]
    ACTION_SCHEMA_CHANGE: _ClassVar[Action]
SYNC_MODE_UNSPECIFIED: SyncMode
SYNC_MODE_FULL_SNAPSHOT: SyncMode
SYNC_MODE_DELTA: SyncMode
SYNC_MODE_DELTA_FROM_SNAPSHOT: SyncMode
ACTION_UNSPECIFIED: Action
ACTION_INSERT: Action
ACTION_UPDATE: Action
ACTION_DELETE: Action
ACTION_TRUNCATE: Action
ACTION_SCHEMA_CHANGE: Action

class TypedValue(_message.Message):
    __slots__ = ("json",)
    JSON_FIELD_NUMBER: _ClassVar[int]
    json: bytes
    def __init__(self, json: _Optional[bytes] = ...) -> None: ...

class ValueList(_message.Message):
    __slots__ = ("values",)
    VALUES_FIELD_NUMBER: _ClassVar[int]
    values: _containers.RepeatedCompositeFieldContainer[TypedValue]
    def __init__(self, values: _Optional[_Iterable[_Union[TypedValue, _Mapping]]] = ...) -> None: ...

class FieldPredicate(_message.Message):
    __slots__ = ("field", "equals", "prefix")
    FIELD_FIELD_NUMBER: _ClassVar[int]
    EQUALS_FIELD_NUMBER: _ClassVar[int]
    PREFIX_FIELD_NUMBER: _ClassVar[int]
    IN_FIELD_NUMBER: _ClassVar[int]
    field: str
    equals: TypedValue
    prefix: str
    def __init__(self, field: _Optional[str] = ..., equals: _Optional[_Union[TypedValue, _Mapping]] = ..., prefix: _Optional[str] = ..., **kwargs) -> None: ...

class SyncRequest(_message.Message):
    __slots__ = ("schema", "table", "last_known_sequence", "last_snapshot_id", "client_id", "last_known_source_position", "filters", "journal_id", "max_batch", "applied_at_position")
    SCHEMA_FIELD_NUMBER: _ClassVar[int]
    TABLE_FIELD_NUMBER: _ClassVar[int]
    LAST_KNOWN_SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    LAST_SNAPSHOT_ID_FIELD_NUMBER: _ClassVar[int]
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    LAST_KNOWN_SOURCE_POSITION_FIELD_NUMBER: _ClassVar[int]
    FILTERS_FIELD_NUMBER: _ClassVar[int]
    JOURNAL_ID_FIELD_NUMBER: _ClassVar[int]
    MAX_BATCH_FIELD_NUMBER: _ClassVar[int]
    APPLIED_AT_POSITION_FIELD_NUMBER: _ClassVar[int]
    schema: str
    table: str
    last_known_sequence: int
    last_snapshot_id: str
    client_id: str
    last_known_source_position: str
    filters: _containers.RepeatedCompositeFieldContainer[FieldPredicate]
    journal_id: str
    max_batch: int
    applied_at_position: int
    def __init__(self, schema: _Optional[str] = ..., table: _Optional[str] = ..., last_known_sequence: _Optional[int] = ..., last_snapshot_id: _Optional[str] = ..., client_id: _Optional[str] = ..., last_known_source_position: _Optional[str] = ..., filters: _Optional[_Iterable[_Union[FieldPredicate, _Mapping]]] = ..., journal_id: _Optional[str] = ..., max_batch: _Optional[int] = ..., applied_at_position: _Optional[int] = ...) -> None: ...

class Column(_message.Message):
    __slots__ = ("name", "type", "nullable", "primary_key", "primary_key_ordinal", "ordinal_position", "type_oid")
    NAME_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    NULLABLE_FIELD_NUMBER: _ClassVar[int]
    PRIMARY_KEY_FIELD_NUMBER: _ClassVar[int]
    PRIMARY_KEY_ORDINAL_FIELD_NUMBER: _ClassVar[int]
    ORDINAL_POSITION_FIELD_NUMBER: _ClassVar[int]
    TYPE_OID_FIELD_NUMBER: _ClassVar[int]
    name: str
    type: str
    nullable: bool
    primary_key: bool
    primary_key_ordinal: int
    ordinal_position: int
    type_oid: int
    def __init__(self, name: _Optional[str] = ..., type: _Optional[str] = ..., nullable: _Optional[bool] = ..., primary_key: _Optional[bool] = ..., primary_key_ordinal: _Optional[int] = ..., ordinal_position: _Optional[int] = ..., type_oid: _Optional[int] = ...) -> None: ...

class Handshake(_message.Message):
    __slots__ = ("mode", "server_current_sequence", "journal_oldest_sequence", "resume_from_sequence", "columns", "snapshot_id", "journal_id", "heartbeat_interval_ms", "client_id")
    MODE_FIELD_NUMBER: _ClassVar[int]
    SERVER_CURRENT_SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    JOURNAL_OLDEST_SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    RESUME_FROM_SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    COLUMNS_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_ID_FIELD_NUMBER: _ClassVar[int]
    JOURNAL_ID_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_INTERVAL_MS_FIELD_NUMBER: _ClassVar[int]
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    mode: SyncMode
    server_current_sequence: int
    journal_oldest_sequence: int
    resume_from_sequence: int
    columns: _containers.RepeatedCompositeFieldContainer[Column]
    snapshot_id: str
    journal_id: str
    heartbeat_interval_ms: int
    client_id: str
    def __init__(self, mode: _Optional[_Union[SyncMode, str]] = ..., server_current_sequence: _Optional[int] = ..., journal_oldest_sequence: _Optional[int] = ..., resume_from_sequence: _Optional[int] = ..., columns: _Optional[_Iterable[_Union[Column, _Mapping]]] = ..., snapshot_id: _Optional[str] = ..., journal_id: _Optional[str] = ..., heartbeat_interval_ms: _Optional[int] = ..., client_id: _Optional[str] = ...) -> None: ...

class SnapshotBegin(_message.Message):
    __slots__ = ("snapshot_id", "sequence", "row_count", "source_position", "applied_at_position")
    SNAPSHOT_ID_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    ROW_COUNT_FIELD_NUMBER: _ClassVar[int]
    SOURCE_POSITION_FIELD_NUMBER: _ClassVar[int]
    APPLIED_AT_POSITION_FIELD_NUMBER: _ClassVar[int]
    snapshot_id: str
    sequence: int
    row_count: int
    source_position: str
    applied_at_position: int
    def __init__(self, snapshot_id: _Optional[str] = ..., sequence: _Optional[int] = ..., row_count: _Optional[int] = ..., source_position: _Optional[str] = ..., applied_at_position: _Optional[int] = ...) -> None: ...

class SnapshotRows(_message.Message):
    __slots__ = ("rows",)
    ROWS_FIELD_NUMBER: _ClassVar[int]
    rows: _containers.RepeatedScalarFieldContainer[bytes]
    def __init__(self, rows: _Optional[_Iterable[bytes]] = ...) -> None: ...

class SnapshotEnd(_message.Message):
    __slots__ = ("sequence", "rows_sent")
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    ROWS_SENT_FIELD_NUMBER: _ClassVar[int]
    sequence: int
    rows_sent: int
    def __init__(self, sequence: _Optional[int] = ..., rows_sent: _Optional[int] = ...) -> None: ...

class JournalEntry(_message.Message):
    __slots__ = ("sequence", "source_position", "timestamp_unix_us", "action", "old_values", "new_values", "old_columns", "new_columns")
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    SOURCE_POSITION_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_UNIX_US_FIELD_NUMBER: _ClassVar[int]
    ACTION_FIELD_NUMBER: _ClassVar[int]
    OLD_VALUES_FIELD_NUMBER: _ClassVar[int]
    NEW_VALUES_FIELD_NUMBER: _ClassVar[int]
    OLD_COLUMNS_FIELD_NUMBER: _ClassVar[int]
    NEW_COLUMNS_FIELD_NUMBER: _ClassVar[int]
    sequence: int
    source_position: str
    timestamp_unix_us: int
    action: Action
    old_values: bytes
    new_values: bytes
    old_columns: _containers.RepeatedCompositeFieldContainer[Column]
    new_columns: _containers.RepeatedCompositeFieldContainer[Column]
    def __init__(self, sequence: _Optional[int] = ..., source_position: _Optional[str] = ..., timestamp_unix_us: _Optional[int] = ..., action: _Optional[_Union[Action, str]] = ..., old_values: _Optional[bytes] = ..., new_values: _Optional[bytes] = ..., old_columns: _Optional[_Iterable[_Union[Column, _Mapping]]] = ..., new_columns: _Optional[_Iterable[_Union[Column, _Mapping]]] = ...) -> None: ...

class JournalBatch(_message.Message):
    __slots__ = ("after_sequence", "through_sequence", "entries")
    AFTER_SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    THROUGH_SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    after_sequence: int
    through_sequence: int
    entries: _containers.RepeatedCompositeFieldContainer[JournalEntry]
    def __init__(self, after_sequence: _Optional[int] = ..., through_sequence: _Optional[int] = ..., entries: _Optional[_Iterable[_Union[JournalEntry, _Mapping]]] = ...) -> None: ...

class Heartbeat(_message.Message):
    __slots__ = ("current_sequence", "server_time_unix_ms")
    CURRENT_SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    SERVER_TIME_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    current_sequence: int
    server_time_unix_ms: int
    def __init__(self, current_sequence: _Optional[int] = ..., server_time_unix_ms: _Optional[int] = ...) -> None: ...

class GoAway(_message.Message):
    __slots__ = ("reason", "drain_deadline_unix_ms")
    REASON_FIELD_NUMBER: _ClassVar[int]
    DRAIN_DEADLINE_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    reason: str
    drain_deadline_unix_ms: int
    def __init__(self, reason: _Optional[str] = ..., drain_deadline_unix_ms: _Optional[int] = ...) -> None: ...

class Resync(_message.Message):
    __slots__ = ("reason", "journal_oldest_sequence")
    REASON_FIELD_NUMBER: _ClassVar[int]
    JOURNAL_OLDEST_SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    reason: str
    journal_oldest_sequence: int
    def __init__(self, reason: _Optional[str] = ..., journal_oldest_sequence: _Optional[int] = ...) -> None: ...

class SyncResponse(_message.Message):
    __slots__ = ("handshake", "snapshot_begin", "snapshot_rows", "snapshot_end", "journal", "heartbeat", "go_away", "resync")
    HANDSHAKE_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_BEGIN_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_ROWS_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_END_FIELD_NUMBER: _ClassVar[int]
    JOURNAL_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_FIELD_NUMBER: _ClassVar[int]
    GO_AWAY_FIELD_NUMBER: _ClassVar[int]
    RESYNC_FIELD_NUMBER: _ClassVar[int]
    handshake: Handshake
    snapshot_begin: SnapshotBegin
    snapshot_rows: SnapshotRows
    snapshot_end: SnapshotEnd
    journal: JournalBatch
    heartbeat: Heartbeat
    go_away: GoAway
    resync: Resync
    def __init__(self, handshake: _Optional[_Union[Handshake, _Mapping]] = ..., snapshot_begin: _Optional[_Union[SnapshotBegin, _Mapping]] = ..., snapshot_rows: _Optional[_Union[SnapshotRows, _Mapping]] = ..., snapshot_end: _Optional[_Union[SnapshotEnd, _Mapping]] = ..., journal: _Optional[_Union[JournalBatch, _Mapping]] = ..., heartbeat: _Optional[_Union[Heartbeat, _Mapping]] = ..., go_away: _Optional[_Union[GoAway, _Mapping]] = ..., resync: _Optional[_Union[Resync, _Mapping]] = ...) -> None: ...

class ListSnapshotsRequest(_message.Message):
    __slots__ = ("schema", "table", "limit")
    SCHEMA_FIELD_NUMBER: _ClassVar[int]
    TABLE_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    schema: str
    table: str
    limit: int
    def __init__(self, schema: _Optional[str] = ..., table: _Optional[str] = ..., limit: _Optional[int] = ...) -> None: ...

class ReplicationSnapshotInfo(_message.Message):
    __slots__ = ("snapshot_id", "sequence", "source_position", "row_count", "size_bytes", "created_at_unix_ms", "persisted")
    SNAPSHOT_ID_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    SOURCE_POSITION_FIELD_NUMBER: _ClassVar[int]
    ROW_COUNT_FIELD_NUMBER: _ClassVar[int]
    SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    PERSISTED_FIELD_NUMBER: _ClassVar[int]
    snapshot_id: str
    sequence: int
    source_position: str
    row_count: int
    size_bytes: int
    created_at_unix_ms: int
    persisted: bool
    def __init__(self, snapshot_id: _Optional[str] = ..., sequence: _Optional[int] = ..., source_position: _Optional[str] = ..., row_count: _Optional[int] = ..., size_bytes: _Optional[int] = ..., created_at_unix_ms: _Optional[int] = ..., persisted: _Optional[bool] = ...) -> None: ...

class ListSnapshotsResponse(_message.Message):
    __slots__ = ("snapshots",)
    SNAPSHOTS_FIELD_NUMBER: _ClassVar[int]
    snapshots: _containers.RepeatedCompositeFieldContainer[ReplicationSnapshotInfo]
    def __init__(self, snapshots: _Optional[_Iterable[_Union[ReplicationSnapshotInfo, _Mapping]]] = ...) -> None: ...

class FetchSnapshotRequest(_message.Message):
    __slots__ = ("schema", "table", "snapshot_id")
    SCHEMA_FIELD_NUMBER: _ClassVar[int]
    TABLE_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_ID_FIELD_NUMBER: _ClassVar[int]
    schema: str
    table: str
    snapshot_id: str
    def __init__(self, schema: _Optional[str] = ..., table: _Optional[str] = ..., snapshot_id: _Optional[str] = ...) -> None: ...

class GetReplicationStatusRequest(_message.Message):
    __slots__ = ("schema", "table")
    SCHEMA_FIELD_NUMBER: _ClassVar[int]
    TABLE_FIELD_NUMBER: _ClassVar[int]
    schema: str
    table: str
    def __init__(self, schema: _Optional[str] = ..., table: _Optional[str] = ...) -> None: ...

class ConnectedClient(_message.Message):
    __slots__ = ("client_id", "current_sequence", "behind_count", "buffer_depth", "connected_at_unix_ms", "state", "mode", "peer")
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    CURRENT_SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    BEHIND_COUNT_FIELD_NUMBER: _ClassVar[int]
    BUFFER_DEPTH_FIELD_NUMBER: _ClassVar[int]
    CONNECTED_AT_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    PEER_FIELD_NUMBER: _ClassVar[int]
    client_id: str
    current_sequence: int
    behind_count: int
    buffer_depth: int
    connected_at_unix_ms: int
    state: str
    mode: SyncMode
    peer: str
    def __init__(self, client_id: _Optional[str] = ..., current_sequence: _Optional[int] = ..., behind_count: _Optional[int] = ..., buffer_depth: _Optional[int] = ..., connected_at_unix_ms: _Optional[int] = ..., state: _Optional[str] = ..., mode: _Optional[_Union[SyncMode, str]] = ..., peer: _Optional[str] = ...) -> None: ...

class GetReplicationStatusResponse(_message.Message):
    __slots__ = ("current_sequence", "journal_oldest_sequence", "journal_entry_count", "row_count", "connected_clients", "clients", "latest_snapshot", "journal_id", "draining", "schema", "table")
    CURRENT_SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    JOURNAL_OLDEST_SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    JOURNAL_ENTRY_COUNT_FIELD_NUMBER: _ClassVar[int]
    ROW_COUNT_FIELD_NUMBER: _ClassVar[int]
    CONNECTED_CLIENTS_FIELD_NUMBER: _ClassVar[int]
    CLIENTS_FIELD_NUMBER: _ClassVar[int]
    LATEST_SNAPSHOT_FIELD_NUMBER: _ClassVar[int]
    JOURNAL_ID_FIELD_NUMBER: _ClassVar[int]
    DRAINING_FIELD_NUMBER: _ClassVar[int]
    SCHEMA_FIELD_NUMBER: _ClassVar[int]
    TABLE_FIELD_NUMBER: _ClassVar[int]
    current_sequence: int
    journal_oldest_sequence: int
    journal_entry_count: int
    row_count: int
    connected_clients: int
    clients: _containers.RepeatedCompositeFieldContainer[ConnectedClient]
    latest_snapshot: ReplicationSnapshotInfo
    journal_id: str
    draining: bool
    schema: str
    table: str
    def __init__(self, current_sequence: _Optional[int] = ..., journal_oldest_sequence: _Optional[int] = ..., journal_entry_count: _Optional[int] = ..., row_count: _Optional[int] = ..., connected_clients: _Optional[int] = ..., clients: _Optional[_Iterable[_Union[ConnectedClient, _Mapping]]] = ..., latest_snapshot: _Optional[_Union[ReplicationSnapshotInfo, _Mapping]] = ..., journal_id: _Optional[str] = ..., draining: _Optional[bool] = ..., schema: _Optional[str] = ..., table: _Optional[str] = ...) -> None: ...
