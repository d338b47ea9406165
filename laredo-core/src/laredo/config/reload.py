"""Applying a new configuration to a running engine: only what changed.

:func:`plan_reload` compares two validated configurations:

* a pipeline (by its id) only in the new one is **added** (only its table is baselined);
* a pipeline only in the old one is **removed** (drained, its target closed);
* a pipeline whose target options, filters, transforms, buffer, error handling, TTL or
  validation changed (or its table's ``baseline``) is **rebuilt** alone (removed, then added
  with a fresh target, baselined the new way);
* a source whose options changed is **restarted**: its pipelines are removed and the source
  starts again with them (resume, snapshot restore or baseline, as at start);
* everything else is untouched: no re-baseline, no gap.

Sections that cannot change while running (``snapshot``, ``dead_letter``, and a runner's own
sections such as the server's listeners) are reported as ``needs_restart`` and not applied.

:func:`apply_reload` is all or nothing: it builds every new plugin object and checks every new
or changed pipeline against the live catalog first (a problem changes nothing: ``ConfigError``
listing every problem), and undoes what it did when a later step fails.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from ..contracts import PipelineAware
from ..engine import Engine
from ..errors import ConfigError, EngineStateError
from ..pipeline import Pipeline
from ..preflight import missing_field_findings
from .build import Maker, build_pipeline, build_source, close_sources, pipeline_specs
from .models import EngineConfig
from .preflight import pipeline_uses

logger = logging.getLogger(__name__)

__all__ = [
    "ChangeKind",
    "ConfigChange",
    "ReloadPlan",
    "apply_reload",
    "describe",
    "plan_reload",
]

ChangeKind = Literal[
    "pipeline_added",
    "pipeline_removed",
    "pipeline_changed",
    "source_added",
    "source_removed",
    "source_restarted",
    "needs_restart",
]


@dataclass(frozen=True, slots=True)
class ConfigChange:
    """One difference between the running and the new configuration."""

    kind: ChangeKind
    id: str
    detail: str = ""

    def __str__(self) -> str:
        text = f"{self.kind.replace('_', ' ')}: {self.id}"
        return f"{text} ({self.detail})" if self.detail else text


@dataclass(frozen=True)
class ReloadPlan:
    """What :func:`apply_reload` does, in order: remove, (re)start sources, add."""

    changes: tuple[ConfigChange, ...] = ()
    remove_pipelines: tuple[str, ...] = ()
    remove_sources: tuple[str, ...] = ()
    start_sources: tuple[str, ...] = ()
    add_pipelines: tuple[str, ...] = ()
    kept: tuple[str, ...] = field(default=(), compare=False)

    @property
    def empty(self) -> bool:
        return not self.changes


def _pipeline_specs(model: EngineConfig) -> dict[str, tuple[str, dict[str, Any]]]:
    """pipeline id -> (source id, everything that defines the pipeline)."""
    out = {}
    for pid, _where, table, target in pipeline_specs(model):
        spec = {
            "table": table.model_dump(exclude={"targets"}, by_alias=True),
            "target": target.model_dump(),
        }
        out[pid] = (table.source, spec)
    return out


def _changed_keys(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    return sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))


def plan_reload(old: EngineConfig, new: EngineConfig) -> ReloadPlan:
    """The difference between the running configuration ``old`` and ``new``."""
    changes: list[ConfigChange] = []
    old_sources = {k: v.model_dump() for k, v in old.sources.items()}
    new_sources = {k: v.model_dump() for k, v in new.sources.items()}
    restarted = sorted(
        sid for sid in old_sources if sid in new_sources and old_sources[sid] != new_sources[sid]
    )
    added_sources = sorted(set(new_sources) - set(old_sources))
    removed_sources = sorted(set(old_sources) - set(new_sources))
    for sid in restarted:
        keys = _changed_keys(old_sources[sid], new_sources[sid])
        changes.append(ConfigChange("source_restarted", sid, "changed: " + ", ".join(keys)))
    changes += [ConfigChange("source_added", sid) for sid in added_sources]
    changes += [ConfigChange("source_removed", sid) for sid in removed_sources]

    old_pipes = _pipeline_specs(old)
    new_pipes = _pipeline_specs(new)
    moving = set(restarted) | set(removed_sources) | set(added_sources)
    remove: list[str] = []
    add: list[str] = []
    kept: list[str] = []
    for pid, (sid, spec) in old_pipes.items():
        if pid not in new_pipes:
            remove.append(pid)
            changes.append(ConfigChange("pipeline_removed", pid))
        elif new_pipes[pid] != (sid, spec):
            remove.append(pid)
            add.append(pid)
            new_sid, new_spec = new_pipes[pid]
            what = ["source"] if new_sid != sid else []
            what += [f"table.{k}" for k in _changed_keys(spec["table"], new_spec["table"])]
            what += [f"target.{k}" for k in _changed_keys(spec["target"], new_spec["target"])]
            changes.append(ConfigChange("pipeline_changed", pid, "changed: " + ", ".join(what)))
        elif sid in moving:
            remove.append(pid)
            add.append(pid)
        else:
            kept.append(pid)
    for pid in new_pipes:
        if pid not in old_pipes:
            add.append(pid)
            changes.append(ConfigChange("pipeline_added", pid))

    old_rest = old.model_dump(exclude={"sources", "tables"})
    new_rest = new.model_dump(exclude={"sources", "tables"})
    for key in _changed_keys(old_rest, new_rest):
        changes.append(
            ConfigChange("needs_restart", key, "not applied while running; restart to apply")
        )
    return ReloadPlan(
        changes=tuple(changes),
        remove_pipelines=tuple(remove),
        remove_sources=tuple(sorted(set(restarted) | set(removed_sources))),
        start_sources=tuple(sorted(set(restarted) | set(added_sources))),
        add_pipelines=tuple(add),
        kept=tuple(kept),
    )


@dataclass
class _Progress:
    """What an apply did so far (what a rollback undoes)."""

    removed_sources: list[str] = field(default_factory=list)
    removed_pipelines: list[str] = field(default_factory=list)
    started_sources: list[str] = field(default_factory=list)
    added_pipelines: list[str] = field(default_factory=list)


def _build(
    model: EngineConfig, source_ids: Sequence[str], pipeline_ids: Sequence[str]
) -> tuple[dict[str, Any], dict[str, Pipeline], dict[str, tuple[str, Any, Any]], list[str]]:
    """The plugin objects of ``model`` for these sources and pipelines (every problem
    collected), and each pipeline's ``(key path, table section, target section)``."""
    make = Maker()
    sources = {sid: build_source(make, model, sid) for sid in source_ids}
    wanted = set(pipeline_ids)
    pipelines: dict[str, Pipeline] = {}
    where: dict[str, tuple[str, Any, Any]] = {}
    for pid, at, table, target in pipeline_specs(model):
        if pid in wanted:
            pipelines[pid] = build_pipeline(make, table, target, at)
            where[pid] = (at, table, target)
    return sources, pipelines, where, make.problems


