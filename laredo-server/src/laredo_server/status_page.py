"""The operator's status page, ``GET /`` on the HTTP port.

One self-contained file (``static/status.html``: inline CSS and JavaScript, no CDN) shipped as
package data. The page polls the same Connect JSON endpoint ``laredo status`` uses
(``POST /laredo.v1.LaredoOAMService/GetStatus``), so it needs the admin token exactly when that
RPC does; the token is typed into the page, kept in the tab's ``sessionStorage`` and sent as
``Authorization: Bearer``. Serving the page reads a file loaded once, and the page stops
polling while its tab is hidden. Its charts come from ``GET /status/history``
(:class:`~laredo_server.status_history.StatusHistory`, the server's last hour, same token
rule), so they show what happened before the page was opened.

The Content-Security-Policy allows only the page's own inline script and style (by hash) and
requests to this origin.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import logging
import re
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from importlib import resources

logger = logging.getLogger(__name__)

__all__ = ["HISTORY_PATH", "PAGE_PATHS", "Page", "page", "serve_page"]

HISTORY_PATH = "/status/history"
"""The page's last hour (``StatusHistory.export()`` as JSON), read once when the page opens."""

PAGE_PATHS = ("", "/index.html", "/status")
"""Request paths (trailing ``/`` removed) that answer the page."""


@dataclass(frozen=True, slots=True)
class Page:
    """The page's bytes and the Content-Security-Policy that admits its inline code."""

    body: bytes
    csp: str


def _hashes(tag: str, html: str) -> str:
    out = []
    for block in re.findall(rf"<{tag}>(.*?)</{tag}>", html, re.DOTALL):
        digest = hashlib.sha256(block.encode()).digest()
        out.append("'sha256-" + base64.b64encode(digest).decode() + "'")
    return " ".join(out)


@functools.cache
def page() -> Page:
    """The page, read once from the package data."""
    html = resources.files(__package__).joinpath("static", "status.html").read_text("utf-8")
    csp = (
        "default-src 'none'; "
        f"script-src {_hashes('script', html)}; "
        f"style-src {_hashes('style', html)}; "
        "connect-src 'self'; img-src 'self' data:; "
        "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    )
    return Page(html.encode("utf-8"), csp)


def serve_page(handler: BaseHTTPRequestHandler, path: str) -> bool:
    """Answer ``GET``/``HEAD`` of the page on ``handler``; False when ``path`` is not the
    page's (the caller answers 404)."""
    if path not in PAGE_PATHS:
        return False
    p = page()
    handler.send_response(200)
    handler.send_header("Content-Type", "text/html; charset=utf-8")
    handler.send_header("Content-Length", str(len(p.body)))
    handler.send_header("Content-Security-Policy", p.csp)
    handler.send_header("X-Content-Type-Options", "nosniff")
    handler.send_header("Referrer-Policy", "no-referrer")
    handler.send_header("Cache-Control", "no-cache")
    handler.end_headers()
    if handler.command != "HEAD":
        handler.wfile.write(p.body)
    return True
