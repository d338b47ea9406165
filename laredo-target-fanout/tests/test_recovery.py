"""Broken connections and server restarts: clients recover with no gap and no duplicate."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import grpc
import laredo
import pytest
from laredo.snapshots.jsonl import JsonlSerializer
from laredo.snapshots.local import LocalSnapshotStore
from laredo.testing import TestSource
from laredo.testing.source import columns
from laredo_target_fanout import FanOutClient
from laredo_target_fanout._proto import replication_pb2 as pb
from laredo_target_fanout.service import SERVICE_NAME
from laredo_target_fanout.testing import USERS, same_rows, user, wait_until

pytestmark = pytest.mark.integration


class SilentServer:
    """A replication server that sends a handshake (heartbeat every 0.1 s) and then nothing."""

    def __init__(self) -> None:
        self.calls = 0
        self.lock = threading.Lock()
        self.release = threading.Event()

        def sync(request: Any, context: Any) -> Any:
            with self.lock:
                self.calls += 1
            yield pb.SyncResponse(
                handshake=pb.Handshake(
                    mode=pb.SYNC_MODE_DELTA,
                    journal_id="j1",
                    heartbeat_interval_ms=100,
                    columns=[pb.Column(name="id", primary_key=True, primary_key_ordinal=1)],
                )
            )
            self.release.wait(30)  # a half-open connection: silence

        handler = grpc.method_handlers_generic_handler(
            SERVICE_NAME,
            {
                "Sync": grpc.unary_stream_rpc_method_handler(
                    sync,
                    request_deserializer=pb.SyncRequest.FromString,
                    response_serializer=pb.SyncResponse.SerializeToString,
                )
            },
        )
        self.server = grpc.server(ThreadPoolExecutor(8), handlers=(handler,))
        self.port = self.server.add_insecure_port("127.0.0.1:0")
        self.server.start()

    def stop(self) -> None:
        self.release.set()
        self.server.stop(0).wait(5)


def test_a_heartbeat_gap_counts_as_a_broken_connection() -> None:
    srv = SilentServer()
    c = FanOutClient(f"127.0.0.1:{srv.port}", USERS, reconnect_initial=0.05).start()
    try:
        # three heartbeat intervals of silence -> cancel and reconnect, again and again
        wait_until(lambda: srv.calls >= 3, 10, "the client to reconnect after silences")
        assert c.reconnects >= 2
    finally:
        c.stop(save=False)
        srv.stop()


def test_server_restart_from_its_snapshot_clients_resume_by_position(tmp_path: Any) -> None:
    """Kill the fan-out server mid-stream and start it again from the engine's snapshot: the
    client resumes by source position in the new journal, with no gap and no duplicate."""
    src = TestSource(supports_resume=True)  # the engine restores snapshots of resumable sources
    t = src.add_table(USERS, columns("id", "name", "team"), rows=[user(i) for i in range(50)])
    store = LocalSnapshotStore(tmp_path / "engine-snapshots", fsync=False)

    def engine(port: int) -> tuple[laredo.Engine, Any]:
        target = laredo.target(
            "replication-fanout",
            grpc={"port": port, "drain_timeout": 0.2},
            heartbeat_interval=0.2,
        )
        eng = laredo.Engine(
            sources={"s": src},
            pipelines=[laredo.Pipeline("s", t, target)],
            snapshot_store=store,
            snapshot_serializer=JsonlSerializer(),
        )
        eng.start()
        assert eng.await_ready(15)
        return eng, target

    eng1, target1 = engine(0)
    port = target1.port
    applied: list[tuple[Any, Any]] = []
    c = FanOutClient(f"127.0.0.1:{port}", USERS, client_id="survivor", reconnect_initial=0.05)
    c.listen(lambda old, new: applied.append((old, new)))
    c.start()
    try:
        assert c.await_ready(10)
        for i in range(10):
            src.update(t, user(i, name=f"before-snapshot-{i}"))
        wait_until(lambda: target1.position == src.position)
        eng1.create_snapshot()
        for i in range(10, 20):
            src.update(t, user(i, name=f"after-snapshot-{i}"))
        wait_until(lambda: target1.position == src.position)
        wait_until(lambda: c.last_sequence == target1.current_sequence)
        old_journal = c.journal_id
        eng1.stop()  # GoAway, then the server is gone
        for i in range(20, 30):  # changes while the fan-out server is down
            src.update(t, user(i, name=f"while-down-{i}"))
        applied.clear()
        eng2, target2 = engine(port)  # restores the snapshot, re-streams what followed it
        try:
            wait_until(lambda: target2.position == src.position, 15)
            wait_until(lambda: same_rows(c.all(), src.rows(t)), 15, "the client to converge")
            assert c.journal_id == target2.journal_id != old_journal
            assert c.mode is laredo.SyncMode.DELTA and c.snapshots_received == 1
            # only the 10 changes made while the server was down reached the client: the
            # 10 after the snapshot, which it already had, were not sent again
            changed = sorted(new["id"] for _old, new in applied if new is not None)
            assert changed == list(range(20, 30))
        finally:
            eng2.stop()
    finally:
        c.stop(save=False)


def test_reconnects_back_off_while_the_server_is_away(tmp_path: Any) -> None:
    c = FanOutClient("127.0.0.1:1", USERS, reconnect_initial=0.05, reconnect_max=0.2).start()
    try:
        wait_until(lambda: c.reconnects >= 3, 10, "reconnect attempts")
        assert not c.ready and c.last_error
        started = time.monotonic()
        n = c.reconnects
        wait_until(lambda: c.reconnects >= n + 3, 10)
        assert time.monotonic() - started >= 0.2  # at least the capped backoff between tries
    finally:
        c.stop(save=False)
