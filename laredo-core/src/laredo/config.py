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
into a :class:`laredo.Engine` with the installed plugins (through :mod:`laredo.registry`). A
runner with sections of its own (the server's ``grpc``, ``health``, ...) subclasses
:class:`EngineConfig`, adds its sections and overrides :meth:`EngineConfig.engine_settings`.
"""

from __future__ import annotations

import contextlib
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

import pydantic
from pydantic import BaseModel, ConfigDict, Field

from .engine import Engine
from .errors import ConfigError
from .pipeline import Pipeline
from .plugins import registry
from .secrets import is_secret_key, show_value
from .types import TableIdentifier
from .units import Duration, OptionalDuration

__all__ = [
    "PIPELINE_KEYS",
    "BufferConfig",
    "Built",
    "DeadLetterConfig",
    "EngineConfig",
    "EngineSettings",
    "ErrorHandlingConfig",
    "PluginSpec",
    "Problem",
    "RetentionConfig",
    "SnapshotConfig",
    "TableConfig",
    "TargetConfig",
    "TtlConfig",
    "ValidationConfig",
    "build_engine",
    "check_engine_config",
    "load_engine_config",
    "pipeline_id",
    "plugin_problems",
    "reference_problems",
    "spec_problems",
    "structure_problems",
]

M = TypeVar("M", bound=BaseModel)
C = TypeVar("C", bound="EngineConfig")

# -- the section models ---------------------------------------------------------------------


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


class BufferConfig(_Section):
    """``buffer { max_size = 10000, policy = block | drop_oldest | error }``"""

    max_size: int = Field(default=10_000, gt=0)
    policy: Literal["block", "drop_oldest", "error"] = "block"


class ErrorHandlingConfig(_Section):
    """``error_handling { max_retries, on_persistent_failure, retry_backoff, ... }``"""

    max_retries: int = Field(default=5, ge=0)
    on_persistent_failure: Literal["isolate", "stop_source", "stop_all", "dead_letter"] = "isolate"
    retry_backoff: Duration = 0.1
    retry_max_backoff: Duration = 5.0


class TtlConfig(_Section):
    """``ttl { field = expires_at, check_interval = 1m, mode = delete }``"""

    field: str = Field(min_length=1)
    check_interval: OptionalDuration = None
    mode: Literal["delete"] = "delete"
    """Expired rows are deleted from the target (the only mode)."""


class ValidationConfig(_Section):
    """``validation { interval = 5m, action = warn | re_baseline | fail }``"""

    interval: OptionalDuration = None
    action: Literal["warn", "re_baseline", "fail"] = "warn"


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


class RetentionConfig(_Section):
    keep_count: int | None = Field(default=None, ge=1)
    max_age: OptionalDuration = None


class SnapshotConfig(_Section):
    """``snapshot { store = local, store_config { path = ... }, schedule = 1h, ... }``"""

    enabled: bool = True
    store: str | None = None
    store_config: dict[str, Any] = Field(default_factory=dict)
    serializer: str = "jsonl"
    serializer_config: dict[str, Any] = Field(default_factory=dict)
    schedule: OptionalDuration = None
    on_shutdown: bool = False
    retention: RetentionConfig = RetentionConfig()
    user_meta: dict[str, Any] = Field(default_factory=dict)
    on_restore_mismatch: Literal["warn", "reject"] = "warn"


class DeadLetterConfig(_Section):
    """``dead_letter { store = memory | local | s3, store_config { ... } }``"""

    store: str = "memory"
    store_config: dict[str, Any] = Field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class EngineSettings:
    """Engine parameters a runner keeps in sections of its own (the server: ``observability``
    and ``shutdown``). ``observers`` are ``(key path, spec)`` pairs of observer plugins."""

    observers: tuple[tuple[str, PluginSpec], ...] = ()
    shutdown_timeout: float = 30.0
    lag_interval: float = 10.0


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


# -- validation -----------------------------------------------------------------------------

KeyPath = tuple[str | int, ...]


@dataclass(frozen=True, slots=True)
class Problem:
    """One configuration problem: the key path it concerns (empty when the message names its
    place itself) and what is wrong."""

    path: KeyPath
    message: str

    @property
    def key(self) -> str:
        return ".".join(str(p) for p in self.path)

    def __str__(self) -> str:
        return f"{self.key}: {self.message}" if self.path else self.message


def _inner_model(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in typing.get_args(annotation):
        found = _inner_model(arg)
        if found is not None:
            return found
    return None


def _allowed_keys(model: type[BaseModel], loc: Sequence[Any]) -> str:
    """The keys ``model`` accepts at the parent of ``loc`` (for "unknown key" hints)."""
    current: type[BaseModel] | None = model
    for part in loc[:-1]:
        if isinstance(part, int) or current is None:
            continue
        fields = current.model_fields
        info = fields.get(part) or next((f for f in fields.values() if f.alias == part), None)
        if info is None:
            continue  # a dict value (sources.<id>) keeps the same model for the next level
        current = _inner_model(info.annotation)
    if current is None or not current.model_fields:
        return ""
    return ", ".join(f.alias or n for n, f in current.model_fields.items())


def structure_problems(model: type[M], tree: Mapping[str, Any]) -> tuple[M | None, list[Problem]]:
    """Validate ``tree`` against ``model``; the model (``None`` when invalid) and every
    problem, with "unknown key" hints listing the keys allowed there."""
    try:
        return model.model_validate(dict(tree)), []
    except pydantic.ValidationError as exc:
        problems = []
        for err in exc.errors():
            loc: KeyPath = tuple(err["loc"])
            message = str(err["msg"])
            if err["type"] == "extra_forbidden":
                allowed = _allowed_keys(model, loc)
                message = "unknown key" + (f" (allowed here: {allowed})" if allowed else "")
            elif err["type"] != "missing" and "input" in err:
                key = ".".join(str(p) for p in loc)
                shown = None if is_secret_key(key) else show_value("", err["input"])
                if shown is not None:
                    message += f" (got {shown})"
            problems.append(Problem(loc, message))
        return None, problems


_WHERE = "\x00"
"""Placeholder label handed to the registry so its messages can be split into key and text."""


def spec_problems(
    kind: str,
    spec: Any,
    path: Sequence[str | int],
    *,
    skip: frozenset[str] = frozenset(),
    type_path: Sequence[str | int] | None = None,
) -> list[Problem]:
    """Problems of one plugin section ``{type = name, ...options}`` of ``kind`` at ``path``:
    an unknown plugin name (at ``type_path``, default ``path.type``) or its options. Keys in
    ``skip`` are not the plugin's options. A spec without a textual ``type`` is left to the
    structure check."""
    if not isinstance(spec, Mapping) or not isinstance(spec.get("type"), str):
        return []
    options = {k: v for k, v in spec.items() if k != "type" and k not in skip}
    try:
        registry(kind).validate(spec["type"], options, where=_WHERE)
    except ConfigError as exc:
        out = []
        for text in exc.problems:
            if text.startswith(f"{_WHERE}: "):
                key, _, message = text[len(_WHERE) + 2 :].partition(": ")
                # "<options>": a problem of the options as a whole (a model validator)
                keys = () if key == "<options>" else tuple(key.split("."))
                out.append(Problem((*path, *keys), message))
            else:
                where = tuple(type_path) if type_path is not None else (*path, "type")
                out.append(Problem(where, text.replace(_WHERE, "")))
        return out
    return []


def _store_spec(section: Mapping[str, Any], name_key: str, default: str | None) -> Any:
    config = section.get(f"{name_key}_config", {})
    return {
        **(config if isinstance(config, Mapping) else {}),
        "type": section.get(name_key, default),
    }


def plugin_problems(tree: Mapping[str, Any]) -> list[Problem]:
    """Problems of every plugin section of the engine sections of a raw ``tree`` (checked on
    the raw tree, so they are reported together with structural problems)."""
    out: list[Problem] = []
    sources = tree.get("sources")
    if isinstance(sources, Mapping):
        for sid, spec in sources.items():
            out += spec_problems("source", spec, ("sources", sid))
    tables = tree.get("tables")
    for i, table in enumerate(tables if isinstance(tables, list) else []):
        targets = table.get("targets") if isinstance(table, Mapping) else None
        for j, target in enumerate(targets if isinstance(targets, list) else []):
            base = ("tables", i, "targets", j)
            out += spec_problems("target", target, base, skip=PIPELINE_KEYS)
            if not isinstance(target, Mapping):
                continue
            for kind in ("filter", "transform"):
                specs = target.get(f"{kind}s")
                for k, spec in enumerate(specs if isinstance(specs, list) else []):
                    out += spec_problems(kind, spec, (*base, f"{kind}s", k))
    snap = tree.get("snapshot")
    if isinstance(snap, Mapping) and snap.get("enabled", True) is not False:
        if isinstance(snap.get("store"), str):
            out += spec_problems(
                "snapshot_store",
                _store_spec(snap, "store", None),
                ("snapshot", "store_config"),
                type_path=("snapshot", "store"),
            )
        if isinstance(snap.get("serializer", "jsonl"), str):
            out += spec_problems(
                "serializer",
                _store_spec(snap, "serializer", "jsonl"),
                ("snapshot", "serializer_config"),
                type_path=("snapshot", "serializer"),
            )
    dead = tree.get("dead_letter")
    if isinstance(dead, Mapping):
        out += spec_problems(
            "dead_letter_store",
            _store_spec(dead, "store", "memory"),
            ("dead_letter", "store_config"),
            type_path=("dead_letter", "store"),
        )
    return out


def reference_problems(model: EngineConfig) -> list[Problem]:
    """Problems between sections of a structurally valid config: unknown sources, a snapshot
    schedule without a store, dead letters without a store, two pipelines with one id."""
    out: list[Problem] = []
    for i, t in enumerate(model.tables):
        if t.source not in model.sources:
            known = ", ".join(sorted(model.sources))
            out.append(
                Problem(
                    ("tables", i, "source"),
                    f"unknown source {t.source!r} (defined sources: {known})",
                )
            )
    snap = model.snapshot
    if (
        snap is not None
        and snap.enabled
        and snap.store is None
        and (snap.schedule or snap.on_shutdown)
    ):
        out.append(
            Problem(
                ("snapshot", "store"),
                "schedule/on_shutdown need a store "
                "(e.g. store = local, store_config { path = /var/lib/laredo })",
            )
        )
    if model.dead_letter is None:
        for i, t in enumerate(model.tables):
            for j, tgt in enumerate(t.targets):
                if tgt.error_handling.on_persistent_failure == "dead_letter":
                    out.append(
                        Problem(
                            ("tables", i, "targets", j, "error_handling", "on_persistent_failure"),
                            "dead_letter needs a dead_letter { store = ... } section",
                        )
                    )
    ids: dict[str, str] = {}
    for i, t in enumerate(model.tables):
        for j, tgt in enumerate(t.targets):
            pid = pipeline_id(t, tgt)
            where = f"tables.{i}.targets.{j}"
            if pid in ids:
                out.append(
                    Problem(
                        (),
                        f"{where}: pipeline id {pid!r} also used by {ids[pid]}: give one of "
                        "them a distinct `id`",
                    )
                )
            ids[pid] = where
    return out


def check_engine_config(tree: Mapping[str, Any], model: type[C]) -> tuple[C | None, list[Problem]]:
    """Every problem of ``tree`` (structure, plugin options, references) and ``tree``
    validated as ``model`` (``None`` when its structure is invalid)."""
    result, problems = structure_problems(model, tree)
    problems += plugin_problems(tree)
    if result is not None:
        problems += reference_problems(result)
    return result, problems


def load_engine_config(tree: Mapping[str, Any]) -> EngineConfig:
    """The validated :class:`EngineConfig` of ``tree``; raises ``ConfigError`` listing every
    problem with its key path."""
    model, problems = check_engine_config(tree, EngineConfig)
    if problems or model is None:
        raise ConfigError([str(p) for p in problems] or ["invalid configuration"])
    return model


# -- building -------------------------------------------------------------------------------


@dataclass
class Built:
    """What :func:`build_engine` made: the engine and the stores it was given."""

    engine: Any
    snapshot_store: Any = None
    snapshot_serializer: Any = None
    dead_letter_store: Any = None


@dataclass
class _Maker:
    """Creates plugins through the registry, collecting problems instead of stopping."""

    problems: list[str] = field(default_factory=list)

    def __call__(self, kind: str, name: str, options: Mapping[str, Any], where: str) -> Any:
        reg = registry(kind)
        try:
            entry = reg.get(name)
        except ConfigError as exc:
            self.problems.extend(f"{where}: {p}" for p in exc.problems)
            return None
        try:
            if entry.takes_options:
                return entry.factory(reg.options_model(name, dict(options), where=where))
            return entry.factory(**reg.validate(name, dict(options), where=where))
        except ConfigError as exc:
            self.problems.extend(exc.problems)
        except Exception as exc:
            self.problems.append(f"{where}: cannot create {kind.replace('_', ' ')} {name!r}: {exc}")
        return None


def _pipelines(model: EngineConfig, make: _Maker) -> list[Pipeline]:
    pipelines = []
    for i, t in enumerate(model.tables):
        table = TableIdentifier(t.schema_, t.table)
        for j, tgt in enumerate(t.targets):
            where = f"tables.{i}.targets.{j}"
            target = make("target", tgt.type, tgt.options(), where)
            filters = [
                make("filter", f.type, f.options(), f"{where}.filters.{k}")
                for k, f in enumerate(tgt.filters)
            ]
            transforms = [
                make("transform", f.type, f.options(), f"{where}.transforms.{k}")
                for k, f in enumerate(tgt.transforms)
            ]
            ttl = tgt.ttl or t.ttl
            val = tgt.validation or t.validation
            eh = tgt.error_handling
            pipelines.append(
                Pipeline(
                    t.source,
                    table,
                    target,
                    filters=filters,
                    transforms=transforms,
                    buffer_size=tgt.buffer.max_size,
                    buffer_policy=tgt.buffer.policy,
                    error_policy=eh.on_persistent_failure,
                    max_retries=eh.max_retries,
                    retry_backoff=eh.retry_backoff,
                    retry_max_backoff=eh.retry_max_backoff,
                    ttl_field=ttl.field if ttl else None,
                    ttl_scan_interval=ttl.check_interval if ttl else None,
                    validation_action=val.action if val else "warn",
                    validation_interval=val.interval if val else None,
                    id=pipeline_id(t, tgt),
                    target_type=tgt.type,
                )
            )
    return pipelines


def build_engine(model: EngineConfig, observers: Sequence[Any] = ()) -> Built:
    """Construct the sources, targets, filters, transforms, stores and the :class:`Engine`
    that ``model`` describes; ``observers`` are added to the configured observer plugins.

    Raises ``ConfigError`` listing every plugin that could not be created (sources already
    created are closed first). Nothing is started.
    """
    make = _Maker()
    settings = model.engine_settings()
    sources = {
        sid: make("source", spec.type, spec.options(), f"sources.{sid}")
        for sid, spec in model.sources.items()
    }
    store = serializer = None
    snap = model.snapshot
    if snap is not None and snap.enabled and snap.store:
        store = make("snapshot_store", snap.store, snap.store_config, "snapshot.store_config")
        serializer = make(
            "serializer", snap.serializer, snap.serializer_config, "snapshot.serializer_config"
        )
    dead_letters = None
    if model.dead_letter is not None:
        dead_letters = make(
            "dead_letter_store",
            model.dead_letter.store,
            model.dead_letter.store_config,
            "dead_letter.store_config",
        )
    pipelines = _pipelines(model, make)
    all_observers = list(observers)
    for where, spec in settings.observers:
        all_observers.append(make("observer", spec.type, spec.options(), where))
    if make.problems:
        for source in sources.values():
            close = getattr(source, "close", None)
            if callable(close):
                with contextlib.suppress(Exception):
                    close()
        raise ConfigError(make.problems)
    stored = snap if store is not None else None  # snapshot settings that take effect
    engine = Engine(
        sources=sources,
        pipelines=pipelines,
        snapshot_store=store,
        snapshot_serializer=serializer,
        snapshot_schedule=stored.schedule if stored else None,
        snapshot_retention=stored.retention.keep_count if stored else None,
        snapshot_max_age=stored.retention.max_age if stored else None,
        snapshot_on_shutdown=bool(stored and stored.on_shutdown),
        snapshot_user_meta=stored.user_meta if stored else None,
        snapshot_meta_policy=snap.on_restore_mismatch if snap else "warn",
        dead_letter_store=dead_letters,
        observers=all_observers,
        shutdown_timeout=settings.shutdown_timeout,
        lag_interval=settings.lag_interval,
    )
    return Built(engine, store, serializer, dead_letters)
