"""``build_engine``: a validated configuration model turned into a :class:`laredo.Engine` with
the installed plugins, created through :mod:`laredo.registry`."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..contracts import DeadLetterStore, ObserverLike, SnapshotSerializer, SnapshotStore
from ..engine import Engine
from ..engine_settings import RUNNER_SETTINGS, SNAPSHOT_SETTINGS
from ..errors import ConfigError
from ..pipeline import Pipeline
from ..pipeline_settings import SETTINGS as PIPELINE_SETTINGS
from ..plugins import registry
from ..types import TableIdentifier
from .models import EngineConfig, TableConfig, TargetConfig, pipeline_id

__all__ = [
    "Built",
    "Maker",
    "build_engine",
    "build_pipeline",
    "build_source",
    "close_sources",
    "pipeline_specs",
]


@dataclass
class Built:
    """What :func:`build_engine` made: the engine and the stores it was given."""

    engine: Engine
    snapshot_store: SnapshotStore | None = None
    snapshot_serializer: SnapshotSerializer | None = None
    dead_letter_store: DeadLetterStore | None = None


@dataclass
class Maker:
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


def pipeline_specs(model: EngineConfig) -> Iterator[tuple[str, str, TableConfig, TargetConfig]]:
    """``(pipeline id, key path, table section, target section)`` of every pipeline."""
    for i, t in enumerate(model.tables):
        for j, tgt in enumerate(t.targets):
            yield pipeline_id(t, tgt), f"tables.{i}.targets.{j}", t, tgt


def build_pipeline(make: Maker, table: TableConfig, target: TargetConfig, where: str) -> Pipeline:
    """One pipeline of the configuration with its target, filters and transforms created."""
    made = make("target", target.type, target.options(), where)
    filters = [
        make("filter", f.type, f.options(), f"{where}.filters.{k}")
        for k, f in enumerate(target.filters)
    ]
    transforms = [
        make("transform", f.type, f.options(), f"{where}.transforms.{k}")
        for k, f in enumerate(target.transforms)
    ]
    return Pipeline(
        table.source,
        TableIdentifier(table.schema_, table.table),
        made,
        filters=filters,
        transforms=transforms,
        **{s.keyword: s.read(target, table) for s in PIPELINE_SETTINGS},
        id=pipeline_id(table, target),
        target_type=target.type,
    )


def build_source(make: Maker, model: EngineConfig, source_id: str) -> Any:
    spec = model.sources[source_id]
    return make("source", spec.type, spec.options(), f"sources.{source_id}")


def close_sources(sources: Iterable[Any]) -> None:
    """Close sources built for a configuration that is not used after all."""
    for source in sources:
        close = getattr(source, "close", None)
        if callable(close):
            with contextlib.suppress(Exception):
                close()


def build_engine(model: EngineConfig, observers: Sequence[ObserverLike] = ()) -> Built:
    """Construct the sources, targets, filters, transforms, stores and the :class:`Engine`
    that ``model`` describes; ``observers`` are added to the configured observer plugins.

    Raises ``ConfigError`` listing every plugin that could not be created (sources already
    created are closed first). Nothing is started.
    """
    make = Maker()
    settings = model.engine_settings()
    sources = {sid: build_source(make, model, sid) for sid in model.sources}
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
    pipelines = [build_pipeline(make, t, tgt, where) for _, where, t, tgt in pipeline_specs(model)]
    all_observers: list[ObserverLike] = list(observers)
    for where, spec in settings.observers:
        all_observers.append(make("observer", spec.type, spec.options(), where))
    if make.problems:
        close_sources(sources.values())
        raise ConfigError(make.problems)
    stored = snap if store is not None else None  # snapshot settings that take effect
    engine = Engine(
        sources=sources,
        pipelines=pipelines,
        snapshot_store=store,
        snapshot_serializer=serializer,
        **{s.keyword: s.read(stored if s.needs_store else snap) for s in SNAPSHOT_SETTINGS},
        dead_letter_store=dead_letters,
        observers=all_observers,
        **{s.keyword: getattr(settings, s.keyword) for s in RUNNER_SETTINGS},
    )
    return Built(engine, store, serializer, dead_letters)
