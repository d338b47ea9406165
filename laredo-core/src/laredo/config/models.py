"""The models of the engine sections of a configuration (``sources``, ``tables``,
``snapshot``, ``dead_letter``) and :class:`EngineSettings`, what runners add to them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from ..engine_settings import (
    LAG_INTERVAL,
    SHUTDOWN_TIMEOUT,
    SNAPSHOT_MAX_AGE,
    SNAPSHOT_META_POLICY,
    SNAPSHOT_ON_SHUTDOWN,
    SNAPSHOT_RETENTION,
    SNAPSHOT_SCHEDULE,
    SNAPSHOT_USER_META,
)
from ..pipeline_settings import (
    BASELINE_CHUNK_ROWS,
    BASELINE_MODE,
    BUFFER_POLICY,
    BUFFER_SIZE,
    ERROR_POLICY,
    MAX_RETRIES,
    RETRY_BACKOFF,
    RETRY_MAX_BACKOFF,
    TTL_FIELD,
    TTL_SCAN_INTERVAL,
    VALIDATION_ACTION,
    VALIDATION_INTERVAL,
)
from ..units import Duration, OptionalDuration

__all__ = [
    "PIPELINE_KEYS",
    "BufferConfig",
    "DeadLetterConfig",
    "EngineConfig",
    "EngineSettings",
    "ErrorHandlingConfig",
    "PluginSpec",
    "RetentionConfig",
    "SnapshotConfig",
    "TableBaselineConfig",
    "TableConfig",
    "TargetConfig",
    "TtlConfig",
    "ValidationConfig",
    "pipeline_id",
]


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


class BufferConfig(_Section):
    """``buffer { max_size = 10000, policy = block | drop_oldest | error }``"""

    max_size: int = BUFFER_SIZE.field()
    policy: Literal["block", "drop_oldest", "error"] = BUFFER_POLICY.field()


class ErrorHandlingConfig(_Section):
    """``error_handling { max_retries, on_persistent_failure, retry_backoff, ... }``"""

    max_retries: int = MAX_RETRIES.field()
    on_persistent_failure: Literal["isolate", "stop_source", "stop_all", "dead_letter"] = (
        ERROR_POLICY.field()
    )
    retry_backoff: Duration = RETRY_BACKOFF.field()
    retry_max_backoff: Duration = RETRY_MAX_BACKOFF.field()


class TtlConfig(_Section):
    """``ttl { field = expires_at, check_interval = 1m, mode = delete }``"""

    field: str = Field(min_length=1, description=TTL_FIELD.doc)
    check_interval: OptionalDuration = TTL_SCAN_INTERVAL.field()
    mode: Literal["delete"] = "delete"
    """Expired rows are deleted from the target (the only mode)."""


class ValidationConfig(_Section):
    """``validation { interval = 5m, action = warn | re_baseline | fail }``"""

    interval: OptionalDuration = VALIDATION_INTERVAL.field()
    action: Literal["warn", "re_baseline", "fail"] = VALIDATION_ACTION.field()


class TableBaselineConfig(_Section):
    """``baseline { mode = snapshot | chunked, chunk_rows = 10000 }`` on a table: overrides
    its source's ``baseline`` for this table (unset keys: the source's). ``chunked`` reads the
    table in key-range chunks by its primary key, else its ``REPLICA IDENTITY USING INDEX``
    index; a table with neither keeps the snapshot baseline (logged, and ``laredo check``
    warns)."""

    mode: Literal["snapshot", "chunked"] | None = BASELINE_MODE.field()
    chunk_rows: int | None = BASELINE_CHUNK_ROWS.field()


class PluginSpec(BaseModel):
    """``{ type = <plugin name>, ...options of that plugin }``"""

    model_config = ConfigDict(extra="allow")
    type: str = Field(min_length=1)

    def options(self) -> dict[str, Any]:
        return dict(self.model_extra or {})


class TargetConfig(BaseModel):
    """One target of a table: ``type`` + the plugin's options, and the pipeline settings."""

    model_config = ConfigDict(extra="allow")
    type: str = Field(min_length=1)
    id: str | None = None
    buffer: BufferConfig = BufferConfig()
    error_handling: ErrorHandlingConfig = ErrorHandlingConfig()
    filters: list[PluginSpec] = Field(default_factory=list)
    transforms: list[PluginSpec] = Field(default_factory=list)
    ttl: TtlConfig | None = None
    validation: ValidationConfig | None = None

    def options(self) -> dict[str, Any]:
        """The target plugin's own options (every key that is not a pipeline setting)."""
        return dict(self.model_extra or {})


PIPELINE_KEYS = frozenset(TargetConfig.model_fields)
"""Keys of a target entry that are pipeline settings, not the target plugin's options."""


class TableConfig(_Section):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    source: str = Field(min_length=1)
    schema_: str = Field(default="public", alias="schema", min_length=1)
    table: str = Field(min_length=1)
    targets: list[TargetConfig] = Field(min_length=1)
    ttl: TtlConfig | None = None
    validation: ValidationConfig | None = None
    baseline: TableBaselineConfig | None = None


class RetentionConfig(_Section):
    keep_count: int | None = SNAPSHOT_RETENTION.field()
    max_age: OptionalDuration = SNAPSHOT_MAX_AGE.field()


class SnapshotConfig(_Section):
    """``snapshot { store = local, store_config { path = ... }, schedule = 1h, ... }``"""

    enabled: bool = True
    store: str | None = None
    store_config: dict[str, Any] = Field(default_factory=dict)
    serializer: str = "jsonl"
    serializer_config: dict[str, Any] = Field(default_factory=dict)
    schedule: OptionalDuration = SNAPSHOT_SCHEDULE.field()
    on_shutdown: bool = SNAPSHOT_ON_SHUTDOWN.field()
    retention: RetentionConfig = RetentionConfig()
    user_meta: dict[str, Any] = SNAPSHOT_USER_META.field()
    on_restore_mismatch: Literal["warn", "reject"] = SNAPSHOT_META_POLICY.field()


class DeadLetterConfig(_Section):
    """``dead_letter { store = memory | local | s3, store_config { ... } }``"""

    store: str = "memory"
    store_config: dict[str, Any] = Field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class EngineSettings:
    """Engine parameters a runner keeps in sections of its own (the server: ``observability``
    and ``shutdown``). ``observers`` are ``(key path, spec)`` pairs of observer plugins; the
    other fields are :data:`laredo.engine_settings.RUNNER_SETTINGS`, by keyword."""

    observers: tuple[tuple[str, PluginSpec], ...] = ()
    shutdown_timeout: float = SHUTDOWN_TIMEOUT.default
    lag_interval: float = LAG_INTERVAL.default


class EngineConfig(_Section):
    """The engine sections of a configuration: ``sources``, ``tables``, ``snapshot``,
    ``dead_letter``. Runners subclass it to add sections of their own."""

    sources: dict[str, PluginSpec] = Field(min_length=1)
    tables: list[TableConfig] = Field(min_length=1)
    snapshot: SnapshotConfig | None = None
    dead_letter: DeadLetterConfig | None = None

    def engine_settings(self) -> EngineSettings:
        """Engine parameters outside the engine sections (defaults here; runners override)."""
        return EngineSettings()


def pipeline_id(table: TableConfig, target: TargetConfig) -> str:
    """A target's ``id``, else ``source:schema.table:type``."""
    return target.id or f"{table.source}:{table.schema_}.{table.table}:{target.type}"
