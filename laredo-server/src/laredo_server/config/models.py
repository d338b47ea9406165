"""The whole configuration file, :class:`ServerConfig`: the engine sections of
:class:`laredo.config.EngineConfig` plus the server's own (``grpc``, ``health``,
``observability``, ``shutdown``), whose settings are declared in :mod:`.sections`."""

from __future__ import annotations

from typing import Any

from laredo.auth import AuthConfig
from laredo.config import EngineSettings
from laredo.engine_settings import RUNNER_SETTINGS
from pydantic import PrivateAttr

from ..addresses import DEFAULT_GRPC_PORT
from .sections import (
    GrpcConfig,
    HealthConfig,
    MetricsConfig,
    ObservabilityConfig,
    ServerSections,
    ShutdownConfig,
    TlsConfig,
)

__all__ = [
    "DEFAULT_GRPC_PORT",
    "AuthConfig",
    "GrpcConfig",
    "HealthConfig",
    "MetricsConfig",
    "ObservabilityConfig",
    "ServerConfig",
    "ShutdownConfig",
    "TlsConfig",
]


class ServerConfig(ServerSections):
    """The whole configuration file: the engine sections and the server's own (their fields
    generated from the declarations: :class:`.sections.ServerSections`)."""

    _plugin_sections: dict[str, dict[str, Any]] = PrivateAttr(default_factory=dict)

    def plugin_section(self, name: str) -> dict[str, Any] | None:
        """A top-level section a plugin registered through ``laredo_register_config_sections``
        (the Spark runner's ``spark``), as written and checked with the plugin's model;
        ``laredo serve`` does not use it, so one file drives every runner. None: absent."""
        return self._plugin_sections.get(name)

    def with_plugin_sections(self, sections: dict[str, dict[str, Any]]) -> ServerConfig:
        """This model holding ``sections`` (see :meth:`plugin_section`)."""
        self._plugin_sections = dict(sections)
        return self

    @property
    def grpc_enabled(self) -> bool:
        """The gRPC listener runs (a ``grpc`` section with a port other than 0)."""
        return self.grpc is not None and self.grpc.port != 0

    def admin_token(self) -> str | None:
        """The token of ``grpc.auth`` (None: none configured); ``ConfigError`` when it is
        empty or its file cannot be read."""
        if self.grpc is None:
            return None
        return self.grpc.auth.resolve("grpc.auth")

    def read_token(self) -> str | None:
        """The read-only token of ``grpc.auth`` (None: none configured); ``ConfigError``
        when it is empty or its file cannot be read."""
        if self.grpc is None:
            return None
        return self.grpc.auth.read.resolve("grpc.auth.read")

    def engine_settings(self) -> EngineSettings:
        """Observer plugins, the stop deadline and the lag interval of the server's sections."""
        return EngineSettings(
            observers=tuple(
                (f"observability.observers.{k}", spec)
                for k, spec in enumerate(self.observability.observers)
            ),
            **{s.keyword: s.read(getattr(self, s.section)) for s in RUNNER_SETTINGS},
        )
