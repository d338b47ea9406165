"""The OpenTelemetry observer with the SDK's in-memory reader."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import laredo
import pytest
from laredo.events import LagUpdated
from laredo.testing import wait_until
from laredo_server.config import build_engine, load_string

pytest.importorskip("opentelemetry.sdk")
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader


def points(reader: InMemoryMetricReader) -> dict[str, list[tuple[dict[str, Any], Any]]]:
    out: dict[str, list[tuple[dict[str, Any], Any]]] = {}
    data = reader.get_metrics_data()
    for rm in data.resource_metrics if data else []:
        for sm in rm.scope_metrics:
            for m in sm.metrics:
                for p in m.data.data_points:
                    value = getattr(p, "value", None)
                    if value is None:
                        value = getattr(p, "count", None)
                    out.setdefault(m.name, []).append((dict(p.attributes), value))
    return out


def test_engine_events_become_otel_metrics(quicktest_plugin: None) -> None:
    from laredo_server.otel import OpenTelemetryObserver

    reader = InMemoryMetricReader()
    obs = OpenTelemetryObserver(meter_provider=MeterProvider(metric_readers=[reader]))
    loaded = load_string(
        """
sources { src { type = quicktest, rows = 4 } }
tables = [ { source = src, table = users, targets = [ { type = indexed-memory, id = u } ] } ]
""",
        env={},
    )
    assert loaded.model is not None
    eng = build_engine(loaded.model, [obs]).engine
    obs.bind({"u": ("src", "public.users")})
    eng.start()
    try:
        assert eng.await_ready(10)
        src = eng.source("src")
        src.insert("public.users", {"id": 9, "email": "n"})
        src.update("public.users", {"id": 9, "email": "m"})
        t = eng.get_target("src", "public.users")
        end = laredo.Table("public", "users")
        wait_until(lambda: t.get(9) == {"id": 9, "email": "m"}, 10, "the update", interval=0.01)
        obs.on_event(LagUpdated("src", 123, timedelta(seconds=1.5)))
    finally:
        eng.stop()
    got = points(reader)
    applied = {a["action"]: v for a, v in got["laredo.changes.applied"]}
    assert applied == {"insert": 1, "update": 1}
    attrs = got["laredo.changes.applied"][0][0]
    assert attrs["pipeline"] == "u" and attrs["source"] == "src" and attrs["table"] == str(end)
    assert [v for _, v in got["laredo.baseline.rows"]] == [4]
    assert got["laredo.source.lag.bytes"] == [({"source": "src"}, 123)]
    assert got["laredo.source.lag.seconds"] == [({"source": "src"}, 1.5)]
    states = {a["state"] for a, _ in got["laredo.pipeline.state_changes"]}
    assert {"BASELINING", "STREAMING", "STOPPED"} <= states


def test_otel_observer_from_config_and_batch_mode(quicktest_plugin: None) -> None:
    loaded = load_string(
        """
sources { src { type = quicktest } }
tables = [ { source = src, table = users, targets = [ { type = indexed-memory } ] } ]
observability { observers = [ { type = opentelemetry, per_action = false } ] }
""",
        env={},
    )
    assert loaded.model is not None
    eng = build_engine(loaded.model).engine
    from laredo.events import ChangeApplied, ChangesApplied, receives

    assert not receives(eng.observer, ChangeApplied)  # no per-change values are built for it
    assert receives(eng.observer, ChangesApplied)
    with pytest.raises(laredo.ConfigError) as ei:
        load_string(
            """
sources { src { type = quicktest } }
tables = [ { source = src, table = users, targets = [ { type = indexed-memory } ] } ]
observability { observers = [ { type = opentelemetry, per_acton = false } ] }
""",
            env={},
        )
    assert "observability.observers.0.per_acton: unknown option" in str(ei.value)