def _check_live(
    engine: Engine,
    plan: ReloadPlan,
    pipelines: Mapping[str, Pipeline],
    where: Mapping[str, tuple[str, Any, Any]],
) -> tuple[list[str], list[Pipeline]]:
    """Every problem the new pipelines on running sources would meet against the live catalog
    (the table, the fields read, the target's own init), and the pipelines whose target was
    initialised by the check. Changes nothing that runs."""
    problems: list[str] = []
    inited: list[Pipeline] = []
    for pid in plan.add_pipelines:
        p = pipelines[pid]
        if p.source_id not in engine.sources or p.source_id in plan.remove_sources:
            continue  # a new or restarted source starts like at engine start
        at, table_cfg, target_cfg = where[pid]
        columns, found = engine.preflight_pipeline(p)
        problems += [f"{at} ({pid}): {x}" for x in found]
        if columns is None:
            continue
        names = {c.name for c in columns}
        missing = missing_field_findings(pipeline_uses(at, table_cfg, target_cfg), names)
        problems += [f"{at} ({pid}): {f.message}; fix: {f.fix}" for f in missing]
        if missing or found or isinstance(p.target, PipelineAware):
            continue  # a pipeline-aware target is initialised only once bound
        inited.append(p)  # closed when the reload does not go ahead, even if init failed
        try:
            p.target.on_init(p.table_id, columns)
        except Exception as exc:
            problems.append(f"{at} ({pid}): target init failed for {p.table_id}: {exc}")
    return problems, inited


def _discard(sources: Mapping[str, Any], inited: Sequence[Pipeline]) -> None:
    close_sources(sources.values())
    for p in inited:
        with contextlib.suppress(Exception):
            p.target.on_close(p.table_id)


