"""Applying a new configuration to a running engine: only what changed.

:func:`plan_reload` compares two validated configurations:

* a pipeline (by its id) only in the new one is **added** (only its table is baselined);
* a pipeline only in the old one is **removed** (drained, its target closed);
* a pipeline whose target options, filters, transforms, buffer, error handling, TTL or
  validation changed is **rebuilt** alone (removed, then added with a fresh target);
* a source whose options changed is **restarted**: its pipelines are removed and the source
  starts again with them (resume, snapshot restore or baseline, as at start);
* everything else is untouched: no re-baseline, no gap.

Sections that cannot change while running (``snapshot``, ``dead_letter``, and a runner's own
sections such as the server's listeners) are reported as ``needs_restart`` and not applied.

:func:`apply_reload` builds every new plugin object first: a configuration whose plugins cannot
be created changes nothing (``ConfigError`` listing every problem).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from ..engine import Engine
from ..errors import ConfigError
from ..pipeline import Pipeline
from .build import Maker, build_pipeline, build_source, close_sources, pipeline_specs
from .models import EngineConfig

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


def apply_reload(
    engine: Engine, new: EngineConfig, plan: ReloadPlan, timeout: float | None = None
) -> tuple[ConfigChange, ...]:
    """Carry out ``plan`` on a running engine built from the old configuration; returns the
    changes applied (``needs_restart`` ones are reported, not applied).

    Every plugin object needed is created before anything running is touched: when one
    cannot be, ``ConfigError`` lists every problem and nothing changed."""
    make = Maker()
    sources = {sid: build_source(make, new, sid) for sid in plan.start_sources}
    wanted = set(plan.add_pipelines)
    pipelines: dict[str, Pipeline] = {}
    for pid, where, table, target in pipeline_specs(new):
        if pid in wanted:
            pipelines[pid] = build_pipeline(make, table, target, where)
    if make.problems:
        close_sources(sources.values())
        raise ConfigError(make.problems)
    for sid in plan.remove_sources:
        if sid in engine.sources:
            engine.remove_source(sid, timeout)
    running = {p.id for p in engine.pipelines()}
    for pid in plan.remove_pipelines:
        if pid in running:
            engine.remove_pipeline(pid, timeout)
    by_source: dict[str, list[Pipeline]] = {}
    for pid in plan.add_pipelines:
        p = pipelines[pid]
        by_source.setdefault(p.source_id, []).append(p)
    for sid, source in sources.items():
        mine = by_source.pop(sid, [])
        if mine:
            engine.add_source(sid, source, mine, timeout)
        else:
            close_sources([source])  # a restarted source without pipelines stays stopped
    for group in by_source.values():
        for p in group:
            engine.add_pipeline(p, timeout=timeout)
    return tuple(c for c in plan.changes if c.kind != "needs_restart")


def describe(changes: Sequence[ConfigChange]) -> str:
    """One line for logs and replies."""
    return "; ".join(str(c) for c in changes) if changes else "no changes"
