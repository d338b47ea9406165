"""The HTTP front end: health probes, Prometheus metrics and the Connect gateway (JSON and
binary protobuf) to the services, on one port.

``GET /health/live`` (200 unless every pipeline of a source failed), ``/health/ready`` (200 when
every pipeline streams or is paused with its baseline done; 503 while draining),
``/health/startup`` and ``/metrics``; ``POST /<service>/<method>`` calls a service
(Connect protocol, :mod:`laredo_server.httpjson`). A failing handler answers 500 and never
kills the thread.

Guarantees: probes and metrics never need credentials (``/health/ready`` leaves out error
text for a caller without the token when ``protect_reads`` is set). A Connect call is refused
before its body is read when it lacks the token its method needs, lacks a verified client
certificate (``health.tls.client_ca_file``) or announces more than ``max_body`` bytes; a gzip
body stops inflating at ``max_body``. The TLS handshake and request head are read by the
:class:`~laredo_server.http_gate.HeadGate` (a deadline of :data:`HEAD_TIMEOUT` seconds in all,
without a thread); then at most ``max_connections`` RPCs are served at once, and probes,
metrics and the page by a pool of their own. The rest of a request must arrive within
``timeout`` seconds as a whole; each write may take that long.
"""

from __future__ import annotations

import contextlib
import functools
import io
import ipaddress
import json
import logging
import queue
import select
import socket
import ssl
import threading
import time
import urllib.parse
from collections.abc import Generator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any

from . import __version__
from .config import TlsConfig
from .config.sections import (
    HEALTH_CONNECT,
    HEALTH_HISTORY_INTERVAL,
    HEALTH_MAX_BODY,
    HEALTH_MAX_CONNECTIONS,
    HEALTH_STATUS_PAGE,
    HEALTH_TIMEOUT,
)
from .http_gate import HEAD_TIMEOUT, Accepted, HeadGate, Prefixed
from .httpjson import HTTP_STATUS, BodyTooLarge, handle, method_of
from .metrics import CONTENT_TYPE
from .runtime import ServerRuntime
from .services._rpc import is_admin
from .status_history import StatusHistory
from .status_page import HISTORY_PATH, serve_page

logger = logging.getLogger(__name__)

__all__ = ["HttpFrontend", "HttpLimits", "host_refusal"]

PATHS = ["/health/live", "/health/ready", "/health/startup", "/metrics"]


@dataclass(frozen=True, slots=True)
class HttpLimits:
    """What one client may take from the HTTP port (``health.max_body``,
    ``health.max_connections``, ``health.timeout``)."""

    max_body: int = HEALTH_MAX_BODY.default
    max_connections: int = HEALTH_MAX_CONNECTIONS.default
    timeout: float = HEALTH_TIMEOUT.default
    allowed_hosts: tuple[str, ...] = ()
    """Host names (``health.allowed_hosts``) Connect calls may name in ``Host`` besides IP
    literals and ``localhost``; ``"*"``: any."""


def host_refusal(host_header: str | None, origin: str | None, allowed: tuple[str, ...]) -> str:
    """Why a Connect call naming ``Host: host_header`` (from a page at ``origin``) is refused
    ("" when it is not): DNS-rebinding protection. IP literals and ``localhost`` names are
    always fine (a rebinding page has a DNS name), other names only when listed in
    ``allowed``; a browser ``Origin`` must be the same host."""
    if host_header is None:
        return ""  # no browser sends a request without Host
    name = _host_name(host_header)
    if "*" not in allowed and not _local_or_literal(name) and name not in _names(allowed):
        return (
            f"Host {host_header!r} is not allowed on this port (DNS rebinding protection): "
            f"add {name!r} to health.allowed_hosts"
        )
    if origin and origin != "null":
        seen = _host_name(origin.split("://", 1)[-1].split("/", 1)[0])
        if seen != name:
            return f"cross-origin call from {origin!r} refused (Origin must match Host)"
    elif origin == "null":
        return "cross-origin call from an opaque origin refused"
    return ""


def _names(allowed: tuple[str, ...]) -> set[str]:
    return {a.strip().lower().rstrip(".") for a in allowed}


def _host_name(value: str) -> str:
    """``host[:port]`` or ``[v6]:port`` without the port, lower case, no trailing dot."""
    v = value.strip().lower()
    if v.startswith("["):
        return v[1:].split("]", 1)[0]
    if v.count(":") == 1:
        v = v.split(":", 1)[0]
    return v.rstrip(".")


def _local_or_literal(name: str) -> bool:
    if name == "localhost" or name.endswith(".localhost"):
        return True
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def _tls_context(tls: TlsConfig) -> ssl.SSLContext:
    """Server TLS; with ``client_ca_file`` a client certificate is verified when presented
    (CERT_OPTIONAL, so probes work without one) and Connect calls require it."""
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(tls.cert_file, tls.key_file)
    if tls.client_ca_file:
        ctx.load_verify_locations(tls.client_ca_file)
        ctx.verify_mode = ssl.CERT_OPTIONAL
    return ctx


