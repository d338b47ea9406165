"""laredo-server's plugin registration: the ``prometheus`` and ``opentelemetry`` observers."""

from __future__ import annotations

import laredo
from laredo.plugins import Registry

from .metrics import PrometheusObserver, PrometheusOptions
from .otel import OpenTelemetryObserver, OpenTelemetryOptions


@laredo.hookimpl
def laredo_register_observers(registry: Registry) -> None:
    registry.add(
        "prometheus",
        PrometheusObserver,
        options=PrometheusOptions,
        description="engine events as Prometheus metrics (served by laredo serve on /metrics)",
    )
    registry.add(
        "opentelemetry",
        OpenTelemetryObserver,
        options=OpenTelemetryOptions,
        description="engine events as OpenTelemetry metrics (pip install laredo-server[otel])",
    )
