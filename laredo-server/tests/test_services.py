"""The OAM and Query services over a real gRPC server on 127.0.0.1 (TestSource + IndexedTarget)."""

from __future__ import annotations

import json
import threading
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import grpc
import pytest
from laredo import ChangeAction, ChangeEvent, ErrorInfo
from laredo.serialization import object_hook
from laredo.testing import probing
from laredo_server._proto.laredo_proto.v1 import oam_pb2 as oam
from laredo_server._proto.laredo_proto.v1 import oam_pb2_grpc, query_pb2_grpc
from laredo_server._proto.laredo_proto.v1 import query_pb2 as q
from laredo_server.services.replays import KEEP_FINISHED

from .testkit import ORDERS, USERS, Harness, wait_for


def stubs(h: Harness) -> tuple[Any, Any]:
    return (
        oam_pb2_grpc.LaredoOAMServiceStub(h.channel),
        query_pb2_grpc.LaredoQueryServiceStub(h.channel),
    )


def code_of(fn: Any, *args: Any, **kw: Any) -> grpc.StatusCode:
    with pytest.raises(grpc.RpcError) as ei:
        fn(*args, **kw)
    return ei.value.code()  # type: ignore[no-any-return]


def row(msg: Any) -> Any:
    return json.loads(msg.json, object_hook=object_hook)


def users_ref() -> q.TableRef:
    return q.TableRef(schema="public", table="users")


def test_status_rpcs(harness: Harness) -> None:
    o, _ = stubs(harness)
    st = o.GetStatus(oam.GetStatusRequest())
    assert st.state == oam.SERVICE_STATE_STREAMING and st.ready
    assert {p.pipeline_id: p.row_count for p in st.pipelines} == {"users": 25, "orders": 2}
    assert st.sources[0].source_id == "src" and st.snapshot_status.store_configured
    assert st.started_at > 0
    ts = o.GetTableStatus(oam.GetTableStatusRequest(schema="public", table="users"))
    assert [p.pipeline_id for p in ts.pipelines] == ["users"]
    assert {i.name for i in ts.indexes} == {"lookup", "by_team"}
    assert code_of(o.GetTableStatus, oam.GetTableStatusRequest(table="nope")) == (
        grpc.StatusCode.NOT_FOUND
    )
    assert code_of(o.GetTableStatus, oam.GetTableStatusRequest()) == (
        grpc.StatusCode.INVALID_ARGUMENT
    )
    ps = o.GetPipelineStatus(oam.GetPipelineStatusRequest(pipeline_id="orders"))
    assert ps.status.state == oam.PIPELINE_STATE_STREAMING and ps.status.table == "orders"
    assert code_of(o.GetPipelineStatus, oam.GetPipelineStatusRequest(pipeline_id="x")) == (
        grpc.StatusCode.NOT_FOUND
    )
    tables = o.ListTables(oam.ListTablesRequest()).tables
    assert {(t.table, t.row_count, t.ready) for t in tables} == {
        ("users", 25, True),
        ("orders", 2, True),
    }
    cols = o.GetTableSchema(oam.GetTableSchemaRequest(schema="public", table="orders")).columns
    assert [(c.column_name, c.is_primary_key, c.primary_key_ordinal) for c in cols] == [
        ("region", True, 1),
        ("id", True, 2),
        ("total", False, 0),
    ]
    assert code_of(o.GetTableSchema, oam.GetTableSchemaRequest(table="zzz")) == (
        grpc.StatusCode.NOT_FOUND
    )
    harness.source.insert(USERS, {"id": 100, "name": "n", "email": "e100", "team": 1})
    info = o.GetSourceInfo(oam.GetSourceInfoRequest(source_id="src")).sources[0]
    assert info.id == "src" and info.ordering_guarantee == "TOTAL_ORDER"
    assert wait_for(
        lambda: o.GetSourceInfo(oam.GetSourceInfoRequest()).sources[0].current_position == "1"
    )
    assert "pipelines" in info.details
    assert code_of(o.GetSourceInfo, oam.GetSourceInfoRequest(source_id="zz")) == (
        grpc.StatusCode.NOT_FOUND
    )


