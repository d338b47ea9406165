"""The engine's configuration: one schema, one validation, one builder for every runner.

A configuration is a plain mapping (what a HOCON, JSON or YAML loader produces) with the engine
sections ``sources``, ``tables``, ``snapshot`` and ``dead_letter``::

    {"sources": {"pg": {"type": "postgresql", "connection": "..."}},
     "tables": [{"source": "pg", "schema": "public", "table": "users",
                 "targets": [{"type": "indexed-memory", "lookup_fields": ["email"],
                              "buffer": {"max_size": 5000},
                              "filters": [{"type": "field-equals", "field": "active",
                                           "value": true}]}]}],
     "snapshot": {"store": "local", "store_config": {"path": "/data"}, "schedule": "1h"}}

Guarantees:

* Every key is either used or rejected. The sections are pydantic models with
  ``extra="forbid"``; plugin sections (a source, target, filter, transform, store, serializer)
  are checked against the options model the plugin registered.
* Every problem is reported at once, in one :class:`laredo.ConfigError`, each line starting with
  the key path (``tables.0.targets.1.buffer.max_size: ...``); values of secret keys are never
  echoed (:mod:`laredo.secrets`).
* Durations and sizes use :mod:`laredo.units` (``"500ms"``, ``"1h30m"``, ``"64MB"``).

:func:`load_engine_config` validates a mapping; :func:`build_engine` turns a validated model
into a :class:`laredo.Engine` with the installed plugins (through :mod:`laredo.registry`);
:func:`run_checks` runs the plugins' preflight checks (:mod:`laredo.preflight`) on it. A
runner with sections of its own (the server's ``grpc``, ``health``, ...) subclasses
:class:`EngineConfig`, adds its sections and overrides :meth:`EngineConfig.engine_settings`.
"""

from __future__ import annotations

from .build import Built, build_engine
from .checks import (
    KeyPath,
    Problem,
    check_engine_config,
    load_engine_config,
    plugin_problems,
    reference_problems,
    shared_listener_problems,
    spec_problems,
    structure_problems,
    target_listener_claims,
)
from .models import (
    PIPELINE_KEYS,
    BufferConfig,
    DeadLetterConfig,
    EngineConfig,
    EngineSettings,
    ErrorHandlingConfig,
    PluginSpec,
    RetentionConfig,
    SnapshotConfig,
    TableBaselineConfig,
    TableConfig,
    TargetConfig,
    TtlConfig,
    ValidationConfig,
    pipeline_id,
)
from .preflight import check_requests, run_checks, table_uses
from .reload import ConfigChange, ReloadPlan, apply_reload, describe, plan_reload

__all__ = [
    "PIPELINE_KEYS",
    "BufferConfig",
    "Built",
    "ConfigChange",
    "DeadLetterConfig",
    "EngineConfig",
    "EngineSettings",
    "ErrorHandlingConfig",
    "KeyPath",
    "PluginSpec",
    "Problem",
    "ReloadPlan",
    "RetentionConfig",
    "SnapshotConfig",
    "TableBaselineConfig",
    "TableConfig",
    "TargetConfig",
    "TtlConfig",
    "ValidationConfig",
    "apply_reload",
    "build_engine",
    "check_engine_config",
    "check_requests",
    "describe",
    "load_engine_config",
    "pipeline_id",
    "plan_reload",
    "plugin_problems",
    "reference_problems",
    "run_checks",
    "shared_listener_problems",
    "spec_problems",
    "structure_problems",
    "table_uses",
    "target_listener_claims",
]
