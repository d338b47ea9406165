"""Checks of ``Engine(...)`` arguments: every problem listed, none fatal on its own."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..contracts import SyncSource
from ..errors import ConfigError
from ..filters import as_filter
from ..pipeline import Pipeline
from ..transforms import as_transform
from ..types import ErrorPolicy, TableIdentifier
from ..units import to_seconds

__all__ = ["SOURCE_METHODS", "check_duration", "check_pipelines", "check_sources"]

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
    pipelines: Sequence[Any], sources: Mapping[str, Any], has_dead_letter_store: bool
) -> list[str]:
    problems: list[str] = []
    if not pipelines:
        problems.append("pipelines: none configured; add at least one Pipeline")
    ids: set[str] = set()
    for i, p in enumerate(pipelines):
        if not isinstance(p, Pipeline):
            problems.append(f"pipelines[{i}]: expected laredo.Pipeline, got {type(p).__name__}")
            continue
        problems.extend(p.problems(i))
        if p.source_id and p.source_id not in sources:
            known = ", ".join(sorted(sources)) or "none"
            problems.append(
                f"pipelines[{i}].source_id: unknown source {p.source_id!r} (sources: {known})"
            )
        if isinstance(p.table, TableIdentifier) and p.target is not None:
            pid = p.pipeline_id()
            if pid in ids:
                problems.append(
                    f"pipelines[{i}]: duplicate pipeline id {pid!r}; give it a distinct id="
                )
            ids.add(pid)
        if p.error_policy is ErrorPolicy.DEAD_LETTER and not has_dead_letter_store:
            problems.append(f"pipelines[{i}].error_policy: 'dead_letter' needs a dead_letter_store")
        try:
            for f in p.filters:
                as_filter(f)
            for t in p.transforms:
                as_transform(t)
        except Exception as exc:
            problems.append(f"pipelines[{i}]: invalid filter/transform: {exc}")
    return problems


def check_duration(value: Any, what: str, problems: list[str]) -> float | None:
    """Seconds from a duration argument, or ``None`` after recording why it is invalid."""
    try:
        return to_seconds(value, what)
    except ConfigError as exc:
        problems.extend(exc.problems)
        return None
