"""A small HTTP/1.1 client over ``http.client`` with one kept-alive connection and retries."""

from __future__ import annotations

import email.utils
import http.client
import logging
import math
import ssl
import threading
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

from laredo.errors import TargetError, Terminal, Transient

logger = logging.getLogger(__name__)

RETRYABLE_STATUSES = frozenset({408, 425, 429})
"""Besides every 5xx: request timeout, too early, too many requests."""

MAX_RESPONSE = 64 * 1024
"""Most bytes of a receiver's answer read (a larger one is cut and its connection closed)."""

_STALE_CONNECTION_ERRORS = (
    http.client.RemoteDisconnected,
    BrokenPipeError,
    ConnectionResetError,
    ConnectionAbortedError,
)


class HttpSyncError(TargetError):
    """An HTTP sync request failed.

    Constructed as :class:`HttpSyncTransientError` (a ``laredo.Transient``) when the request was
    retryable (5xx, 408/425/429, timeout, connection error) and every attempt failed: the
    engine's retry policy may try again later; otherwise as :class:`HttpSyncTerminalError` (a
    ``laredo.Terminal``: any other 4xx, a 3xx): the engine skips its retries, dead-letters and
    applies the error policy. ``transient`` reads which one it is.
    """

    def __new__(
        cls, message: str, status: int | None = None, transient: bool = False, attempts: int = 0
    ) -> HttpSyncError:
        kind: type[HttpSyncError] = cls
        if cls is HttpSyncError:
            kind = HttpSyncTransientError if transient else HttpSyncTerminalError
        return super().__new__(kind, message)

    def __init__(
        self, message: str, status: int | None = None, transient: bool = False, attempts: int = 0
    ) -> None:
        super().__init__(message)
        self.status = status
        self.attempts = attempts

    def __reduce__(self) -> tuple[Any, ...]:
        return (HttpSyncError, (self.args[0], self.status, self.transient, self.attempts))


class HttpSyncTransientError(HttpSyncError, Transient):
    """A retryable HTTP failure that outlasted every attempt."""


class HttpSyncTerminalError(HttpSyncError, Terminal):
    """An HTTP answer that retrying will not change (a 4xx other than 408/425/429, a 3xx)."""


def parse_retry_after(value: str | None, now: float | None = None) -> float | None:
    """Seconds to wait from a ``Retry-After`` header (delta-seconds or an HTTP date)."""
    if not value:
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError, IndexError):
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        current = datetime.now(UTC).timestamp() if now is None else now
        seconds = when.timestamp() - current
    if not math.isfinite(seconds):
        return None
    return max(0.0, seconds)


