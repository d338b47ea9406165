"""The HTTP port's front door: every accepted connection's TLS handshake and request head are
read by one selector thread, never by a worker, so a client that drips bytes (slow-loris)
holds a file descriptor and a small buffer, not a thread.

Guarantees:

* A connection has :data:`HEAD_TIMEOUT` seconds from ``accept`` for its TLS handshake and
  whole request head (a deadline, not a per-read timeout); then it is closed.
* At most ``max_pending`` connections wait for their head, at most ``max_per_peer`` of them
  from one address: past either cap the oldest waiting connection (of that address, else of
  all) is closed, so a flood of slow connections never locks a new probe out.
* A request whose head is complete goes to the probe pool (``GET``/``HEAD``: probes,
  ``/metrics``, the status page) or the RPC pool (``POST``: Connect), so RPCs, however slow
  their bodies, never hold up ``/health/*``. A pool whose queue is full answers 503 at once.
* The bytes read past the head (the start of a body) go to the worker with the socket
  (:class:`Prefixed`), and the worker reads the rest of the request against one deadline.
"""

from __future__ import annotations

import collections
import contextlib
import io
import logging
import queue
import selectors
import socket
import ssl
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

logger = logging.getLogger(__name__)

__all__ = ["HEAD_TIMEOUT", "MAX_HEAD", "Accepted", "HeadGate", "Prefixed"]

HEAD_TIMEOUT = 5.0
"""Seconds from ``accept`` by which the TLS handshake and the whole request head must be in."""

MAX_HEAD = 64 * 1024
"""Largest request head (request line and headers), in bytes; a larger one is refused."""

_BUSY = (
    b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
    b"Content-Length: 61\r\nConnection: close\r\nRetry-After: 1\r\n\r\n"
    b'{"code":"unavailable","message":"too many requests; retry"}\r\n'
)
_TOO_LARGE = (
    b"HTTP/1.1 431 Request Header Fields Too Large\r\nContent-Length: 0\r\n"
    b"Connection: close\r\n\r\n"
)


@dataclass(eq=False)
class Accepted:
    """A connection whose head is being read (then handed to a worker)."""

    sock: socket.socket
    addr: Any
    deadline: float
    buf: bytearray = field(default_factory=bytearray)
    handshaking: bool = False

    @property
    def peer(self) -> str:
        return str(self.addr[0]) if isinstance(self.addr, tuple) and self.addr else str(self.addr)

    @property
    def method(self) -> bytes:
        return bytes(self.buf[:8]).split(b" ", 1)[0].upper()


class Prefixed(io.RawIOBase):
    """A socket's reads, starting with bytes already read (the head), each read bounded by
    what is left of ``deadline`` (``TimeoutError`` once it has passed)."""

    def __init__(self, sock: socket.socket, prefix: bytes, deadline: float) -> None:
        self._sock = sock
        self._prefix = memoryview(prefix)
        self.deadline = deadline

    def readable(self) -> bool:
        return True

    def readinto(self, b: Any) -> int:
        if self._prefix:
            n = min(len(b), len(self._prefix))
            b[:n] = self._prefix[:n]
            self._prefix = self._prefix[n:]
            return n
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("the request did not arrive in time (health.timeout)")
        self._sock.settimeout(left)
        return self._sock.recv_into(b)


