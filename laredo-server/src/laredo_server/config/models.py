"""The models of the server's own sections (``grpc``, ``health``, ``observability``,
``shutdown``) and :class:`ServerConfig`, the whole file: the engine sections of
:class:`laredo.config.EngineConfig` plus these."""

from __future__ import annotations

from typing import Any, Literal

from laredo.auth import AuthConfig
from laredo.config import EngineConfig, EngineSettings, PluginSpec
from laredo.engine_settings import LAG_INTERVAL, RUNNER_SETTINGS, SHUTDOWN_TIMEOUT
from laredo.units import Duration
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr

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


class GrpcConfig(_Section):
    """``grpc { port = 4001, host = "127.0.0.1", ... }``: the OAM and Query services."""

    port: int = Field(default=DEFAULT_GRPC_PORT, ge=0, le=65535)
    """0 turns the gRPC listener off."""
    host: str = "127.0.0.1"
    tls: TlsConfig | None = None
    auth: AuthConfig = AuthConfig()
    reflection: bool = True
    max_workers: int = Field(default=16, ge=2)
    """Threads serving calls; must be more than ``max_streams``, so that unary calls (admin
    RPCs included) always find one."""
    max_streams: int = Field(default=8, ge=1)
    """Long-lived calls (WatchStatus, Subscribe, WaitForPosition) served at once, over gRPC
    and Connect together; one more is refused with RESOURCE_EXHAUSTED."""
    watch_buffer: int = Field(default=16_384, ge=16)
    """Events buffered per WatchStatus/Subscribe stream before the client is told it lost some."""


class HealthConfig(_Section):
    """``health { port = 8080, host = "127.0.0.1", connect = true, status_page = true,
    tls { ... } }``: probes, metrics, the status page and the Connect gateway to the
    services."""

    enabled: bool = True
    port: int = Field(default=8080, ge=0, le=65535)
    host: str = "127.0.0.1"
    connect: bool = True
    """Serve the OAM and Query RPCs (Connect protocol) on this port too; the token of
    ``grpc.auth`` applies. False: probes and metrics only."""
    status_page: bool = True
    """Serve the operator's status page at ``/`` (it holds no data: it reads ``GetStatus``
    over Connect, so it shows nothing with ``connect = false``). False: ``/`` answers 404."""
    tls: TlsConfig | None = None
    """Serve HTTPS. With ``client_ca_file``, Connect calls need a client certificate signed by
    that CA (probes and metrics do not)."""
    max_body: int = Field(default=4 << 20, ge=1024)
    """Largest Connect request body, in bytes, before and after decompression (413 beyond)."""
    max_connections: int = Field(default=64, ge=2)
    """Connect RPCs served at once (one thread each); probes, metrics and the page have a
    pool of their own. Connections still sending their request head take no thread."""
    allowed_hosts: list[str] = Field(default_factory=list)
    """Host names Connect calls may be addressed to (``Host``), besides IP literals and
    ``localhost``: DNS-rebinding protection, so a web page cannot call the port through a name
    it controls. List the names clients use (``laredo.example.internal``); ``["*"]``: any."""
    timeout: Duration = 30.0
    """Seconds the rest of a request (its body) may take as a whole, and each write of an
    answer. The TLS handshake and request head must arrive within 5 s of the connection."""
    history_interval: Duration = Field(default=5.0, gt=0)
    """Seconds between two samples of the status page's last hour (per source and pipeline:
    changes/s, lag, buffer fill); memory is bounded by ``3600 / history_interval`` samples
    per series."""


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
    lag_interval: Duration = LAG_INTERVAL.field()
    observers: list[PluginSpec] = Field(default_factory=list)
    """Extra observer plugins, e.g. ``[{type = logging}]``."""


class ShutdownConfig(_Section):
    grace_period: Duration = SHUTDOWN_TIMEOUT.field()
    drain: Duration = 0.0
    """Before stopping, report not-ready for this long so load balancers move away."""


class ServerConfig(EngineConfig):
    """The whole configuration file: the engine sections and the server's own."""

    grpc: GrpcConfig | None = GrpcConfig()
    """Defaults to 127.0.0.1:4001; ``grpc.port = 0`` (or ``grpc = null``) turns it off."""
    health: HealthConfig = HealthConfig()
    observability: ObservabilityConfig = ObservabilityConfig()
    shutdown: ShutdownConfig = ShutdownConfig()
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
