"""HOCON configuration of ``laredo serve``: loading, overrides, validation, dumping.

Resolution order (later wins):

1. the main file (``--config FILE`` or ``LAREDO_CONFIG``), with its ``include`` statements;
2. every ``*.conf`` of each conf directory (``--conf-dir``, default ``<config dir>/conf.d``),
   in file-name order;
3. environment overrides ``LAREDO_<PATH>``: the key path upper-cased, levels separated by a
   **double** underscore, list indexes as numbers, ``-`` in names written ``_``:
   ``LAREDO_SOURCES__PG__CONNECTION``, ``LAREDO_GRPC__PORT``,
   ``LAREDO_TABLES__0__TARGETS__0__BASE_URL``. Names without ``__`` (``LAREDO_CONFIG``,
   ``LAREDO_ADDRESS``, ``LAREDO_PLUGINS``, ...) are never config overrides;
4. ``--set key.path=value`` (repeatable), so a command line beats the environment.

Objects merge key by key; any other value replaces. Substitutions (``${...}``, ``${?ENV}``)
resolve inside each file. Override values are typed: ``true``/``false``, integers, floats,
``null``, ``[...]``/``{...}`` (parsed as HOCON); anything else is a string.

Normalisation: HOCON durations (``5s``, ``10 minutes``, which pyhocon turns into
``relativedelta``/``timedelta``) become seconds (a float); months and years are rejected (their
length varies). Duration and size options also accept text and numbers, with the one grammar of
:mod:`laredo.units` (``"500ms"``, ``"1h30m"``, ``"7d"``; ``"64MB"``, ``"1GiB"``).

Every key is either used or rejected: the engine sections (``sources``, ``tables``,
``snapshot``, ``dead_letter``) are validated and built by :mod:`laredo.config`, the server's own
sections (``grpc``, ``health``, ``observability``, ``shutdown``) by :mod:`.sections`; plugin
sections are validated by the options model the plugin registered. Every problem is reported in
one :class:`laredo.ConfigError`, each line naming the key path and, where it can be found, the
file and line. Secrets are masked by the one rule of :mod:`laredo.secrets`.

Modules: :mod:`.loader` (HOCON, includes, conf.d, environment, ``--set``), :mod:`.loaded`
(:class:`LoadedConfig`, ``file:line`` lookup), :mod:`.validate`, :mod:`.sections` (the server's
settings, declared once, and their section models), :mod:`.models` (:class:`ServerConfig`),
:mod:`.dump`.
"""

from __future__ import annotations

from laredo.config import (
    BufferConfig,
    Built,
    DeadLetterConfig,
    EngineConfig,
    ErrorHandlingConfig,
    PluginSpec,
    RetentionConfig,
    SnapshotConfig,
    TableConfig,
    TargetConfig,
    TtlConfig,
    ValidationConfig,
    build_engine,
    pipeline_id,
)
from laredo.secrets import MASK, mask_secrets, mask_text
from laredo.units import Duration, Size, parse_duration, parse_size

from .dump import dump_config
from .listeners import (
    claimed_open_warnings,
    cleartext_token_warnings,
    listener_problems,
    open_listener_warnings,
    reads_protected,
)
from .loaded import LoadedConfig
from .loader import ENV_PREFIX, load_config, load_string, parse_value
from .models import (
    DEFAULT_GRPC_PORT,
    AuthConfig,
    GrpcConfig,
    HealthConfig,
    MetricsConfig,
    ObservabilityConfig,
    ServerConfig,
    ShutdownConfig,
    TlsConfig,
)
from .validate import validate_tree

__all__ = [
    "DEFAULT_GRPC_PORT",
    "ENV_PREFIX",
    "MASK",
    "AuthConfig",
    "BufferConfig",
    "Built",
    "DeadLetterConfig",
    "Duration",
    "EngineConfig",
    "ErrorHandlingConfig",
    "GrpcConfig",
    "HealthConfig",
    "LoadedConfig",
    "MetricsConfig",
    "ObservabilityConfig",
    "PluginSpec",
    "RetentionConfig",
    "ServerConfig",
    "ShutdownConfig",
    "Size",
    "SnapshotConfig",
    "TableConfig",
    "TargetConfig",
    "TlsConfig",
    "TtlConfig",
    "ValidationConfig",
    "build_engine",
    "claimed_open_warnings",
    "cleartext_token_warnings",
    "dump_config",
    "listener_problems",
    "load_config",
    "load_string",
    "mask_secrets",
    "mask_text",
    "open_listener_warnings",
    "parse_duration",
    "parse_size",
    "parse_value",
    "pipeline_id",
    "reads_protected",
    "validate_tree",
]
