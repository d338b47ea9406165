"""Unit tests of the fan-out target: journal, pins, modes, snapshots (no gRPC server)."""

from __future__ import annotations

import time
from typing import Any

import laredo
import pytest
from laredo.snapshots.jsonl import JsonlSerializer
from laredo.snapshots.local import LocalSnapshotStore
from laredo.testing import wait_until
from laredo.testing.source import columns
from laredo.types import ChangeAction, ChangeEvent, SyncMode, TableSnapshotInfo
from laredo_target_fanout.target import Exhausted, FanOutTarget

T = laredo.Table("public", "users")
COLS = columns("id", "name", "team")
DELTA, FULL = SyncMode.DELTA, SyncMode.FULL_SNAPSHOT


def make(**kw: Any) -> FanOutTarget:
    kw.setdefault("grpc", {"port": 0, "drain_timeout": 0})
    t = FanOutTarget(serve=False, **kw)
    t.on_init(T, COLS)
    t.on_baseline_rows(T, [{"id": i, "name": f"u{i}", "team": i % 3} for i in range(10)])
    t.set_change_position(100)
    t.on_baseline_complete(T)
    return t


def ins(t: FanOutTarget, i: int, pos: int) -> None:
    t.apply_changes(
        T, [ChangeEvent(T, ChangeAction.INSERT, pos, new_values={"id": i, "name": "x", "team": 0})]
    )


def session(t: FanOutTarget, **kw: Any) -> Any:
    args = {"last_sequence": 0, "journal_id": "", "last_position": "", "last_snapshot_id": ""}
    args.update(kw)
    s, hs, snap = t.open_session(
        kw.pop("client_id", "c1"),
        peer="peer",
        last_sequence=args["last_sequence"],
        journal_id=args["journal_id"],
        last_position=args["last_position"],
        last_snapshot_id=args["last_snapshot_id"],
        matcher=None,
        applied_at_position=args.get("applied_at_position", 0),
    )
    return s, hs, snap


def test_sequences_start_at_one_and_empty_journal_reports_zero() -> None:
    t = make()
    try:
        assert (t.current_sequence, t.oldest_sequence, t.journal_length()) == (0, 0, 0)
        ins(t, 100, 101)
        ins(t, 101, 102)
        assert (t.current_sequence, t.oldest_sequence, t.journal_length()) == (2, 1, 2)
        assert t.count() == 12
    finally:
        t.on_close(T)


def test_initial_baseline_is_not_journaled_but_rebaseline_is_with_backfilled_positions() -> None:
    t = make()
    try:
        assert t.current_sequence == 0  # the snapshot covers the initial state
        t.on_truncate(T)
        t.on_baseline_rows(T, [{"id": 1, "name": "a", "team": 1}])
        t.set_change_position(200)
        t.on_baseline_complete(T)
        entries = t.journal_entries(1)
        assert [e.action for e in entries] == [ChangeAction.TRUNCATE, ChangeAction.INSERT]
        assert entries[1].position == 200
    finally:
        t.on_close(T)


def test_prune_by_max_entries_and_age() -> None:
    obs = laredo.RecordingObserver()
    t = make(journal={"max_entries": 5, "max_age": None}, observer=obs)
    try:
        for i in range(12):
            ins(t, 100 + i, 101 + i)
        assert (t.oldest_sequence, t.current_sequence, t.journal_length()) == (8, 12, 5)
        assert sum(a[1] for a in obs.of("on_fanout_journal_pruned")) == 7
        assert obs.of("on_fanout_journal_pruned")[-1][2] == 8
    finally:
        t.on_close(T)
    t = make(journal={"max_entries": 1000, "max_age": 0.2})
    try:
        ins(t, 100, 101)
        time.sleep(0.25)
        ins(t, 101, 102)
        assert (t.oldest_sequence, t.current_sequence) == (2, 2)
    finally:
        t.on_close(T)


def test_pin_protects_catch_up_entries_until_the_hard_cap() -> None:
    t = make(journal={"max_entries": 5, "max_age": None})
    try:
        for i in range(5):
            ins(t, 100 + i, 101 + i)
        s, hs, _ = session(t, last_sequence=1, journal_id=t.journal_id)
        assert hs.mode is DELTA and hs.resume_from_sequence == 1
        for i in range(5):
            ins(t, 200 + i, 200 + i)
        # entry 2 is what the client needs next: still there
        assert t.oldest_sequence == 2
        got = t.sessions.read_batch(s, 3, 0)
        assert isinstance(got, tuple) and [e.sequence for e in got[2]] == [2, 3, 4]
        # beyond 2 x max_entries the pin breaks and the client is told to re-sync
        for i in range(20):
            ins(t, 300 + i, 300 + i)
        assert t.journal_length() <= 10
        assert t.sessions.read_batch(s, 3, 0) == "resync"
    finally:
        t.on_close(T)


