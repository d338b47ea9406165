from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Row(_message.Message):
    __slots__ = ("json",)
    JSON_FIELD_NUMBER: _ClassVar[int]
    json: str
    def __init__(self, json: _Optional[str] = ...) -> None: ...

class TableRef(_message.Message):
    __slots__ = ("schema", "table", "pipeline_id")
    SCHEMA_FIELD_NUMBER: _ClassVar[int]
    TABLE_FIELD_NUMBER: _ClassVar[int]
    PIPELINE_ID_FIELD_NUMBER: _ClassVar[int]
    schema: str
    table: str
    pipeline_id: str
    def __init__(self, schema: _Optional[str] = ..., table: _Optional[str] = ..., pipeline_id: _Optional[str] = ...) -> None: ...

class LookupRequest(_message.Message):
    __slots__ = ("table", "index_name", "key_values")
    TABLE_FIELD_NUMBER: _ClassVar[int]
    INDEX_NAME_FIELD_NUMBER: _ClassVar[int]
    KEY_VALUES_FIELD_NUMBER: _ClassVar[int]
    table: TableRef
    index_name: str
    key_values: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, table: _Optional[_Union[TableRef, _Mapping]] = ..., index_name: _Optional[str] = ..., key_values: _Optional[_Iterable[str]] = ...) -> None: ...

class LookupResponse(_message.Message):
    __slots__ = ("found", "row", "pipeline_id", "key_fields")
    FOUND_FIELD_NUMBER: _ClassVar[int]
    ROW_FIELD_NUMBER: _ClassVar[int]
    PIPELINE_ID_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELDS_FIELD_NUMBER: _ClassVar[int]
    found: bool
    row: Row
    pipeline_id: str
    key_fields: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, found: _Optional[bool] = ..., row: _Optional[_Union[Row, _Mapping]] = ..., pipeline_id: _Optional[str] = ..., key_fields: _Optional[_Iterable[str]] = ...) -> None: ...

class LookupAllRequest(_message.Message):
    __slots__ = ("table", "index_name", "key_values")
    TABLE_FIELD_NUMBER: _ClassVar[int]
    INDEX_NAME_FIELD_NUMBER: _ClassVar[int]
    KEY_VALUES_FIELD_NUMBER: _ClassVar[int]
    table: TableRef
    index_name: str
    key_values: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, table: _Optional[_Union[TableRef, _Mapping]] = ..., index_name: _Optional[str] = ..., key_values: _Optional[_Iterable[str]] = ...) -> None: ...

class LookupAllResponse(_message.Message):
    __slots__ = ("rows",)
    ROWS_FIELD_NUMBER: _ClassVar[int]
    rows: _containers.RepeatedCompositeFieldContainer[Row]
    def __init__(self, rows: _Optional[_Iterable[_Union[Row, _Mapping]]] = ...) -> None: ...

class GetRowRequest(_message.Message):
    __slots__ = ("table", "primary_key")
    TABLE_FIELD_NUMBER: _ClassVar[int]
    PRIMARY_KEY_FIELD_NUMBER: _ClassVar[int]
    table: TableRef
    primary_key: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, table: _Optional[_Union[TableRef, _Mapping]] = ..., primary_key: _Optional[_Iterable[str]] = ...) -> None: ...

class GetRowResponse(_message.Message):
    __slots__ = ("found", "row", "pipeline_id", "key_fields")
    FOUND_FIELD_NUMBER: _ClassVar[int]
    ROW_FIELD_NUMBER: _ClassVar[int]
    PIPELINE_ID_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELDS_FIELD_NUMBER: _ClassVar[int]
    found: bool
    row: Row
    pipeline_id: str
    key_fields: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, found: _Optional[bool] = ..., row: _Optional[_Union[Row, _Mapping]] = ..., pipeline_id: _Optional[str] = ..., key_fields: _Optional[_Iterable[str]] = ...) -> None: ...

