"""Every engine setting, declared once: its :class:`laredo.Engine` keyword, its configuration
key, its default, its description and whether only the serving process uses it.

Two kinds: the ``snapshot`` section's (``snapshot { schedule, retention { keep_count } }``) and
the runner's (``shutdown { grace_period }``, ``observability { lag_interval }``: sections a
runner such as laredo-server keeps). The ``snapshot`` section's models are generated here
from the declarations (:func:`laredo.settings.section_model`), ``Engine`` takes its defaults
from them, and ``build_engine`` maps the model to ``Engine`` keywords by looping over
:data:`ENGINE_SETTINGS`; nothing else spells a key or a default. Add a setting here (its
declaration, its model's tuple and the stub line the stub test asks for) and its ``Engine``
keyword.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Literal

from .pipeline_settings import SETTINGS as PIPELINE_SETTINGS
from .settings import DEFAULT, Section, Setting, section_model, settings_dataclass
from .units import Duration, OptionalDuration

__all__ = [
    "DEAD_LETTER_SETTINGS",
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
    "DeadLetterConfig",
    "EngineSetting",
    "RetentionConfig",
    "RunnerSettings",
    "SnapshotConfig",
    "serve_only_keys",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class EngineSetting(Setting):
    """One engine setting: ``Engine(<keyword>=...)`` in Python, ``<section> { <key> }`` in a
    configuration file."""

    keyword: str
    """The :class:`laredo.Engine` keyword."""
    serve_only: bool = True
    """Only the serving process (``laredo serve``) uses it; the Spark baseline leaves it."""
    needs_store: bool = False
    """Takes effect only with a snapshot store configured (else the default applies)."""

    def description(self) -> str:
        return f"{self.doc} (Engine keyword: {self.keyword})"

    def read(self, section: Any) -> Any:
        """This setting's value in the model of its top-level section (None or absent: the
        default)."""
        value = section
        for part in [*self.section.split(".")[1:], self.key]:
            if value is None:
                return self.default
            value = getattr(value, part)
        return value


SNAPSHOT_SCHEDULE = EngineSetting(
    keyword="snapshot_schedule",
    section="snapshot",
    key="schedule",
    of_type=OptionalDuration,
    doc="time between two snapshots (None: none scheduled)",
    needs_store=True,
)
SNAPSHOT_RETENTION = EngineSetting(
    keyword="snapshot_retention",
    section="snapshot.retention",
    key="keep_count",
    of_type=int | None,
    doc="snapshots kept per source (None: all)",
    needs_store=True,
    minimum=1,
)
SNAPSHOT_MAX_AGE = EngineSetting(
    keyword="snapshot_max_age",
    section="snapshot.retention",
    key="max_age",
    of_type=OptionalDuration,
    doc="older snapshots are deleted (None: none for age)",
    needs_store=True,
)
SNAPSHOT_ON_SHUTDOWN = EngineSetting(
    keyword="snapshot_on_shutdown",
    section="snapshot",
    key="on_shutdown",
    of_type=bool,
    default=False,
    doc="take a snapshot when the engine stops",
    needs_store=True,
)
SNAPSHOT_USER_META = EngineSetting(
    keyword="snapshot_user_meta",
    section="snapshot",
    key="user_meta",
    of_type=dict[str, Any],
    default={},
    doc="written into each snapshot; a restore compares it (on_restore_mismatch)",
    serve_only=False,
    needs_store=True,
)
SNAPSHOT_META_POLICY = EngineSetting(
    keyword="snapshot_meta_policy",
    section="snapshot",
    key="on_restore_mismatch",
    of_type=Literal["warn", "reject"],
    default="warn",
    doc="a snapshot whose user_meta differs: warn and restore it, or reject it",
)
SHUTDOWN_TIMEOUT = EngineSetting(
    keyword="shutdown_timeout",
    section="shutdown",
    key="grace_period",
    of_type=Duration,
    default=30.0,
    doc="longest time stop may take (drain buffers, shutdown snapshot, close)",
)
LAG_INTERVAL = EngineSetting(
    keyword="lag_interval",
    section="observability",
    key="lag_interval",
    of_type=Duration,
    default=10.0,
    doc="seconds between two lag reports",
)

_STORE_CONFIG = Setting(
    section="snapshot",
    key="store_config",
    of_type=dict[str, Any],
    default={},
    doc="the store plugin's options",
)
_STORE_SETTINGS = (
    Setting(section="snapshot", key="enabled", of_type=bool, default=True, doc="take snapshots"),
    Setting(section="snapshot", key="store", of_type=str | None, doc="snapshot store plugin"),
    _STORE_CONFIG,
    Setting(
        section="snapshot",
        key="serializer",
        of_type=str,
        default="jsonl",
        doc="snapshot serializer plugin",
    ),
    Setting(
        section="snapshot",
        key="serializer_config",
        of_type=dict[str, Any],
        default={},
        doc="the serializer plugin's options",
    ),
)
"""The ``snapshot`` section's plugin keys (the store and serializer are not Engine keywords)."""

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