def test_mode_selection() -> None:
    t = make(journal={"max_entries": 3, "max_age": None})
    try:
        for i in range(2):
            ins(t, 100 + i, 101 + i)
        jid = t.journal_id
        # same journal, covered -> DELTA
        _, hs, snap = session(t, client_id="a", last_sequence=1, journal_id=jid)
        assert (hs.mode, hs.resume_from_sequence, snap) == (DELTA, 1, None)
        # another journal id, no position -> FULL
        _, hs, snap = session(t, client_id="b", last_sequence=1, journal_id="other")
        # FULL shares the retained baseline snapshot (seq 0) and catches up from the journal
        assert hs.mode is FULL and snap is not None and len(snap.rows) == 10
        assert snap.sequence == hs.resume_from_sequence == 0
        # a sequence from the future -> FULL
        _, hs, _ = session(t, client_id="c", last_sequence=99, journal_id=jid)
        assert hs.mode is FULL
        # by position (another journal): resume after the last entry at or before it
        _, hs, _ = session(t, client_id="d", last_position="101", applied_at_position=1)
        assert (hs.mode, hs.resume_from_sequence) == (DELTA, 1)
        _, hs, _ = session(t, client_id="d2", last_position="101")  # none of 101 applied
        assert (hs.mode, hs.resume_from_sequence) == (DELTA, 0)
        _, hs, _ = session(t, client_id="e", last_position="100")
        assert (hs.mode, hs.resume_from_sequence) == (DELTA, 0)
        _, hs, _ = session(t, client_id="f", last_position="99")  # before the journal's base
        assert hs.mode is FULL
        # behind the journal -> FULL (prune everything up to 3 first)
        for s in t.clients():
            t.sessions.close(s, "test")
        for i in range(4):
            ins(t, 200 + i, 200 + i)
        assert t.oldest_sequence == 4
        _, hs, _ = session(t, client_id="g", last_sequence=2, journal_id=jid)
        assert hs.mode is FULL
        _, hs, _ = session(t, client_id="h", last_sequence=3, journal_id=jid)
        assert hs.mode is DELTA
        # a position before the pruned entries -> FULL
        _, hs, _ = session(t, client_id="i", last_position="101")
        assert hs.mode is FULL
        # delta from a retained snapshot
        snap = t.create_snapshot()
        assert snap is not None
        ins(t, 300, 300)
        _, hs, _ = session(t, client_id="j", last_snapshot_id=snap.snapshot_id)
        assert (hs.mode, hs.resume_from_sequence, hs.snapshot_id) == (
            SyncMode.DELTA_FROM_SNAPSHOT,
            snap.sequence,
            snap.snapshot_id,
        )
    finally:
        t.on_close(T)


def test_resume_by_position_inside_a_multi_entry_transaction() -> None:
    t = make()
    try:
        ins(t, 100, 101)
        txn = [
            ChangeEvent(T, ChangeAction.INSERT, 102, new_values={"id": 200 + i, "name": "t"})
            for i in range(3)
        ]
        t.apply_changes(T, txn[:2])  # a transaction delivered in two chunks
        snap = t.create_snapshot()
        assert snap is not None and snap.applied_at_position == 2
        t.apply_changes(T, txn[2:])
        ins(t, 300, 103)
        for applied, resume in [(0, 1), (1, 2), (2, 3), (3, 4), (9, 4)]:
            _, hs, _ = session(
                t, client_id=f"p{applied}", last_position="102", applied_at_position=applied
            )
            assert (hs.mode, hs.resume_from_sequence) == (DELTA, resume), applied
    finally:
        t.on_close(T)


def test_update_journals_the_stored_old_row_and_keeps_unchanged_toast() -> None:
    t = make()
    try:
        t.apply_changes(
            T,
            [
                ChangeEvent(
                    T,
                    ChangeAction.UPDATE,
                    101,
                    new_values={"id": 1, "team": 7},
                    unchanged_toast=frozenset({"name"}),
                )
            ],
        )
        e = t.journal_entries(1)[0]
        assert e.old_values == {"id": 1, "name": "u1", "team": 1}
        assert e.new_values == {"id": 1, "name": "u1", "team": 7}
        t.on_delete(T, {"id": 2})
        e = t.journal_entries(2)[0]
        assert e.action is ChangeAction.DELETE and e.old_values == {
            "id": 2,
            "name": "u2",
            "team": 2,
        }
    finally:
        t.on_close(T)