class _SocketWriter(io.BufferedIOBase):
    """``wfile``: every write is sent whole (``sendall``), each send bounded by the socket's
    timeout (``health.timeout``)."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock

    def writable(self) -> bool:
        return True

    def write(self, b: Any) -> int:
        self._sock.sendall(b)
        with memoryview(b) as view:
            return view.nbytes


class _PooledHTTPServer(HTTPServer):
    """An HTTP server whose accept loop hands each connection to a :class:`HeadGate` (TLS
    handshake and request head read without a thread), then to one of two fixed pools of
    daemon threads: ``max_connections`` for RPCs, a few for probes, metrics and the page. A
    stuck client never holds up the process's exit."""

    request_queue_size = 128  # the listen backlog

    def __init__(
        self, addr: tuple[str, int], site: _Site, ssl_context: ssl.SSLContext | None
    ) -> None:
        self.site = site
        self.limits = limits = site.limits
        self.ssl_context = ssl_context
        probe_workers = max(2, min(8, limits.max_connections // 8))
        self._pools: dict[str, tuple[int, queue.Queue[Accepted | None]]] = {
            "rpc": (limits.max_connections, queue.Queue()),
            "probe": (probe_workers, queue.Queue()),
        }
        super().__init__(addr, _Handler)
        pending = max(256, 4 * limits.max_connections)
        self.gate = HeadGate(
            ssl_context,
            self._dispatch,
            max_pending=pending,
            max_per_peer=max(16, pending // 8),
            head_timeout=min(HEAD_TIMEOUT, limits.timeout),
        )
        for kind, (n, jobs) in self._pools.items():
            for k in range(n):
                threading.Thread(
                    target=self._worker, args=(jobs,), name=f"laredo-http-{kind}-{k}", daemon=True
                ).start()

    def get_request(self) -> tuple[Any, Any]:
        return self.socket.accept()

    def process_request(self, request: Any, client_address: Any) -> None:
        self.gate.add(request, client_address)

    def _dispatch(self, kind: str, acc: Accepted) -> bool:
        workers, jobs = self._pools[kind]
        if jobs.qsize() >= 2 * workers:
            return False
        jobs.put(acc)
        return True

    def _worker(self, jobs: queue.Queue[Accepted | None]) -> None:
        while (acc := jobs.get()) is not None:
            self._serve_one(acc)

    def _serve_one(self, acc: Accepted) -> None:
        conn = acc.sock
        try:
            conn.setblocking(True)
            conn.settimeout(self.limits.timeout)
            self.RequestHandlerClass(acc, acc.addr, self)  # type: ignore[arg-type]  # the head-read connection
        except (OSError, ssl.SSLError) as exc:
            logger.debug("http connection from %s: %s", acc.addr, exc)
        except Exception:
            self.handle_error(conn, acc.addr)
        finally:
            self.shutdown_request(conn)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Log through the module's logger (masked like every log line), never a raw
        traceback on stderr."""
        logger.warning("http request from %s failed", client_address, exc_info=True)

    def shutdown_request(self, request: Any) -> None:
        """Close after a lingering read: a client still sending a body we refused reads our
        answer instead of a connection reset (at most 16 MiB or 2 s of its data is
        discarded)."""
        with contextlib.suppress(OSError, ValueError):
            request.shutdown(socket.SHUT_WR)
            end = time.monotonic() + 2.0
            drained = 0
            wait = 0.0  # nothing pending now: close at once (the usual case)
            while drained < (16 << 20) and time.monotonic() < end:
                if not select.select([request], [], [], wait)[0]:
                    break
                wait = max(0.0, end - time.monotonic())
                data = request.recv(65536)
                if not data:
                    break
                drained += len(data)
        request.close()

    def server_close(self) -> None:
        super().server_close()
        self.gate.close()
        for n, jobs in self._pools.values():
            for _ in range(n):
                jobs.put(None)


def _peer_connected(conn: socket.socket) -> bool:
    """The client has not closed the connection. After its request a Connect client sends
    nothing more, so a readable socket means EOF (plain: peeked; TLS: assumed)."""
    try:
        readable, _, _ = select.select([conn], [], [], 0)
        if not readable:
            return True
        if isinstance(conn, ssl.SSLSocket):
            return False
        return bool(conn.recv(1, socket.MSG_PEEK))
    except (OSError, ValueError):
        return False


def _read_chunked(rfile: Any, limit: int) -> bytes:
    """A ``Transfer-Encoding: chunked`` body, refused (``BodyTooLarge``) as soon as it goes
    past ``limit`` bytes; ``ValueError`` when it is malformed."""
    out = bytearray()
    while True:
        line = rfile.readline(1026)
        try:
            size = int(line.split(b";", 1)[0].strip(), 16)
        except ValueError:
            raise ValueError("bad chunked body") from None
        if size < 0:
            raise ValueError("bad chunked body")
        if size == 0:
            while rfile.readline(1026) not in (b"\r\n", b"\n", b""):
                pass  # trailers
            return bytes(out)
        if len(out) + size > limit:
            raise BodyTooLarge(limit)
        chunk = rfile.read(size)
        if len(chunk) != size:
            raise ValueError("truncated chunked body")
        out += chunk
        rfile.readline(3)


@dataclass(frozen=True, slots=True)
class _Site:
    """What the HTTP port serves, read by each request's handler through its server."""

    rt: ServerRuntime
    servicers: dict[str, Any]
    connect: bool
    client_certs: bool
    limits: HttpLimits
    history: StatusHistory | None = None
    """The status page's history (None: no status page)."""


class _Handler(BaseHTTPRequestHandler):
    """One request per connection: health, metrics, the status page and the Connect gateway,
    as :class:`_Site` (``self.server.site``) says."""

    server_version = "laredo/" + __version__
    server: _PooledHTTPServer

    @property
    def site(self) -> _Site:
        return self.server.site

    def setup(self) -> None:
        """The head is already read (by the gate): the rest of the request must arrive
        within ``health.timeout`` as a whole; each write may take that long."""
        acc: Accepted = self.request
        self.connection = acc.sock
        deadline = time.monotonic() + self.site.limits.timeout
        self.rfile = io.BufferedReader(Prefixed(acc.sock, bytes(acc.buf), deadline))
        self.wfile = _SocketWriter(acc.sock)

    def handle(self) -> None:
        self.close_connection = True
        self.handle_one_request()  # one request per connection

    def log_message(self, format: str, *args: Any) -> None:
        logger.debug("http: " + format, *args)

    def _send(self, code: int, body: str, ctype: str = "application/json") -> None:
        data = body.encode()
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def _refuse(self, status: int, code: str, message: str) -> None:
        """A Connect error, sent without reading the request body (closes the
        connection)."""
        self.close_connection = True
        data = json.dumps({"code": code, "message": message}).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(data)

    def _refusal(self, path: str) -> tuple[int, str, str] | None:
        """Why this call may not go on, checked before its body is read."""
        if not self.site.connect:
            return (
                404,
                "unimplemented",
                "RPCs are not served on this port (health.connect = false)",
            )
        why = host_refusal(
            self.headers.get("Host"), self.headers.get("Origin"), self.site.limits.allowed_hosts
        )
        if why:
            return HTTP_STATUS["permission_denied"], "permission_denied", why
        if self.site.client_certs and not self.connection.getpeercert():
            return (
                HTTP_STATUS["unauthenticated"],
                "unauthenticated",
                "this port requires a client certificate (health.tls.client_ca_file)",
            )
        refusal = self.site.rt.access.check(
            self.headers.items(), admin=is_admin(method_of(self.site.servicers, path))
        )
        if refusal is not None:
            code = refusal.code.lower()
            return HTTP_STATUS[code], code, refusal.message
        if self._chunked():
            return None  # read chunk by chunk, up to max_body (see _body)
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            return 400, "invalid_argument", "bad Content-Length"
        if length < 0:
            return 400, "invalid_argument", "bad Content-Length"
        if length > self.site.limits.max_body:
            return (
                413,
                "resource_exhausted",
                f"request body of {length} bytes is larger than {self.site.limits.max_body} "
                "(health.max_body)",
            )
        return None

    def _chunked(self) -> bool:
        return "chunked" in (self.headers.get("Transfer-Encoding") or "").lower()

    def _body(self) -> bytes | None:
        """The request body; None (after answering 413/400) when a chunked body goes past
        ``max_body`` or is malformed."""
        if not self._chunked():
            length = int(self.headers.get("Content-Length") or 0)
            return self.rfile.read(length) if length else b""
        try:
            return _read_chunked(self.rfile, self.site.limits.max_body)
        except BodyTooLarge as exc:
            self._refuse(413, "resource_exhausted", str(exc))
        except ValueError as exc:
            self._refuse(400, "invalid_argument", str(exc))
        return None

    def do_POST(self) -> None:
        path = self.path.split("?", 1)[0]
        refused = self._refusal(path)
        if refused is not None:
            self._refuse(*refused)
            return
        body = self._body()
        if body is None:
            return
        reply = handle(
            self.site.servicers,
            path,
            dict(self.headers),
            body,
            max_body=self.site.limits.max_body,
            alive=functools.partial(_peer_connected, self.connection),
        )
        self.send_response(reply.status)
        self.send_header("Content-Type", reply.content_type)
        if reply.length is not None:
            self.send_header("Content-Length", str(reply.length))
        self.send_header("Connection", "close")
        self.end_headers()
        chunks = reply.chunks
        try:
            for chunk in chunks:
                self.wfile.write(chunk)
                self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            if isinstance(chunks, Generator):
                chunks.close()  # the client left: end a stream now

    def _history(self, history: StatusHistory) -> None:
        """The status page's last hour; needs the token exactly when ``GetStatus`` does."""
        refusal = self.site.rt.access.check(self.headers.items(), admin=False)
        if refusal is not None:
            code = refusal.code.lower()
            body = {"code": code, "message": refusal.message}
            self._send(HTTP_STATUS[code], json.dumps(body))
            return
        query = urllib.parse.parse_qs(self.path.partition("?")[2])
        try:
            since = float(query.get("since", ["0"])[0])
        except ValueError:
            since = 0.0
        self._send(200, json.dumps(history.export(since)))

    def do_HEAD(self) -> None:
        self.do_GET()

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0].rstrip("/")
        history = self.site.history
        try:
            if path == "/health/live":
                ok, reasons = self.site.rt.liveness()
                body: dict[str, Any] = {
                    "status": "ok" if ok else "failed",
                    "reasons": reasons,
                }
                self._send(200 if ok else 503, json.dumps(body))
            elif path == "/health/ready":
                access = self.site.rt.access
                detail = not access.protect_reads or access.may_read(self.headers.items())
                ok, reasons = self.site.rt.readiness(detail=detail)
                body = {
                    "ready": ok,
                    "reasons": reasons,
                    "pipelines": self.site.rt.pipeline_map(detail),
                }
                self._send(200 if ok else 503, json.dumps(body))
            elif path == "/health/startup":
                ok = self.site.rt.started
                body = {"status": "started" if ok else "starting"}
                self._send(200 if ok else 503, json.dumps(body))
            elif path == "/metrics":
                self._send(200, self.site.rt.metrics.render(), CONTENT_TYPE)
            elif path == HISTORY_PATH and history is not None:
                self._history(history)
            elif not (history is not None and serve_page(self, path)):
                self._send(404, json.dumps({"error": "not found", "paths": PATHS}))
        except Exception as exc:  # never kill the probe thread
            logger.warning("http %s failed: %s", path, exc)
            self._send(500, json.dumps({"error": type(exc).__name__}))


class HttpFrontend:
    """Serves health, metrics, (with ``status_page``) the status page at ``/`` and (with
    ``connect``) the Connect gateway on ``host:port`` (0: any free port; the bound one goes to
    ``rt.listeners.health_port``), over TLS with ``tls``."""

    def __init__(
        self,
        rt: ServerRuntime,
        servicers: dict[str, Any],
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        connect: bool = HEALTH_CONNECT.default,
        tls: TlsConfig | None = None,
        limits: HttpLimits | None = None,
        status_page: bool = HEALTH_STATUS_PAGE.default,
        history_interval: float = HEALTH_HISTORY_INTERVAL.default,
    ) -> None:
        self.rt = rt
        self.status_page = status_page
        self.history = StatusHistory(rt, history_interval) if status_page else None
        """The status page's last hour (sampled while this front end runs)."""
        self.servicers = servicers
        self.host = host
        self.port = port
        self.connect = connect
        self.tls = tls
        self.limits = limits or HttpLimits()
        self._httpd: _PooledHTTPServer | None = None

    def start(self) -> None:
        site = _Site(
            self.rt,
            self.servicers,
            connect=self.connect,
            client_certs=bool(self.tls and self.tls.client_ca_file),
            limits=self.limits,
            history=self.history,
        )
        ctx = _tls_context(self.tls) if self.tls is not None else None
        try:
            httpd = _PooledHTTPServer((self.host, self.port or 0), site, ctx)
        except OSError as exc:
            raise OSError(
                f"cannot listen for HTTP on {self.host}:{self.port} ({exc.strerror or exc}); "
                "set health.port to a free port, or health.enabled = false"
            ) from exc
        self._httpd = httpd
        port = httpd.server_address[1]
        self.rt.listeners.health_port = port
        threading.Thread(target=httpd.serve_forever, name="laredo-http", daemon=True).start()
        scheme = "https" if ctx is not None else "http"
        logger.info("health and metrics on %s://%s:%s", scheme, self.host, port)
        if self.history is not None:
            self.history.start()

    def stop(self, grace: float) -> None:
        """Keep answering: probes and metrics stay up while the engine stops."""

    def close(self) -> None:
        if self.history is not None:
            self.history.stop(1.0)
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
