"""Listeners (order, replay, unsubscribe, errors) and readers running while a writer applies."""

from __future__ import annotations

import sys
import threading
import time
from datetime import UTC, datetime
from typing import Any

import pytest
from laredo import ChangeAction, ChangeEvent, ColumnDefinition, Index, Table
from laredo.types import TableSnapshotInfo
from laredo_target_memory import CompiledTarget, IndexedTarget

pytestmark = pytest.mark.usefixtures("each_storage")  # every storage of IndexedTarget

T = Table("public", "accounts")
COLS = [
    ColumnDefinition("id", "int8", 1, False, True, 1),
    ColumnDefinition("owner", "text", 2),
    ColumnDefinition("balance", "int8", 3),
    ColumnDefinition("version", "int8", 4),
]


def ev(action: ChangeAction, new: Any = None, old: Any = None) -> ChangeEvent:
    return ChangeEvent(T, action, 0, datetime.now(UTC), new_values=new, old_values=old)


def new_target(n: int = 0) -> IndexedTarget:
    t = IndexedTarget(lookup_fields=["owner"], indexes=[Index("by_version", ["version"])])
    t.on_init(T, COLS)
    t.on_baseline_rows(
        T, [{"id": i, "owner": f"o{i}", "balance": 100, "version": 0} for i in range(n)]
    )
    return t


# -------------------------------------------------------------------------------- listeners
def test_listener_pairs_for_every_action() -> None:
    t = new_target(1)
    seen: list[tuple[Any, Any]] = []
    t.listen(lambda old, new: seen.append((old, new)))
    a = {"id": 5, "owner": "x", "balance": 1, "version": 0}
    t.on_insert(T, a)
    t.on_update(T, {**a, "balance": 2}, None)
    t.on_delete(T, {"id": 5})
    t.on_truncate(T)
    assert seen == [
        (None, a),
        (a, {**a, "balance": 2}),
        ({**a, "balance": 2}, None),
        (None, None),
    ]


def test_listener_receives_copies() -> None:
    t = new_target(0)

    def vandal(old: Any, new: Any) -> None:
        if new is not None:
            new["owner"] = "vandal"

    t.listen(vandal)
    t.on_insert(T, {"id": 1, "owner": "a", "balance": 0, "version": 0})
    assert t.get(1)["owner"] == "a"  # type: ignore[index]


def test_unsubscribe_stops_calls_and_is_idempotent() -> None:
    t = new_target(0)
    seen: list[Any] = []
    unsubscribe = t.listen(lambda old, new: seen.append(new["id"]))
    t.on_insert(T, {"id": 1})
    unsubscribe()
    unsubscribe()
    t.on_insert(T, {"id": 2})
    assert seen == [1]


def test_unsubscribe_from_inside_the_listener_mid_batch() -> None:
    t = new_target(0)
    seen: list[Any] = []
    holder: dict[str, Any] = {}

    def once(old: Any, new: Any) -> None:
        seen.append(new["id"])
        holder["unsub"]()

    holder["unsub"] = t.listen(once)
    t.apply_changes(T, [ev(ChangeAction.INSERT, {"id": i}) for i in range(5)])
    assert seen == [0]


def test_replay_existing_then_live_changes_without_gap_or_duplicate() -> None:
    t = new_target(3)
    seen: list[tuple[Any, Any]] = []
    t.listen(lambda old, new: seen.append((old, new)), replay_existing=True)
    t.on_insert(T, {"id": 9, "owner": "o9", "balance": 0, "version": 0})
    assert [(o, n["id"]) for o, n in seen] == [(None, 0), (None, 1), (None, 2), (None, 9)]