def test_check_ready_scopes(harness: Harness) -> None:
    o, _ = stubs(harness)
    for req in (
        oam.CheckReadyRequest(),
        oam.CheckReadyRequest(source="src"),
        oam.CheckReadyRequest(table="public.orders"),
        oam.CheckReadyRequest(pipeline_id="users"),
    ):
        r = o.CheckReady(req)
        assert r.ready and not r.not_ready_reasons
    assert code_of(o.CheckReady, oam.CheckReadyRequest(source="nope")) == grpc.StatusCode.NOT_FOUND
    assert code_of(o.CheckReady, oam.CheckReadyRequest(pipeline_id="x")) == (
        grpc.StatusCode.NOT_FOUND
    )
    harness.rt.begin_drain()
    r = o.CheckReady(oam.CheckReadyRequest(table="public.users"))
    assert not r.ready and "shutting down" in r.not_ready_reasons[0]


def test_pause_resume_keeps_changes_and_watch_reports(harness: Harness) -> None:
    o, qs = stubs(harness)
    events: list[Any] = []
    call = o.WatchStatus(oam.WatchStatusRequest(pipeline_ids=["users"]))

    def consume() -> None:
        try:
            for ev in call:
                events.append(ev)
        except grpc.RpcError:
            pass

    t = threading.Thread(target=consume, daemon=True)
    t.start()
    assert wait_for(lambda: events)  # initial state of the watched pipeline
    paused = o.PauseSync(oam.PauseSyncRequest(source_id="src"))
    assert {p.state for p in paused.pipelines} == {oam.PIPELINE_STATE_PAUSED}
    assert o.GetStatus(oam.GetStatusRequest()).state == oam.SERVICE_STATE_PAUSED
    harness.source.insert(USERS, {"id": 200, "name": "p", "email": "p@x", "team": 2})
    harness.source.insert(ORDERS, {"region": "eu", "id": 9, "total": Decimal("1")})
    count = lambda: qs.CountRows(q.CountRowsRequest(table=users_ref())).count  # noqa: E731
    assert count() == 25  # buffered while paused, not applied
    resumed = o.ResumeSync(oam.ResumeSyncRequest(source_id="src"))
    assert {p.state for p in resumed.pipelines} == {oam.PIPELINE_STATE_STREAMING}
    assert wait_for(lambda: count() == 26)
    assert wait_for(lambda: any(e.WhichOneof("event") == "row_change" for e in events))
    kinds = [e.WhichOneof("event") for e in events]
    assert "pipeline_state_change" in kinds
    changes = [e.pipeline_state_change for e in events if e.HasField("pipeline_state_change")]
    assert any(c.new_state == oam.PIPELINE_STATE_PAUSED for c in changes)
    assert all(c.pipeline_id == "users" for c in changes)  # filtered to the watched pipeline
    assert all(e.row_change.pipeline_id == "users" for e in events if e.HasField("row_change"))
    call.cancel()
    assert code_of(o.PauseSync, oam.PauseSyncRequest(source_id="nope")) == (
        grpc.StatusCode.NOT_FOUND
    )


def test_reload_table_and_all_replace_state(harness: Harness) -> None:
    o, _ = stubs(harness)
    target = harness.rt.engine.get_target("src", USERS)
    target.on_delete(USERS, {"id": 1})  # drift: a row lost behind the engine's back
    target.on_insert(USERS, {"id": 999, "name": "stale", "email": "s@x", "team": 0})
    r = o.ReloadTable(oam.ReloadTableRequest(schema="public", table="users"))
    assert r.accepted and r.tables == ["public.users"]
    assert target.get(1) is not None and target.get(999) is None
    r = o.ReloadAll(oam.ReloadAllRequest())
    assert r.accepted and set(r.tables) == {"public.users", "public.orders"}
    assert code_of(o.ReloadTable, oam.ReloadTableRequest(table="nope")) == (
        grpc.StatusCode.NOT_FOUND
    )
    assert code_of(o.ReloadAll, oam.ReloadAllRequest(source_id="zz")) == grpc.StatusCode.NOT_FOUND


