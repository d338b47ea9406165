"""``Pipeline``: binds a source's table to a target with filters, transforms and policies."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from .contracts import SyncTarget
from .errors import ConfigError
from .pipeline_settings import (
    BASELINE_CHUNK_ROWS,
    BASELINE_MODE,
    BASELINE_MODES,
    BUFFER_POLICY,
    BUFFER_SIZE,
    ERROR_POLICY,
    MAX_RETRIES,
    RETRY_BACKOFF,
    RETRY_MAX_BACKOFF,
    SETTINGS,
    TTL_FIELD,
    TTL_SCAN_INTERVAL,
    VALIDATION_ACTION,
    VALIDATION_INTERVAL,
)
from .types import (
    BufferPolicy,
    ErrorPolicy,
    PipelineState,
    Row,
    TableIdentifier,
    ValidationAction,
)
from .units import to_seconds

_BUFFER_POLICY = BufferPolicy(BUFFER_POLICY.default)
_ERROR_POLICY = ErrorPolicy(ERROR_POLICY.default)
_VALIDATION_ACTION = ValidationAction(VALIDATION_ACTION.default)


@dataclass(eq=False)
class Pipeline:
    """One pipeline: ``source_id`` + ``table`` -> filters -> transforms -> buffer -> ``target``.

    ``ttl`` is a callable ``row -> datetime | None`` (expiry time) and ``ttl_field`` names a
    column holding a ``datetime`` (or ISO-8601 string); expired rows are never loaded, an update
    to an expired value becomes a delete, and ``ttl_scan_interval`` sweeps stored rows.
    ``validation_interval`` compares the target's row count with the source's at one position
    (a :class:`~laredo.contracts.RowCounter` source and a pipeline without filters, transforms
    or TTL), else with the engine's count of the rows it delivered. ``baseline_mode``
    (``snapshot`` | ``chunked``) and ``baseline_chunk_rows`` override the source's
    ``baseline`` for this table (``None``: the source's); pipelines of one table should agree.
    """

    source_id: str
    table: TableIdentifier | str
    target: SyncTarget
    filters: Sequence[Any] = ()
    transforms: Sequence[Any] = ()
    # defaults, bounds and configuration keys: :mod:`laredo.pipeline_settings`
    buffer_size: int = BUFFER_SIZE.default
    buffer_policy: BufferPolicy | str = _BUFFER_POLICY
    error_policy: ErrorPolicy | str = _ERROR_POLICY
    max_retries: int = MAX_RETRIES.default
    retry_backoff: float | timedelta = RETRY_BACKOFF.default
    retry_max_backoff: float | timedelta = RETRY_MAX_BACKOFF.default
    ttl: Callable[[Row], datetime | None] | None = None
    ttl_field: str | None = TTL_FIELD.default
    ttl_scan_interval: float | timedelta | None = TTL_SCAN_INTERVAL.default
    validation_action: ValidationAction | str = _VALIDATION_ACTION
    validation_interval: float | timedelta | None = VALIDATION_INTERVAL.default
    baseline_mode: str | None = BASELINE_MODE.default
    baseline_chunk_rows: int | None = BASELINE_CHUNK_ROWS.default
    id: str | None = None
    target_type: str | None = None

    def problems(self, index: int) -> list[str]:
        """Every configuration problem of this pipeline (empty when valid)."""
        where = f"pipelines[{index}]"
        out: list[str] = []
        if not self.source_id:
            out.append(f"{where}.source_id: empty; name the source this pipeline reads from")
        if isinstance(self.table, str):
            try:
                self.table = TableIdentifier.parse(self.table)
            except ValueError as exc:
                out.append(f"{where}.table: {exc}")
        elif not isinstance(self.table, TableIdentifier) or not self.table.table:
            out.append(f"{where}.table: empty table name; use laredo.Table('schema', 'table')")
        given: Any = self.target  # untyped callers may pass anything
        if given is None:
            out.append(f"{where}.target: missing; give a target such as IndexedTarget()")
        else:
            missing = [
                m
                for m in ("on_init", "on_baseline_row", "on_insert", "on_update", "on_delete")
                if not callable(getattr(self.target, m, None))
            ]
            if missing:
                out.append(
                    f"{where}.target: {type(self.target).__name__} is not a SyncTarget "
                    f"(missing {', '.join(missing)})"
                )
        if problem := BUFFER_SIZE.problem(self.buffer_size, where):
            out.append(problem)
        for name, enum_type in ((s.keyword, s.choices) for s in SETTINGS if s.choices):
            value = getattr(self, name)
            if not isinstance(value, enum_type):
                try:
                    setattr(self, name, enum_type(str(value).lower().replace("-", "_")))
                except ValueError:
                    allowed = ", ".join(e.value for e in enum_type)
                    out.append(f"{where}.{name}: unknown value {value!r}; use one of {allowed}")
        if problem := MAX_RETRIES.problem(self.max_retries, where):
            out.append(problem)
        out.extend(self._baseline_problems(where))
        for name in (s.keyword for s in SETTINGS if s.duration):
            value = getattr(self, name)
            try:
                seconds = to_seconds(value, f"{where}.{name}")
            except ConfigError as exc:
                out.extend(exc.problems)
                continue
            if seconds is not None and seconds <= 0 and name.endswith("interval"):
                out.append(f"{where}.{name}: must be positive (got {value!r})")
            else:
                setattr(self, name, seconds)
        return out

    def _baseline_problems(self, where: str) -> list[str]:
        out: list[str] = []
        if self.baseline_mode is not None and self.baseline_mode not in BASELINE_MODES:
            out.append(
                f"{where}.baseline_mode: unknown value {self.baseline_mode!r}; use one of "
                f"{', '.join(BASELINE_MODES)} (None: the source's baseline.mode)"
            )
        rows = self.baseline_chunk_rows
        if rows is not None and (problem := BASELINE_CHUNK_ROWS.problem(rows, where)):
            out.append(problem)
        return out

    @property
    def table_id(self) -> TableIdentifier:
        assert isinstance(self.table, TableIdentifier)
        return self.table

    def resolved_target_type(self) -> str:
        if self.target_type:
            return self.target_type
        declared = getattr(self.target, "target_type", None)
        if isinstance(declared, str) and declared:
            return declared
        return type(self.target).__name__

    def pipeline_id(self) -> str:
        return self.id or f"{self.source_id}:{self.table}:{self.resolved_target_type()}"


@dataclass(frozen=True, slots=True)
class PipelineInfo:
    id: str
    source_id: str
    table: TableIdentifier
    target_type: str
    state: PipelineState
    row_count: int | None
    buffer_depth: int
    buffer_capacity: int
    error: str | None = None
    applied_position: str | None = None
    durable_position: str | None = None


@dataclass(frozen=True, slots=True)
class SourceRunInfo:
    id: str
    source_type: str
    supports_resume: bool
    ordering_guarantee: str
    state: str
    lag_bytes: int
    lag_time: timedelta | None
    acked_position: str | None
    current_position: str | None
    pipelines: tuple[str, ...]
    error: str | None = None
