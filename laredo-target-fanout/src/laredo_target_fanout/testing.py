"""Test helpers for the fan-out: an engine feeding a served target (``Rig``), a stalled
client in another process (``SlowClient``), polling and row comparison.

Used by this package's tests (``tests/conftest.py``) and usable by anyone testing against a
fan-out server; they start real servers on free ports of 127.0.0.1.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from typing import Any, cast

import laredo
from laredo.testing import TestSource, wait_until
from laredo.testing.source import columns

from .target import FanOutTarget

__all__ = ["USERS", "Rig", "SlowClient", "same_rows", "user", "wait_until"]

USERS = laredo.Table("public", "users")


def user(i: int, **kw: Any) -> dict[str, Any]:
    row = {"id": i, "name": f"user{i}", "team": i % 5}
    row.update(kw)
    return row


class Rig:
    """An engine with a TestSource feeding a replication-fanout target on a free port."""

    def __init__(self, rows: int = 100, observer: Any = None, **target_opts: Any) -> None:
        self.source = TestSource()
        self.table = self.source.add_table(
            USERS, columns("id", "name", "team"), rows=[user(i) for i in range(rows)]
        )
        opts: dict[str, Any] = {"grpc": {"port": 0}, "heartbeat_interval": 0.5}
        opts.update(target_opts)
        if observer is not None:
            opts["observer"] = observer
        self.target = cast(FanOutTarget, laredo.target("replication-fanout", **opts))
        self.engine = laredo.Engine(
            sources={"src": self.source},
            pipelines=[laredo.Pipeline("src", self.table, self.target)],
        )
        self.engine.start()
        assert self.engine.await_ready(15)

    @property
    def address(self) -> str:
        return str(self.target.address)

    def settle(self, timeout: float = 10.0) -> None:
        """Wait until the target applied everything the source committed."""
        wait_until(
            lambda: (
                self.target.count() == len(self.source.rows(self.table))
                and self.target.position == self.source.position
            ),
            timeout,
            "the fan-out target to apply every change",
        )

    def stop(self) -> None:
        self.engine.stop()


def same_rows(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> bool:
    key = lambda r: repr(r.get("id"))  # noqa: E731
    return sorted(a, key=key) == sorted(b, key=key)


SLOW_CLIENT = r"""
import json, sys
import grpc
from laredo.types import TableIdentifier
from laredo_target_fanout.client import build_request, sync_stub

address, client_id = sys.argv[1], sys.argv[2]
ch = grpc.insecure_channel(address, options=[("grpc.max_receive_message_length", 64 << 20)])
call = sync_stub(ch)(build_request(TableIdentifier("public", "users"), client_id, max_batch=1),
                     timeout=120)
entries = 0
try:
    for msg in call:
        kind = msg.WhichOneof("msg")
        if kind == "snapshot_end":
            print(json.dumps({"event": "ready"}), flush=True)
        elif kind == "journal":
            entries += len(msg.journal.entries)
            print(json.dumps({"event": "entries", "n": entries}), flush=True)
    print(json.dumps({"event": "end", "code": "OK", "entries": entries}), flush=True)
except grpc.RpcError as exc:
    print(json.dumps({"event": "end", "code": exc.code().name, "details": exc.details(),
                      "entries": entries}), flush=True)
"""


class SlowClient:
    """A Sync client in another process: ``freeze()`` (SIGSTOP) makes it a truly stalled
    reader, so only the kernel's socket buffers absorb what the server sends."""

    def __init__(self, address: str, client_id: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", SLOW_CLIENT, address, client_id],
            stdout=subprocess.PIPE,
            text=True,
        )
        self.events: list[dict[str, Any]] = []
        assert self.next_event()["event"] == "ready"

    def next_event(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise AssertionError("slow client exited")
        ev: dict[str, Any] = json.loads(line)
        self.events.append(ev)
        return ev

    def freeze(self) -> None:
        self.proc.send_signal(signal.SIGSTOP)

    def thaw(self) -> None:
        self.proc.send_signal(signal.SIGCONT)

    def until_end(self, timeout: float = 60) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            ev = self.next_event()
            if ev["event"] == "end":
                return ev
        raise AssertionError("slow client did not finish")

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.kill()
        self.proc.wait(10)
        if self.proc.stdout is not None:
            self.proc.stdout.close()