def _execute(
    engine: Engine,
    plan: ReloadPlan,
    sources: Mapping[str, Any],
    pipelines: Mapping[str, Pipeline],
    timeout: float | None,
    *,
    done: _Progress,
) -> None:
    """Remove, (re)start sources, add; ``done`` records each step as it completes."""
    for sid in plan.remove_sources:
        if sid in engine.sources:
            gone = [p.id for p in engine.pipelines() if p.source_id == sid]
            engine.remove_source(sid, timeout)
            done.removed_sources.append(sid)
            done.removed_pipelines += gone
    running = {p.id for p in engine.pipelines()}
    for pid in plan.remove_pipelines:
        if pid in running:
            engine.remove_pipeline(pid, timeout)
            done.removed_pipelines.append(pid)
    by_source: dict[str, list[Pipeline]] = {}
    for pid in plan.add_pipelines:
        p = pipelines[pid]
        by_source.setdefault(p.source_id, []).append(p)
    for sid, source in sources.items():
        mine = by_source.pop(sid, [])
        if mine:
            done.started_sources.append(sid)  # add_source may fail after starting it
            engine.add_source(sid, source, mine, timeout)
        else:
            close_sources([source])  # a restarted source without pipelines stays stopped
    for group in by_source.values():
        for p in group:
            engine.add_pipeline(p, timeout=timeout)
            done.added_pipelines.append(p.pipeline_id())


def _rollback(engine: Engine, old: EngineConfig, done: _Progress, timeout: float | None) -> None:
    """Undo ``done``: remove what was added or started, start again what was removed (built
    from ``old``, the configuration that ran before)."""
    for pid in reversed(done.added_pipelines):
        if pid in {p.id for p in engine.pipelines()}:
            engine.remove_pipeline(pid, timeout)
    for sid in reversed(done.started_sources):
        if sid in engine.sources:
            engine.remove_source(sid, timeout)
    back = ReloadPlan(
        start_sources=tuple(s for s in done.removed_sources if s in old.sources),
        add_pipelines=tuple(done.removed_pipelines),
    )
    sources, pipelines, _where, problems = _build(old, back.start_sources, back.add_pipelines)
    if problems:
        close_sources(sources.values())
        raise ConfigError(problems)
    _execute(engine, back, sources, pipelines, timeout, done=_Progress())


def apply_reload(
    engine: Engine,
    new: EngineConfig,
    plan: ReloadPlan,
    timeout: float | None = None,
    old: EngineConfig | None = None,
) -> tuple[ConfigChange, ...]:
    """Carry out ``plan`` on a running engine built from the old configuration; returns the
    changes applied (``needs_restart`` ones are reported, not applied).

    All or nothing: every plugin object is created, and every new or changed pipeline on a
    running source is checked against the live catalog (table, fields read, the target's
    init) before anything running is touched; ``ConfigError`` lists every problem and nothing
    changed. When a step fails later (a baseline), what was done is undone from ``old`` (the
    configuration that ran, given by the caller) and ``ConfigError`` names the cause; only
    when that undo fails too is ``EngineStateError`` raised (the reload applied partly)."""
    sources, pipelines, where, problems = _build(new, plan.start_sources, plan.add_pipelines)
    inited: list[Pipeline] = []
    if not problems:
        problems, inited = _check_live(engine, plan, pipelines, where)
    if problems:
        _discard(sources, inited)
        raise ConfigError(problems)
    done = _Progress()
    try:
        _execute(engine, plan, sources, pipelines, timeout, done=done)
    except Exception as exc:
        cause = f"{type(exc).__name__}: {exc}"
        if old is None:
            raise
        logger.warning("configuration reload failed (%s); restoring the running one", cause)
        try:
            _rollback(engine, old, done, timeout)
        except Exception as undo:
            raise EngineStateError(
                f"reload failed ({cause}) and restoring the running configuration failed "
                f"({type(undo).__name__}: {undo}); reload again once the cause is fixed"
            ) from exc
        raise ConfigError(
            [f"reload failed and was undone (the running configuration stays): {cause}"]
        ) from exc
    return tuple(c for c in plan.changes if c.kind != "needs_restart")


def describe(changes: Sequence[ConfigChange]) -> str:
    """One line for logs and replies."""
    return "; ".join(str(c) for c in changes) if changes else "no changes"
