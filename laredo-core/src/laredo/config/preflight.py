"""Running the preflight checks of a validated configuration (``laredo check``; ``laredo
serve`` at startup).

:func:`table_uses` works out, per configured table, which source fields its pipelines read:
the fields named by filters (on source rows), by transforms and by the target's index
declarations and TTL (on transformed rows, traced back through the transforms with
:class:`laredo.preflight.MapsFields`; a transform that does not say how it maps fields stops
the tracing, so nothing after it is checked rather than guessed). :func:`run_checks` builds one
:class:`laredo.preflight.CheckRequest` per configured plugin that has a registered check and
runs them concurrently (each check bounds its own waits), turning a check that raises into an
error finding. Nothing here connects anywhere itself.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from ..errors import ConfigError
from ..plugins import check_registry, registry
from ..preflight import (
    CheckRegistry,
    CheckReport,
    CheckRequest,
    FieldUse,
    Finding,
    KeysRows,
    MapsFields,
    TableUse,
    declared_fields,
)
from ..secrets import mask_text
from ..types import TableIdentifier
from .checks import ephemeral_source_findings, stalled_slot_findings
from .models import EngineConfig, PluginSpec, TableConfig, TargetConfig

logger = logging.getLogger(__name__)

__all__ = ["check_requests", "config_findings", "pipeline_uses", "run_checks", "table_uses"]

_OPAQUE = object()
"""A field that cannot be traced back (a transform that does not declare its mapping)."""


def _build(kind: str, spec: PluginSpec) -> Any:
    """The filter or transform of ``spec`` (cheap and side-effect free by contract), or None
    when it cannot be built (the configuration check reports why)."""
    try:
        return registry(kind).build(spec.type, **spec.options())
    except Exception:
        return None


def _trace(name: str, transforms: Sequence[Any]) -> object:
    """The source field a field after ``transforms`` comes from: a name, ``None`` (written or
    removed by a transform: nothing to check) or ``_OPAQUE``."""
    current = name
    for t in reversed(transforms):
        if not isinstance(t, MapsFields):
            return _OPAQUE
        before = t.input_field(current)
        if before is None:
            return None
        current = before
    return current


def _options_model(kind: str, name: str, options: dict[str, Any]) -> Any:
    """The plugin's validated options model (a dict for a plugin without one); None when the
    options do not validate (the configuration check reports that)."""
    try:
        reg = registry(kind)
        entry = reg.get(name)
        if entry.options is None:
            return dict(options)
        return reg.options_model(name, dict(options))
    except ConfigError:
        return None


def _target_uses(where: str, table: TableConfig, target: TargetConfig) -> list[FieldUse]:
    out: list[FieldUse] = []
    for k, spec in enumerate(target.filters):
        for key, name in declared_fields(_build("filter", spec)) or ():
            out.append(FieldUse(name, f"{where}.filters.{k}.{key}"))
    transforms: list[Any] = []
    for k, spec in enumerate(target.transforms):
        t = _build("transform", spec)
        for key, name in declared_fields(t) or ():
            src = _trace(name, transforms)
            if isinstance(src, str):
                out.append(FieldUse(src, f"{where}.transforms.{k}.{key}"))
        transforms.append(t)
    reads: list[tuple[str, str]] = []
    model = _options_model("target", target.type, target.options())
    for key, name in declared_fields(model) or ():
        reads.append((f"{where}.{key}", name))
    if target.ttl is not None:
        reads.append((f"{where}.ttl.field", target.ttl.field))
    elif table.ttl is not None:
        reads.append((f"{where.rsplit('.targets.', 1)[0]}.ttl.field", table.ttl.field))
    for path, name in reads:
        src = _trace(name, transforms)
        if isinstance(src, str):
            out.append(FieldUse(src, path))
    return out


def pipeline_uses(where: str, table: TableConfig, target: TargetConfig) -> TableUse:
    """The source fields one pipeline (``tables.i.targets.j`` at ``where``) reads: filters,
    transforms (renames traced back), the target's declared fields and TTL."""
    tid = TableIdentifier(table.schema_, table.table)
    return TableUse(tid, where, tuple(_target_uses(where, table, target)))


def table_uses(model: EngineConfig) -> list[TableUse]:
    """Per ``tables[i]``: the table and the source fields its pipelines read (each field once
    per key path)."""
    out = []
    for i, t in enumerate(model.tables):
        uses: dict[tuple[str, str], FieldUse] = {}
        keyed: list[tuple[str, tuple[str, ...]]] = []
        for j, target in enumerate(t.targets):
            where = f"tables.{i}.targets.{j}"
            for u in _target_uses(where, t, target):
                uses.setdefault((u.field, u.where), u)
            model_ = _options_model("target", target.type, target.options())
            if isinstance(model_, KeysRows):
                keyed.append((where, tuple(model_.row_key_fields())))
        table = TableIdentifier(t.schema_, t.table)
        mode = t.baseline.mode if t.baseline is not None else None
        out.append(TableUse(table, f"tables.{i}", tuple(uses.values()), tuple(keyed), mode))
    return out


