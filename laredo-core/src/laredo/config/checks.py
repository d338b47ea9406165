"""Validation of a configuration mapping: structure (the section models), plugin options (the
models plugins registered) and references between sections, every problem with its key path."""

from __future__ import annotations

import difflib
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import pydantic
from pydantic import BaseModel

from ..deprecation import collect_deprecations
from ..engine.validation import CONFIG_WORDS, Declared, KeyPath, cross_section_problems
from ..errors import ConfigError
from ..plugins import registry
from ..preflight import ClaimsListeners, Finding, ListenerClaim
from ..secrets import is_secret_key, show_value
from .models import PIPELINE_KEYS, EngineConfig, pipeline_id

__all__ = [
    "KeyPath",
    "Problem",
    "check_engine_config",
    "ephemeral_source_findings",
    "load_engine_config",
    "plugin_problems",
    "reference_problems",
    "shared_listener_problems",
    "spec_problems",
    "stalled_slot_findings",
    "structure_problems",
    "target_listener_claims",
]

M = TypeVar("M", bound=BaseModel)
C = TypeVar("C", bound=EngineConfig)


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


def _allowed_keys(model: type[BaseModel], loc: Sequence[Any]) -> list[str]:
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
    if current is None:
        return []
    return [f.alias or n for n, f in current.model_fields.items()]


def _unknown_key(model: type[BaseModel], loc: Sequence[Any]) -> str:
    """ "unknown key", with the closest allowed key (a misspelling) and every allowed key."""
    allowed = _allowed_keys(model, loc)
    close = difflib.get_close_matches(str(loc[-1]), allowed, n=1) if loc else []
    return (
        "unknown key"
        + (f"; did you mean {close[0]!r}?" if close else "")
        + (f" (allowed here: {', '.join(allowed)})" if allowed else "")
    )


def structure_problems(model: type[M], tree: Any) -> tuple[M | None, list[Problem]]:
    """Validate ``tree`` (a mapping) against ``model``; the model (``None`` when invalid) and
    every problem, with "unknown key" hints listing the keys allowed there."""
    try:
        return model.model_validate(dict(tree) if isinstance(tree, Mapping) else tree), []
    except pydantic.ValidationError as exc:
        problems = []
        for err in exc.errors():
            loc: KeyPath = tuple(err["loc"])
            message = str(err["msg"])
            if err["type"] == "extra_forbidden":
                message = _unknown_key(model, loc)
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
    notes: list[str] | None = None,
) -> list[Problem]:
    """Problems of one plugin section ``{type = name, ...options}`` of ``kind`` at ``path``:
    an unknown plugin name (at ``type_path``, default ``path.type``) or its options. Keys in
    ``skip`` are not the plugin's options. A spec without a textual ``type`` is left to the
    structure check. Deprecated spellings the plugin reports (:mod:`laredo.deprecation`) are
    appended to ``notes`` as ``<path>: <message>``."""
    if not isinstance(spec, Mapping) or not isinstance(spec.get("type"), str):
        return []
    options = {k: v for k, v in spec.items() if k != "type" and k not in skip}
    out: list[Problem] = []
    with collect_deprecations() as found:
        try:
            registry(kind).validate(spec["type"], options, where=_WHERE)
        except ConfigError as exc:
            for text in exc.problems:
                if text.startswith(f"{_WHERE}: "):
                    key, _, message = text[len(_WHERE) + 2 :].partition(": ")
                    # "<options>": a problem of the options as a whole (a model validator)
                    keys = () if key == "<options>" else tuple(key.split("."))
                    out.append(Problem((*path, *keys), message))
                else:
                    where = tuple(type_path) if type_path is not None else (*path, "type")
                    out.append(Problem(where, text.replace(_WHERE, "")))
    if notes is not None:
        label = ".".join(str(p) for p in path)
        notes += [f"{label}: {message}" for message in found]
    return out


def _store_spec(section: Mapping[str, Any], name_key: str, default: str | None) -> Any:
    config = section.get(f"{name_key}_config", {})
    return {
        **(config if isinstance(config, Mapping) else {}),
        "type": section.get(name_key, default),
    }


