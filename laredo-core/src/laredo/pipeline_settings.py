"""Every pipeline setting, declared once: its ``Pipeline`` keyword, its configuration key,
its type, default, bounds and description; and the target sections' models (``buffer``,
``error_handling``, ``ttl``, ``validation``), generated from the declarations.

The Python API (:class:`laredo.Pipeline` keywords and their checks) and the pipeline worker
read defaults and bounds from here, and ``build_pipeline`` maps a configuration to ``Pipeline``
keywords by looping over :data:`SETTINGS`. The section keys of a table and of a target entry
(:class:`TableSections`, :class:`TargetSections`, bases of ``laredo.config``'s ``TableConfig``
and ``TargetConfig``) are generated from the ``table_level``/``target_level`` flags. Add a
setting (or a section) here: its declaration, its section's tuple and the stub lines the stub
test asks for; then its ``Pipeline`` keyword.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from .settings import DEFAULT, Section, Setting, declared, generated, section_model
from .types import BufferPolicy, ErrorPolicy, ValidationAction
from .units import Duration, OptionalDuration

__all__ = [
    "BASELINE_CHUNK_ROWS",
    "BASELINE_MODE",
    "BASELINE_MODES",
    "BUFFER_POLICY",
    "BUFFER_SIZE",
    "ERROR_POLICY",
    "MAX_RETRIES",
    "RETRY_BACKOFF",
    "RETRY_MAX_BACKOFF",
    "SETTINGS",
    "TTL_FIELD",
    "TTL_MODE",
    "TTL_SCAN_INTERVAL",
    "VALIDATION_ACTION",
    "VALIDATION_INTERVAL",
    "BufferConfig",
    "ErrorHandlingConfig",
    "PipelineSetting",
    "TableBaselineConfig",
    "TableSections",
    "TargetSections",
    "TtlConfig",
    "ValidationConfig",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class PipelineSetting(Setting):
    """One pipeline setting: ``Pipeline(<keyword>=...)`` in Python, ``<section> { <key> }`` in a
    target's configuration."""

    keyword: str
    """The :class:`laredo.Pipeline` keyword."""
    table_level: bool = False
    """Its section may also be given on the table (for every target of it); the target's wins."""
    target_level: bool = True
    """Its section may be given on a target (``False``: on the table only)."""
    serve_only: bool = True
    """Only the serving process (``laredo serve``) uses it; the Spark baseline leaves it."""
    choices: type[enum.Enum] | None = None
    """Its values are this enum's (``Pipeline`` turns strings into members)."""
    duration: bool = False
    """A duration: seconds, a ``timedelta`` or a string such as ``"5m"``."""

    def description(self) -> str:
        return f"{self.doc} (Pipeline keyword: {self.keyword})"

    def read(self, target: Any, table: Any) -> Any:
        """This setting's value for a target section model of a table model: the target's
        section, else the table's (``table_level``), else the default."""
        section = getattr(target, self.section, None) if self.target_level else None
        if section is None and self.table_level:
            section = getattr(table, self.section, None)
        return self.default if section is None else getattr(section, self.key)

    def problem(self, value: Any, where: str) -> str | None:
        """What is wrong with ``value`` for this setting's bounds (integers only), or None."""
        if self.positive and (not isinstance(value, int) or isinstance(value, bool) or value <= 0):
            return f"{where}.{self.keyword}: must be a positive integer (got {value!r})"
        if self.minimum is not None and (
            not isinstance(value, int) or isinstance(value, bool) or value < self.minimum
        ):
            return f"{where}.{self.keyword}: must be >= {self.minimum:g} (got {value!r})"
        if self.maximum is not None and value > self.maximum:
            return f"{where}.{self.keyword}: must be <= {self.maximum:g} (got {value!r})"
        return None


