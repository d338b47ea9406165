"""Health endpoints and /metrics over real HTTP on 127.0.0.1."""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import laredo
from laredo.testing import TestSource, columns
from laredo_server.config import Built
from laredo_server.metrics import PrometheusObserver
from laredo_server.runtime import ServerRuntime
from laredo_server.serve import attach_frontends
from laredo_target_memory import IndexedTarget
from prometheus_client.parser import text_string_to_metric_families

from .testkit import ORDERS, USERS, Harness, make_source, wait_for


def get(port: int, path: str) -> tuple[int, Any, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as r:
            body = r.read().decode()
            return r.status, r.headers.get("Content-Type"), body
    except urllib.error.HTTPError as e:
        return e.code, e.headers.get("Content-Type"), e.read().decode()


class GatedSource(TestSource):
    """A TestSource whose baseline waits until ``gate`` is set."""

    __test__ = False

    def __init__(self, gate: threading.Event) -> None:
        super().__init__()
        self.gate = gate

    def baseline(self, tables: Any, row_callback: Any) -> Any:
        self.gate.wait(20)
        return super().baseline(tables, row_callback)


def test_ready_503_then_200_with_pipeline_reasons(tmp_path: Path) -> None:
    gate = threading.Event()
    src = GatedSource(gate)
    base = make_source()
    src.add_table(USERS, base._columns[USERS], base.rows(USERS))

    def factory(observers: Any, _store: Any) -> Built:
        eng = laredo.Engine(
            sources={"src": src},
            pipelines=[laredo.Pipeline("src", USERS, IndexedTarget(), id="users")],
            observers=list(observers),
        )
        return Built(eng)

    rt = attach_frontends(ServerRuntime(factory), grpc_port=None)
    rt.start()
    try:
        port = rt.listeners.health_port
        assert port

        def state() -> str:
            return str(json.loads(get(port, "/health/ready")[2])["pipelines"]["users"]["state"])

        assert wait_for(lambda: state() == "BASELINING")  # blocked in the gated baseline
        code, ctype, body = get(port, "/health/ready")
        assert code == 503 and ctype == "application/json"
        data = json.loads(body)
        assert data["ready"] is False
        assert any("users" in r for r in data["reasons"])
        assert get(port, "/health/live")[0] == 200
        assert get(port, "/health/startup")[0] == 200
        gate.set()
        assert wait_for(lambda: get(port, "/health/ready")[0] == 200)
        data = json.loads(get(port, "/health/ready")[2])
        assert data == {
            "ready": True,
            "reasons": [],
            "pipelines": {
                "users": {"state": "STREAMING", "ready": True, "error": None, "rows": 25}
            },
        }
        rt.begin_drain()  # draining: not ready any more, still live
        assert get(port, "/health/ready")[0] == 503
        assert get(port, "/health/live")[0] == 200
        assert get(port, "/nope")[0] == 404
    finally:
        gate.set()
        rt.stop(grace=5)


def test_live_fails_when_every_pipeline_of_a_source_failed(tmp_path: Path) -> None:
    src = TestSource()  # no tables: init finds none, pipelines fail

    def factory(observers: Any, _store: Any) -> Built:
        eng = laredo.Engine(
            sources={"src": src},
            pipelines=[laredo.Pipeline("src", USERS, IndexedTarget(), id="users")],
            observers=list(observers),
        )
        return Built(eng)

    rt = attach_frontends(ServerRuntime(factory), grpc_port=None)
    rt.start()
    try:
        port = rt.listeners.health_port
        assert port
        assert wait_for(lambda: get(port, "/health/live")[0] == 503)
        body = json.loads(get(port, "/health/live")[2])
        assert body["reasons"] == ["source src: every pipeline failed"]
        ready = json.loads(get(port, "/health/ready")[2])
        assert "ERROR" in ready["reasons"][0]
    finally:
        rt.stop(grace=5)


def test_metrics_text_parses_and_counts_changes(harness: Harness) -> None:
    port = harness.rt.listeners.health_port
    assert port
    for i in range(5):
        harness.source.insert(USERS, {"id": 1000 + i, "name": "m", "email": f"m{i}", "team": 0})
    harness.source.update(USERS, {"id": 1000, "name": "m2", "email": "m0", "team": 1})
    harness.source.delete(USERS, {"id": 1001})

    def applied() -> dict[str, float]:
        out: dict[str, float] = {}
        for fam in text_string_to_metric_families(get(port, "/metrics")[2]):
            for s in fam.samples:
                if s.name == "laredo_changes_applied_total" and s.labels["pipeline"] == "users":
                    out[s.labels["action"]] = s.value
        return out

    assert wait_for(lambda: applied() == {"insert": 5, "update": 1, "delete": 1})
    code, ctype, text = get(port, "/metrics")
    assert code == 200 and ctype.startswith("text/plain; version=0.0.4")
    fams = {f.name: f for f in text_string_to_metric_families(text)}
    st = [
        s
        for s in fams["laredo_pipeline_state"].samples
        if s.labels["pipeline"] == "users" and s.value == 1
    ]
    assert [(s.labels["state"], s.labels["source"], s.labels["table"]) for s in st] == [
        ("STREAMING", "src", "public.users")
    ]
    rows = {s.labels["pipeline"]: s.value for s in fams["laredo_pipeline_rows"].samples}
    assert rows == {"users": 29, "orders": 2}
    cap = {s.labels["pipeline"]: s.value for s in fams["laredo_pipeline_buffer_capacity"].samples}
    assert cap == {"users": 10000, "orders": 10000}
    assert fams["laredo_change_apply_duration_seconds"].type == "histogram"
    baseline = {
        s.labels["pipeline"]: s.value
        for s in fams["laredo_baseline_rows"].samples
        if s.name == "laredo_baseline_rows_total"
    }
    assert baseline == {"users": 25, "orders": 2}
    assert fams["laredo_ready"].samples[0].value == 1


def test_every_observer_event_becomes_a_metric() -> None:
    from datetime import timedelta

    from laredo import ChangeAction, ChangeEvent, ErrorInfo, PipelineState, SyncMode
    from laredo import events as E
    from laredo.types import SchemaChangeEvent
    from laredo_target_fanout import events as F

    obs = PrometheusObserver(buffer_depth=True)
    obs.bind({"p": ("s", "public.t")})
    before = obs.render()
    t = laredo.Table("public", "t")
    ev = ChangeEvent(t, ChangeAction.INSERT, 1, None, new_values={"id": 1})
    values: list[E.Event] = [
        E.SourceConnected("s", "X"),
        E.SourceDisconnected("s", "bye"),
        E.PipelineStateChanged("p", PipelineState.INITIALIZING, PipelineState.STREAMING),
        E.BaselineStarted("p", t),
        E.BaselineRowLoaded("p", t, 10),
        E.BaselineCompleted("p", t, 10, timedelta(seconds=1)),
        E.RebaselineTriggered("s"),
        E.ChangeReceived("p", t, ChangeAction.INSERT, 1),
        E.ChangeApplied("p", t, ChangeAction.INSERT, timedelta(0)),
        E.ChangesApplied("p", t, 3, timedelta(milliseconds=2)),
        E.ChangeError("p", t, ChangeAction.UPDATE, ErrorInfo("x")),
        E.AckAdvanced("s", 5),
        E.BufferDepthChanged("p", 3, 10),
        E.BufferPolicyTriggered("p", "drop_oldest"),
        E.SnapshotStarted("snap"),
        E.SnapshotCompleted("snap", 1, 10, 100, timedelta(seconds=1)),
        E.SnapshotFailed("snap", ErrorInfo("x")),
        E.SnapshotRestoreStarted("snap"),
        E.SnapshotRestoreCompleted("snap", timedelta(seconds=1)),
        E.SchemaChanged("s", t, SchemaChangeEvent((), ())),
        E.LagUpdated("s", 100, timedelta(seconds=2)),
        E.DeadLetterWritten("p", ev, ErrorInfo("x")),
        E.RowExpired("p", t, "1"),
        E.ValidationResult("p", t, 10, 9, False),
        F.FanoutClientConnected("p", "c", SyncMode.DELTA),
        F.FanoutClientDisconnected("p", "c", "bye"),
        F.FanoutClientCaughtUp("p", "c", 5),
        F.FanoutClientBackpressure("p", "c", 5),
        F.FanoutSnapshotCreated("p", "snap", 5, 10),
        F.FanoutJournalPruned("p", 3, 7),
        E.PipelineAdded("p2", "s", t),
        E.PipelineRemoved("p2", "s", "removed"),
    ]
    kinds = {
        c
        for m in (E, F)
        for c in vars(m).values()
        if isinstance(c, type) and issubclass(c, E.Event) and c is not E.Event
    }
    assert {type(v) for v in values} == kinds, kinds ^ {type(v) for v in values}
    text_before = {f.name for f in text_string_to_metric_families(before)}
    for v in values:
        fams_before = obs.render()
        assert E.receives(obs, type(v)), type(v).__name__
        obs.on_event(v)
        assert obs.render() != fams_before, f"{type(v).__name__} changed no metric"
    fams = {f.name: f for f in text_string_to_metric_families(obs.render())}
    assert set(fams) == text_before and len(fams) > 50  # every family from the first scrape
    lag = fams["laredo_source_lag_seconds"].samples[0]
    assert lag.labels == {"source": "s"} and lag.value == 2.0
    errs = [x for x in fams["laredo_change_errors"].samples if x.value]
    assert [e.labels for e in errs] == [
        {"pipeline": "p", "source": "s", "table": "public.t", "action": "update"}
    ]
    batch = PrometheusObserver(per_action=False)
    batch.on_event(E.ChangesApplied("p", t, 3, timedelta(0)))
    assert batch.value("laredo_changes_applied_total", action="any") == 3
    # the engine builds per-change / per-buffer-operation values only for observers that opt in
    assert not E.receives(batch, E.ChangeApplied)
    assert not E.receives(batch, E.BufferDepthChanged)
    assert E.receives(PrometheusObserver(), E.ChangeApplied)


def test_readiness_names_the_failed_pipeline_and_its_reason(tmp_path: Path) -> None:
    """One pipeline's target refuses the table (a Delta target on a table without a key): the
    server is not ready, and the reason names that pipeline and why; its sibling of the same
    source streams and is ready on its own."""
    src = TestSource()
    src.add_table(USERS, columns("id", "name"), [{"id": 1, "name": "a"}])
    src.add_table(ORDERS, columns("id", "total"), [{"id": 1, "total": 2}])

    class Refusing(IndexedTarget):
        def on_init(self, table: Any, cols: Any) -> None:
            raise laredo.ConfigError(f"{table} has no key: set key_fields")

    def factory(observers: Any, _store: Any) -> Built:
        eng = laredo.Engine(
            sources={"src": src},
            pipelines=[
                laredo.Pipeline("src", USERS, IndexedTarget(), id="users"),
                laredo.Pipeline("src", ORDERS, Refusing(), id="orders"),
            ],
            observers=list(observers),
        )
        return Built(eng)

    rt = attach_frontends(ServerRuntime(factory), grpc_port=None)
    rt.start()
    try:
        port = rt.listeners.health_port
        assert port
        assert wait_for(lambda: rt.readiness(pipeline_id="users")[0])
        code, _, body = get(port, "/health/ready")
        assert code == 503
        (reason,) = json.loads(body)["reasons"]
        assert reason.startswith("pipeline orders: ERROR") and "set key_fields" in reason
        assert rt.readiness(table="public.orders") == (False, [reason])
    finally:
        rt.stop(grace=5)


def test_a_later_version_of_an_event_reaches_the_server_observers() -> None:
    """One more field on an event (as a later release would add it) changes nothing for the
    metrics and the watch hub: they read the fields they need by name."""
    from dataclasses import field, make_dataclass
    from datetime import timedelta

    from laredo import events as E
    from laredo_server.state import ServiceState
    from laredo_server.watch import WatchHub

    later: Any = make_dataclass(
        "ChangesApplied",
        [("rows_bytes", int, field(default=0))],
        bases=(E.ChangesApplied,),
        frozen=True,
        slots=True,
    )
    ev = later("p", laredo.Table("public", "t"), 3, timedelta(0), rows_bytes=10)
    metrics = PrometheusObserver(per_action=False)
    hub = WatchHub(lambda: ServiceState.STREAMING)
    laredo.CompositeObserver(metrics, hub).on_event(ev)
    assert metrics.value("laredo_changes_applied_total", pipeline="p") == 3
    assert metrics.value("laredo_change_batches_applied_total", pipeline="p") == 1
    assert hub.last_change_at is not None