def test_reset_source_requires_confirm(harness: Harness) -> None:
    o, _ = stubs(harness)
    assert code_of(o.ResetSource, oam.ResetSourceRequest(source_id="src")) == (
        grpc.StatusCode.FAILED_PRECONDITION
    )
    # the test source cannot be reset: a clear FAILED_PRECONDITION, not UNIMPLEMENTED
    with pytest.raises(grpc.RpcError) as ei:
        o.ResetSource(oam.ResetSourceRequest(source_id="src", confirm=True))
    assert ei.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "cannot be reset" in ei.value.details()


def test_snapshots_create_list_inspect_prune_delete(harness: Harness) -> None:
    o, _ = stubs(harness)
    ids = []
    for i in range(3):
        r = o.CreateSnapshot(oam.CreateSnapshotRequest(user_meta_json=json.dumps({"n": i})))
        assert r.accepted and r.snapshot_id.startswith("snap-")
        ids.append(r.snapshot_id)
    listed = o.ListSnapshots(oam.ListSnapshotsRequest()).snapshots
    assert [s.snapshot_id for s in listed] == ids[::-1]
    assert len(o.ListSnapshots(oam.ListSnapshotsRequest(limit=1)).snapshots) == 1
    assert len(o.ListSnapshots(oam.ListSnapshotsRequest(table="public.orders")).snapshots) == 3
    inspected = o.InspectSnapshot(oam.InspectSnapshotRequest(snapshot_id=ids[0]))
    snap = inspected.snapshot
    assert {(t.table, t.row_count) for t in snap.tables} == {("users", 25), ("orders", 2)}
    assert inspected.layout == 2
    assert {(a.kind, a.table, sum(p.rows for p in a.parts)) for a in inspected.artifacts} == {
        ("table", "users", 25),
        ("table", "orders", 2),
    }
    assert all(len(p.sha256) == 64 for a in inspected.artifacts for p in a.parts)
    assert json.loads(snap.user_meta_json)["n"] == 0
    assert snap.source_positions["src"] == "0"
    pr = o.PruneSnapshots(oam.PruneSnapshotsRequest(keep=2))
    assert pr.deleted_count == 1 and list(pr.deleted_ids) == [ids[0]]
    assert o.DeleteSnapshot(oam.DeleteSnapshotRequest(snapshot_id=ids[1])).deleted
    assert [s.snapshot_id for s in o.ListSnapshots(oam.ListSnapshotsRequest()).snapshots] == [
        ids[2]
    ]
    assert code_of(o.InspectSnapshot, oam.InspectSnapshotRequest(snapshot_id=ids[0])) == (
        grpc.StatusCode.NOT_FOUND
    )
    assert code_of(o.DeleteSnapshot, oam.DeleteSnapshotRequest(snapshot_id="snap-x")) == (
        grpc.StatusCode.NOT_FOUND
    )
    assert code_of(o.PruneSnapshots, oam.PruneSnapshotsRequest(keep=0)) == (
        grpc.StatusCode.INVALID_ARGUMENT
    )


def test_restore_snapshot_restarts_from_it(harness: Harness) -> None:
    o, qs = stubs(harness)
    snap = o.CreateSnapshot(oam.CreateSnapshotRequest()).snapshot_id
    assert code_of(o.RestoreSnapshot, oam.RestoreSnapshotRequest(snapshot_id=snap)) == (
        grpc.StatusCode.FAILED_PRECONDITION
    )
    harness.source.insert(USERS, {"id": 300, "name": "after", "email": "a@x", "team": 1})
    r = o.RestoreSnapshot(oam.RestoreSnapshotRequest(snapshot_id=snap, confirm=True))
    assert r.accepted
    assert harness.builds == 2
    eng = harness.rt.engine
    assert eng.await_ready(10)
    assert harness.rt.metrics.value("laredo_snapshot_restores_total", outcome="completed") == 1
    # restored at the snapshot's position, then streamed the change made after it
    assert wait_for(lambda: qs.CountRows(q.CountRowsRequest(table=users_ref())).count == 26)
    assert (
        code_of(o.RestoreSnapshot, oam.RestoreSnapshotRequest(snapshot_id="snap-x", confirm=True))
        == grpc.StatusCode.NOT_FOUND
    )
    harness.source.set_supports_resume(False)
    with pytest.raises(grpc.RpcError) as ei:
        o.RestoreSnapshot(oam.RestoreSnapshotRequest(snapshot_id=snap, confirm=True))
    assert ei.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "cannot resume" in ei.value.details()


