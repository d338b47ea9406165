"""The models of the server's own sections (``grpc``, ``health``, ``observability``,
``shutdown``) and :class:`ServerConfig`, the whole file: the engine sections of
:class:`laredo.config.EngineConfig` plus these."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from laredo.config import EngineConfig, EngineSettings, PluginSpec
from laredo.units import Duration
from pydantic import BaseModel, ConfigDict, Field, SecretStr

from ..addresses import DEFAULT_GRPC_PORT

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


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


class TlsConfig(_Section):
    cert_file: str
    key_file: str
    client_ca_file: str | None = None
    """When set, clients must present a certificate signed by this CA (mutual TLS)."""


class AuthConfig(_Section):
    token: SecretStr | None = None
    token_file: str | None = None
    """Read the token from this file (stripped) instead of writing it in the config."""
    protect_reads: bool = False
    """Also require the token for read-only RPCs (status, queries, lists)."""


class GrpcConfig(_Section):
    """``grpc { port = 4001, host = "127.0.0.1", ... }``: the OAM and Query services."""

    port: int = Field(default=DEFAULT_GRPC_PORT, ge=0, le=65535)
    """0 turns the gRPC listener off."""
    host: str = "127.0.0.1"
    tls: TlsConfig | None = None
    auth: AuthConfig = AuthConfig()
    reflection: bool = True
    max_workers: int = Field(default=16, ge=1)
    watch_buffer: int = Field(default=16_384, ge=16)
    """Events buffered per WatchStatus/Subscribe stream before the client is told it lost some."""


class HealthConfig(_Section):
    enabled: bool = True
    port: int = Field(default=8080, ge=0, le=65535)
    host: str = "127.0.0.1"


class MetricsConfig(_Section):
    enabled: bool = True
    per_action: bool = True
    """Count applied changes per action (insert/update/delete/truncate); costs one observer
    call per change. False: counts per batch only."""
    deprecated_names: bool = True
    """Also export the metric names kept from Go Laredo that promtool's lint rejects
    (``laredo_validation_*_row_count``; their twins are ``laredo_validation_*_rows``).
    False gives a lint-clean ``/metrics``. Removed in 0.3."""


class ObservabilityConfig(_Section):
    log_format: Literal["json", "console"] = "console"
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    metrics: MetricsConfig = MetricsConfig()
    lag_interval: Duration = 10.0
    observers: list[PluginSpec] = Field(default_factory=list)
    """Extra observer plugins, e.g. ``[{type = logging}]``."""


class ShutdownConfig(_Section):
    grace_period: Duration = 30.0
    """Longest time ``stop`` may take (drain buffers, shutdown snapshot, close)."""
    drain: Duration = 0.0
    """Before stopping, report not-ready for this long so load balancers move away."""


class ServerConfig(EngineConfig):
    """The whole configuration file: the engine sections and the server's own."""

    grpc: GrpcConfig | None = GrpcConfig()
    """Defaults to 127.0.0.1:4001; ``grpc.port = 0`` (or ``grpc = null``) turns it off."""
    health: HealthConfig = HealthConfig()
    observability: ObservabilityConfig = ObservabilityConfig()
    shutdown: ShutdownConfig = ShutdownConfig()
    spark: dict[str, Any] | None = None
    """The Spark runner's section (``laredo spark``, laredo-spark), validated by that runner;
    ``laredo serve`` does not use it, so one file drives both runners."""

    @property
    def grpc_enabled(self) -> bool:
        """The gRPC listener runs (a ``grpc`` section with a port other than 0)."""
        return self.grpc is not None and self.grpc.port != 0

    def admin_token(self) -> str | None:
        if self.grpc is None:
            return None
        auth = self.grpc.auth
        if auth.token is not None:
            return auth.token.get_secret_value()
        if auth.token_file:
            return Path(auth.token_file).read_text().strip()
        return None

    def engine_settings(self) -> EngineSettings:
        """Observer plugins, the stop deadline and the lag interval of the server's sections."""
        return EngineSettings(
            observers=tuple(
                (f"observability.observers.{k}", spec)
                for k, spec in enumerate(self.observability.observers)
            ),
            shutdown_timeout=self.shutdown.grace_period,
            lag_interval=self.observability.lag_interval,
        )
