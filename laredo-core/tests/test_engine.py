"""The engine against the programmable test source: lifecycle, baseline then stream, ACK,
filters, pause, reload, error policies, snapshots, TTL, schema changes."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import laredo
import pytest
from laredo import ChangeAction, PipelineState, Table
from laredo.testing import RecordingTarget, TestSource, columns
from laredo.testing import wait_until as wait

USERS = Table("public", "users")
ORDERS = Table("public", "orders")


def test_config_errors_are_all_reported(make_source) -> None:
    with pytest.raises(laredo.ConfigError) as ei:
        laredo.Engine(sources={}, pipelines=[])
    assert len(ei.value.problems) >= 2
    src = make_source()
    with pytest.raises(laredo.ConfigError) as ei:
        laredo.Engine(
            sources={"s": src},
            pipelines=[
                laredo.Pipeline("nope", USERS, RecordingTarget()),
                laredo.Pipeline("s", USERS, None, buffer_size=0),
                laredo.Pipeline("s", USERS, RecordingTarget(), buffer_policy="sometimes"),
                laredo.Pipeline("s", USERS, RecordingTarget(), max_retries=-1),
            ],
            snapshot_schedule=-1,
        )
    text = str(ei.value)
    for needle in (
        "unknown source 'nope'",
        "target: missing",
        "buffer_size",
        "buffer_policy",
        "max_retries",
        "snapshot_schedule",
        "duplicate pipeline id",
    ):
        assert needle in text, needle


def test_lifecycle_errors(make_source) -> None:
    src = make_source()
    eng = laredo.Engine(
        sources={"s": src}, pipelines=[laredo.Pipeline("s", USERS, RecordingTarget())]
    )
    with pytest.raises(laredo.EngineStateError):
        eng.stop()
    with pytest.raises(laredo.EngineStateError):
        eng.pause("s")
    assert not eng.await_ready(0)
    eng.start()
    with pytest.raises(laredo.EngineStateError):
        eng.start()
    with pytest.raises(KeyError):
        eng.pause("missing")
    assert eng.await_ready(5)
    with pytest.raises(laredo.EngineStateError):
        eng.create_snapshot()
    eng.stop()
    with pytest.raises(laredo.EngineStateError):
        eng.stop()
    with pytest.raises(laredo.EngineStateError):
        eng.start()


def test_baseline_then_stream_in_order(obs: laredo.RecordingObserver, make_source, run) -> None:
    src = make_source()
    users, orders = RecordingTarget(), RecordingTarget()
    eng = run(
        src,
        [laredo.Pipeline("s", USERS, users), laredo.Pipeline("s", ORDERS, orders)],
        observers=[obs],
    )
    assert eng.await_ready(5)
    assert users.count() == 2 and orders.count() == 1
    assert orders.get(10)["total"] == Decimal("9.50")
    src.insert(USERS, {"id": 3, "name": "carol", "email": "c@x"})
    src.update(USERS, {"id": 1, "name": "alice2", "email": "a@x"})
    src.delete(USERS, {"id": 2})
    src.insert(ORDERS, {"id": 11, "user_id": 3, "total": Decimal("1")})
    # Each pipeline applies on its own worker: wait for the final state of both
    # (users' count is 2 before and after its three changes, so count alone races).
    assert wait(lambda: users.get(3) is not None and users.get(2) is None and orders.count() == 2)
    assert users.count() == 2
    assert users.get(1)["name"] == "alice2" and users.get(2) is None
    assert [c[0] for c in users.calls if c[0].startswith("on_") and c[0] not in ("on_init",)][
        -3:
    ] == ["on_insert", "on_update", "on_delete"]
    # orders pipeline saw only its own table
    assert all(c[1] == ORDERS for c in orders.calls)
    # acked position reaches the last change: every target is durable
    assert wait(lambda: src.acked == src.position)
    assert obs.count("source_connected") == 1
    assert obs.count("baseline_started") == 2 and obs.count("baseline_completed") == 2
    states = [
        (a[1], a[2]) for a in obs.of("pipeline_state_changed") if a[0].startswith("s:public.users")
    ]
    assert states[:2] == [
        (PipelineState.INITIALIZING, PipelineState.BASELINING),
        (PipelineState.BASELINING, PipelineState.STREAMING),
    ]
    assert obs.count("ack_advanced") >= 1
    eng.stop()
    assert {p.state for p in eng.pipelines()} == {PipelineState.STOPPED}
    assert users.closed


def test_ack_is_minimum_over_pipelines_and_waits_for_non_durable(make_source, run) -> None:
    src = make_source()
    fast = RecordingTarget()
    slow_gate = threading.Event()
    slow = RecordingTarget()
    orig = slow.on_insert

    def blocked_insert(table, row):  # type: ignore[no-untyped-def]
        slow_gate.wait(10)
        orig(table, row)

    slow.on_insert = blocked_insert  # type: ignore[method-assign]
    eng = run(
        src, [laredo.Pipeline("s", USERS, fast), laredo.Pipeline("s", USERS, slow, id="slow")]
    )
    assert eng.await_ready(5)
    base = src.position
    assert wait(lambda: src.acked == base)
    p1 = src.insert(USERS, {"id": 5, "name": "e", "email": "e"})
    assert wait(lambda: fast.get(5) is not None)
    time.sleep(0.1)
    assert src.acked == base  # the slow pipeline has not applied p1: no ack beyond it
    slow_gate.set()
    assert wait(lambda: src.acked == p1)
    assert src.acks == sorted(src.acks)  # forward only
    eng.stop()


def test_idle_heartbeats_and_unrelated_tables_advance_ack(make_source, run) -> None:
    src = make_source()
    users = RecordingTarget()
    eng = run(src, [laredo.Pipeline("s", USERS, users)])
    assert eng.await_ready(5)
    p = src.insert(ORDERS, {"id": 99, "user_id": 1, "total": Decimal(0)})
    assert wait(lambda: src.acked == p)
    hb = src.heartbeat()
    assert wait(lambda: src.acked == hb)
    assert users.count() == 2
    eng.stop()


def test_filters_and_transforms_apply_to_baseline_and_stream(make_source, run) -> None:
    src = make_source()
    t = RecordingTarget()
    eng = run(
        src,
        [
            laredo.Pipeline(
                "s",
                USERS,
                t,
                filters=[laredo.filters.FieldPrefix("name", "a")],
                transforms=[laredo.transforms.DropFields(["email"])],
            )
        ],
    )
    assert eng.await_ready(5)
    assert [r["name"] for r in t.rows()] == ["alice"]
    assert "email" not in t.rows()[0]
    src.insert(USERS, {"id": 3, "name": "anna", "email": "x"})
    src.insert(USERS, {"id": 4, "name": "zed", "email": "x"})
    # alice leaves the filter: the row must be removed, not left stale
    src.update(USERS, {"id": 1, "name": "zoe", "email": "a@x"})
    assert wait(lambda: t.get(3) is not None and t.get(1) is None)
    assert t.get(4) is None
    eng.stop()


def test_delete_with_key_only_identity_reaches_filtered_target(make_source, run) -> None:
    src = make_source()
    t = RecordingTarget()
    eng = run(
        src, [laredo.Pipeline("s", USERS, t, filters=[laredo.filters.FieldEquals("name", "alice")])]
    )
    assert eng.await_ready(5)
    src.delete(USERS, {"id": 1})  # DEFAULT replica identity: key columns only
    assert wait(lambda: t.get(1) is None)
    eng.stop()


def test_pause_buffers_and_resume_applies_everything(make_source, run) -> None:
    src = make_source()
    t = RecordingTarget()
    eng = run(src, [laredo.Pipeline("s", USERS, t)])
    assert eng.await_ready(5)
    eng.pause("s")
    assert eng.pipelines()[0].state is PipelineState.PAUSED
    for i in range(100, 150):
        src.insert(USERS, {"id": i, "name": f"n{i}", "email": ""})
    time.sleep(0.1)
    assert t.count() == 2  # nothing applied while paused
    assert src.acked is not None and src.acked < src.position
    eng.resume("s")
    assert wait(lambda: t.count() == 52)
    assert wait(lambda: src.acked == src.position)
    eng.stop()


def test_call_in_pipeline_runs_on_the_worker_also_while_paused(make_source, run) -> None:
    src = make_source()
    t = RecordingTarget()
    eng = run(src, [laredo.Pipeline("s", USERS, t, id="u")])
    assert eng.await_ready(5)
    assert eng.call_in_pipeline("u", lambda: threading.current_thread().name) == (
        "laredo-pipeline-u"
    )
    eng.pause("s")  # data items wait; the call does not
    assert eng.call_in_pipeline("u", t.count, timeout=5) == 2
    with pytest.raises(ZeroDivisionError):  # the work's own error, as raised
        eng.call_in_pipeline("u", lambda: 1 / 0)
    with pytest.raises(TimeoutError, match=r"did not run the call in 0\.2s"):
        eng.call_in_pipeline("u", lambda: time.sleep(1), timeout=0.2)
    with pytest.raises(KeyError, match="unknown pipeline 'nope'"):
        eng.call_in_pipeline("nope", t.count)
    eng.resume("s")
    eng.stop()
    with pytest.raises(laredo.errors.EngineStateError, match="pipeline u is not running"):
        eng.call_in_pipeline("u", t.count)


def test_reload_replaces_state_and_loses_no_concurrent_change(make_source, run) -> None:
    src = make_source()
    t = RecordingTarget()
    eng = run(src, [laredo.Pipeline("s", USERS, t)])
    assert eng.await_ready(5)
    # a stale row the source no longer has (e.g. missed while we were away)
    t._rows[(999,)] = {"id": 999, "name": "stale", "email": ""}
    stop = threading.Event()

    def writer() -> None:
        i = 1000
        while not stop.is_set():
            src.insert(USERS, {"id": i, "name": "w", "email": ""})
            i += 1
            time.sleep(0.001)

    th = threading.Thread(target=writer)
    th.start()
    time.sleep(0.05)
    eng.reload("s", USERS)
    time.sleep(0.05)
    stop.set()
    th.join()
    expected = {r["id"] for r in src.rows(USERS)}
    assert wait(lambda: {r["id"] for r in t.rows()} == expected)
    assert 999 not in {r["id"] for r in t.rows()}
    assert eng.pipelines()[0].state is PipelineState.STREAMING
    with pytest.raises(KeyError):
        eng.reload("s", Table("public", "nope"))
    eng.stop()


def test_retry_then_success_and_dead_letter_isolate(
    obs: laredo.RecordingObserver, make_source, run
) -> None:
    from laredo.deadletter import MemoryDeadLetterStore

    src = make_source()
    flaky = RecordingTarget()
    broken = RecordingTarget()
    dl = MemoryDeadLetterStore()
    eng = run(
        src,
        [
            laredo.Pipeline("s", USERS, flaky, retry_backoff=0.001),
            laredo.Pipeline("s", ORDERS, broken, max_retries=2, retry_backoff=0.001),
        ],
        observers=[obs],
        dead_letter_store=dl,
    )
    assert eng.await_ready(5)
    flaky.fail_times = 2
    src.insert(USERS, {"id": 7, "name": "g", "email": ""})
    assert wait(lambda: flaky.get(7) is not None)
    assert obs.count("change_error") >= 2
    broken.fail_always = True
    pos = src.insert(ORDERS, {"id": 12, "user_id": 7, "total": Decimal(2)})
    assert wait(lambda: eng.pipelines()[1].state is PipelineState.ERROR)
    letters = dl.read(eng.pipelines()[1].id)
    assert len(letters) == 1 and letters[0].change.action is ChangeAction.INSERT
    assert obs.count("dead_letter_written") == 1
    # the isolated pipeline no longer holds back the ACK of the healthy one
    p2 = src.insert(USERS, {"id": 8, "name": "h", "email": ""})
    assert wait(lambda: src.acked is not None and src.acked >= p2)
    assert pos <= p2
    assert not eng.is_ready("s", ORDERS) and eng.is_ready("s", USERS)
    eng.stop()


def test_stop_source_policy_fails_every_pipeline_of_the_source(make_source, run) -> None:
    src = make_source()
    a, b = RecordingTarget(), RecordingTarget()
    eng = run(
        src,
        [
            laredo.Pipeline("s", USERS, a, error_policy="stop_source", max_retries=0),
            laredo.Pipeline("s", ORDERS, b),
        ],
    )
    assert eng.await_ready(5)
    a.fail_always = True
    src.insert(USERS, {"id": 9, "name": "i", "email": ""})
    assert wait(lambda: all(p.state is PipelineState.ERROR for p in eng.pipelines()))
    eng.stop()


def test_buffer_policies(obs: laredo.RecordingObserver, make_source, run) -> None:
    src = make_source()
    gate = threading.Event()
    t = RecordingTarget()
    orig = t.on_insert

    def slow(table, row):  # type: ignore[no-untyped-def]
        gate.wait(5)
        orig(table, row)

    t.on_insert = slow  # type: ignore[method-assign]
    eng = run(
        src,
        [laredo.Pipeline("s", USERS, t, buffer_size=5, buffer_policy="drop_oldest")],
        observers=[obs],
    )
    assert eng.await_ready(5)
    for i in range(100, 120):
        src.insert(USERS, {"id": i, "name": "", "email": ""})
    assert obs.wait_for("buffer_policy_triggered", 1, 10)  # changes were dropped
    gate.set()
    assert wait(lambda: t.get(119) is not None)
    assert t.count() < 22  # some were dropped, by the user's choice of policy
    eng.stop()

    src2 = make_source()
    gate2 = threading.Event()
    t2 = RecordingTarget()
    orig2 = t2.on_insert
    t2.on_insert = lambda table, row: (gate2.wait(5), orig2(table, row))  # type: ignore[method-assign]
    eng2 = run(src2, [laredo.Pipeline("s", USERS, t2, buffer_size=2, buffer_policy="error")])
    assert eng2.await_ready(5)
    for i in range(100, 110):
        src2.insert(USERS, {"id": i, "name": "", "email": ""})
    assert wait(lambda: eng2.pipelines()[0].state is PipelineState.ERROR)
    assert "buffer full" in (eng2.pipelines()[0].error or "")
    gate2.set()
    eng2.stop()


def test_block_policy_backpressures_without_loss(make_source, run) -> None:
    src = make_source()
    src.batch_size = 1
    t = RecordingTarget()
    eng = run(src, [laredo.Pipeline("s", USERS, t, buffer_size=3)])
    assert eng.await_ready(5)
    for i in range(100, 400):
        src.insert(USERS, {"id": i, "name": "", "email": ""})
    assert wait(lambda: t.count() == 302)
    ids = [c[2]["id"] for c in t.calls if c[0] == "on_insert"]
    assert ids == list(range(100, 400))
    eng.stop()


def test_stop_drains_buffers(make_source, run) -> None:
    src = make_source()
    t = RecordingTarget()
    eng = run(src, [laredo.Pipeline("s", USERS, t)])
    assert eng.await_ready(5)
    eng.pause("s")
    for i in range(100, 106):
        src.insert(USERS, {"id": i, "name": "", "email": ""})
    assert wait(lambda: eng.pipelines()[0].buffer_depth == 6)  # all six wait in the buffer
    eng.stop()
    assert t.count() == 8


def test_rebaseline_on_disconnect_replaces_state(
    obs: laredo.RecordingObserver, make_source, run
) -> None:
    src = make_source()
    t = RecordingTarget()
    eng = run(src, [laredo.Pipeline("s", USERS, t)], observers=[obs])
    assert eng.await_ready(5)
    t._rows[(555,)] = {"id": 555, "name": "stale", "email": ""}
    src.disconnect()
    assert obs.wait_for("rebaseline_triggered", 1, 5)
    assert wait(lambda: obs.count("baseline_completed") == 2)
    assert {r["id"] for r in t.rows()} == {1, 2}
    src.insert(USERS, {"id": 3, "name": "c", "email": ""})
    assert wait(lambda: t.get(3) is not None)
    eng.stop()


def test_source_init_error_never_ready(obs: laredo.RecordingObserver, make_source, run) -> None:
    src = make_source()
    src.init_error = laredo.SourceError("connection refused")
    eng = run(src, [laredo.Pipeline("s", USERS, RecordingTarget())], observers=[obs])
    assert not eng.await_ready(0.3)
    assert obs.count("source_disconnected") == 1
    assert "connection refused" in obs.of("source_disconnected")[0][1]
    assert eng.pipelines()[0].state is PipelineState.ERROR
    eng.stop()


def test_validation_errors_fail_only_that_pipeline(make_source, run) -> None:
    src = make_source()
    eng = run(
        src,
        [
            laredo.Pipeline("s", USERS, RecordingTarget()),
            laredo.Pipeline("s", Table("public", "missing"), RecordingTarget()),
        ],
    )
    assert wait(lambda: eng.is_ready("s", USERS))
    p = next(x for x in eng.pipelines() if x.table.table == "missing")
    assert p.state is PipelineState.ERROR and "TABLE_NOT_FOUND" in (p.error or "")
    eng.stop()


def test_resume_with_durable_target_skips_baseline(
    obs: laredo.RecordingObserver, make_source, run
) -> None:
    src = make_source(supports_resume=True)
    t = RecordingTarget()
    eng = run(src, [laredo.Pipeline("s", USERS, t)])
    assert eng.await_ready(5)
    p = src.insert(USERS, {"id": 3, "name": "c", "email": ""})
    assert wait(lambda: src.acked == p)
    eng.stop()
    src.insert(USERS, {"id": 4, "name": "d", "email": ""})  # while we were down
    t2 = RecordingTarget()
    eng2 = run(src, [laredo.Pipeline("s", USERS, t2)], observers=[obs])
    assert eng2.await_ready(5)
    assert obs.count("baseline_started") == 0
    assert wait(lambda: t2.get(4) is not None)
    assert t2.get(3) is None  # exactly the un-acked change, nothing older
    eng2.stop()


def test_volatile_target_on_resumable_source_without_snapshot_rebaselines(
    obs: laredo.RecordingObserver, make_source, run
) -> None:
    src = make_source(supports_resume=True)
    eng = run(src, [laredo.Pipeline("s", USERS, RecordingTarget(durable=False))])
    assert eng.await_ready(5)
    eng.stop()
    t2 = RecordingTarget(durable=False)
    eng2 = run(src, [laredo.Pipeline("s", USERS, t2)], observers=[obs])
    assert eng2.await_ready(5)
    assert t2.count() == 2  # baseline, not an empty target resumed
    assert obs.count("baseline_started") == 1
    eng2.stop()


def test_snapshot_bounds_ack_and_restore_resumes(
    tmp_path, obs: laredo.RecordingObserver, make_source, run
) -> None:  # type: ignore[no-untyped-def]
    store = laredo.snapshot_store("local", path=str(tmp_path))
    src = make_source(supports_resume=True)
    t = RecordingTarget(durable=False)
    eng = run(src, [laredo.Pipeline("s", USERS, t)], snapshot_store=store)
    assert eng.await_ready(5)
    p1 = src.insert(USERS, {"id": 3, "name": "c", "email": ""})
    assert wait(lambda: t.get(3) is not None)
    time.sleep(0.05)
    assert src.acked is None  # in-memory state is not durable until a snapshot exists
    snap = eng.create_snapshot({"who": "test"})
    assert wait(lambda: src.acked == p1)
    p2 = src.insert(USERS, {"id": 4, "name": "d", "email": ""})
    assert wait(lambda: t.get(4) is not None)
    time.sleep(0.05)
    assert src.acked == p1  # not beyond the snapshot
    eng.stop()
    assert store.list()[0].snapshot_id == snap
    t2 = RecordingTarget(durable=False)
    eng2 = run(src, [laredo.Pipeline("s", USERS, t2)], snapshot_store=store, observers=[obs])
    assert eng2.await_ready(5)
    assert obs.count("baseline_started") == 0 and obs.count("snapshot_restore_completed") == 1
    assert wait(lambda: t2.get(4) is not None)
    assert {r["id"] for r in t2.rows()} == {1, 2, 3, 4}
    inserts = [c for c in t2.calls if c[0] == "on_insert"]
    assert [c[2]["id"] for c in inserts] == [4]  # nothing applied twice
    assert p2 > p1
    eng2.stop()


def test_malformed_snapshot_falls_back_to_baseline(
    tmp_path, obs: laredo.RecordingObserver, make_source, run
) -> None:  # type: ignore[no-untyped-def]
    store = laredo.snapshot_store("local", path=str(tmp_path))
    src = make_source(supports_resume=True)
    eng = run(
        src, [laredo.Pipeline("s", USERS, RecordingTarget(durable=False))], snapshot_store=store
    )
    assert eng.await_ready(5)
    snap = eng.create_snapshot()
    eng.stop()
    for f in (tmp_path / snap).rglob("part-*"):
        f.write_text('{"not": "a header"\n garbage')
    t2 = RecordingTarget(durable=False)
    eng2 = run(src, [laredo.Pipeline("s", USERS, t2)], snapshot_store=store, observers=[obs])
    assert eng2.await_ready(5)
    assert obs.count("snapshot_failed") == 1 and obs.count("baseline_started") == 1
    assert t2.count() == 2
    eng2.stop()


def test_snapshot_on_shutdown_and_meta_reject(tmp_path, make_source, run) -> None:  # type: ignore[no-untyped-def]
    store = laredo.snapshot_store("local", path=str(tmp_path))
    src = make_source(supports_resume=True)
    eng = run(
        src,
        [laredo.Pipeline("s", USERS, RecordingTarget(durable=False))],
        snapshot_store=store,
        snapshot_on_shutdown=True,
        snapshot_user_meta={"schema_version": 1},
    )
    assert eng.await_ready(5)
    eng.stop()
    snaps = store.list()
    assert len(snaps) == 1
    obs = laredo.RecordingObserver()
    eng2 = run(
        src,
        [laredo.Pipeline("s", USERS, RecordingTarget(durable=False))],
        snapshot_store=store,
        snapshot_user_meta={"schema_version": 2},
        snapshot_meta_policy="reject",
        observers=[obs],
    )
    assert eng2.await_ready(5)
    assert obs.count("snapshot_failed") == 1 and obs.count("baseline_started") == 1
    eng2.stop()


def test_ttl_field_and_scan(obs: laredo.RecordingObserver, run) -> None:
    now = datetime.now(UTC)
    src = TestSource()
    src.add_table(
        USERS,
        columns("id", "exp"),
        [
            {"id": 1, "exp": now - timedelta(hours=1)},
            {"id": 2, "exp": now + timedelta(hours=1)},
            {"id": 3, "exp": None},
            {"id": 4, "exp": now + timedelta(milliseconds=300)},
        ],
    )
    t = RecordingTarget()
    eng = run(
        src,
        [laredo.Pipeline("s", USERS, t, ttl_field="exp", ttl_scan_interval=0.1)],
        observers=[obs],
    )
    assert eng.await_ready(5)
    assert {r["id"] for r in t.rows()} == {2, 3, 4}
    src.insert(USERS, {"id": 5, "exp": now - timedelta(seconds=1)})
    src.update(USERS, {"id": 2, "exp": now - timedelta(seconds=1)})
    assert wait(lambda: t.get(2) is None)
    assert t.get(5) is None
    assert wait(lambda: t.get(4) is None, 5)
    assert obs.count("row_expired") >= 1
    eng.stop()


def test_validation_after_baseline(obs: laredo.RecordingObserver, make_source, run) -> None:
    src = make_source()
    eng = run(src, [laredo.Pipeline("s", USERS, RecordingTarget())], observers=[obs])
    assert eng.await_ready(5)
    assert obs.of("validation_result")[0][2:] == (2, 2, True)
    eng.stop()


def test_schema_change_responses(make_source, run) -> None:
    src = make_source()
    cont = RecordingTarget()
    rebase = RecordingTarget(
        schema_response=laredo.SchemaChangeResponse(laredo.SchemaChangeAction.RE_BASELINE)
    )
    err = RecordingTarget(
        schema_response=laredo.SchemaChangeResponse(laredo.SchemaChangeAction.ERROR, "no")
    )
    eng = run(
        src,
        [
            laredo.Pipeline("s", USERS, cont),
            laredo.Pipeline("s", USERS, rebase, id="rb"),
            laredo.Pipeline("s", USERS, err, id="err"),
        ],
    )
    assert eng.await_ready(5)
    src.schema_change(USERS, columns("id", "name", "email", "age"))
    src.insert(USERS, {"id": 3, "name": "c", "email": "", "age": 3})
    # three pipelines on three workers: wait for the final state of each (row 3 can reach
    # `rb` in its re-baseline before that baseline completes; `err` fails on its own worker)
    assert wait(
        lambda: (
            cont.get(3) is not None
            and rebase.get(3) is not None
            and rebase.baseline_complete == 2
            and {p.id: p.state for p in eng.pipelines()}["err"] is PipelineState.ERROR
        )
    )
    assert "age" in [c.name for c in eng.table_schema(USERS)]
    eng.stop()


def test_on_ready_and_introspection(make_source) -> None:
    src = make_source()
    fired = threading.Event()
    t = RecordingTarget()
    eng = laredo.Engine(sources={"s": src}, pipelines=[laredo.Pipeline("s", USERS, t)])
    eng.on_ready(fired.set)
    eng.start()
    assert fired.wait(5)
    late = []
    eng.on_ready(lambda: late.append(1))
    assert late == [1]
    assert eng.get_target("s", USERS) is t
    assert eng.get_target("s", "public.users", RecordingTarget) is t
    assert eng.get_target("other", USERS) is None
    assert eng.source_ids() == ["s"]
    info = eng.source_info("s")
    assert info is not None and info.source_type == "TestSource"
    assert eng.source_info("nope") is None
    assert [c.name for c in eng.table_schema(USERS)] == ["id", "name", "email"]
    assert eng.pipelines()[0].row_count == 2
    eng.stop()


def test_async_wrappers(make_source) -> None:
    import asyncio

    src = make_source()
    eng = laredo.Engine(
        sources={"s": src}, pipelines=[laredo.Pipeline("s", USERS, RecordingTarget())]
    )

    async def main() -> bool:
        await eng.astart()
        ok = await eng.await_ready_async(5)
        await eng.astop()
        return ok

    assert asyncio.run(main())
