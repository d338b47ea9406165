"""The HTTP port under slow clients (round-4 review N3, N13), in process on real sockets:

* a connection that drips its request head is closed at the head deadline, however often it
  sends a byte (it used to be a per-read timeout, renewed by every byte);
* hundreds of dripping connections and ``max_connections`` dripping RPC bodies leave
  ``/health/live`` answering;
* a dripped body is cut at ``health.timeout`` as a whole;
* an absurd ``Connect-Timeout-Ms`` is a 400, not a traceback on stderr.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from laredo_server.http_gate import HEAD_TIMEOUT
from laredo_server.http_server import HttpFrontend, HttpLimits
from laredo_server.services import make_servicers

from .testkit import Harness

OAM = "laredo.v1.LaredoOAMService"


@pytest.fixture
def port(tmp_path: Path) -> Iterator[int]:
    """An HTTP port with ``max_connections = 4`` and ``timeout = 3s`` over a running harness."""
    h = Harness(tmp_path).start()
    front = HttpFrontend(
        h.rt, make_servicers(h.rt), limits=HttpLimits(max_connections=4, timeout=3.0)
    )
    h.rt.listeners.health_port = None
    front.start()
    try:
        yield h.rt.listeners.health_port or 0
    finally:
        front.close()
        h.stop()


def _connect(port: int) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=10)


class Drip:
    """Sockets that send ``first`` and then one byte of ``rest`` every ``every`` seconds."""

    def __init__(self, port: int, n: int, first: bytes, every: float = 0.5) -> None:
        self.socks = []
        for _ in range(n):
            s = _connect(port)
            s.sendall(first)
            self.socks.append(s)
        self.every = every
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stop.wait(self.every):
            for s in self.socks:
                with contextlib.suppress(OSError):
                    s.send(b"X")

    def close(self) -> None:
        self.stop.set()
        self.thread.join()
        for s in self.socks:
            s.close()


def _live(port: int, timeout: float) -> int:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("GET", "/health/live")
        return conn.getresponse().status
    finally:
        conn.close()


def test_a_dripped_head_is_closed_at_the_deadline_not_renewed_by_each_byte(port: int) -> None:
    s = _connect(port)
    s.sendall(b"GET /health/live HTTP/1.1\r\nX-Slow: ")
    start = time.monotonic()
    closed_at = None
    with contextlib.suppress(OSError):
        while time.monotonic() - start < HEAD_TIMEOUT + 6:
            s.send(b"a")  # a byte every 0.5 s: a per-read timeout would never fire
            s.settimeout(0.5)
            try:
                if s.recv(1) == b"":
                    closed_at = time.monotonic() - start
                    break
            except TimeoutError:
                continue
    s.close()
    assert closed_at is not None, "the dripping connection was never closed"


def test_probes_answer_while_heads_and_bodies_drip(port: int) -> None:
    heads = Drip(port, 300, b"GET /health/live HTTP/1.1\r\nX-Slow: ")
    body = (
        f"POST /{OAM}/GetStatus HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        "Content-Type: application/json\r\nContent-Length: 100000\r\n\r\n{"
    ).encode()
    bodies = Drip(port, 4, body)  # max_connections RPC workers, each reading a dripped body
    try:
        time.sleep(1.0)
        for _ in range(5):
            assert _live(port, timeout=HEAD_TIMEOUT - 1) == 200
    finally:
        heads.close()
        bodies.close()


def test_a_dripped_body_is_cut_at_the_request_deadline(port: int) -> None:
    drip = Drip(
        port,
        1,
        (
            f"POST /{OAM}/GetStatus HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            "Content-Type: application/json\r\nContent-Length: 100000\r\n\r\n{"
        ).encode(),
        every=0.5,
    )
    s = drip.socks[0]
    s.settimeout(12)
    closed = False
    try:
        with contextlib.suppress(TimeoutError, ConnectionResetError):
            while s.recv(4096):
                pass
            closed = True
    finally:
        drip.close()
    # health.timeout = 3 s for the whole request: the server closes long before 100 000 bytes
    # at 2 bytes a second (with a per-read timeout the drip kept it open past 12 s)
    assert closed


def test_a_huge_connect_timeout_is_a_clear_400(port: int) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.request(
        "POST",
        f"/{OAM}/GetStatus",
        body=b"{}",
        headers={"Content-Type": "application/json", "Connect-Timeout-Ms": "9" * 5000},
    )
    resp = conn.getresponse()
    body = json.loads(resp.read())
    conn.close()
    assert resp.status == 400 and body["code"] == "invalid_argument"
    assert "Connect-Timeout-Ms" in body["message"]
