"""Every pipeline setting, declared once: its ``Pipeline`` keyword, its configuration key, its
default, its bounds and its description.

The configuration models (:mod:`laredo.config.models`: ``buffer { max_size }``, ...), the
Python API (:class:`laredo.Pipeline` keywords and their checks) and the pipeline worker read
defaults and bounds from here, so the three cannot drift apart; the test pins each setting to
the fields that use it, and ``build_pipeline`` maps a configuration to ``Pipeline`` keywords
by looping over :data:`SETTINGS`. Add a setting here, then give it a field in both places.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

from pydantic import Field

from .types import BufferPolicy, ErrorPolicy, ValidationAction

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
    "TTL_SCAN_INTERVAL",
    "VALIDATION_ACTION",
    "VALIDATION_INTERVAL",
    "PipelineSetting",
]


@dataclass(frozen=True, slots=True)
class PipelineSetting:
    """One pipeline setting: ``Pipeline(<keyword>=...)`` in Python, ``<section> { <key> }`` in a
    target's configuration."""

    keyword: str
    """The :class:`laredo.Pipeline` keyword."""
    section: str
    """The target's configuration section holding it (``buffer``, ``error_handling``, ...)."""
    key: str
    """Its key in that section."""
    default: Any
    doc: str
    minimum: int | float | None = None
    """Least allowed value (inclusive), if any."""
    maximum: int | None = None
    """Greatest allowed value (inclusive), if any."""
    positive: bool = False
    """Must be > 0."""
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

    @property
    def config_key(self) -> str:
        """``section.key``, as written in a configuration file."""
        return f"{self.section}.{self.key}"

    def field(self) -> Any:
        """The pydantic field of the configuration model: default, bounds, description."""
        return Field(
            default=self.default,
            ge=self.minimum,
            le=self.maximum,
            gt=0 if self.positive else None,
            description=f"{self.doc} (Pipeline keyword: {self.keyword})",
        )

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
            return f"{where}.{self.keyword}: must be >= {self.minimum} (got {value!r})"
        if self.maximum is not None and value > self.maximum:
            return f"{where}.{self.keyword}: must be <= {self.maximum} (got {value!r})"
        return None


BUFFER_SIZE = PipelineSetting(
    "buffer_size",
    "buffer",
    "max_size",
    10_000,
    "changes held between source and target",
    positive=True,
)
BUFFER_POLICY = PipelineSetting(
    "buffer_policy",
    "buffer",
    "policy",
    "block",
    "when the buffer is full: block, drop_oldest, error",
    choices=BufferPolicy,
)
ERROR_POLICY = PipelineSetting(
    "error_policy",
    "error_handling",
    "on_persistent_failure",
    "isolate",
    "after the retries: isolate, stop_source, stop_all, dead_letter",
    choices=ErrorPolicy,
)
MAX_RETRIES = PipelineSetting(
    "max_retries", "error_handling", "max_retries", 5, "retries of a failed apply", minimum=0
)
RETRY_BACKOFF = PipelineSetting(
    "retry_backoff",
    "error_handling",
    "retry_backoff",
    0.1,
    "first backoff; doubles per retry",
    duration=True,
)
RETRY_MAX_BACKOFF = PipelineSetting(
    "retry_max_backoff",
    "error_handling",
    "retry_max_backoff",
    5.0,
    "cap of the backoff",
    duration=True,
)
TTL_FIELD = PipelineSetting(
    "ttl_field", "ttl", "field", None, "column holding the expiry time", table_level=True
)
TTL_SCAN_INTERVAL = PipelineSetting(
    "ttl_scan_interval",
    "ttl",
    "check_interval",
    None,
    "sweep of expired rows (None: never)",
    table_level=True,
    duration=True,
)
VALIDATION_ACTION = PipelineSetting(
    "validation_action",
    "validation",
    "action",
    "warn",
    "on a count mismatch: warn, re_baseline, fail",
    table_level=True,
    choices=ValidationAction,
)
VALIDATION_INTERVAL = PipelineSetting(
    "validation_interval",
    "validation",
    "interval",
    None,
    "row-count check (None: never)",
    table_level=True,
    duration=True,
)

BASELINE_MODES = ("snapshot", "chunked")
"""The values of ``baseline.mode``."""
BASELINE_MODE = PipelineSetting(
    "baseline_mode",
    "baseline",
    "mode",
    None,
    "how the table's baseline is read: snapshot, chunked (None: its source's baseline.mode)",
    table_level=True,
    target_level=False,
)
BASELINE_CHUNK_ROWS = PipelineSetting(
    "baseline_chunk_rows",
    "baseline",
    "chunk_rows",
    None,
    "rows per chunk of a chunked baseline (None: its source's baseline.chunk_rows)",
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
