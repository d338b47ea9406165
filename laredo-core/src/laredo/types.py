"""Value types of the data path: tables, columns, change events, states and snapshot metadata.

Rows are plain ``dict[str, Any]`` of Python-typed values; the same Python types appear on every
path (baseline, stream, snapshot restore, fan-out wire).

Values Python's ``datetime`` cannot hold (the one vocabulary every source and encoding uses):

* a date or timestamp at positive or negative **infinity** (PostgreSQL's ``'infinity'`` and
  ``'-infinity'``) is the extreme value of its type: :data:`DATE_INFINITY` (``date.max``) and
  :data:`DATE_MINUS_INFINITY` (``date.min``); :data:`TIMESTAMP_INFINITY` (naive
  ``datetime.max``) and :data:`TIMESTAMP_MINUS_INFINITY`; :data:`TIMESTAMPTZ_INFINITY`
  (``datetime.max`` in UTC, whatever the session's time zone: no other zone can hold it) and
  :data:`TIMESTAMPTZ_MINUS_INFINITY`. They are ordinary values from then on (every encoding
  round-trips them); the price is that a stored ``9999-12-31 23:59:59.999999`` reads as
  infinity too.
* any other value with no Python equivalent (a year after 9999, a BC date, ``time '24:00'``,
  an interval past ``timedelta``'s range) arrives as an :class:`Unrepresentable` marker in its
  column; the engine never hands such a row to a target: it dead-letters the change (or
  baseline row), naming table, key and column, and the pipeline goes on.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from typing import Any, TypeAlias

Row: TypeAlias = dict[str, Any]
Position: TypeAlias = Any
"""Opaque source position; only the source compares, serialises and parses it."""


@dataclass(frozen=True, slots=True, order=True)
class TableIdentifier:
    """A table, ``schema.table``. ``str()`` gives ``"schema.table"``."""

    schema: str
    table: str

    def __str__(self) -> str:
        return f"{self.schema}.{self.table}"

    @classmethod
    def parse(cls, text: str) -> TableIdentifier:
        """Parse ``"schema.table"`` (split on the first dot); a bare name means ``public``."""
        if "." not in text:
            if not text:
                raise ValueError("empty table name: write 'schema.table'")
            return cls("public", text)
        schema, _, table = text.partition(".")
        if not schema or not table:
            raise ValueError(f"invalid table {text!r}: write 'schema.table'")
        return cls(schema, table)


DATE_INFINITY = date.max
DATE_MINUS_INFINITY = date.min
TIMESTAMP_INFINITY = datetime.max
TIMESTAMP_MINUS_INFINITY = datetime.min
TIMESTAMPTZ_INFINITY = datetime.max.replace(tzinfo=UTC)
TIMESTAMPTZ_MINUS_INFINITY = datetime.min.replace(tzinfo=UTC)


@dataclass(frozen=True, slots=True)
class Unrepresentable:
    """A source value no Python type holds (see the module docstring): the source's type name
    and the value as the source wrote it. A marker in a row's column, never stored by a target:
    the engine dead-letters the change or baseline row that holds one."""

    type_name: str
    text: str

    def __str__(self) -> str:
        return f"{self.type_name} {self.text!r}"


def unrepresentable_columns(row: Mapping[str, Any] | None) -> list[str]:
    """The columns of ``row`` holding an :class:`Unrepresentable` marker, in row order."""
    if not row:
        return []
    return [name for name, v in row.items() if type(v) is Unrepresentable]


def Table(schema: str, table: str | None = None) -> TableIdentifier:
    """``Table("public", "users")`` or ``Table("public.users")``."""
    if table is None:
        return TableIdentifier.parse(schema)
    return TableIdentifier(schema, table)


@dataclass(frozen=True, slots=True)
class ColumnDefinition:
    """A column. ``ordinal_position`` and ``primary_key_ordinal`` are 1-based (0: unset/not PK).

    ``max_length`` is a declared character length (``varchar(80)``: 80; 0: none declared).
    ``precision`` and ``scale`` are a declared numeric precision and scale (``numeric(12,2)``:
    12 and 2), and ``precision`` a declared fractional-seconds precision of a time type
    (``timestamptz(3)``: 3); ``None`` when the type declares none (``numeric``, ``timestamptz``)
    or the source does not know it.
    """

    name: str
    type: str = "text"
    ordinal_position: int = 0
    nullable: bool = True
    primary_key: bool = False
    primary_key_ordinal: int = 0
    type_oid: int = 0
    default_value: str | None = None
    max_length: int = 0
    precision: int | None = None
    scale: int | None = None


def primary_key_columns(columns: Sequence[ColumnDefinition]) -> list[str]:
    """Primary-key column names in key order (``primary_key_ordinal``, then table order); empty
    for a keyless table. The one reading of a key from column definitions: see
    :func:`row_key_columns` for a table without one."""
    pk = [c for c in columns if c.primary_key]
    pk.sort(key=lambda c: (c.primary_key_ordinal or 1_000_000, c.ordinal_position))
    return [c.name for c in pk]


def row_key_columns(columns: Sequence[ColumnDefinition]) -> tuple[str, ...]:
    """The columns that identify a row: the primary key (in key order) when the table has one,
    otherwise every column in table order (PostgreSQL's ``REPLICA IDENTITY FULL``: an update or
    delete then carries the whole old row). Empty only when ``columns`` is. The one rule for
    every part that keys rows; a target that cannot key by every column refuses the table with
    :func:`no_primary_key_problem` instead."""
    return tuple(primary_key_columns(columns) or (c.name for c in columns))


def row_key(row: Mapping[str, Any], fields: Sequence[str]) -> tuple[Any, ...]:
    """The key of ``row`` under ``fields`` (see :func:`row_key_columns`), hashable even when a
    key column holds a list or a mapping (JSON, arrays: a table keyed by every column). Raises
    ``KeyError`` for a missing field."""
    return key_tuple(row[f] for f in fields)


def key_tuple(values: Iterable[Any]) -> tuple[Any, ...]:
    """``values`` as a hashable key: lists become tuples, mappings sorted item tuples."""
    return tuple(_hashable(v) for v in values)


def _hashable(value: Any) -> Any:
    if isinstance(value, list):
        return tuple(_hashable(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted(((k, _hashable(v)) for k, v in value.items()), key=lambda kv: kv[0]))
    return value


def no_primary_key_problem(table: TableIdentifier, target: str, setting: str = "") -> str:
    """Why a target that stores rows by a key of its own refuses a table without a primary key,
    with the fix: add a primary key (or set ``setting``, the target's own key option)."""
    if setting:
        return (
            f"table {table}: table has no primary key; set {setting} (the columns that "
            f"identify a row) on the {target} target, or add a primary key to the table"
        )
    return (
        f"table {table}: table has no primary key and the {target} target stores rows by "
        "key; add a primary key to the table"
    )


class ChangeAction(enum.IntEnum):
    INSERT = 0
    UPDATE = 1
    DELETE = 2
    TRUNCATE = 3
    SCHEMA_CHANGE = 4

    def __str__(self) -> str:
        return self.name


@dataclass(frozen=True, slots=True)
class ChangeEvent:
    """One change of one table, carrying the position of its transaction's commit.

    ``new_values`` is set for INSERT/UPDATE, ``old_values`` for DELETE (the identity: key columns,
    or the whole old row under REPLICA IDENTITY FULL) and for UPDATE when the source sent one.
    A target that reports ``position`` durable has made this change, and all before it, durable.
    """

    table: TableIdentifier
    action: ChangeAction
    position: Position
    timestamp: datetime | None = None
    new_values: Row | None = None
    old_values: Row | None = None
    xid: int = 0
    commit_timestamp: datetime | None = None
    unchanged_toast: frozenset[str] = frozenset()
    """Columns whose value the source did not send (unchanged TOAST): keep the stored value."""


@dataclass(frozen=True, slots=True)
class SourceConfig:
    tables: list[TableIdentifier]
    options: dict[str, Any] = field(default_factory=dict)


class SourceState(enum.Enum):
    CONNECTING = "CONNECTING"
    CONNECTED = "CONNECTED"
    STREAMING = "STREAMING"
    RECONNECTING = "RECONNECTING"
    PAUSED = "PAUSED"
    ERROR = "ERROR"
    CLOSED = "CLOSED"

    def __str__(self) -> str:
        return self.value


class OrderingGuarantee(enum.Enum):
    TOTAL_ORDER = "TOTAL_ORDER"
    PER_TABLE_ORDER = "PER_TABLE_ORDER"
    PER_PARTITION_ORDER = "PER_PARTITION_ORDER"
    BEST_EFFORT = "BEST_EFFORT"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True, slots=True)