BUFFER_SIZE = PipelineSetting(
    keyword="buffer_size",
    section="buffer",
    key="max_size",
    of_type=int,
    default=10_000,
    doc="changes held between source and target",
    positive=True,
)
BUFFER_POLICY = PipelineSetting(
    keyword="buffer_policy",
    section="buffer",
    key="policy",
    of_type=Literal["block", "drop_oldest", "error"],
    default="block",
    doc="when the buffer is full: block, drop_oldest, error",
    choices=BufferPolicy,
)
ERROR_POLICY = PipelineSetting(
    keyword="error_policy",
    section="error_handling",
    key="on_persistent_failure",
    of_type=Literal["isolate", "stop_source", "stop_all", "dead_letter"],
    default="isolate",
    doc="after the retries: isolate, stop_source, stop_all, dead_letter",
    choices=ErrorPolicy,
)
MAX_RETRIES = PipelineSetting(
    keyword="max_retries",
    section="error_handling",
    key="max_retries",
    of_type=int,
    default=5,
    doc="retries of a failed apply",
    minimum=0,
)
RETRY_BACKOFF = PipelineSetting(
    keyword="retry_backoff",
    section="error_handling",
    key="retry_backoff",
    of_type=Duration,
    default=0.1,
    doc="first backoff; doubles per retry",
    duration=True,
)
RETRY_MAX_BACKOFF = PipelineSetting(
    keyword="retry_max_backoff",
    section="error_handling",
    key="retry_max_backoff",
    of_type=Duration,
    default=5.0,
    doc="cap of the backoff",
    duration=True,
)
TTL_FIELD = PipelineSetting(
    keyword="ttl_field",
    section="ttl",
    key="field",
    of_type=str,
    doc="column holding the expiry time",
    required=True,
    min_length=1,
    table_level=True,
)
TTL_SCAN_INTERVAL = PipelineSetting(
    keyword="ttl_scan_interval",
    section="ttl",
    key="check_interval",
    of_type=OptionalDuration,
    doc="sweep of expired rows (None: never)",
    table_level=True,
    duration=True,
)
TTL_MODE = Setting(
    section="ttl",
    key="mode",
    of_type=Literal["delete"],
    default="delete",
    doc="expired rows are deleted from the target (the only mode)",
)
VALIDATION_ACTION = PipelineSetting(
    keyword="validation_action",
    section="validation",
    key="action",
    of_type=Literal["warn", "re_baseline", "fail"],
    default="warn",
    doc="on a count mismatch: warn, re_baseline, fail",
    table_level=True,
    choices=ValidationAction,
)
VALIDATION_INTERVAL = PipelineSetting(
    keyword="validation_interval",
    section="validation",
    key="interval",
    of_type=OptionalDuration,
    doc="row-count check (None: never)",
    table_level=True,
    duration=True,
)

BASELINE_MODES = ("snapshot", "chunked")
"""The values of ``baseline.mode``."""
BASELINE_MODE = PipelineSetting(
    keyword="baseline_mode",
    section="baseline",
    key="mode",
    of_type=Literal["snapshot", "chunked"] | None,
    default=None,
    doc="how the table's baseline is read: snapshot, chunked (None: its source's baseline.mode)",
    table_level=True,
    target_level=False,
)
BASELINE_CHUNK_ROWS = PipelineSetting(
    keyword="baseline_chunk_rows",
    section="baseline",
    key="chunk_rows",
    of_type=int | None,
    default=None,
    doc="rows per chunk of a chunked baseline (None: its source's baseline.chunk_rows)",
    minimum=1,
    maximum=10_000_000,
    table_level=True,
    target_level=False,
)

SETTINGS: tuple[PipelineSetting, ...] = (
    BUFFER_SIZE,
    BUFFER_POLICY,
    ERROR_POLICY,
    MAX_RETRIES,
    RETRY_BACKOFF,
    RETRY_MAX_BACKOFF,
    TTL_FIELD,
    TTL_SCAN_INTERVAL,
    VALIDATION_ACTION,
    VALIDATION_INTERVAL,
    BASELINE_MODE,
    BASELINE_CHUNK_ROWS,
)
"""Every pipeline setting, in the order of :class:`laredo.Pipeline`'s keywords."""


