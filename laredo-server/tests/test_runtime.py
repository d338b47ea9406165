"""The runtime's state computations, the watch hub and the pinned store, without a running
engine (no threads, no listeners)."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import laredo
import pytest
from laredo import PipelineInfo
from laredo import events as E
from laredo.testing import TestSource, columns
from laredo.types import PipelineState, SnapshotMetadata, TableIdentifier, TableSnapshotInfo
from laredo_server.config import Built
from laredo_server.runtime import (
    PinnedSnapshotStore,
    ServerRuntime,
    liveness_reasons,
    readiness_reasons,
    service_state_of,
)
from laredo_server.state import (
    ChangesApplied,
    PipelineStateChanged,
    ServiceState,
    ServiceStateChanged,
    SnapshotActivity,
    SourceStateChanged,
)
from laredo_server.watch import WatchHub
from laredo_target_memory import IndexedTarget

USERS = TableIdentifier("public", "users")
S = PipelineState


def info(pid: str, state: PipelineState, source: str = "src", error: str | None = None) -> Any:
    return PipelineInfo(pid, source, USERS, "indexed-memory", state, 0, 0, 10, error)


@pytest.mark.parametrize(
    ("states", "kw", "expected"),
    [
        ([S.STREAMING], {"stopping": True}, ServiceState.STOPPING),
        ([S.STREAMING], {"started": False}, ServiceState.STARTING),
        ([], {}, ServiceState.STARTING),
        ([S.STREAMING, S.ERROR, S.PAUSED], {"reloading": True}, ServiceState.ERROR),
        ([S.STREAMING, S.PAUSED], {"reloading": True}, ServiceState.RELOADING),
        ([S.STREAMING, S.PAUSED, S.BASELINING], {}, ServiceState.PAUSED),
        ([S.STREAMING, S.BASELINING], {}, ServiceState.BASELINING),
        ([S.STREAMING, S.STREAMING], {}, ServiceState.STREAMING),
        ([S.STREAMING, S.INITIALIZING], {}, ServiceState.STARTING),
        ([S.STOPPED], {}, ServiceState.STARTING),
    ],
)
def test_service_state_precedence(
    states: list[PipelineState], kw: dict[str, bool], expected: ServiceState
) -> None:
    args = {"started": True, "stopping": False, "reloading": False, **kw}
    assert service_state_of(states, **args) is expected


def test_readiness_reasons() -> None:
    pipes = [
        info("a", S.STREAMING),
        info("b", S.PAUSED),
        info("c", S.ERROR, error="boom"),
        info("d", S.ERROR),
        info("e", S.BASELINING),
        info("f", S.STREAMING),
    ]
    reasons = readiness_reasons(pipes, lambda p: p.id != "f", started=True, shutting_down=False)
    assert reasons == [
        "pipeline c: ERROR: boom",
        "pipeline d: ERROR: failed",
        "pipeline e: BASELINING",
        "pipeline f: not ready",
    ]
    assert readiness_reasons(pipes[:2], lambda p: True, started=True, shutting_down=False) == []
    assert readiness_reasons(pipes[:1], lambda p: True, started=False, shutting_down=True) == [
        "server is shutting down",
        "engine not started",
    ]


def test_liveness_fails_only_when_every_pipeline_of_a_source_failed() -> None:
    assert liveness_reasons([info("a", S.ERROR), info("b", S.STREAMING)]) == []
    assert liveness_reasons(
        [info("a", S.ERROR), info("b", S.ERROR), info("c", S.STREAMING, source="other")]
    ) == ["source src: every pipeline failed"]


def _runtime(**kw: Any) -> ServerRuntime:
    src = TestSource()
    src.add_table(USERS, columns("id"), [{"id": 1}])

    def factory(observers: Any, store: Any) -> Built:
        return Built(
            laredo.Engine(
                sources={"src": src},
                pipelines=[laredo.Pipeline("src", USERS, IndexedTarget(), id="users")],
                observers=list(observers),
            )
        )

    return ServerRuntime(factory, **kw)


def test_runtime_before_start() -> None:
    rt = _runtime()
    assert rt.service_state() is ServiceState.STARTING
    assert not rt.is_ready()
    assert rt.liveness() == (True, [])
    assert rt.require_source("src") == "src"
    with pytest.raises(KeyError, match="unknown source"):
        rt.require_source("nope")
    assert rt.source_of(USERS) == "src"
    assert rt.pipeline_config("users").table_id == USERS
    assert isinstance(rt.pipeline_target("users"), IndexedTarget)
    assert rt.pipeline_target("nope") is None
    rt.stopping.set()
    assert rt.service_state() is ServiceState.STOPPING


def test_access_follows_the_runtime_tokens() -> None:
    admin = [("authorization", "Bearer t")]
    assert _runtime().access.check(None, admin=True) is None
    rt = _runtime(admin_token="t", read_token="r")
    assert rt.access.check(None, admin=False) is None
    assert rt.access.check(admin, admin=True) is None
    refusal = rt.access.check(None, admin=True)
    assert refusal is not None and refusal.code == "UNAUTHENTICATED"
    rt.protect_reads = True
    assert rt.access.check(None, admin=False) is not None
    assert rt.access.check([("authorization", "Bearer r")], admin=False) is None


def test_hub_routes_events_to_matching_watchers() -> None:
    state = {"now": ServiceState.STARTING}
    hub = WatchHub(lambda: state["now"], buffer=2)
    every = hub.watch(set(), set())
    users = hub.watch(set(), {"users"})
    orders_table = hub.watch({"public.orders"}, set())
    hub.on_event(E.ChangesApplied("users", USERS, 3, dt.timedelta(0)))
    hub.on_event(E.SnapshotStarted("snap-1"))
    hub.on_event(E.SourceDisconnected("src", "postgresql://u:secret@h/db gone"))
    assert isinstance(users.next(0), ChangesApplied) and users.next(0) is None
    assert orders_table.next(0) is None
    got = [every.next(0), every.next(0)]
    assert isinstance(got[0], ChangesApplied) and isinstance(got[1], SnapshotActivity)
    assert every.next(0) is None  # the third event did not fit (buffer 2): counted instead
    assert every.take_dropped() == 1 and every.take_dropped() == 0
    hub.unwatch(every)
    hub.on_event(E.SnapshotFailed("snap-2", laredo.ErrorInfo("disk full")))
    assert hub.last_snapshot_error == "snap-2: disk full"
    assert every.next(0) is None
    assert hub.last_change_at is not None


def test_hub_masks_secrets_and_reports_service_state_changes() -> None:
    state = {"now": ServiceState.STARTING}
    hub = WatchHub(lambda: state["now"])
    w = hub.watch(set(), set())
    hub.on_event(E.SourceDisconnected("src", "postgresql://u:secret@h/db gone"))
    ev = w.next(0)
    assert isinstance(ev, SourceStateChanged)
    assert ev.state == "DISCONNECTED" and "secret" not in ev.reason and "***" in ev.reason
    hub.check_service_state()
    hub.check_service_state()
    state["now"] = ServiceState.STREAMING
    hub.check_service_state()
    changes = [w.next(0), w.next(0)]
    assert [(c.old, c.new) for c in changes if isinstance(c, ServiceStateChanged)] == [
        (None, ServiceState.STARTING),
        (ServiceState.STARTING, ServiceState.STREAMING),
    ]
    assert w.next(0) is None


def test_hub_names_the_table_of_a_pipeline_event() -> None:
    rt = _runtime()
    w = rt.hub.watch({"public.users"}, set())
    other = rt.hub.watch({"public.orders"}, set())
    rt.hub.on_event(E.PipelineStateChanged("users", S.INITIALIZING, S.BASELINING))
    ev = w.next(0)
    assert isinstance(ev, PipelineStateChanged)
    assert (ev.pipeline_id, ev.old, ev.new) == ("users", S.INITIALIZING, S.BASELINING)
    assert other.next(0) is None


def test_pinned_store_lists_only_the_pinned_snapshot_until_loaded(tmp_path: Path) -> None:
    store = laredo.snapshot_store("local", path=str(tmp_path))
    ser = laredo.serializer("jsonl")
    for sid in ("snap-a", "snap-b"):
        meta = SnapshotMetadata(
            sid,
            dt.datetime.now(dt.UTC),
            {"src": "1"},
            (TableSnapshotInfo(USERS, 1, tuple(columns("id"))),),
        )
        store.save(sid, meta, {USERS: [{"id": 1}]}, ser)
    pinned = PinnedSnapshotStore(store, "snap-a")
    assert pinned.inner is store
    assert [d.snapshot_id for d in pinned.list()] == ["snap-a"]
    assert pinned.describe("snap-b").snapshot_id == "snap-b"  # everything else passes through
    pinned.load("snap-b")
    assert [d.snapshot_id for d in pinned.list()] == ["snap-a"]
    _, tables = pinned.load("snap-a")
    assert [list(rows) for rows in tables.values()] == [[{"id": 1}]]
    assert sorted(d.snapshot_id for d in pinned.list()) == ["snap-a", "snap-b"]


@pytest.mark.parametrize("metrics_enabled", [True, False])
def test_one_event_stream_feeds_watch_status_and_metrics(metrics_enabled: bool) -> None:
    """The engine's observer is one stream to the watch hub, the status and the metrics; the
    status reads the metrics' counters (one count), also when /metrics is not exported (then
    per batch: no per-change values are built for it)."""
    rt = _runtime(metrics_enabled=metrics_enabled)
    stream = rt.engine.observer
    err = laredo.ErrorInfo("boom")
    w = rt.hub.watch(set(), set())
    stream.on_event(E.ChangesApplied("users", USERS, 3, dt.timedelta(0)))
    if E.receives(stream, E.ChangeApplied):  # as the engine does: per change when wanted
        for _ in range(3):
            stream.on_event(
                E.ChangeApplied("users", USERS, laredo.ChangeAction.INSERT, dt.timedelta(0))
            )
    stream.on_event(E.ChangeError("users", USERS, laredo.ChangeAction.UPDATE, err))
    counts = rt.metrics.pipeline_counts("users")
    assert (counts.changes_applied, counts.change_errors) == (3, 1)
    assert isinstance(w.next(0), ChangesApplied)
    assert E.receives(stream, E.ChangeApplied) is metrics_enabled