def _plugins(model: EngineConfig) -> Iterable[tuple[str, str, str, dict[str, Any], list[int]]]:
    """``(kind, name, where, options, table indexes)`` of every configured plugin."""
    for sid, spec in model.sources.items():
        served = [i for i, t in enumerate(model.tables) if t.source == sid]
        yield "source", spec.type, f"sources.{sid}", spec.options(), served
    for i, t in enumerate(model.tables):
        for j, target in enumerate(t.targets):
            yield "target", target.type, f"tables.{i}.targets.{j}", target.options(), [i]
    snap = model.snapshot
    if snap is not None and snap.enabled and snap.store:
        yield "snapshot_store", snap.store, "snapshot.store_config", snap.store_config, []
        yield (
            "serializer",
            snap.serializer,
            "snapshot.serializer_config",
            snap.serializer_config,
            [],
        )
    if model.dead_letter is not None:
        dl = model.dead_letter
        yield "dead_letter_store", dl.store, "dead_letter.store_config", dl.store_config, []
    for where, spec in model.engine_settings().observers:
        yield "observer", spec.type, where, spec.options(), []


def check_requests(
    model: EngineConfig, *, timeout: float = 10.0, checks: CheckRegistry | None = None
) -> list[tuple[CheckRequest, list[Any]]]:
    """The request of every configured plugin that has checks, with those checks."""
    checks = checks if checks is not None else check_registry()
    uses: list[TableUse] | None = None
    out = []
    for kind, name, where, options, served in _plugins(model):
        entries = checks.get(kind, name)
        if not entries:
            continue
        validated = _options_model(kind, name, options)
        if validated is None:
            continue
        if uses is None:
            uses = table_uses(model)
        request = CheckRequest(
            kind, name, where, validated, tuple(uses[i] for i in served), timeout=timeout
        )
        out.append((request, entries))
    return out


def _run_one(request: CheckRequest, entry: Any) -> list[Finding]:
    try:
        found = list(entry.check(request))
    except Exception as exc:
        logger.debug("check of %s failed", request.where, exc_info=True)
        text = mask_text(f"{type(exc).__name__}: {exc}")
        return [
            Finding.error(
                "CHECK_FAILED",
                f"the {request.kind.replace('_', ' ')} {request.name!r} check failed: {text}",
                f"report this to the authors of {entry.provider}",
                where=request.where,
            )
        ]
    return [f if f.where else dataclasses.replace(f, where=request.where) for f in found]


def _ask(kind: str, spec: PluginSpec | TargetConfig, question: str) -> bool | None:
    """Build the plugin of ``spec`` (constructors do no I/O by contract), ask it
    ``question()`` and close it; None when that is not possible."""
    try:
        made = registry(kind).build(spec.type, **spec.options())
    except Exception:
        return None
    try:
        return bool(getattr(made, question)())
    except Exception:
        return None
    finally:
        close = getattr(made, "close", None) if kind == "source" else None
        if callable(close):
            try:
                close()
            except Exception:
                logger.debug("closing the %s built for a check failed", kind, exc_info=True)


def config_findings(model: EngineConfig) -> list[Finding]:
    """The findings about how the sections work together (no plugin check needed): a slot
    that can never advance (:func:`laredo.config.checks.stalled_slot_findings`), a durable
    target behind a source that does not resume
    (:func:`laredo.config.checks.ephemeral_source_findings`). Each plugin is built at most
    once to be asked."""
    resumes: dict[str, bool | None] = {}
    durables: dict[tuple[int, int], bool | None] = {}

    def resumable(sid: str) -> bool | None:
        if sid not in resumes:
            resumes[sid] = _ask("source", model.sources[sid], "supports_resume")
        return resumes[sid]

    def durable(i: int, j: int) -> bool | None:
        if (i, j) not in durables:
            durables[i, j] = _ask("target", model.tables[i].targets[j], "is_durable")
        return durables[i, j]

    out = ephemeral_source_findings(model, resumable=resumable, durable=durable)
    snap = model.snapshot
    if snap is not None and snap.enabled and snap.store and not snap.schedule:
        out += stalled_slot_findings(model, resumable=resumable, durable=durable)
    return out


def run_checks(
    model: EngineConfig, *, timeout: float = 10.0, checks: CheckRegistry | None = None
) -> CheckReport:
    """Run every registered check of the plugins ``model`` configures, concurrently (at most
    8 at a time), after the checks of the configuration as a whole
    (:func:`config_findings`); findings come back in configuration order. ``checks`` defaults
    to the installed plugins' (``laredo_register_checks``)."""
    jobs = [
        (request, entry)
        for request, entries in check_requests(model, timeout=timeout, checks=checks)
        for entry in entries
    ]
    own = config_findings(model)
    if not jobs:
        return CheckReport(tuple(own), ("configuration",) if own else ())
    with ThreadPoolExecutor(max_workers=min(8, len(jobs)), thread_name_prefix="check") as pool:
        results = list(pool.map(lambda job: _run_one(*job), jobs))
    checked = tuple(dict.fromkeys(f"{r.where} ({r.name})" for r, _ in jobs))
    return CheckReport((*own, *(f for found in results for f in found)), checked)
