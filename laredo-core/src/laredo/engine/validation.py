"""Checks of ``Engine(...)`` arguments, and the one home of the cross-section rules.

Every problem is listed, none fatal on its own. :func:`cross_section_problems` holds each rule
between sections (sources, pipelines, snapshot and dead-letter stores) once; ``Engine(...)``
reports it in the Python API's words (:data:`PYTHON_WORDS`) and ``laredo.config`` in the
configuration file's (:data:`CONFIG_WORDS`)."""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..contracts import SyncSource
from ..errors import ConfigError
from ..filters import as_filter
from ..pipeline import Pipeline
from ..transforms import as_transform
from ..types import ErrorPolicy, TableIdentifier
from ..units import to_seconds

__all__ = [
    "CONFIG_WORDS",
    "PYTHON_WORDS",
    "SOURCE_METHODS",
    "Declared",
    "KeyPath",
    "Wording",
    "check_duration",
    "check_pipelines",
    "check_sources",
    "cross_section_problems",
    "str_problem",
]

SOURCE_METHODS: tuple[str, ...] = tuple(
    name for name, value in vars(SyncSource).items() if not name.startswith("_") and callable(value)
)
"""The methods of the ``SyncSource`` contract, read from the Protocol itself."""


def check_sources(sources: Mapping[str, Any]) -> list[str]:
    problems: list[str] = []
    if not sources:
        problems.append("sources: none configured; give at least one source")
    for sid, src in sources.items():
        if not sid:
            problems.append("sources: a source has an empty id")
        if src is None:
            problems.append(f"sources.{sid}: is None")
            continue
        if not isinstance(src, SyncSource):
            missing = [m for m in SOURCE_METHODS if not callable(getattr(src, m, None))]
            problems.append(
                f"sources.{sid}: {type(src).__name__} is not a SyncSource "
                f"(missing {', '.join(missing)})"
            )
    return problems


def check_pipelines(
    pipelines: Sequence[Any],
    sources: Mapping[str, Any],
    has_dead_letter_store: bool,
    *,
    snapshots_without_store: bool = False,
) -> list[str]:
    """Problems of ``Engine(pipelines=...)``: each pipeline's own, then the cross-section rules
    (:func:`cross_section_problems`) in the Python API's words."""
    problems: list[str] = []
    if not pipelines:
        problems.append("pipelines: none configured; add at least one Pipeline")
    declared: list[Declared] = []
    for i, p in enumerate(pipelines):
        if not isinstance(p, Pipeline):
            problems.append(f"pipelines[{i}]: expected laredo.Pipeline, got {type(p).__name__}")
            continue
        problems.extend(p.problems(i))
        pid = (
            p.pipeline_id()
            if isinstance(p.table, TableIdentifier) and p.target is not None
            else None
        )
        declared.append(
            Declared(
                where=(f"pipelines[{i}]",),
                source_key=(f"pipelines[{i}].source_id",),
                policy_key=(f"pipelines[{i}].error_policy",),
                source_id=p.source_id,
                pipeline_id=pid,
                dead_letter=p.error_policy is ErrorPolicy.DEAD_LETTER,
            )
        )
        try:
            for f in p.filters:
                as_filter(f)
            for t in p.transforms:
                as_transform(t)
        except Exception as exc:
            problems.append(f"pipelines[{i}]: invalid filter/transform: {exc}")
    problems += [
        str_problem(path, msg)
        for path, msg in cross_section_problems(
            declared,
            sources,
            dead_letter_store=has_dead_letter_store,
            snapshots_without_store=snapshots_without_store,
            words=PYTHON_WORDS,
        )
    ]
    return problems


# -- cross-section rules: the one home of each, for ``Engine(...)`` and configuration files --

KeyPath = tuple[str | int, ...]


def str_problem(path: KeyPath, message: str) -> str:
    """``key: message`` (the dotted key path), or the message alone when it names its place."""
    return f"{'.'.join(str(k) for k in path)}: {message}" if path else message


