"""A real HTTP receiver on 127.0.0.1 for the HTTP sync target's tests.

``receiver`` records every request (path, headers, parsed JSON body, the status it answered) and
answers from a programmable script: ``receiver.script(500, 500, 200)`` makes the next three
requests get those statuses; ``Reply(status, delay, headers)`` adds a delay or headers; once the
script is used up every request gets 200. ``receiver.stop()`` closes the listening socket and
kills open connections (a crash of the receiver); ``receiver.restart()`` listens again on the same
port.
"""

from __future__ import annotations

import contextlib
import json
import socket
import ssl
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from laredo.testing import wait_until


@dataclass(frozen=True)
class Reply:
    status: int = 200
    delay: float = 0.0
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""


@dataclass(frozen=True)
class Request:
    path: str
    headers: dict[str, str]
    body: Any
    status: int
    at: float
    client: tuple[str, int]


class _QuietServer(ThreadingHTTPServer):
    allow_reuse_address = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # connections the tests drop on purpose


class Receiver:
    def __init__(self, tls: tuple[str, str] | None = None) -> None:
        self._tls = tls
        self._lock = threading.Lock()
        self._conns: set[socket.socket] = set()
        self._script: deque[Reply] = deque()
        self.requests: list[Request] = []
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self.port = 0
        self.default = Reply()
        self.start()

    @property
    def url(self) -> str:
        scheme = "https" if self._tls else "http"
        return f"{scheme}://127.0.0.1:{self.port}"

    def start(self) -> None:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def setup(self) -> None:
                super().setup()
                with receiver._lock:
                    receiver._conns.add(self.connection)

            def finish(self) -> None:
                with receiver._lock:
                    receiver._conns.discard(self.connection)
                super().finish()

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                raw = self.rfile.read(length)
                reply = receiver._next()
                if reply.delay:
                    time.sleep(reply.delay)
                try:
                    body = json.loads(raw) if raw else None
                except ValueError:
                    body = raw
                receiver._record(
                    Request(
                        self.path,
                        dict(self.headers),
                        body,
                        reply.status,
                        time.monotonic(),
                        self.client_address,
                    )
                )
                self.send_response(reply.status)
                for k, v in reply.headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(reply.body)))
                self.end_headers()
                self.wfile.write(reply.body)

        server = _QuietServer(("127.0.0.1", self.port), Handler)
        if self._tls is not None:
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.load_cert_chain(*self._tls)
            server.socket = ctx.wrap_socket(server.socket, server_side=True)
        server.daemon_threads = True
        server.block_on_close = False
        self._server = server
        self.port = server.server_address[1]
        self._thread = threading.Thread(target=server.serve_forever, args=(0.02,), daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop listening (the receiver is gone: new connections are refused)."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        self.drop_connections()

    def drop_connections(self) -> None:
        """Close every open client connection (as a server closing idle keep-alives does)."""
        with self._lock:
            conns = list(self._conns)
        for c in conns:
            with contextlib.suppress(OSError):
                c.shutdown(socket.SHUT_RDWR)

    def restart(self) -> None:
        self.stop()
        self.start()

    def _next(self) -> Reply:
        with self._lock:
            return self._script.popleft() if self._script else self.default

    def _record(self, req: Request) -> None:
        with self._lock:
            self.requests.append(req)

    @staticmethod
    def reply(
        status: int = 200, delay: float = 0.0, headers: dict[str, str] | None = None
    ) -> Reply:
        return Reply(status, delay, headers or {})

    def script(self, *replies: int | Reply) -> None:
        with self._lock:
            for r in replies:
                self._script.append(Reply(r) if isinstance(r, int) else r)

    def ok_requests(self, path: str | None = None) -> list[Request]:
        with self._lock:
            return [
                r
                for r in self.requests
                if 200 <= r.status < 300 and (path is None or r.path == path)
            ]

    def all_requests(self, path: str | None = None) -> list[Request]:
        with self._lock:
            return [r for r in self.requests if path is None or r.path == path]

    def changes(self) -> list[dict[str, Any]]:
        """Every change the receiver accepted (2xx), in arrival order."""
        return [c for r in self.ok_requests("/changes") for c in r.body["changes"]]


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    yield r
    r.stop()


@pytest.fixture
def tls_receiver(tmp_path: Any) -> Iterator[Receiver]:
    """A receiver over HTTPS with a self-signed certificate for 127.0.0.1 (``.cert_file``)."""
    import shutil
    import subprocess

    if shutil.which("openssl") is None:
        pytest.skip("the openssl command is needed to make a test certificate")
    cert, key = str(tmp_path / "cert.pem"), str(tmp_path / "key.pem")
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            key,
            "-out",
            cert,
            "-days",
            "1",
            "-subj",
            "/CN=127.0.0.1",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
        ],
        check=True,
        capture_output=True,
    )
    r = Receiver(tls=(cert, key))
    r.cert_file = cert  # type: ignore[attr-defined]
    yield r
    r.stop()


@pytest.fixture
def wait_for() -> Callable[..., Any]:
    """``wait_for(cond, timeout=10, what="...")`` polls ``cond`` until truthy."""
    return wait_until
