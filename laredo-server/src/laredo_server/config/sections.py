"""The server's own settings (``grpc``, ``health``, ``observability``, ``shutdown``), declared
once (:class:`laredo.settings.Setting`: key, deprecated spellings, type, default, bounds,
description), and their section models, generated from the declarations; and
:class:`ServerSections`, the base of ``ServerConfig``: one field per top-level section (each
generated model no other one holds), generated too.

Add a setting here: its declaration, its section's tuple and the stub line the stub test
(``tests/test_config_sections.py``) asks for; its reader is where the server uses it. A new
section is its settings' tuple and its ``section_model`` (and stubs): it becomes a field of
``ServerConfig`` by itself.
"""

from __future__ import annotations

import typing
from functools import partial
from typing import TYPE_CHECKING, Any, Literal

from laredo.auth import AuthConfig
from laredo.config import EngineConfig, PluginSpec
from laredo.engine_settings import LAG_INTERVAL, SHUTDOWN_TIMEOUT
from laredo.settings import DEFAULT, Section, Setting, declared, generated, section_model
from laredo.units import Duration

from ..addresses import DEFAULT_GRPC_PORT

__all__ = [
    "GRPC_SETTINGS",
    "HEALTH_SETTINGS",
    "METRICS_SETTINGS",
    "OBSERVABILITY_SETTINGS",
    "SHUTDOWN_SETTINGS",
    "TLS_SETTINGS",
    "GrpcConfig",
    "HealthConfig",
    "MetricsConfig",
    "ObservabilityConfig",
    "ServerSections",
    "ShutdownConfig",
    "TlsConfig",
]

_PORT: dict[str, Any] = {"of_type": int, "minimum": 0, "maximum": 65535}
_HOST: dict[str, Any] = {
    "key": "host",
    "of_type": str,
    "default": "127.0.0.1",
    "doc": "address to bind",
}

_tls = partial(Setting, section="tls")
TLS_SETTINGS = (
    _tls(key="cert_file", of_type=str, required=True, doc="the server's certificate (PEM)"),
    _tls(key="key_file", of_type=str, required=True, doc="its private key (PEM)"),
    _tls(
        key="client_ca_file",
        of_type=str | None,
        doc="when set, clients must present a certificate signed by this CA (mutual TLS)",
    ),
)

if TYPE_CHECKING:  # each generated model's stub for mypy, checked by the stub test

    class TlsConfig(Section):
        cert_file: str
        key_file: str
        client_ca_file: str | None = DEFAULT

else:
    TlsConfig = section_model("TlsConfig", TLS_SETTINGS, module=__name__)

_grpc = partial(Setting, section="grpc")
GRPC_REFLECTION = _grpc(
    key="reflection", of_type=bool, default=True, doc="serve gRPC server reflection"
)
GRPC_MAX_WORKERS = _grpc(
    key="max_workers",
    of_type=int,
    default=16,
    minimum=2,
    doc="threads serving calls; must be more than max_streams, so that unary calls "
    "(admin RPCs included) always find one",
)
GRPC_SETTINGS = (
    _grpc(key="port", default=DEFAULT_GRPC_PORT, doc="0 turns the gRPC listener off", **_PORT),
    _grpc(**_HOST),
    _grpc(key="tls", of_type=TlsConfig | None, doc="serve TLS (mutual with client_ca_file)"),
    _grpc(key="auth", of_type=AuthConfig, default=AuthConfig(), doc="tokens of the RPCs"),
    GRPC_REFLECTION,
    GRPC_MAX_WORKERS,
    _grpc(
        key="max_streams",
        of_type=int,
        default=8,
        minimum=1,
        doc="long-lived calls (WatchStatus, Subscribe, WaitForPosition) served at once, over "
        "gRPC and Connect together; one more is refused with RESOURCE_EXHAUSTED",
    ),
    _grpc(
        key="watch_buffer",
        of_type=int,
        default=16_384,
        minimum=16,
        doc="events buffered per WatchStatus/Subscribe stream before the client is told it "
        "lost some",
    ),
)

