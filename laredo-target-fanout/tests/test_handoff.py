"""Drain hand-off: a client whose server drains (GoAway with a deadline) moves to another
server at the same address with no gap and no duplicate; a local snapshot path that is a
directory is refused at construction."""

from __future__ import annotations

import contextlib
import select
import socket
import threading
from pathlib import Path
from typing import Any

import pytest
from laredo.errors import ConfigError
from laredo.types import SyncMode
from laredo_target_fanout import FanOutClient
from laredo_target_fanout.testing import USERS, Rig, same_rows, user, wait_until

pytestmark = pytest.mark.integration


class TcpProxy:
    """Forwards every new connection to the current backend port (like a load balancer that
    sends new connections to the instances that are ready); open connections stay where
    they are."""

    def __init__(self, backend: int) -> None:
        self.backend = backend
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.closed = threading.Event()
        self.conns: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self.closed.is_set():
            try:
                client, _ = self.sock.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(("127.0.0.1", self.backend))
            except OSError:
                client.close()
                continue
            self.conns += [client, upstream]
            threading.Thread(target=self._pump, args=(client, upstream), daemon=True).start()

    def _pump(self, a: socket.socket, b: socket.socket) -> None:
        peers = {a: b, b: a}
        try:
            while not self.closed.is_set():
                ready, _, _ = select.select([a, b], [], [], 0.2)
                for s in ready:
                    data = s.recv(65536)
                    if not data:
                        return
                    peers[s].sendall(data)
        except OSError:
            return
        finally:
            for s in (a, b):
                with contextlib.suppress(OSError):
                    s.close()

    def close(self) -> None:
        self.closed.set()
        self.sock.close()
        for s in self.conns:
            with contextlib.suppress(OSError):
                s.close()


def test_a_directory_as_local_snapshot_path_is_refused_at_construction(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="is a directory; give the path of a file in it"):
        FanOutClient("127.0.0.1:4002", USERS, local_snapshot_path=tmp_path)
    FanOutClient("127.0.0.1:4002", USERS, local_snapshot_path=tmp_path / "users.replica")


def test_drain_hands_the_client_to_another_server_with_no_gap_and_no_duplicate() -> None:
    """Two servers read the same changes (two sources fed alike, as two instances on one
    database); the client is on A, the address now leads to B, and A drains: the client
    keeps A's stream until B answers, then resumes on B by source position."""
    a, b = Rig(rows=30, heartbeat_interval=0.2), Rig(rows=30, heartbeat_interval=0.2)
    proxy = TcpProxy(a.target.port)
    applied: list[tuple[Any, Any]] = []
    c = FanOutClient(f"127.0.0.1:{proxy.port}", USERS, client_id="mover", reconnect_initial=0.05)
    c.listen(lambda old, new: applied.append((old, new)))

    def change(i: int, name: str) -> None:
        for rig in (a, b):
            rig.source.update(rig.table, user(i, name=name))

    try:
        c.start()
        assert c.await_ready(10)
        for i in range(10):
            change(i, f"before-{i}")
        a.settle()
        b.settle()
        wait_until(lambda: c.last_sequence == a.target.current_sequence, 10, "the client on A")
        journal_a = c.journal_id
        proxy.backend = b.target.port  # new connections now reach B
        a.target.drain("admin", 30.0)  # clients get GoAway and 30 s to hand off
        for i in range(10, 20):  # changes during the hand-off
            change(i, f"during-{i}")
        wait_until(lambda: c.journal_id == b.target.journal_id, 10, "the client to move to B")
        for i in range(20, 25):  # and after it
            change(i, f"after-{i}")
        b.settle()
        wait_until(lambda: same_rows(c.all(), b.source.rows(b.table)), 10, "the client to converge")
        assert c.handoffs == 1 and journal_a != c.journal_id
        assert c.mode is SyncMode.DELTA and c.snapshots_received == 1  # resumed, no new snapshot
        names = [n["name"] for _o, n in applied if n is not None and n["name"][:4] != "user"]
        expected = [f"before-{i}" for i in range(10)]
        expected += [f"during-{i}" for i in range(10, 20)] + [f"after-{i}" for i in range(20, 25)]
        assert sorted(names) == sorted(expected)  # every change once: no gap, no duplicate
    finally:
        c.stop(save=False)
        proxy.close()
        a.stop()
        b.stop()


def test_after_go_away_the_client_retries_quickly_until_a_server_answers(tmp_path: Path) -> None:
    """A drained server that goes away: the client reconnects every ~0.2 s (not with its
    backoff) and takes the server that comes back at the address at once."""
    a = Rig(rows=5, heartbeat_interval=0.2)
    port = a.target.port
    c = FanOutClient(
        f"127.0.0.1:{port}", USERS, reconnect_initial=5.0, reconnect_max=5.0, client_id="quick"
    )
    try:
        c.start()
        assert c.await_ready(10)
        a.target.drain("admin", 0.3)
        wait_until(lambda: c.go_away != "" or c.reconnects > 0, 10, "GoAway")
        a.stop()
        wait_until(lambda: c.reconnects >= 3, 10, "fast retries while no server answers")
        b = Rig(rows=5, heartbeat_interval=0.2, grpc={"port": port})
        try:
            wait_until(
                lambda: c.journal_id == b.target.journal_id, 10, "the client on the new server"
            )
            assert same_rows(c.all(), b.source.rows(b.table))
        finally:
            c.stop(save=False)  # first: a server stopping with clients drains them
            b.stop()
    finally:
        c.stop(save=False)