def test_replay_is_consistent_with_a_concurrent_writer() -> None:
    """A listener registered while a writer runs sees each row's final state exactly once
    (replayed rows + later changes reconstruct the target's state)."""
    t = new_target(100)
    stop = threading.Event()

    def writer() -> None:
        i = 0
        while not stop.is_set():
            k = i % 100
            t.apply_changes(
                T,
                [ev(ChangeAction.UPDATE, {"id": k, "owner": f"o{k}", "balance": i, "version": i})],
            )
            i += 1

    th = threading.Thread(target=writer)
    th.start()
    try:
        time.sleep(0.01)
        mirror: dict[Any, Any] = {}

        def apply(old: Any, new: Any) -> None:
            if new is None:
                mirror.pop(old["id"], None)
            else:
                mirror[new["id"]] = new

        t.listen(apply, replay_existing=True)
        time.sleep(0.02)
    finally:
        stop.set()
        th.join(10)
    assert mirror == {r["id"]: r for r in t.all()}


def test_listener_errors_are_logged_and_counted(caplog: pytest.LogCaptureFixture) -> None:
    t = new_target(0)
    seen: list[Any] = []

    def bad(old: Any, new: Any) -> None:
        raise RuntimeError("boom")

    t.listen(bad)
    t.listen(lambda old, new: seen.append(new["id"]))
    t.on_insert(T, {"id": 1})
    t.on_insert(T, {"id": 2})
    assert seen == [1, 2]
    assert t.listener_errors == 2
    assert t.count() == 2
    assert "boom" in caplog.text and "public.accounts" in caplog.text


def test_listener_may_read_the_target() -> None:
    t = new_target(0)
    counts: list[int] = []
    t.listen(lambda old, new: counts.append(t.count()))
    t.apply_changes(T, [ev(ChangeAction.INSERT, {"id": i}) for i in range(3)])
    assert counts == [3, 3, 3]  # listeners run after the whole batch is applied


def test_restore_notifies_listeners_as_truncate_then_inserts() -> None:
    t = new_target(2)
    seen: list[tuple[Any, Any]] = []
    t.listen(lambda old, new: seen.append((old, new)))
    t.restore_snapshot(TableSnapshotInfo(T, 1, tuple(COLS)), [{"id": 7, "owner": "z"}])
    assert seen == [(None, None), (None, {"id": 7, "owner": "z"})]


def test_compiled_target_listeners_see_objects() -> None:
    t = CompiledTarget(compiler=lambda r: ("obj", r["id"], r.get("owner")))
    t.on_init(T, COLS)
    seen: list[tuple[Any, Any]] = []
    t.on_insert(T, {"id": 1, "owner": "a"})
    t.listen(lambda old, new: seen.append((old, new)), replay_existing=True)
    t.on_update(T, {"id": 1, "owner": "b"}, None)
    t.on_delete(T, {"id": 1})
    assert seen == [
        (None, ("obj", 1, "a")),
        (("obj", 1, "a"), ("obj", 1, "b")),
        (("obj", 1, "b"), None),
    ]