if TYPE_CHECKING:

    class GrpcConfig(Section):
        port: int = DEFAULT
        host: str = DEFAULT
        tls: TlsConfig | None = DEFAULT
        auth: AuthConfig = DEFAULT
        reflection: bool = DEFAULT
        max_workers: int = DEFAULT
        max_streams: int = DEFAULT
        watch_buffer: int = DEFAULT

else:
    GrpcConfig = section_model(
        "GrpcConfig",
        GRPC_SETTINGS,
        module=__name__,
        doc='``grpc { port = 4001, host = "127.0.0.1", ... }``: the OAM and Query services; '
        "``grpc.port = 0`` (or ``grpc = null``) turns the listener off.",
    )

_health = partial(Setting, section="health")
HEALTH_CONNECT = _health(
    key="connect",
    of_type=bool,
    default=True,
    doc="serve the OAM and Query RPCs (Connect protocol) on this port too; the token of "
    "grpc.auth applies. False: probes and metrics only",
)
HEALTH_STATUS_PAGE = _health(
    key="status_page",
    of_type=bool,
    default=True,
    doc="serve the operator's status page at / (it holds no data: it reads GetStatus over "
    "Connect, so it shows nothing with connect = false). False: / answers 404",
)
HEALTH_MAX_BODY = _health(
    key="max_body",
    of_type=int,
    default=4 << 20,
    minimum=1024,
    doc="largest Connect request body, in bytes, before and after decompression (413 beyond)",
)
HEALTH_MAX_CONNECTIONS = _health(
    key="max_connections",
    of_type=int,
    default=64,
    minimum=2,
    doc="Connect RPCs served at once (one thread each); probes, metrics and the page have "
    "a pool of their own. Connections still sending their request head take no thread",
)
HEALTH_TIMEOUT = _health(
    key="timeout",
    of_type=Duration,
    default=30.0,
    doc="seconds the rest of a request (its body) may take as a whole, and each write of "
    "an answer. The TLS handshake and request head must arrive within 5 s",
)
HEALTH_HISTORY_INTERVAL = _health(
    key="history_interval",
    of_type=Duration,
    default=5.0,
    positive=True,
    doc="seconds between two samples of the status page's last hour (per source and "
    "pipeline); memory is bounded by 3600 / history_interval samples per series",
)
HEALTH_SETTINGS = (
    _health(key="enabled", of_type=bool, default=True, doc="serve the HTTP port"),
    _health(key="port", default=8080, doc="probes, metrics, status page, Connect", **_PORT),
    _health(**_HOST),
    HEALTH_CONNECT,
    HEALTH_STATUS_PAGE,
    _health(
        key="tls",
        of_type=TlsConfig | None,
        doc="serve HTTPS. With client_ca_file, Connect calls need a client certificate signed "
        "by that CA (probes and metrics do not)",
    ),
    HEALTH_MAX_BODY,
    HEALTH_MAX_CONNECTIONS,
    _health(
        key="allowed_hosts",
        of_type=list[str],
        default=[],
        doc="host names Connect calls may be addressed to (Host), besides IP literals and "
        "localhost: DNS-rebinding protection, so a web page cannot call the port through a "
        "name it controls. List the names clients use; ['*']: any",
    ),
    HEALTH_TIMEOUT,
    HEALTH_HISTORY_INTERVAL,
)

if TYPE_CHECKING:

    class HealthConfig(Section):
        enabled: bool = DEFAULT
        port: int = DEFAULT
        host: str = DEFAULT
        connect: bool = DEFAULT
        status_page: bool = DEFAULT
        tls: TlsConfig | None = DEFAULT
        max_body: int = DEFAULT
        max_connections: int = DEFAULT
        allowed_hosts: list[str] = DEFAULT
        timeout: Duration = DEFAULT
        history_interval: Duration = DEFAULT

else:
    HealthConfig = section_model(
        "HealthConfig",
        HEALTH_SETTINGS,
        module=__name__,
        doc="``health { port = 8080, ... }``: probes, metrics, the status page and the "
        "Connect gateway to the services.",
    )