class LagInfo:
    lag_bytes: int = 0
    lag_time: timedelta | None = None


@dataclass(frozen=True, slots=True)
class TableProblem:
    """A problem ``validate_tables`` found with a table (a value, not an exception), e.g.
    ``TableProblem(table, "TABLE_NOT_FOUND", "...")``; ``table`` is ``None`` for a problem of
    the whole source."""

    table: TableIdentifier | None
    code: str
    message: str

    def __str__(self) -> str:
        if self.table is not None:
            return f"{self.table}: {self.code}: {self.message}"
        return f"{self.code}: {self.message}"


ValidationError = TableProblem
"""The 0.1 name of :class:`TableProblem` (it reads like an exception but is a value)."""


class SchemaChangeAction(enum.Enum):
    CONTINUE = "CONTINUE"
    RE_BASELINE = "RE_BASELINE"
    ERROR = "ERROR"


@dataclass(frozen=True, slots=True)
class SchemaChangeResponse:
    action: SchemaChangeAction = SchemaChangeAction.CONTINUE
    message: str = ""


@dataclass(frozen=True, slots=True)
class SchemaChangeEvent:
    old_columns: tuple[ColumnDefinition, ...]
    new_columns: tuple[ColumnDefinition, ...]


class PipelineState(enum.Enum):
    INITIALIZING = "INITIALIZING"
    BASELINING = "BASELINING"
    STREAMING = "STREAMING"
    PAUSED = "PAUSED"
    ERROR = "ERROR"
    STOPPED = "STOPPED"

    def __str__(self) -> str:
        return self.value