class HttpClient:
    """POSTs JSON bodies to ``base_url + path`` on one kept-alive connection (not thread-safe:
    the target serialises calls)."""

    def __init__(
        self,
        base_url: str,
        *,
        timeout: float,
        headers: Mapping[str, str],
        retry_count: int,
        backoff: float,
        backoff_max: float,
        retry_after_max: float,
        stop: threading.Event,
    ) -> None:
        parts = urlsplit(base_url)
        self.base_url = base_url
        self._https = parts.scheme == "https"
        self._host = parts.hostname or ""
        self._port = parts.port
        self._prefix = parts.path.rstrip("/")
        self._timeout = timeout
        self._headers = dict(headers)
        self._retry_count = retry_count
        self._backoff = backoff
        self._backoff_max = backoff_max
        self._retry_after_max = retry_after_max
        self._stop = stop
        self._conn: http.client.HTTPConnection | None = None
        self._requests_on_conn = 0
        self.requests = 0
        self.retries = 0

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
            self._requests_on_conn = 0

    def _connection(self) -> http.client.HTTPConnection:
        if self._conn is None:
            if self._https:
                self._conn = http.client.HTTPSConnection(
                    self._host, self._port, timeout=self._timeout
                )
            else:
                self._conn = http.client.HTTPConnection(
                    self._host, self._port, timeout=self._timeout
                )
            self._requests_on_conn = 0
        return self._conn

    def _once(self, path: str, body: bytes) -> tuple[int, http.client.HTTPMessage, bytes]:
        """One request. A kept-alive connection the server closed while idle is re-opened once
        without counting as an attempt."""
        for fresh_retry in (False, True):
            reused = self._requests_on_conn > 0
            conn = self._connection()
            try:
                self.requests += 1
                conn.request("POST", self._prefix + path, body=body, headers=self._headers)
                resp = conn.getresponse()
                data = resp.read(MAX_RESPONSE)  # only a snippet is ever shown
                if not resp.isclosed():  # more than that: the rest is never read
                    self.close()
                    return resp.status, resp.headers, data
            except _STALE_CONNECTION_ERRORS:
                self.close()
                if reused and not fresh_retry:
                    continue
                raise
            except BaseException:
                self.close()
                raise
            self._requests_on_conn += 1
            if resp.will_close:
                self.close()
            return resp.status, resp.headers, data
        raise AssertionError("unreachable")  # pragma: no cover

    def post(self, path: str, body: bytes, what: str) -> None:
        """POST with retries; returns on a 2xx, raises ``HttpSyncError`` otherwise.

        Retried: 5xx, 408, 425, 429, timeouts and connection errors, ``retry_count`` times,
        waiting ``backoff * 2**n`` (capped at ``backoff_max``) or the server's ``Retry-After``
        (capped at ``retry_after_max``), whichever is longer. Once ``stop`` is set (close), a
        failed request is not retried.
        """
        url = self.base_url + path
        attempts = self._retry_count + 1
        failure = ""
        status: int | None = None
        for attempt in range(1, attempts + 1):
            retry_after: float | None = None
            try:
                status, headers, data = self._once(path, body)
            except ssl.SSLCertVerificationError as exc:
                raise HttpSyncError(
                    f"POST {url} ({what}): TLS certificate verification failed: "
                    f"{exc.verify_message or exc}; trust a private CA with the SSL_CERT_FILE "
                    f"environment variable",
                    transient=False,
                    attempts=attempt,
                ) from exc
            except TimeoutError:
                status = None
                failure = f"no answer within {self._timeout * 1000:.0f} ms (timeout)"
            except (OSError, http.client.HTTPException) as exc:
                status = None
                failure = f"connection error: {type(exc).__name__}: {exc}"
            else:
                if 200 <= status < 300:
                    return
                snippet = data[:200].decode("utf-8", "replace").strip()
                failure = f"HTTP {status}" + (f": {snippet}" if snippet else "")
                if status < 500 and status not in RETRYABLE_STATUSES:
                    raise HttpSyncError(
                        f"POST {url} ({what}) was rejected with {failure}; this status is not "
                        f"retried: fix the receiver or the data (the change goes to the "
                        f"pipeline's error policy)",
                        status=status,
                        transient=False,
                        attempts=attempt,
                    )
                retry_after = parse_retry_after(headers.get("Retry-After"))
            if attempt == attempts or self._stop.is_set():
                break  # once the target is closing, a failed request is not retried
            delay = min(self._backoff * (2 ** (attempt - 1)), self._backoff_max)
            if retry_after is not None:
                delay = max(delay, min(retry_after, self._retry_after_max))
            self.retries += 1
            logger.warning(
                "POST %s (%s) failed (%s); retry %d of %d in %.3f s",
                url,
                what,
                failure,
                attempt,
                self._retry_count,
                delay,
                extra={"url": url, "attempt": attempt},
            )
            if delay > 0 and not self._stop.is_set():
                self._stop.wait(delay)
        raise HttpSyncError(
            f"POST {url} ({what}) failed after {attempt} attempt(s): {failure}; the changes "
            f"stay buffered and are not durable (raise retry_count or check the receiver)",
            status=status,
            transient=True,
            attempts=attempt,
        )


def monotonic() -> float:
    return time.monotonic()