def test_snapshot_after_truncate_and_schema_change_with_retention(tmp_path: Any) -> None:
    store = LocalSnapshotStore(tmp_path / "snaps", fsync=False)
    obs = laredo.RecordingObserver()
    t = make(snapshot={"keep_count": 2, "store": store}, observer=obs)
    try:
        first = t.snapshots()[0]
        assert len(first.rows) == 10 and first.sequence == 0
        t.on_truncate(T)
        assert t.snapshots()[0].sequence == 1 and t.snapshots()[0].rows == ()
        new_cols = columns("id", "name", "team", "email")
        t.on_schema_change(T, COLS, new_cols)
        e = t.journal_entries(2)[0]
        assert (
            e.action is ChangeAction.SCHEMA_CHANGE
            and [c.name for c in e.new_columns][-1] == "email"
        )
        snaps = t.snapshots()
        assert [s.sequence for s in snaps] == [2, 1]  # keep_count 2
        assert obs.count("on_fanout_snapshot_created") == 3
        # persisted through the store, pruned to keep_count
        # the final state: all three saved, the oldest pruned (two stored is true earlier too)
        want = {s.snapshot_id for s in snaps}
        wait_until(
            lambda: {d.snapshot_id for d in store.list()} == want,
            5,
            "the two newest snapshots stored and the oldest pruned",
            interval=0.02,
        )
        meta, tables = store.load(snaps[1].snapshot_id, JsonlSerializer())
        assert meta.user_meta["fanout_sequence"] == 1 and list(tables[T]) == []
    finally:
        t.on_close(T)


def test_restore_snapshot_starts_a_new_journal_at_its_position() -> None:
    t = make()
    try:
        old = t.journal_id
        ins(t, 100, 101)
        t.restore_snapshot(
            TableSnapshotInfo(T, 1, COLS, position="500"), [{"id": 1, "name": "r", "team": 0}]
        )
        assert t.journal_id != old and t.current_sequence == 0 and t.count() == 1
        _, hs, _ = session(t, client_id="x", last_position="500")
        assert hs.mode is DELTA
        _, hs, _ = session(t, client_id="y", last_position="499")
        assert hs.mode is FULL
    finally:
        t.on_close(T)


def test_max_clients_and_duplicate_ids() -> None:
    t = make(grpc={"port": 0, "max_clients": 2, "drain_timeout": 0})
    try:
        a, _, _ = session(t, client_id="a")
        session(t, client_id="b")
        with pytest.raises(Exhausted, match="max clients reached"):
            session(t, client_id="c")
        a2, _, _ = session(t, client_id="a")  # same id replaces the old connection
        assert a.closed and a.close_code == "replaced" and not a2.closed
        assert len(t.clients()) == 2
    finally:
        t.on_close(T)


def test_options_are_validated_with_every_problem() -> None:
    with pytest.raises(laredo.ConfigError) as ei:
        laredo.target(
            "replication-fanout",
            grpc={"port": -1},
            client_buffer={"policy": "nope"},
            journal={"max_age": "7 fortnights"},
            bogus=1,
        )
    text = str(ei.value)
    for key in ("grpc.port", "client_buffer.policy", "journal.max_age", "bogus"):
        assert key in text


def test_sync_mode_enum_matches_core() -> None:
    assert {m.value for m in SyncMode} == {"FULL_SNAPSHOT", "DELTA", "DELTA_FROM_SNAPSHOT"}


def test_periodic_snapshots() -> None:
    t = make(snapshot={"interval": "200ms", "keep_count": 5})
    try:
        ins(t, 100, 101)
        wait_until(lambda: t.snapshots()[0].sequence == 1, 5, "sequence 1", interval=0.02)
        assert t.snapshots()[0].sequence == 1 and len(t.snapshots()[0].rows) == 11
    finally:
        t.on_close(T)


def test_key_without_primary_key_is_id_else_every_column() -> None:
    """The fan-out's documented key: the primary key, else an ``id`` column, else every column
    (``laredo.types.row_key_columns``)."""
    t = FanOutTarget(serve=False, grpc={"port": 0, "drain_timeout": 0})
    try:
        t.on_init(T, columns("id", "name", pk=()))
        assert t.key_fields == ("id",)
        t.on_init(T, columns("day", "note", pk=()))
        assert t.key_fields == ("day", "note")
        t.on_baseline_rows(T, [{"day": 1, "note": "a"}, {"day": 1, "note": "b"}])
        t.on_baseline_complete(T)
        assert t.count() == 2
        with pytest.raises(laredo.ConfigError, match=r"public\.users.*add a primary key"):
            t.on_init(T, [])
    finally:
        t.on_close(T)