DEAD_LETTER_SETTINGS = (
    Setting(
        section="dead_letter",
        key="store",
        of_type=str,
        default="memory",
        doc="dead-letter store plugin: memory, local, s3",
    ),
    replace(_STORE_CONFIG, section="dead_letter"),
)
"""The ``dead_letter`` section's keys (a plugin store, not Engine keywords)."""

_SERVE_ONLY_SECTIONS = frozenset({"dead_letter"})
"""Top-level engine sections only the streaming phase uses (plugin stores, not settings)."""


def _heads(settings: Iterable[EngineSetting]) -> frozenset[str]:
    """The keys of the ``snapshot`` section holding ``settings`` (``retention`` for its own)."""
    return frozenset(s.section.split(".")[1] if "." in s.section else s.key for s in settings)


def serve_only_keys() -> dict[str, frozenset[str]]:
    """Keys of the engine sections only the streaming phase (``laredo serve``) uses, by the
    section holding them (``""``: top level; ``tables``: each table; ``targets``: each target),
    from the ``serve_only`` flags of the declarations."""
    pipeline = [s for s in PIPELINE_SETTINGS if s.serve_only]
    return {
        "": _SERVE_ONLY_SECTIONS,
        "snapshot": _heads(s for s in SNAPSHOT_SETTINGS if s.serve_only),
        "tables": frozenset(s.section for s in pipeline if s.table_level),
        "targets": frozenset(s.section for s in pipeline if s.target_level),
    }


if TYPE_CHECKING:  # the generated models for mypy; test_settings checks them against the above

    @dataclass(frozen=True, slots=True, kw_only=True)
    class RunnerSettings:
        shutdown_timeout: Duration = DEFAULT
        lag_interval: Duration = DEFAULT

    class DeadLetterConfig(Section):
        store: str = DEFAULT
        store_config: dict[str, Any] = DEFAULT

    class RetentionConfig(Section):
        keep_count: int | None = DEFAULT
        max_age: OptionalDuration = DEFAULT

    class SnapshotConfig(Section):
        enabled: bool = DEFAULT
        store: str | None = DEFAULT
        store_config: dict[str, Any] = DEFAULT
        serializer: str = DEFAULT
        serializer_config: dict[str, Any] = DEFAULT
        schedule: OptionalDuration = DEFAULT
        on_shutdown: bool = DEFAULT
        retention: RetentionConfig = DEFAULT
        user_meta: dict[str, Any] = DEFAULT
        on_restore_mismatch: Literal["warn", "reject"] = DEFAULT

else:
    RunnerSettings = settings_dataclass(
        "RunnerSettings",
        [(s.keyword, s) for s in RUNNER_SETTINGS],
        module=__name__,
        doc="The :data:`RUNNER_SETTINGS` by ``Engine`` keyword (base of ``EngineSettings``).",
    )
    DeadLetterConfig = section_model(
        "DeadLetterConfig",
        DEAD_LETTER_SETTINGS,
        module=__name__,
        doc="``dead_letter { store = memory | local | s3, store_config { ... } }``",
    )
    RetentionConfig = section_model(
        "RetentionConfig", (SNAPSHOT_RETENTION, SNAPSHOT_MAX_AGE), module=__name__
    )
    SnapshotConfig = section_model(
        "SnapshotConfig",
        (
            *_STORE_SETTINGS,
            SNAPSHOT_SCHEDULE,
            SNAPSHOT_ON_SHUTDOWN,
            Setting(
                section="snapshot",
                key="retention",
                of_type=RetentionConfig,
                default=RetentionConfig(),
                doc="snapshots deleted after each one taken",
            ),
            SNAPSHOT_USER_META,
            SNAPSHOT_META_POLICY,
        ),
        module=__name__,
        doc="``snapshot { store = local, store_config { path = ... }, schedule = 1h, ... }``",
    )