def _entry_sections(level: Literal["table", "target"]) -> tuple[Setting, ...]:
    """The section keys of a table (``level="table"``) or target entry, one per section model
    of this module holding a setting of that level, in :data:`SETTINGS` order. A section is
    optional (None: absent) on a table, and on a target when the table's may apply or it has
    a required key; otherwise its default is the section with every default."""
    models = {declared(m)[0].section: m for m in generated(__name__)}
    out: list[Setting] = []
    for section in dict.fromkeys(s.section for s in SETTINGS):
        here = [s for s in SETTINGS if s.section == section]
        if not any(s.table_level if level == "table" else s.target_level for s in here):
            continue
        model = models[section]
        optional = (
            level == "table"
            or any(s.table_level for s in here)
            or any(s.required for s in declared(model))
        )
        keys = ", ".join(s.key for s in declared(model))
        out.append(
            Setting(
                section="tables" if level == "table" else "tables.targets",
                key=section,
                of_type=model | None if optional else model,
                default=None if optional else model(),
                doc=f"{section} {{ {keys} }}"
                + (" (for every target of the table)" if level == "table" else ""),
            )
        )
    return tuple(out)


if TYPE_CHECKING:  # the generated models for mypy; test_settings checks them against the above

    class BufferConfig(Section):
        max_size: int = DEFAULT
        policy: Literal["block", "drop_oldest", "error"] = DEFAULT

    class ErrorHandlingConfig(Section):
        max_retries: int = DEFAULT
        on_persistent_failure: Literal["isolate", "stop_source", "stop_all", "dead_letter"] = (
            DEFAULT
        )
        retry_backoff: Duration = DEFAULT
        retry_max_backoff: Duration = DEFAULT

    class TtlConfig(Section):
        field: str
        check_interval: OptionalDuration = DEFAULT
        mode: Literal["delete"] = DEFAULT

    class ValidationConfig(Section):
        interval: OptionalDuration = DEFAULT
        action: Literal["warn", "re_baseline", "fail"] = DEFAULT

    class TableBaselineConfig(Section):
        mode: Literal["snapshot", "chunked"] | None = DEFAULT
        chunk_rows: int | None = DEFAULT

    class TargetSections(Section):
        buffer: BufferConfig = DEFAULT
        error_handling: ErrorHandlingConfig = DEFAULT
        ttl: TtlConfig | None = DEFAULT
        validation: ValidationConfig | None = DEFAULT

    class TableSections(Section):
        ttl: TtlConfig | None = DEFAULT
        validation: ValidationConfig | None = DEFAULT
        baseline: TableBaselineConfig | None = DEFAULT

else:
    BufferConfig = section_model("BufferConfig", (BUFFER_SIZE, BUFFER_POLICY), module=__name__)
    ErrorHandlingConfig = section_model(
        "ErrorHandlingConfig",
        (MAX_RETRIES, ERROR_POLICY, RETRY_BACKOFF, RETRY_MAX_BACKOFF),
        module=__name__,
    )
    TtlConfig = section_model(
        "TtlConfig", (TTL_FIELD, TTL_SCAN_INTERVAL, TTL_MODE), module=__name__
    )
    ValidationConfig = section_model(
        "ValidationConfig", (VALIDATION_INTERVAL, VALIDATION_ACTION), module=__name__
    )
    TableBaselineConfig = section_model(
        "TableBaselineConfig", (BASELINE_MODE, BASELINE_CHUNK_ROWS), module=__name__
    )
    TargetSections = section_model(
        "TargetSections",
        _entry_sections("target"),
        module=__name__,
        doc="The pipeline-setting sections of a target entry (base of ``TargetConfig``).",
    )
    TableSections = section_model(
        "TableSections",
        _entry_sections("table"),
        module=__name__,
        doc="The pipeline-setting sections of a table entry (base of ``TableConfig``).",
    )