def plugin_problems(tree: Mapping[str, Any], notes: list[str] | None = None) -> list[Problem]:
    """Problems of every plugin section of the engine sections of a raw ``tree`` (checked on
    the raw tree, so they are reported together with structural problems); deprecated
    spellings go to ``notes`` (see :func:`spec_problems`)."""
    out: list[Problem] = []
    sources = tree.get("sources")
    if isinstance(sources, Mapping):
        for sid, spec in sources.items():
            out += spec_problems("source", spec, ("sources", sid), notes=notes)
    tables = tree.get("tables")
    for i, table in enumerate(tables if isinstance(tables, list) else []):
        targets = table.get("targets") if isinstance(table, Mapping) else None
        for j, target in enumerate(targets if isinstance(targets, list) else []):
            base = ("tables", i, "targets", j)
            out += spec_problems("target", target, base, skip=PIPELINE_KEYS, notes=notes)
            if not isinstance(target, Mapping):
                continue
            for kind in ("filter", "transform"):
                specs = target.get(f"{kind}s")
                for k, spec in enumerate(specs if isinstance(specs, list) else []):
                    out += spec_problems(kind, spec, (*base, f"{kind}s", k), notes=notes)
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
    schedule without a store, dead letters without a store, two pipelines with one id (the
    rules of :func:`laredo.engine.validation.cross_section_problems`, in configuration
    words), targets on one listener that disagree (:func:`shared_listener_problems`)."""
    declared = [
        Declared(
            where=("tables", i, "targets", j),
            source_key=("tables", i, "source"),
            policy_key=("tables", i, "targets", j, "error_handling", "on_persistent_failure"),
            source_id=t.source,
            pipeline_id=pipeline_id(t, tgt),
            dead_letter=tgt.error_handling.on_persistent_failure == "dead_letter",
        )
        for i, t in enumerate(model.tables)
        for j, tgt in enumerate(t.targets)
    ]
    snap = model.snapshot
    found = cross_section_problems(
        declared,
        model.sources,
        dead_letter_store=model.dead_letter is not None,
        snapshots_without_store=snap is not None
        and snap.enabled
        and snap.store is None
        and bool(snap.schedule or snap.on_shutdown),
        words=CONFIG_WORDS,
    )
    return [Problem(path, message) for path, message in found] + shared_listener_problems(model)


def _differing_keys(a: Any, b: Any, key: str) -> list[str]:
    """The keys under ``key`` whose values differ between two settings mappings."""
    if not (isinstance(a, Mapping) and isinstance(b, Mapping)):
        return [] if a == b else [key]
    out: list[str] = []
    for k in sorted({*a, *b}, key=str):
        out += _differing_keys(a.get(k), b.get(k), f"{key}.{k}")
    return out


def target_listener_claims(model: EngineConfig) -> list[tuple[str, str, ListenerClaim]]:
    """``(where, pipeline id, claim)`` of every listener the targets' options claim
    (:class:`laredo.preflight.ClaimsListeners`); targets with invalid options are skipped
    (:func:`plugin_problems` reports them)."""
    out: list[tuple[str, str, ListenerClaim]] = []
    for i, t in enumerate(model.tables):
        for j, tgt in enumerate(t.targets):
            try:
                with collect_deprecations():  # noted once, by plugin_problems
                    options = registry("target").options_model(tgt.type, tgt.options())
            except ConfigError:
                continue
            if isinstance(options, ClaimsListeners):
                where, pid = f"tables.{i}.targets.{j}", pipeline_id(t, tgt)
                out += [(where, pid, claim) for claim in options.listener_claims()]
    return out


def shared_listener_problems(model: EngineConfig) -> list[Problem]:
    """Targets whose options claim the same listener (:class:`laredo.preflight.ClaimsListeners`:
    a fan-out target's ``grpc.host:grpc.port``) with different settings: one listener serves
    them all, so they must agree. Names both pipelines and the keys that differ (never the
    values: they may hold tokens). Port 0 (a free port each) never conflicts."""
    first: dict[tuple[str, int], tuple[str, str, ListenerClaim]] = {}
    out: list[Problem] = []
    for where, pid, claim in target_listener_claims(model):
        if not claim.port:
            continue
        seen = first.setdefault((claim.host, claim.port), (where, pid, claim))
        if seen[2] is claim:
            continue
        other_where, other_pid, other = seen
        differ = _differing_keys(other.settings, claim.settings, claim.key)
        if differ:
            out.append(
                Problem(
                    (),
                    f"{where}: pipeline {pid!r} shares {claim.host}:{claim.port} with pipeline "
                    f"{other_pid!r} ({other_where}) but sets {', '.join(differ)} differently: "
                    "targets on one port share one listener, so give them the same "
                    f"{claim.key} section, or give one its own {claim.key}.port",
                )
            )
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


def stalled_slot_findings(
    model: EngineConfig,
    *,
    resumable: Callable[[str], bool | None],
    durable: Callable[[int, int], bool | None],
) -> list[Finding]:
    """A WARNING per source whose replication position can never advance while the server
    runs: it resumes from a position (a stateful slot, ``resumable(source id)``), a target it
    feeds is volatile (``durable(table index, target index)`` is False: in memory), and a
    snapshot store is configured without ``snapshot.schedule``. Such a target acknowledges
    only up to its last snapshot, so without scheduled snapshots the slot keeps every WAL
    segment on the primary until its disk fills. None from a callable: unknown, not
    reported."""
    snap = model.snapshot
    if snap is None or not snap.enabled or not snap.store or snap.schedule:
        return []
    out: list[Finding] = []
    for sid in model.sources:
        if not resumable(sid):
            continue
        volatile = [
            f"tables.{i}.targets.{j}"
            for i, t in enumerate(model.tables)
            if t.source == sid
            for j in range(len(t.targets))
            if durable(i, j) is False
        ]
        if not volatile:
            continue
        when = (
            "only at a clean shutdown (snapshot.on_shutdown)"
            if snap.on_shutdown
            else "never (no snapshot is ever taken on its own)"
        )
        out.append(
            Finding.warning(
                "SLOT_NEVER_ADVANCES",
                f"source {sid} resumes from its replication position, and its in-memory "
                f"target(s) {', '.join(volatile)} acknowledge only up to the last snapshot: with "
                f"a snapshot store and no snapshot.schedule the position advances {when}, so "
                "the source database keeps every change since (PostgreSQL: WAL fills the "
                "primary's disk)",
                "set snapshot.schedule (e.g. schedule = 15m), or remove the snapshot store",
                where="snapshot.schedule",
            )
        )
    return out


def ephemeral_source_findings(
    model: EngineConfig,
    *,
    resumable: Callable[[str], bool | None],
    durable: Callable[[int, int], bool | None],
) -> list[Finding]:
    """A WARNING per source that does not resume (``resumable(source id)`` is False: an
    ephemeral slot) while a target it feeds is durable (``durable(table index, target
    index)``: a Delta table, an HTTP receiver): every restart baselines those targets again (a
    full new Delta version each time) although they kept everything. None: unknown, not
    reported."""
    out: list[Finding] = []
    for sid, spec in model.sources.items():
        kept = [
            f"tables.{i}.targets.{j} ({target.type})"
            for i, t in enumerate(model.tables)
            if t.source == sid
            for j, target in enumerate(t.targets)
            if durable(i, j) is True
        ]
        if not kept or resumable(sid) is not False:
            continue
        fix = (
            f"set sources.{sid}.slot_mode = stateful (and a slot_name), so a restart resumes "
            "after the last acknowledged change"
            if spec.type == "postgresql"
            else f"configure sources.{sid} to resume from its last acknowledged position"
        )
        out.append(
            Finding.warning(
                "DURABLE_TARGET_EPHEMERAL_SOURCE",
                f"source {sid} does not resume after a restart (an ephemeral slot), but its "
                f"target(s) {', '.join(kept)} keep what they received: every restart sends them "
                "a full new baseline (a Delta target writes the whole table again as a new "
                "version)",
                fix,
                where=f"sources.{sid}",
            )
        )
    return out
