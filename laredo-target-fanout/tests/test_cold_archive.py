"""Cold replay: a client that fell out of the journal at a version boundary of a Delta archive
(kept by a ``delta`` target on the same table) catches up from the archive, then the journal:
no snapshot, no gap, no duplicate. At any other position it gets a full snapshot, as before."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import laredo
import pytest
from laredo.testing import TestSource
from laredo.testing.source import columns
from laredo_target_fanout import FanOutClient
from laredo_target_fanout.testing import USERS, same_rows, user, wait_until

pytest.importorskip("laredo_target_delta")
from laredo_target_delta import history

pytestmark = pytest.mark.integration


def _rig(tmp_path: Path, **archive: Any) -> tuple[TestSource, Any, laredo.Engine, Any, str]:
    src = TestSource()
    t = src.add_table(
        USERS,
        columns("id", "name", "team", types={"id": "int8", "team": "int8"}),
        rows=[user(i) for i in range(20)],
    )
    uri = str(tmp_path / "lake" / "users")
    fanout = laredo.target(
        "replication-fanout",
        grpc={"port": 0, "drain_timeout": 0.2},
        heartbeat_interval=0.2,
        journal={"max_entries": 10},
        archive={"uri": uri, **archive},
    )
    delta = laredo.target("delta", uri=uri, flush_interval="50ms")
    eng = laredo.Engine(
        sources={"s": src},
        pipelines=[
            laredo.Pipeline("s", t, fanout, id="fanout"),
            laredo.Pipeline("s", t, delta, id="delta"),
        ],
    )
    eng.start()
    assert eng.await_ready(20)
    return src, t, eng, fanout, uri


def _committed(uri: str, position: int) -> bool:
    return any(c.position == str(position) for c in history(uri))


def _client(target: Any, path: Path) -> FanOutClient:
    return FanOutClient(
        f"127.0.0.1:{target.port}",
        USERS,
        client_id="cold",
        local_snapshot_path=path,
        reconnect_initial=0.05,
    )


@pytest.mark.parametrize("at_boundary", [True, False])
def test_a_client_behind_the_journal_replays_the_archive(tmp_path: Path, at_boundary: bool) -> None:
    src, t, eng, fanout, uri = _rig(tmp_path)
    local = tmp_path / "replica.jsonl"
    try:
        c1 = _client(fanout, local).start()
        assert c1.await_ready(10)
        for i in range(5):
            src.update(t, user(i, name=f"first-{i}"))
        p = src.position
        if at_boundary:
            src.heartbeat()  # p is complete: the delta target commits a version at p
            wait_until(lambda: _committed(uri, p), 10, "a Delta version at p")
        wait_until(lambda: c1.source_position == str(p), 10, "the client at p")
        c1.stop(save=True)

        for i in range(40):  # four times the journal: the client's next entry is pruned
            src.update(t, user(i % 20, name=f"later-{i}"))
        src.insert(t, user(100))
        src.delete(t, {"id": 3})
        src.heartbeat()
        head = src.position - 1
        wait_until(lambda: _committed(uri, head), 10, "the archive's head")
        assert fanout.oldest_sequence > 1  # pruned

        c2 = _client(fanout, local).start()
        try:
            wait_until(lambda: same_rows(c2.all(), src.rows(t)), 15, "the client to converge")
            if at_boundary:
                assert c2.snapshots_received == 0 and c2.mode is laredo.SyncMode.DELTA
            else:
                assert c2.snapshots_received == 1  # not a version boundary: full snapshot
            src.update(t, user(5, name="live"))
            wait_until(lambda: same_rows(c2.all(), src.rows(t)), 10, "the live tail")
        finally:
            c2.stop(save=False)
    finally:
        eng.stop()


def _behind_the_journal(tmp_path: Path, **archive: Any) -> tuple[Any, ...]:
    """A client stopped at a version boundary of the archive, then 42 changes: behind the
    journal (10 entries), so it needs the archive or a full snapshot."""
    src, t, eng, fanout, uri = _rig(tmp_path, **archive)
    local = tmp_path / "replica.jsonl"
    c1 = _client(fanout, local).start()
    assert c1.await_ready(10)
    src.update(t, user(1, name="first"))
    p = src.position
    src.heartbeat()
    wait_until(lambda: _committed(uri, p), 10, "a Delta version at p")
    wait_until(lambda: c1.source_position == str(p), 10, "the client at p")
    c1.stop(save=True)
    for i in range(40):
        src.update(t, user(i % 20, name=f"later-{i}"))
    src.insert(t, user(100))
    src.delete(t, {"id": 3})
    src.heartbeat()
    head = src.position - 1
    wait_until(lambda: _committed(uri, head), 10, "the archive's head")
    assert fanout.oldest_sequence > 1
    return src, t, eng, fanout, local


def test_the_archive_is_read_outside_the_targets_lock(tmp_path: Path) -> None:
    """N6: reading the archive (remote I/O, the whole range) never holds the target's lock,
    so journal appends and other handshakes go on meanwhile."""
    import threading

    src, t, eng, fanout, local = _behind_the_journal(tmp_path)
    archive = fanout.sessions.archive
    real = archive.prepare
    held: list[bool] = []

    def probe() -> None:  # from another thread: is the target's lock free right now?
        got = fanout._cond.acquire(blocking=False)
        if got:
            fanout._cond.release()
        held.append(not got)

    def prepare(*args: Any) -> Any:
        th = threading.Thread(target=probe)
        th.start()
        th.join(5)
        return real(*args)

    archive.prepare = prepare
    try:
        c2 = _client(fanout, local).start()
        try:
            wait_until(lambda: same_rows(c2.all(), src.rows(t)), 15, "the client to converge")
            assert c2.snapshots_received == 0 and c2.mode is laredo.SyncMode.DELTA
        finally:
            c2.stop(save=False)
    finally:
        eng.stop()
    assert held == [False]


def test_a_replay_past_max_entries_is_a_full_snapshot_instead(tmp_path: Path) -> None:
    """N6: at most ``archive.max_entries`` changes are read for one client; further behind,
    it gets a (shared) full snapshot rather than an unbounded replay in memory."""
    src, t, eng, fanout, local = _behind_the_journal(tmp_path, max_entries=10)
    try:
        c2 = _client(fanout, local).start()
        try:
            wait_until(lambda: same_rows(c2.all(), src.rows(t)), 15, "the client to converge")
            assert c2.snapshots_received == 1
        finally:
            c2.stop(save=False)
    finally:
        eng.stop()