# -------------------------------------------------------------------------------- threads
def test_readers_never_see_a_half_applied_batch() -> None:
    """Each batch moves 1 unit between two accounts and bumps every row's version.

    Readers must always see: total balance constant, one version across all rows (whole
    batches only), and index results agreeing with the rows returned.
    """
    n = 200
    t = new_target(n)
    total = 100 * n
    stop = threading.Event()
    errors: list[str] = []
    reads = [0]

    def writer() -> None:
        version = 0
        while not stop.is_set():
            version += 1
            a, b = version % n, (version * 7 + 1) % n
            # Intermediate states inside the batch that no reader may ever observe.
            events = [
                ev(ChangeAction.UPDATE, {"id": 3, "owner": "o3", "balance": -1, "version": -1}),
                ev(ChangeAction.UPDATE, {"id": 5, "owner": "tmp", "balance": 0, "version": -1}),
            ]
            for i in [*range(6, n), 0, 1, 2, 4, 3, 5]:  # 3 and 5 last: a wide window
                bal = t_state[i]
                if i == a and a != b:
                    bal -= 1
                elif i == b and a != b:
                    bal += 1
                t_state[i] = bal
                events.append(
                    ev(
                        ChangeAction.UPDATE,
                        {"id": i, "owner": f"o{i}", "balance": bal, "version": version},
                    )
                )
            t.apply_changes(T, events)

    def reader() -> None:
        while not stop.is_set():
            rows = t.all()
            if sum(r["balance"] for r in rows) != total:
                errors.append("total balance changed: a reader saw half a batch")
            versions = {r["version"] for r in rows}
            if len(versions) != 1:
                errors.append(f"mixed versions {sorted(versions)[:3]}: half a batch")
            v = next(iter(versions))
            same = t.lookup_all("by_version", v)  # all n rows, or none if v moved on
            if any(r["version"] != v for r in same):
                errors.append("index returned a row whose value does not match")
            if same and len(same) != n:
                errors.append(f"index listed {len(same)} of {n} rows: half a batch")
            reads[0] += 1

    def point_reader() -> None:
        while not stop.is_set():
            one = t.lookup("o5")
            if one is None or one["owner"] != "o5" or one["version"] < 0:
                errors.append(f"lookup('o5') returned {one!r}: half a batch")
            got = t.get(3)
            if got is None or got["version"] < 0:
                errors.append(f"get(3) returned {got!r}: half a batch")

    t_state = {i: 100 for i in range(n)}
    threads = [threading.Thread(target=f) for f in (writer, reader, reader, point_reader)]
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)  # many more thread switches, so races show up quickly
    try:
        for th in threads:
            th.start()
        deadline = time.monotonic() + 0.5  # a run length, not a wait
        while time.monotonic() < deadline and not errors:  # a run length, not a wait
            time.sleep(0.01)
    finally:
        stop.set()
        for th in threads:
            th.join(10)
        sys.setswitchinterval(interval)
    assert not errors, errors[:5]
    assert reads[0] > 10
    assert sum(r["balance"] for r in t.all()) == total


def test_optimistic_get_retries_under_the_lock_when_a_write_ran() -> None:
    t = new_target(2)
    real_rows = t._rows

    class Racing(dict):  # simulates a write landing between the version reads
        def get(self, key: Any, default: Any = None) -> Any:
            t._version += 2
            return real_rows.get(key, default)

    calls = [0]

    class Counting(Racing):
        def get(self, key: Any, default: Any = None) -> Any:
            calls[0] += 1
            return super().get(key, default)

    t._rows = Counting(real_rows)
    # The unlocked read sees a changed version, so the target reads again with the lock.
    assert t.get(1)["id"] == 1  # type: ignore[index]
    assert calls[0] == 2


def test_listen_lazily_decodes_outside_the_writers_lock_without_gap_or_duplicate() -> None:
    """N5: a streaming replay holds no lock while it decodes, so the writer goes on mid-replay;
    replayed rows then live changes reconstruct the table exactly."""
    t = new_target(50)
    live: list[tuple[Any, Any]] = []
    pairs, unsubscribe = t.listen_lazily(lambda old, new: live.append((old, new)))
    mirror: dict[Any, Any] = {}
    first = next(pairs)
    mirror[first[1]["id"]] = first[1]
    # mid-replay, a writer on another thread applies at once (a replay under the writer's
    # lock would block it until the whole table was delivered)
    writer = threading.Thread(
        target=lambda: (
            t.on_insert(T, {"id": 99, "owner": "o99", "balance": 0, "version": 1}),
            t.apply_changes(T, [ev(ChangeAction.DELETE, old={"id": 0})]),
            t.apply_changes(
                T, [ev(ChangeAction.UPDATE, {"id": 7, "owner": "x", "balance": 1, "version": 2})]
            ),
        )
    )
    writer.start()
    writer.join(10)
    assert not writer.is_alive(), "the writer waited for the replay"
    assert len(live) == 3
    for old, new in pairs:  # the rest of the replay: the values as of registration
        assert old is None
        mirror[new["id"]] = new
    assert len(mirror) == 50 and mirror[7]["owner"] == "o7"
    for old, new in live:
        if new is None:
            mirror.pop(old["id"])
        else:
            mirror[new["id"]] = new
    assert mirror == {r["id"]: r for r in t.all()}
    unsubscribe()
    t.on_insert(T, {"id": 100, "owner": "o100", "balance": 0, "version": 0})
    assert len(live) == 3