class BufferPolicy(enum.Enum):
    BLOCK = "block"
    DROP_OLDEST = "drop_oldest"
    ERROR = "error"


class ErrorPolicy(enum.Enum):
    ISOLATE = "isolate"
    STOP_SOURCE = "stop_source"
    STOP_ALL = "stop_all"
    DEAD_LETTER = "dead_letter"
    """Write the change to the dead-letter store and continue (needs a dead-letter store)."""


class ValidationAction(enum.Enum):
    WARN = "warn"
    RE_BASELINE = "re_baseline"
    FAIL = "fail"


class SyncMode(enum.Enum):
    FULL_SNAPSHOT = "FULL_SNAPSHOT"
    DELTA = "DELTA"
    DELTA_FROM_SNAPSHOT = "DELTA_FROM_SNAPSHOT"


@dataclass(frozen=True, slots=True)
class IndexDefinition:
    """A secondary index over ``fields``; ``unique`` indexes map a key to one row."""

    name: str
    fields: tuple[str, ...]
    unique: bool = False

    def __init__(self, name: str, fields: Any, unique: bool = False) -> None:
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "fields", (fields,) if isinstance(fields, str) else tuple(fields))
        object.__setattr__(self, "unique", unique)


Index = IndexDefinition


@dataclass(frozen=True, slots=True)
class ErrorInfo:
    message: str
    error_type: str = ""

    @classmethod
    def of(cls, exc: BaseException, prefix: str = "") -> ErrorInfo:
        msg = f"{prefix}{exc}" if prefix else str(exc)
        return cls(message=msg, error_type=type(exc).__name__)


@dataclass(frozen=True, slots=True)
class TableSnapshotInfo:
    """Per-table snapshot header. ``position`` is the source position the table's state is at;
    ``progress`` the record of a chunked baseline its rows are part way through (a restore
    continues it after that record's key; None: none was running)."""

    table: TableIdentifier
    row_count: int
    columns: tuple[ColumnDefinition, ...] = ()
    target_type: str = ""
    indexes: tuple[IndexDefinition, ...] = ()
    position: str | None = None
    pipeline_id: str = ""
    progress: str | None = None


@dataclass(frozen=True, slots=True)
class SnapshotMetadata:
    """A snapshot: one consistent export of every pipeline's target.

    ``source_positions`` maps source id to a serialised position (``position_to_string``): the
    engine resumes each source after that position when it restores the snapshot.
    """

    snapshot_id: str
    created_at: datetime
    source_positions: dict[str, str]
    tables: tuple[TableSnapshotInfo, ...]
    format: str = "jsonl"
    user_meta: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class SnapshotDescriptor:
    snapshot_id: str
    created_at: datetime
    format: str
    tables: tuple[TableSnapshotInfo, ...]
    size_bytes: int = 0
    source_positions: dict[str, str] = field(default_factory=dict)
    user_meta: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """A change that could not be applied after every retry."""

    pipeline_id: str
    change: ChangeEvent
    error: ErrorInfo
    written_at: datetime
    position: str | None = None