_metrics = partial(Setting, section="metrics", of_type=bool, default=True)
METRICS_SETTINGS = (
    _metrics(key="enabled", doc="serve /metrics on the health port"),
    _metrics(
        key="per_action",
        doc="count applied changes per action (insert/update/delete/truncate); costs one "
        "observer call per change. False: counts per batch only",
    ),
    _metrics(
        key="deprecated_names",
        doc="also export the metric names kept from Go Laredo that promtool's lint rejects "
        "(laredo_validation_*_row_count; their twins are laredo_validation_*_rows). False "
        "gives a lint-clean /metrics. Removed in 0.3",
    ),
)

if TYPE_CHECKING:

    class MetricsConfig(Section):
        enabled: bool = DEFAULT
        per_action: bool = DEFAULT
        deprecated_names: bool = DEFAULT

else:
    MetricsConfig = section_model("MetricsConfig", METRICS_SETTINGS, module=__name__)

_obs = partial(Setting, section="observability")
OBSERVABILITY_SETTINGS = (
    _obs(
        key="log_format",
        of_type=Literal["json", "console"],
        default="console",
        doc="one JSON object per line, or text for a console",
    ),
    _obs(
        key="log_level",
        of_type=Literal["debug", "info", "warning", "error"],
        default="info",
        doc="least level logged",
    ),
    _obs(key="metrics", of_type=MetricsConfig, default=MetricsConfig(), doc="Prometheus"),
    LAG_INTERVAL,
    _obs(
        key="observers",
        of_type=list[PluginSpec],
        default=[],
        doc="extra observer plugins, e.g. [{type = logging}]",
    ),
)

SHUTDOWN_SETTINGS = (
    SHUTDOWN_TIMEOUT,
    Setting(
        section="shutdown",
        key="drain",
        of_type=Duration,
        default=0.0,
        doc="before stopping, report not-ready for this long so load balancers move away",
    ),
)


if TYPE_CHECKING:

    class ObservabilityConfig(Section):
        log_format: Literal["json", "console"] = DEFAULT
        log_level: Literal["debug", "info", "warning", "error"] = DEFAULT
        metrics: MetricsConfig = DEFAULT
        lag_interval: Duration = DEFAULT
        observers: list[PluginSpec] = DEFAULT

    class ShutdownConfig(Section):
        grace_period: Duration = DEFAULT
        drain: Duration = DEFAULT

else:
    ObservabilityConfig = section_model(
        "ObservabilityConfig", OBSERVABILITY_SETTINGS, module=__name__
    )
    ShutdownConfig = section_model("ShutdownConfig", SHUTDOWN_SETTINGS, module=__name__)


_OFF_WITH_NULL = frozenset({"grpc"})
"""Top-level sections that ``<section> = null`` turns off (their field is optional)."""


def _top_level_sections() -> tuple[Setting, ...]:
    """One setting per top-level section, in declaration order: every model generated above
    that no other one holds (``tls`` and ``metrics`` sit inside others), defaulting to the
    model's defaults."""
    models = generated(__name__)
    held = {
        arg for m in models for s in declared(m) for arg in (s.of_type, *typing.get_args(s.of_type))
    }
    out = []
    for model in models:
        if model in held:
            continue
        key = declared(model)[0].section
        out.append(
            Setting(
                section="",
                key=key,
                of_type=model | None if key in _OFF_WITH_NULL else model,
                default=model(),
                doc=model.__doc__ or key,
            )
        )
    return tuple(out)


if TYPE_CHECKING:

    class ServerSections(EngineConfig):
        grpc: GrpcConfig | None = DEFAULT
        health: HealthConfig = DEFAULT
        observability: ObservabilityConfig = DEFAULT
        shutdown: ShutdownConfig = DEFAULT

else:
    ServerSections = section_model(
        "ServerSections",
        _top_level_sections(),
        module=__name__,
        base=EngineConfig,
        doc="The engine sections and the server's own (base of ``ServerConfig``).",
    )
