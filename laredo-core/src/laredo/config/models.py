"""The models of the engine sections of a configuration (``sources``, ``tables``,
``snapshot``, ``dead_letter``) and :class:`EngineSettings`, what runners add to them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from ..engine_settings import DeadLetterConfig, RetentionConfig, RunnerSettings, SnapshotConfig
from ..pipeline_settings import (
    BufferConfig,
    ErrorHandlingConfig,
    TableBaselineConfig,
    TableSections,
    TargetSections,
    TtlConfig,
    ValidationConfig,
)
from ..settings import Section

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

_Section = Section


class PluginSpec(BaseModel):
    """``{ type = <plugin name>, ...options of that plugin }``"""

    model_config = ConfigDict(extra="allow")
    type: str = Field(min_length=1)

    def options(self) -> dict[str, Any]:
        return dict(self.model_extra or {})


class TargetConfig(TargetSections):
    """One target of a table: ``type`` + the plugin's options, and the pipeline settings'
    sections (:class:`laredo.pipeline_settings.TargetSections`, generated)."""

    model_config = ConfigDict(extra="allow")
    type: str = Field(min_length=1)
    id: str | None = None
    filters: list[PluginSpec] = Field(default_factory=list)
    transforms: list[PluginSpec] = Field(default_factory=list)

    def options(self) -> dict[str, Any]:
        """The target plugin's own options (every key that is not a pipeline setting)."""
        return dict(self.model_extra or {})


PIPELINE_KEYS = frozenset(TargetConfig.model_fields)
"""Keys of a target entry that are pipeline settings, not the target plugin's options."""


class TableConfig(TableSections):
    """One table: its source, schema and name, its targets, and the pipeline settings'
    sections given for every target (:class:`laredo.pipeline_settings.TableSections`)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    source: str = Field(min_length=1)
    schema_: str = Field(default="public", alias="schema", min_length=1)
    table: str = Field(min_length=1)
    targets: list[TargetConfig] = Field(min_length=1)


@dataclass(frozen=True, slots=True, kw_only=True)
class EngineSettings(RunnerSettings):
    """Engine parameters a runner keeps in sections of its own (the server: ``observability``
    and ``shutdown``). ``observers`` are ``(key path, spec)`` pairs of observer plugins; the
    other fields are :data:`laredo.engine_settings.RUNNER_SETTINGS`, by keyword (generated:
    :class:`laredo.engine_settings.RunnerSettings`)."""

    observers: tuple[tuple[str, PluginSpec], ...] = ()


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
