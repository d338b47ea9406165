from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import laredo
import pytest
from laredo.replay import ReplayResult, SnapshotReplay
from laredo.snapshots.jsonl import JsonlSerializer
from laredo.snapshots.local import LocalSnapshotStore
from laredo.testing import RecordingTarget, wait_until
from laredo.types import ColumnDefinition, SnapshotMetadata, TableSnapshotInfo

USERS = laredo.Table("public", "users")
ORDERS = laredo.Table("public", "orders")
T0 = datetime(2026, 1, 1, tzinfo=UTC)
COLS = (ColumnDefinition("id", "integer", 1, False, True, 1),)


def _store(tmp_path: Path, n_users: int = 10, n_orders: int = 4, **user_meta: Any) -> Any:
    store = LocalSnapshotStore(tmp_path, fsync=False)
    users = [{"id": i, "at": T0 + timedelta(milliseconds=100 * i)} for i in range(n_users)]
    orders = [{"id": i} for i in range(n_orders)]
    meta = SnapshotMetadata(
        "snap",
        T0,
        {"pg": "1"},
        (TableSnapshotInfo(USERS, 0, COLS), TableSnapshotInfo(ORDERS, 0, COLS)),
        user_meta=user_meta,
    )
    store.save("snap", meta, {USERS: users, ORDERS: orders}, JsonlSerializer())
    return store


def test_full_speed_replays_mapped_tables_only(tmp_path: Path) -> None:
    store = _store(tmp_path)
    target = RecordingTarget()
    result = SnapshotReplay(store).target(USERS, target).run("snap")
    assert isinstance(result, ReplayResult)
    assert result.snapshot_id == "snap"
    assert result.tables == (USERS,)
    assert result.total_rows == 10
    assert not result.stopped
    methods = target.methods()
    assert methods[0] == "on_init" and methods[-1] == "on_baseline_complete"
    assert methods.count("on_baseline_row") == 10
    assert target.calls[0][2] == list(COLS)
    assert target.rows()[3] == {"id": 3, "at": T0 + timedelta(milliseconds=300)}
    status = SnapshotReplay(store).status()
    assert status.state == "idle"


@pytest.mark.parametrize("speed", ["full", 5000.0])
def test_every_target_call_goes_through_the_tables_call(tmp_path: Path, speed: Any) -> None:
    store = _store(tmp_path, n_users=2100)
    users, orders = RecordingTarget(), RecordingTarget()
    ran: list[tuple[str, Any]] = []

    def via(name: str) -> Any:
        def call(work: Any) -> Any:
            before = len(users.calls) + len(orders.calls)
            out = work()
            ran.append((name, len(users.calls) + len(orders.calls) - before))
            return out

        return call

    replay = SnapshotReplay(store).speed(speed)
    replay.target(USERS, users, call=via("users")).target(ORDERS, orders, call=via("orders"))
    result = replay.run("snap")
    assert result.total_rows == 2104
    # every target call was made inside one of the table's own calls, none outside
    assert sum(n for _, n in ran) == len(users.calls) + len(orders.calls)
    assert {name for name, _ in ran} == {"users", "orders"}
    per_users = [n for name, n in ran if name == "users"]
    if speed == "full":
        assert len(per_users) == 2 + 3  # on_init, 3 chunks of rows, on_baseline_complete
    else:
        assert len(per_users) == 2 + 2100  # paced: one call per row


def test_two_targets_and_status(tmp_path: Path) -> None:
    store = _store(tmp_path, n_users=3000)
    a, b = RecordingTarget(), RecordingTarget()
    replay = SnapshotReplay(store, JsonlSerializer()).target(USERS, a).target(ORDERS, b)
    result = replay.run("snap")
    assert result.total_rows == 3004
    assert set(result.tables) == {USERS, ORDERS}
    st = replay.status()
    assert st.state == "completed" and st.rows_replayed == 3004 and st.tables_completed == 2
    assert a.count() == 3000 and b.count() == 4


def test_missing_table_is_an_error_before_any_target_call(tmp_path: Path) -> None:
    store = _store(tmp_path)
    target = RecordingTarget()
    replay = SnapshotReplay(store).target(USERS, target).target(laredo.Table("x.y"), target)
    with pytest.raises(laredo.SnapshotError, match=r"no table x\.y"):
        replay.run("snap")
    assert target.calls == []
    assert replay.status().state == "error"
    with pytest.raises(laredo.ConfigError, match="no targets"):
        SnapshotReplay(store).run("snap")
    with pytest.raises((laredo.SnapshotError, LookupError)):
        SnapshotReplay(store).target(USERS, target).run("missing")


def test_throttled_speed_paces_rows(tmp_path: Path) -> None:
    store = _store(tmp_path, n_users=5, n_orders=0)
    target = RecordingTarget()
    replay = SnapshotReplay(store).target(USERS, target).speed(20.0)
    started = time.monotonic()
    result = replay.run("snap")
    # 5 rows at 20 rows/s: the last row is due 4/20 s after the start
    assert time.monotonic() - started >= 0.2 - 0.01
    assert result.total_rows == 5


def test_realtime_follows_the_timestamp_column(tmp_path: Path) -> None:
    store = _store(tmp_path, n_users=4, n_orders=0)  # timestamps 0, 100, 200, 300 ms
    target = RecordingTarget()
    started = time.monotonic()
    SnapshotReplay(store).target(USERS, target).speed("realtime", timestamp_field="at").run("snap")
    assert time.monotonic() - started >= 0.3 - 0.01


def test_realtime_without_timestamp_uses_the_recorded_duration(tmp_path: Path) -> None:
    store = _store(tmp_path, n_users=4, n_orders=0, duration_seconds=0.2)
    started = time.monotonic()
    SnapshotReplay(store).target(USERS, RecordingTarget()).speed("realtime").run("snap")
    assert time.monotonic() - started >= 0.15 - 0.01
    bare = _store(tmp_path / "bare", n_users=4, n_orders=0)
    with pytest.raises(laredo.ConfigError, match="timestamp_field"):
        SnapshotReplay(bare).target(USERS, RecordingTarget()).speed("realtime").run("snap")


def test_bad_speed() -> None:
    for bad in ("warp", 0, -1.0, True):
        with pytest.raises(laredo.ConfigError, match="replay speed"):
            SnapshotReplay(None).speed(bad)


def test_start_stop_in_background(tmp_path: Path) -> None:
    store = _store(tmp_path, n_users=1000, n_orders=0)
    target = RecordingTarget()
    replay = SnapshotReplay(store).target(USERS, target).speed(200.0)
    future = replay.start("snap")
    assert wait_until(lambda: replay.status().rows_replayed >= 3)
    st = replay.status()
    assert st.state == "running" and st.current_table == USERS
    with pytest.raises(laredo.EngineStateError):
        replay.start("snap")
    replay.stop()
    result = future.result(timeout=10)
    assert result.stopped and result.tables == ()
    assert 3 <= result.total_rows < 1000
    assert "on_baseline_complete" not in target.methods()
    assert replay.status().state == "stopped"
    assert replay.join(5)


def test_background_error_reaches_the_future(tmp_path: Path) -> None:
    store = _store(tmp_path, n_users=5, n_orders=0)
    target = RecordingTarget()
    target.fail_always = True
    replay = SnapshotReplay(store).target(USERS, target)
    future = replay.start("snap")
    with pytest.raises(laredo.TargetError):
        future.result(timeout=10)
    st = replay.status()
    assert st.state == "error" and "injected failure" in (st.error or "")
