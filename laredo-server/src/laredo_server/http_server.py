"""The HTTP front end: health probes, Prometheus metrics and the Connect gateway (JSON and
binary protobuf) to the services, on one port.

``GET /health/live`` (200 unless every pipeline of a source failed), ``/health/ready`` (200 when
every pipeline streams or is paused with its baseline done; 503 while draining),
``/health/startup`` and ``/metrics``; ``POST /<service>/<method>`` calls a service
(Connect protocol, :mod:`laredo_server.httpjson`). A failing handler answers 500 and never
kills the thread.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Generator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from . import __version__
from .httpjson import handle
from .metrics import CONTENT_TYPE
from .runtime import ServerRuntime
from .status_page import serve_page

logger = logging.getLogger(__name__)

__all__ = ["HttpFrontend"]

PATHS = ["/health/live", "/health/ready", "/health/startup", "/metrics"]


def _handler(rt: ServerRuntime, servicers: dict[str, Any]) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        server_version = "laredo/" + __version__

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

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            reply = handle(servicers, self.path.split("?", 1)[0], dict(self.headers), body)
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

        def do_HEAD(self) -> None:
            self.do_GET()

        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0].rstrip("/")
            try:
                if path == "/health/live":
                    ok, reasons = rt.liveness()
                    body: dict[str, Any] = {
                        "status": "ok" if ok else "failed",
                        "reasons": reasons,
                    }
                    self._send(200 if ok else 503, json.dumps(body))
                elif path == "/health/ready":
                    ok, reasons = rt.readiness()
                    body = {"ready": ok, "reasons": reasons, "pipelines": rt.pipeline_map()}
                    self._send(200 if ok else 503, json.dumps(body))
                elif path == "/health/startup":
                    ok = rt.started
                    body = {"status": "started" if ok else "starting"}
                    self._send(200 if ok else 503, json.dumps(body))
                elif path == "/metrics":
                    self._send(200, rt.metrics.render(), CONTENT_TYPE)
                elif not serve_page(self, path):
                    self._send(404, json.dumps({"error": "not found", "paths": PATHS}))
            except Exception as exc:  # never kill the probe thread
                logger.warning("http %s failed: %s", path, exc)
                self._send(500, json.dumps({"error": str(exc)}))

    return Handler


class HttpFrontend:
    """Serves health, metrics and the HTTP+JSON gateway on ``host:port`` (0: any free port; the
    bound one goes to ``rt.listeners.health_port``)."""

    def __init__(
        self,
        rt: ServerRuntime,
        servicers: dict[str, Any],
        *,
        host: str = "127.0.0.1",
        port: int = 0,
    ) -> None:
        self.rt = rt
        self.servicers = servicers
        self.host = host
        self.port = port
        self._httpd: ThreadingHTTPServer | None = None

    def start(self) -> None:
        try:
            httpd = ThreadingHTTPServer(
                (self.host, self.port or 0), _handler(self.rt, self.servicers)
            )
        except OSError as exc:
            raise OSError(
                f"cannot listen for HTTP on {self.host}:{self.port} ({exc.strerror or exc}); "
                "set health.port to a free port, or health.enabled = false"
            ) from exc
        httpd.daemon_threads = True
        self._httpd = httpd
        port = httpd.server_address[1]
        self.rt.listeners.health_port = port
        threading.Thread(target=httpd.serve_forever, name="laredo-http", daemon=True).start()
        logger.info("health and metrics on http://%s:%s", self.host, port)

    def stop(self, grace: float) -> None:
        """Keep answering: probes and metrics stay up while the engine stops."""

    def close(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