def test_dead_letters_list_replay_purge(harness: Harness) -> None:
    o, qs = stubs(harness)
    dls = harness.rt.engine.dead_letter_store
    for i in (500, 501):
        ev = ChangeEvent(
            USERS,
            ChangeAction.INSERT,
            7,
            datetime.now(UTC),
            new_values={"id": i, "name": "dl", "email": f"dl{i}@x", "team": 1},
        )
        dls.write("users", ev, ErrorInfo("boom", "TargetError"))
    entries = o.ListDeadLetters(oam.ListDeadLettersRequest()).entries
    assert [(e.pipeline_id, e.action, e.error) for e in entries] == [
        ("users", "INSERT", "boom"),
        ("users", "INSERT", "boom"),
    ]
    assert len(o.ListDeadLetters(oam.ListDeadLettersRequest(limit=1)).entries) == 1
    r = o.ReplayDeadLetters(oam.ReplayDeadLettersRequest(pipeline_id="users"))
    assert r.replayed == 2
    got = qs.GetRow(q.GetRowRequest(table=users_ref(), primary_key=["501"]))
    assert got.found and row(got.row)["email"] == "dl501@x"
    ev = ChangeEvent(USERS, ChangeAction.DELETE, 8, None, old_values={"id": 1})
    dls.write("users", ev, ErrorInfo("x"))
    assert o.PurgeDeadLetters(oam.PurgeDeadLettersRequest(pipeline_id="users")).purged == 1
    assert not o.ListDeadLetters(oam.ListDeadLettersRequest(pipeline_id="users")).entries
    assert code_of(o.ReplayDeadLetters, oam.ReplayDeadLettersRequest(pipeline_id="nope")) == (
        grpc.StatusCode.NOT_FOUND
    )


def test_snapshot_replay_start_status_stop(harness: Harness) -> None:
    o, _ = stubs(harness)
    snap = o.CreateSnapshot(oam.CreateSnapshotRequest()).snapshot_id
    with pytest.raises(grpc.RpcError) as ei:  # writes into live targets: confirm first
        o.StartReplay(oam.StartReplayRequest(snapshot_id=snap, tables=["public.orders"]))
    assert ei.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "confirm=true" in ei.value.details() and "orders" in ei.value.details()
    assert harness.rt.replays == {}
    rid = o.StartReplay(
        oam.StartReplayRequest(snapshot_id=snap, tables=["public.orders"], confirm=True)
    ).replay_id
    st = wait_for(
        lambda: (
            (s := o.GetReplayStatus(oam.GetReplayStatusRequest(replay_id=rid))).state != "running"
            and s
        )
    )
    assert st.state == "completed" and st.rows_replayed == 2 and st.snapshot_id == snap
    assert not o.StopReplay(oam.StopReplayRequest(replay_id=rid)).stopped
    # a slow replay can be stopped
    rid = o.StartReplay(
        oam.StartReplayRequest(
            snapshot_id=snap, speed="5", target_pipeline_id="users", confirm=True
        )
    ).replay_id
    assert o.StopReplay(oam.StopReplayRequest(replay_id=rid)).stopped
    st = o.GetReplayStatus(oam.GetReplayStatusRequest(replay_id=rid))
    assert st.state in ("stopped", "completed") and st.rows_replayed < 25
    assert code_of(o.GetReplayStatus, oam.GetReplayStatusRequest(replay_id="r")) == (
        grpc.StatusCode.NOT_FOUND
    )
    assert (
        code_of(o.StartReplay, oam.StartReplayRequest(snapshot_id=snap, tables=["public.nope"]))
        == grpc.StatusCode.NOT_FOUND
    )