class ListRowsRequest(_message.Message):
    __slots__ = ("table", "page_size", "page_token")
    TABLE_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    table: TableRef
    page_size: int
    page_token: str
    def __init__(self, table: _Optional[_Union[TableRef, _Mapping]] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListRowsResponse(_message.Message):
    __slots__ = ("rows", "next_page_token", "total_count")
    ROWS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    TOTAL_COUNT_FIELD_NUMBER: _ClassVar[int]
    rows: _containers.RepeatedCompositeFieldContainer[Row]
    next_page_token: str
    total_count: int
    def __init__(self, rows: _Optional[_Iterable[_Union[Row, _Mapping]]] = ..., next_page_token: _Optional[str] = ..., total_count: _Optional[int] = ...) -> None: ...

class CountRowsRequest(_message.Message):
    __slots__ = ("table",)
    TABLE_FIELD_NUMBER: _ClassVar[int]
    table: TableRef
    def __init__(self, table: _Optional[_Union[TableRef, _Mapping]] = ...) -> None: ...

class CountRowsResponse(_message.Message):
    __slots__ = ("count",)
    COUNT_FIELD_NUMBER: _ClassVar[int]
    count: int
    def __init__(self, count: _Optional[int] = ...) -> None: ...

class SubscribeRequest(_message.Message):
    __slots__ = ("table", "replay_existing")
    TABLE_FIELD_NUMBER: _ClassVar[int]
    REPLAY_EXISTING_FIELD_NUMBER: _ClassVar[int]
    table: TableRef
    replay_existing: bool
    def __init__(self, table: _Optional[_Union[TableRef, _Mapping]] = ..., replay_existing: _Optional[bool] = ...) -> None: ...

class SubscribeResponse(_message.Message):
    __slots__ = ("events",)
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    events: _containers.RepeatedCompositeFieldContainer[RowEvent]
    def __init__(self, events: _Optional[_Iterable[_Union[RowEvent, _Mapping]]] = ...) -> None: ...

class RowEvent(_message.Message):
    __slots__ = ("action", "old_values", "new_values", "position", "timestamp", "replayed")
    ACTION_FIELD_NUMBER: _ClassVar[int]
    OLD_VALUES_FIELD_NUMBER: _ClassVar[int]
    NEW_VALUES_FIELD_NUMBER: _ClassVar[int]
    POSITION_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    REPLAYED_FIELD_NUMBER: _ClassVar[int]
    action: str
    old_values: Row
    new_values: Row
    position: str
    timestamp: int
    replayed: bool
    def __init__(self, action: _Optional[str] = ..., old_values: _Optional[_Union[Row, _Mapping]] = ..., new_values: _Optional[_Union[Row, _Mapping]] = ..., position: _Optional[str] = ..., timestamp: _Optional[int] = ..., replayed: _Optional[bool] = ...) -> None: ...

class WaitForPositionRequest(_message.Message):
    __slots__ = ("source_id", "position", "timeout_ms", "durable")
    SOURCE_ID_FIELD_NUMBER: _ClassVar[int]
    POSITION_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    DURABLE_FIELD_NUMBER: _ClassVar[int]
    source_id: str
    position: str
    timeout_ms: int
    durable: bool
    def __init__(self, source_id: _Optional[str] = ..., position: _Optional[str] = ..., timeout_ms: _Optional[int] = ..., durable: _Optional[bool] = ...) -> None: ...

class WaitForPositionResponse(_message.Message):
    __slots__ = ("reached", "applied_position", "durable_position")
    REACHED_FIELD_NUMBER: _ClassVar[int]
    APPLIED_POSITION_FIELD_NUMBER: _ClassVar[int]
    DURABLE_POSITION_FIELD_NUMBER: _ClassVar[int]
    reached: bool
    applied_position: str
    durable_position: str
    def __init__(self, reached: _Optional[bool] = ..., applied_position: _Optional[str] = ..., durable_position: _Optional[str] = ...) -> None: ...