@dataclass(frozen=True, slots=True)
class Declared:
    """One pipeline as the cross-section rules see it, whichever front end declared it; the
    key paths say where (``("tables", 0, "targets", 1)`` or ``("pipelines[1]",)``)."""

    where: KeyPath
    source_key: KeyPath
    policy_key: KeyPath
    source_id: str
    pipeline_id: str | None
    """``None``: no id could be derived (the pipeline's own problems say why)."""
    dead_letter: bool
    """Its error policy is ``dead_letter``."""


@dataclass(frozen=True, slots=True)
class Wording:
    """How a front end words the cross-section problems: its own keys and fixes."""

    unknown_source: Callable[[str, str], str]
    """``(source id, defined ids)`` -> message."""
    no_snapshot_store: tuple[KeyPath, str]
    no_dead_letter_store: str
    duplicate_id: Callable[[str, Declared, Declared], tuple[KeyPath, str]]
    """``(pipeline id, this one, the first one)`` -> (key path, message)."""


def _where(d: Declared) -> str:
    return ".".join(str(k) for k in d.where)


PYTHON_WORDS = Wording(
    unknown_source=lambda sid, known: f"unknown source {sid!r} (sources: {known or 'none'})",
    no_snapshot_store=(
        ("snapshot_schedule/snapshot_on_shutdown",),
        "need a snapshot_store (e.g. laredo.snapshot_store('local', path=...))",
    ),
    no_dead_letter_store="'dead_letter' needs a dead_letter_store",
    duplicate_id=lambda pid, this, first: (
        this.where,
        f"duplicate pipeline id {pid!r}; give it a distinct id=",
    ),
)
"""The Python API's words (``Engine(...)`` arguments)."""

CONFIG_WORDS = Wording(
    unknown_source=lambda sid, known: f"unknown source {sid!r} (defined sources: {known})",
    no_snapshot_store=(
        ("snapshot", "store"),
        "schedule/on_shutdown need a store "
        "(e.g. store = local, store_config { path = /var/lib/laredo })",
    ),
    no_dead_letter_store="dead_letter needs a dead_letter { store = ... } section",
    duplicate_id=lambda pid, this, first: (
        (),
        f"{_where(this)}: pipeline id {pid!r} also used by {_where(first)}: give one of "
        "them a distinct `id`",
    ),
)
"""The configuration file's words (HOCON keys)."""


def cross_section_problems(
    pipelines: Sequence[Declared],
    sources: Collection[str],
    *,
    dead_letter_store: bool,
    snapshots_without_store: bool = False,
    words: Wording,
) -> list[tuple[KeyPath, str]]:
    """The rules between sections, each written once: every pipeline reads a defined source;
    scheduled or shutdown snapshots need a snapshot store (``snapshots_without_store``: the
    caller found them without one); the ``dead_letter`` error policy needs a dead-letter store;
    pipeline ids are unique. Returns ``(key path, message)`` pairs in ``words``."""
    out: list[tuple[KeyPath, str]] = []
    known = ", ".join(sorted(sources))
    reported: set[KeyPath] = set()  # a table's targets share its source key: once each
    for d in pipelines:
        if d.source_id and d.source_id not in sources and d.source_key not in reported:
            reported.add(d.source_key)
            out.append((d.source_key, words.unknown_source(d.source_id, known)))
    if snapshots_without_store:
        out.append(words.no_snapshot_store)
    if not dead_letter_store:
        out += [(d.policy_key, words.no_dead_letter_store) for d in pipelines if d.dead_letter]
    first: dict[str, Declared] = {}
    for d in pipelines:
        if d.pipeline_id is None:
            continue
        if d.pipeline_id in first:
            out.append(words.duplicate_id(d.pipeline_id, d, first[d.pipeline_id]))
        else:
            first[d.pipeline_id] = d
    return out


def check_duration(value: Any, what: str, problems: list[str]) -> float | None:
    """Seconds from a duration argument, or ``None`` after recording why it is invalid."""
    try:
        return to_seconds(value, what)
    except ConfigError as exc:
        problems.extend(exc.problems)
        return None
