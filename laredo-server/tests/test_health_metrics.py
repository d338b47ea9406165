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
    from laredo.observers import EVENT_NAMES

    obs = PrometheusObserver(buffer_depth=True)
    obs.bind({"p": ("s", "public.t")})
    before = obs.render()
    from datetime import timedelta

    from laredo import ChangeAction, ChangeEvent, ErrorInfo, PipelineState, SyncMode
    from laredo.types import SchemaChangeEvent

    t = laredo.Table("public", "t")
    ev = ChangeEvent(t, ChangeAction.INSERT, 1, None, new_values={"id": 1})
    args: dict[str, tuple[Any, ...]] = {
        "on_source_connected": ("s", "X"),
        "on_source_disconnected": ("s", "bye"),
        "on_pipeline_state_changed": ("p", PipelineState.INITIALIZING, PipelineState.STREAMING),
        "on_baseline_started": ("p", t),
        "on_baseline_row_loaded": ("p", t, 10),
        "on_baseline_completed": ("p", t, 10, timedelta(seconds=1)),
        "on_rebaseline_triggered": ("s",),
        "on_change_received": ("p", t, ChangeAction.INSERT, 1),
        "on_change_applied": ("p", t, ChangeAction.INSERT, timedelta(0)),
        "on_changes_applied": ("p", t, 3, timedelta(milliseconds=2)),
        "on_change_error": ("p", t, ChangeAction.UPDATE, ErrorInfo("x")),
        "on_ack_advanced": ("s", 5),
        "on_buffer_depth_changed": ("p", 3, 10),
        "on_buffer_policy_triggered": ("p", "drop_oldest"),
        "on_snapshot_started": ("snap",),
        "on_snapshot_completed": ("snap", 1, 10, 100, timedelta(seconds=1)),
        "on_snapshot_failed": ("snap", ErrorInfo("x")),
        "on_snapshot_restore_started": ("snap",),
        "on_snapshot_restore_completed": ("snap", timedelta(seconds=1)),
        "on_schema_change": ("s", t, SchemaChangeEvent((), ())),
        "on_lag_updated": ("s", 100, timedelta(seconds=2)),
        "on_dead_letter_written": ("p", ev, ErrorInfo("x")),
        "on_row_expired": ("p", t, "1"),
        "on_validation_result": ("p", t, 10, 9, False),
        "on_fanout_client_connected": ("p", "c", SyncMode.DELTA),
        "on_fanout_client_disconnected": ("p", "c", "bye"),
        "on_fanout_client_caught_up": ("p", "c", 5),
        "on_fanout_client_backpressure": ("p", "c", 5),
        "on_fanout_snapshot_created": ("p", "snap", 5, 10),
        "on_fanout_journal_pruned": ("p", 3, 7),
        "on_pipeline_added": ("p2", "s", t),
        "on_pipeline_removed": ("p2", "s", "removed"),
    }
    assert set(args) == set(EVENT_NAMES), set(EVENT_NAMES) ^ set(args)
    text_before = {f.name for f in text_string_to_metric_families(before)}
    for name in EVENT_NAMES:
        fams_before = obs.render()
        getattr(obs, name)(*args[name])
        assert obs.render() != fams_before, f"{name} changed no metric"
    fams = {f.name: f for f in text_string_to_metric_families(obs.render())}
    assert set(fams) == text_before and len(fams) > 50  # every family from the first scrape
    lag = fams["laredo_source_lag_seconds"].samples[0]
    assert lag.labels == {"source": "s"} and lag.value == 2.0
    errs = [x for x in fams["laredo_change_errors"].samples if x.value]
    assert [e.labels for e in errs] == [
        {"pipeline": "p", "source": "s", "table": "public.t", "action": "update"}
    ]
    batch = PrometheusObserver(per_action=False)
    batch.on_changes_applied("p", t, 3, timedelta(0))
    assert batch.value("laredo_changes_applied_total", action="any") == 3
    # the engine only makes per-change / per-buffer-operation calls to observers that want them
    from laredo.observers import implements as _overrides

    assert not _overrides(batch, "on_change_applied")
    assert not _overrides(batch, "on_buffer_depth_changed")
    assert _overrides(PrometheusObserver(), "on_change_applied")


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
