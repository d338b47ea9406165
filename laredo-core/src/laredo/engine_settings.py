"""Every engine setting, declared once: its :class:`laredo.Engine` keyword, its configuration
key, its default, its description and whether only the serving process uses it.

Two kinds: the ``snapshot`` section's (``snapshot { schedule, retention { keep_count } }``) and
the runner's (``shutdown { grace_period }``, ``observability { lag_interval }``: sections a
runner such as laredo-server keeps). The configuration models take their fields from here
(:meth:`EngineSetting.field`), ``Engine`` its defaults, and ``build_engine`` maps the model to
``Engine`` keywords by looping over :data:`ENGINE_SETTINGS`; nothing else spells a key or a
default. Add a setting here (and its ``Engine`` keyword), then give it a field in its model.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from pydantic import Field

from .pipeline_settings import SETTINGS as PIPELINE_SETTINGS

__all__ = [
    "ENGINE_SETTINGS",
    "LAG_INTERVAL",
    "RUNNER_SETTINGS",
    "SHUTDOWN_TIMEOUT",
    "SNAPSHOT_MAX_AGE",
    "SNAPSHOT_META_POLICY",
    "SNAPSHOT_ON_SHUTDOWN",
    "SNAPSHOT_RETENTION",
    "SNAPSHOT_SCHEDULE",
    "SNAPSHOT_SETTINGS",
    "SNAPSHOT_USER_META",
    "EngineSetting",
    "serve_only_keys",
]


@dataclass(frozen=True, slots=True)
class EngineSetting:
    """One engine setting: ``Engine(<keyword>=...)`` in Python, ``<section> { <key> }`` in a
    configuration file (``key`` may be a dotted path inside the section)."""

    keyword: str
    """The :class:`laredo.Engine` keyword."""
    section: str
    """The top-level configuration section holding it (``snapshot``, ``shutdown``, ...)."""
    key: str
    """Its key (or dotted path) in that section."""
    default: Any
    doc: str
    serve_only: bool = True
    """Only the serving process (``laredo serve``) uses it; the Spark baseline leaves it."""
    needs_store: bool = False
    """Takes effect only with a snapshot store configured (else the default applies)."""
    minimum: int | None = None
    """Least allowed value (inclusive), if any."""

    @property
    def config_key(self) -> str:
        """``section.key``, as written in a configuration file."""
        return f"{self.section}.{self.key}"

    def field(self) -> Any:
        """The pydantic field of the configuration model: default, bounds, description."""
        description = f"{self.doc} (Engine keyword: {self.keyword})"
        if isinstance(self.default, dict):
            return Field(default_factory=dict, description=description)
        return Field(default=self.default, ge=self.minimum, description=description)

    def read(self, section: Any) -> Any:
        """This setting's value in a section model (None or absent: the default)."""
        value = section
        for part in self.key.split("."):
            if value is None:
                return self.default
            value = getattr(value, part)
        return value


SNAPSHOT_SCHEDULE = EngineSetting(
    "snapshot_schedule",
    "snapshot",
    "schedule",
    None,
    "time between two snapshots (None: none scheduled)",
    needs_store=True,
)
SNAPSHOT_RETENTION = EngineSetting(
    "snapshot_retention",
    "snapshot",
    "retention.keep_count",
    None,
    "snapshots kept per source (None: all)",
    needs_store=True,
    minimum=1,
)
SNAPSHOT_MAX_AGE = EngineSetting(
    "snapshot_max_age",
    "snapshot",
    "retention.max_age",
    None,
    "older snapshots are deleted (None: none for age)",
    needs_store=True,
)
SNAPSHOT_ON_SHUTDOWN = EngineSetting(
    "snapshot_on_shutdown",
    "snapshot",
    "on_shutdown",
    False,
    "take a snapshot when the engine stops",
    needs_store=True,
)
SNAPSHOT_USER_META = EngineSetting(
    "snapshot_user_meta",
    "snapshot",
    "user_meta",
    {},
    "written into each snapshot; a restore compares it (on_restore_mismatch)",
    serve_only=False,
    needs_store=True,
)
SNAPSHOT_META_POLICY = EngineSetting(
    "snapshot_meta_policy",
    "snapshot",
    "on_restore_mismatch",
    "warn",
    "a snapshot whose user_meta differs: warn and restore it, or reject it",
)
SHUTDOWN_TIMEOUT = EngineSetting(
    "shutdown_timeout",
    "shutdown",
    "grace_period",
    30.0,
    "longest time stop may take (drain buffers, shutdown snapshot, close)",
)
LAG_INTERVAL = EngineSetting(
    "lag_interval", "observability", "lag_interval", 10.0, "seconds between two lag reports"
)

SNAPSHOT_SETTINGS: tuple[EngineSetting, ...] = (
    SNAPSHOT_SCHEDULE,
    SNAPSHOT_RETENTION,
    SNAPSHOT_MAX_AGE,
    SNAPSHOT_ON_SHUTDOWN,
    SNAPSHOT_USER_META,
    SNAPSHOT_META_POLICY,
)
"""The settings of the engine's ``snapshot`` section."""
RUNNER_SETTINGS: tuple[EngineSetting, ...] = (SHUTDOWN_TIMEOUT, LAG_INTERVAL)
"""Engine settings a runner keeps in sections of its own (:class:`laredo.config.EngineSettings`)."""
ENGINE_SETTINGS: tuple[EngineSetting, ...] = SNAPSHOT_SETTINGS + RUNNER_SETTINGS
"""Every engine setting, in the order of :class:`laredo.Engine`'s keywords."""

_SERVE_ONLY_SECTIONS = frozenset({"dead_letter"})
"""Top-level engine sections only the streaming phase uses (plugin stores, not settings)."""


def _heads(keys: Iterable[str]) -> frozenset[str]:
    return frozenset(k.split(".", 1)[0] for k in keys)


def serve_only_keys() -> dict[str, frozenset[str]]:
    """Keys of the engine sections only the streaming phase (``laredo serve``) uses, by the
    section holding them (``""``: top level; ``tables``: each table; ``targets``: each target),
    from the ``serve_only`` flags of the declarations."""
    pipeline = [s for s in PIPELINE_SETTINGS if s.serve_only]
    return {
        "": _SERVE_ONLY_SECTIONS,
        "snapshot": _heads(s.key for s in SNAPSHOT_SETTINGS if s.serve_only),
        "tables": frozenset(s.section for s in pipeline if s.table_level),
        "targets": frozenset(s.section for s in pipeline if s.target_level),
    }