def test_finished_replays_are_pruned(harness: Harness) -> None:
    o, _ = stubs(harness)
    snap = o.CreateSnapshot(oam.CreateSnapshotRequest()).snapshot_id
    req = oam.StartReplayRequest(snapshot_id=snap, tables=["public.orders"], confirm=True)
    ids = []
    for _ in range(KEEP_FINISHED + 3):
        ids.append(o.StartReplay(req).replay_id)
        assert wait_for(lambda: harness.rt.replays[ids[-1]].status().state == "completed")
    # the newest replay and KEEP_FINISHED finished ones before it stay readable
    assert list(harness.rt.replays) == ids[-(KEEP_FINISHED + 1) :]
    assert code_of(o.GetReplayStatus, oam.GetReplayStatusRequest(replay_id=ids[0])) == (
        grpc.StatusCode.NOT_FOUND
    )
    st = o.GetReplayStatus(oam.GetReplayStatusRequest(replay_id=ids[-1]))
    assert st.state == "completed" and st.rows_replayed == 2


def test_query_lookup_get_count_typed_values(harness: Harness) -> None:
    _, qs = stubs(harness)
    r = qs.Lookup(q.LookupRequest(table=users_ref(), key_values=['"u7@x"']))
    assert r.found and row(r.row) == {"id": 7, "name": "user7", "email": "u7@x", "team": 1}
    assert type(row(r.row)["id"]) is int  # integers stay integers on the wire
    assert not qs.Lookup(q.LookupRequest(table=users_ref(), key_values=['"zz"'])).found
    r = qs.Lookup(q.LookupRequest(table=users_ref(), index_name="by_team", key_values=["2"]))
    assert r.found and row(r.row)["team"] == 2
    rows = qs.LookupAll(
        q.LookupAllRequest(table=users_ref(), index_name="by_team", key_values=["0"])
    ).rows
    assert sorted(row(x)["id"] for x in rows) == [3, 6, 9, 12, 15, 18, 21, 24]
    assert code_of(qs.LookupAll, q.LookupAllRequest(table=users_ref(), key_values=["0"])) == (
        grpc.StatusCode.INVALID_ARGUMENT
    )
    orders = q.TableRef(table="public.orders")
    got = qs.GetRow(q.GetRowRequest(table=orders, primary_key=['"eu"', "1"]))
    assert got.found and row(got.row)["total"] == Decimal("9.50")  # decimals survive
    assert not qs.GetRow(q.GetRowRequest(table=orders, primary_key=['"xx"', "1"])).found
    assert code_of(qs.GetRow, q.GetRowRequest(table=orders, primary_key=['"eu"'])) == (
        grpc.StatusCode.INVALID_ARGUMENT
    )
    assert qs.CountRows(q.CountRowsRequest(table=orders)).count == 2
    assert code_of(qs.CountRows, q.CountRowsRequest(table=q.TableRef(table="zz"))) == (
        grpc.StatusCode.NOT_FOUND
    )


def test_list_rows_pages_are_stable(harness: Harness) -> None:
    _, qs = stubs(harness)
    seen: list[int] = []
    token = ""
    pages = 0
    while True:
        r = qs.ListRows(q.ListRowsRequest(table=users_ref(), page_size=10, page_token=token))
        seen.extend(row(x)["id"] for x in r.rows)
        pages += 1
        if pages == 1:
            assert r.total_count == 25
            # rows inserted before the cursor do not shift later pages
            harness.source.insert(USERS, {"id": 0, "name": "z", "email": "z@x", "team": 0})
            harness.source.insert(USERS, {"id": 1000, "name": "y", "email": "y@x", "team": 0})
            wait_for(lambda: qs.CountRows(q.CountRowsRequest(table=users_ref())).count == 27)
        token = r.next_page_token
        if not token:
            break
    assert seen == [*range(1, 26), 1000]
    assert (
        code_of(qs.ListRows, q.ListRowsRequest(table=users_ref(), page_token="!!not-a-token"))
        == grpc.StatusCode.INVALID_ARGUMENT
    )