class HeadGate:
    """The selector thread: ``add`` an accepted socket; ``dispatch(kind, accepted)`` gets each
    connection whose head is complete (``kind``: ``"probe"`` or ``"rpc"``) and returns False
    when that pool is full (the gate then answers 503)."""

    def __init__(
        self,
        ssl_context: ssl.SSLContext | None,
        dispatch: Callable[[str, Accepted], bool],
        *,
        max_pending: int,
        max_per_peer: int,
        head_timeout: float = HEAD_TIMEOUT,
    ) -> None:
        self.ssl_context = ssl_context
        self.dispatch = dispatch
        self.max_pending = max_pending
        self.max_per_peer = max_per_peer
        self.head_timeout = head_timeout
        self._sel = selectors.DefaultSelector()
        self._pending: collections.OrderedDict[Accepted, None] = collections.OrderedDict()
        self._by_peer: dict[str, collections.deque[Accepted]] = {}
        self._inbox: queue.SimpleQueue[tuple[socket.socket, Any]] = queue.SimpleQueue()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)  # a full pipe already means "wake up"
        self._sel.register(self._wake_r, selectors.EVENT_READ, None)
        self._closing = threading.Event()
        self._thread = threading.Thread(target=self._run, name="laredo-http-gate", daemon=True)
        self._thread.start()

    def add(self, sock: socket.socket, addr: Any) -> None:
        """Take an accepted connection (from the accept loop)."""
        self._inbox.put((sock, addr))
        with contextlib.suppress(OSError):
            self._wake_w.send(b"x")

    def close(self) -> None:
        self._closing.set()
        with contextlib.suppress(OSError):
            self._wake_w.send(b"x")
        self._thread.join(5)
        for acc in list(self._pending):
            self._drop(acc)
        self._wake_r.close()
        self._wake_w.close()
        self._sel.close()

    # -- the loop ---------------------------------------------------------------------------
    def _run(self) -> None:
        while not self._closing.is_set():
            try:
                self._once()
            except Exception:  # never kill the gate: the port would stop answering
                logger.warning("http gate: unexpected error", exc_info=True)

    def _once(self) -> None:
        """One round: wait for readiness or the next deadline, step the ready connections,
        take the new ones, close the late ones."""
        timeout = None
        if self._pending:
            first = next(iter(self._pending))
            timeout = max(0.0, first.deadline - time.monotonic())
        for key, _mask in self._sel.select(timeout):
            if key.data is None:
                with contextlib.suppress(OSError):
                    self._wake_r.recv(4096)
                continue
            try:
                self._step(key.data)
            except Exception:  # one bad connection never stops the others
                logger.debug("http head from %s failed", key.data.addr, exc_info=True)
                self._drop(key.data)
        self._take_new()
        self._expire()

    def _take_new(self) -> None:
        while True:
            try:
                sock, addr = self._inbox.get_nowait()
            except queue.Empty:
                return
            acc = Accepted(sock, addr, time.monotonic() + self.head_timeout)
            try:
                sock.setblocking(False)
                if self.ssl_context is not None:
                    acc.sock = self.ssl_context.wrap_socket(
                        sock, server_side=True, do_handshake_on_connect=False
                    )
                    acc.handshaking = True
                self._sel.register(acc.sock, selectors.EVENT_READ, acc)
            except (OSError, ValueError):
                with contextlib.suppress(OSError):
                    sock.close()
                continue
            self._pending[acc] = None
            peers = self._by_peer.setdefault(acc.peer, collections.deque())
            peers.append(acc)
            if len(peers) > self.max_per_peer:
                self._drop(peers[0])
            if len(self._pending) > self.max_pending:
                self._drop(next(iter(self._pending)))

    def _expire(self) -> None:
        now = time.monotonic()
        while self._pending:
            first = next(iter(self._pending))
            if first.deadline > now:
                return
            logger.debug(
                "http connection from %s: no request head within %ss", first.addr, self.head_timeout
            )
            self._drop(first)

    def _step(self, acc: Accepted) -> None:
        sock = acc.sock
        if acc.handshaking:
            assert isinstance(sock, ssl.SSLSocket)
            try:
                sock.do_handshake()
            except ssl.SSLWantReadError:
                self._sel.modify(sock, selectors.EVENT_READ, acc)
                return
            except ssl.SSLWantWriteError:
                self._sel.modify(sock, selectors.EVENT_WRITE, acc)
                return
            acc.handshaking = False
            self._sel.modify(sock, selectors.EVENT_READ, acc)
        while True:
            try:
                data = sock.recv(65536)
            except (ssl.SSLWantReadError, ssl.SSLWantWriteError, BlockingIOError):
                break
            if not data:
                self._drop(acc)
                return
            acc.buf += data
            if len(acc.buf) > MAX_HEAD + 65536 or b"\r\n\r\n" in acc.buf or b"\n\n" in acc.buf:
                break
        end = acc.buf.find(b"\r\n\r\n")
        if end < 0:
            end = acc.buf.find(b"\n\n")
        if end < 0 and len(acc.buf) <= MAX_HEAD:
            return
        if end < 0 or end > MAX_HEAD:
            self._answer_and_drop(acc, _TOO_LARGE)
            return
        self._release(acc)
        kind = "probe" if acc.method in (b"GET", b"HEAD") else "rpc"
        if not self.dispatch(kind, acc):
            self._answer(acc, _BUSY)
            with contextlib.suppress(OSError):
                acc.sock.close()

    # -- bookkeeping ------------------------------------------------------------------------
    def _release(self, acc: Accepted) -> None:
        """Stop watching ``acc`` (it goes to a worker, or is being closed)."""
        with contextlib.suppress(KeyError, ValueError):
            self._sel.unregister(acc.sock)
        self._pending.pop(acc, None)
        peers = self._by_peer.get(acc.peer)
        if peers is not None:
            with contextlib.suppress(ValueError):
                peers.remove(acc)
            if not peers:
                del self._by_peer[acc.peer]

    def _drop(self, acc: Accepted) -> None:
        self._release(acc)
        with contextlib.suppress(OSError):
            acc.sock.close()

    def _answer(self, acc: Accepted, data: bytes) -> None:
        """Best effort, never blocking the gate: one non-blocking send (a short answer fits
        the socket buffer)."""
        with contextlib.suppress(OSError, ValueError, ssl.SSLError):
            acc.sock.send(data)

    def _answer_and_drop(self, acc: Accepted, data: bytes) -> None:
        self._release(acc)
        self._answer(acc, data)
        with contextlib.suppress(OSError):
            acc.sock.close()