def test_subscribe_replays_then_streams(harness: Harness) -> None:
    _, qs = stubs(harness)
    call = qs.Subscribe(
        q.SubscribeRequest(table=q.TableRef(table="public.orders"), replay_existing=True)
    )
    got: list[Any] = []

    def consume() -> None:
        try:
            for resp in call:
                got.extend(resp.events)
        except grpc.RpcError:
            pass

    threading.Thread(target=consume, daemon=True).start()
    assert wait_for(lambda: len(got) >= 2)
    assert all(e.action == "INSERT" and e.replayed for e in got[:2])
    harness.source.insert(ORDERS, {"region": "ap", "id": 5, "total": Decimal("3.00")})
    harness.source.update(ORDERS, {"region": "ap", "id": 5, "total": Decimal("4.00")})
    harness.source.delete(ORDERS, {"region": "eu", "id": 1})
    assert wait_for(lambda: len(got) >= 5)
    live = got[2:5]
    assert [e.action for e in live] == ["INSERT", "UPDATE", "DELETE"]
    assert not any(e.replayed for e in live)
    assert row(live[1].new_values)["total"] == Decimal("4.00")
    assert row(live[1].old_values)["total"] == Decimal("3.00")
    assert row(live[2].old_values)["region"] == "eu"
    assert live[0].position  # the source position of the change
    call.cancel()


def test_admin_token(tmp_path: Path) -> None:
    h = Harness(tmp_path, token="t0ken").start()
    try:
        o, qs = stubs(h)
        assert o.GetStatus(oam.GetStatusRequest()).ready  # reads stay open
        with pytest.raises(grpc.RpcError) as ei:
            o.PauseSync(oam.PauseSyncRequest(source_id="src"))
        assert ei.value.code() == grpc.StatusCode.UNAUTHENTICATED
        with pytest.raises(grpc.RpcError) as ei:
            o.PauseSync(
                oam.PauseSyncRequest(source_id="src"),
                metadata=[("authorization", "Bearer wrong")],
            )
        assert ei.value.code() == grpc.StatusCode.UNAUTHENTICATED
        assert "invalid" in ei.value.details()
        o.PauseSync(
            oam.PauseSyncRequest(source_id="src"), metadata=[("authorization", "Bearer t0ken")]
        )
        assert h.rt.engine.pipelines()[0].state.value == "PAUSED"
        h.rt.protect_reads = True
        assert code_of(o.GetStatus, oam.GetStatusRequest()) == grpc.StatusCode.UNAUTHENTICATED
        assert code_of(qs.CountRows, q.CountRowsRequest(table=users_ref())) == (
            grpc.StatusCode.UNAUTHENTICATED
        )
    finally:
        h.stop()


def test_standard_health_and_reflection(harness: Harness) -> None:
    from grpc_health.v1 import health_pb2, health_pb2_grpc
    from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

    hs = health_pb2_grpc.HealthStub(harness.channel)
    for name in ("", "laredo.v1.LaredoOAMService", "laredo.v1.LaredoQueryService"):
        r = hs.Check(health_pb2.HealthCheckRequest(service=name))
        assert r.status == health_pb2.HealthCheckResponse.SERVING
    rs = reflection_pb2_grpc.ServerReflectionStub(harness.channel)
    resp = next(
        iter(
            rs.ServerReflectionInfo(
                iter([reflection_pb2.ServerReflectionRequest(list_services="")])
            )
        )
    )
    names = {s.name for s in resp.list_services_response.service}
    assert {"laredo.v1.LaredoOAMService", "laredo.v1.LaredoQueryService"} <= names


def test_subscribe_overflow_is_an_error_not_a_silent_gap(tmp_path: Path) -> None:
    h = Harness(tmp_path, watch_buffer=16).start()
    try:
        _, qs = stubs(h)
        call = qs.Subscribe(q.SubscribeRequest(table=users_ref()))
        # probe until the server's listener is in place: rows inserted before it would never
        # reach this subscriber (and nothing would overflow)
        with probing(
            lambda i: h.source.insert(
                USERS, {"id": 100_000 + i, "name": "p", "email": f"p{i}@x", "team": 0}
            )
        ):
            first = next(call)
        assert all(row(e.new_values)["id"] >= 100_000 for e in first.events)
        for i in range(3000):  # the client reads nothing meanwhile: it falls behind
            h.source.insert(USERS, {"id": 1000 + i, "name": "x", "email": f"x{i}@x", "team": 0})
        with pytest.raises(grpc.RpcError) as ei:
            for _ in call:
                pass
        assert ei.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "resubscribe" in ei.value.details()
    finally:
        h.stop()


def test_subscribe_replays_a_table_larger_than_the_watch_buffer(tmp_path: Path) -> None:
    """Review L3: the existing rows are not limited by grpc.watch_buffer (25 rows > 10)."""
    h = Harness(tmp_path, watch_buffer=10).start()
    try:
        _, qs = stubs(h)
        call = qs.Subscribe(q.SubscribeRequest(table=users_ref(), replay_existing=True))
        got: list[Any] = []
        for resp in call:
            got.extend(resp.events)
            if len(got) >= 25:
                break
        assert len(got) == 25 and all(e.action == "INSERT" and e.replayed for e in got)
        assert sorted(row(e.new_values)["id"] for e in got) == list(range(1, 26))
        # then the changes, in order, none lost or doubled
        h.source.insert(USERS, {"id": 26, "name": "n", "email": "n26@x", "team": 0})
        h.source.delete(USERS, {"id": 3})
        live: list[Any] = []
        for resp in call:
            live.extend(resp.events)
            if len(live) >= 2:
                break
        assert [(e.action, e.replayed) for e in live] == [("INSERT", False), ("DELETE", False)]
        assert row(live[0].new_values)["id"] == 26 and row(live[1].old_values)["id"] == 3
        call.cancel()
    finally:
        h.stop()


def test_unencodable_row_is_an_error_not_dropped(harness: Harness) -> None:
    _, qs = stubs(harness)
    target = harness.rt.engine.get_target("src", USERS)
    target.on_insert(USERS, {"id": 4242, "name": object(), "email": "o@x", "team": 0})
    with pytest.raises(grpc.RpcError) as ei:
        qs.GetRow(q.GetRowRequest(table=users_ref(), primary_key=["4242"]))
    assert ei.value.code() == grpc.StatusCode.INTERNAL
    assert "cannot be encoded" in ei.value.details() and "object" in ei.value.details()
    with pytest.raises(grpc.RpcError) as ei:
        qs.ListRows(q.ListRowsRequest(table=users_ref(), page_size=10000))
    assert ei.value.code() == grpc.StatusCode.INTERNAL


def test_wait_for_position_read_your_writes(harness: Harness) -> None:
    _, qs = stubs(harness)
    for i in range(50):
        pos = harness.source.insert(
            USERS, {"id": 100 + i, "name": "w", "email": f"w{i}@x", "team": 0}
        )
        resp = qs.WaitForPosition(
            q.WaitForPositionRequest(source_id="src", position=str(pos), timeout_ms=5000)
        )
        assert resp.reached and int(resp.applied_position) >= pos
        row = qs.GetRow(q.GetRowRequest(table=users_ref(), primary_key=[str(100 + i)]))
        assert row.found
    far = str(harness.source.position + 10_000)
    resp = qs.WaitForPosition(
        q.WaitForPositionRequest(source_id="src", position=far, timeout_ms=200)
    )
    assert not resp.reached  # a timeout is an answer, not an error
    assert code_of(
        qs.WaitForPosition, q.WaitForPositionRequest(source_id="nope", position="1")
    ) == (grpc.StatusCode.NOT_FOUND)
    assert code_of(qs.WaitForPosition, q.WaitForPositionRequest(source_id="src", position="x")) == (
        grpc.StatusCode.INVALID_ARGUMENT
    )
