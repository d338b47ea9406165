"""The OAM and Query services over the Connect protocol, both codecs, on the HTTP port.

One implementation for JSON and binary protobuf, so ``curl`` and Connect clients (connect-go,
connect-es, ``buf curl --protocol connect``) reach every RPC:

    curl -s -X POST localhost:8080/laredo.v1.LaredoOAMService/GetStatus \\
         -H 'Content-Type: application/json' -d '{}'

* **Unary** RPCs: ``POST /<service>/<method>`` with ``Content-Type: application/json`` (the
  protobuf JSON mapping) or ``application/proto`` (binary protobuf); the response uses the same
  codec. A request body may be gzip-compressed (``Content-Encoding: gzip``).
* **Server-streaming** RPCs (WatchStatus, Subscribe): ``application/connect+json`` or
  ``application/connect+proto``; request and response messages are enveloped (1 flags byte,
  4-byte big-endian length). The last envelope has flag 0x02 and carries the end of the stream
  as JSON, ``{"error": {"code", "message"}, "metadata": {}}``, whatever the codec.
* **Errors**: a unary error is ``{"code": "not_found", "message": ...}`` (always JSON) with the
  HTTP status of Connect's table (:data:`HTTP_STATUS`); a streaming error is the end-of-stream
  message of an HTTP 200 response. An unsupported content type is HTTP 415.
* ``Connect-Timeout-Ms`` is the call's deadline (``context.time_remaining()``). The admin token
  goes in ``Authorization: Bearer <token>``, exactly as with gRPC.
"""

from __future__ import annotations

import json
import struct
import time
import zlib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import grpc
from google.protobuf import json_format
from google.protobuf.message import DecodeError

from ._proto.laredo_proto.v1 import oam_pb2, query_pb2
from .config.sections import HEALTH_MAX_BODY

__all__ = [
    "CODECS",
    "DEFAULT_MAX_BODY",
    "HTTP_STATUS",
    "BodyTooLarge",
    "Codec",
    "HttpAbort",
    "HttpContext",
    "Reply",
    "envelope",
    "handle",
]

HTTP_STATUS = {
    "canceled": 499,
    "unknown": 500,
    "invalid_argument": 400,
    "deadline_exceeded": 504,
    "not_found": 404,
    "already_exists": 409,
    "permission_denied": 403,
    "resource_exhausted": 429,
    "failed_precondition": 400,
    "aborted": 409,
    "out_of_range": 400,
    "unimplemented": 501,
    "internal": 500,
    "unavailable": 503,
    "data_loss": 500,
    "unauthenticated": 401,
}
"""Connect error code -> HTTP status of a unary error response."""

_MODULES = {
    "laredo.v1.LaredoOAMService": oam_pb2,
    "laredo.v1.LaredoQueryService": query_pb2,
}

DEFAULT_MAX_BODY: int = HEALTH_MAX_BODY.default
"""Largest request body (and message, after decompression) unless configured
(``health.max_body``)."""

END_STREAM = 0x02
COMPRESSED = 0x01


@dataclass(frozen=True, slots=True)
class Codec:
    """One Connect content type: its codec (``json`` or ``proto``) and whether it is the
    enveloped streaming form."""

    content_type: str
    name: str
    streaming: bool

    def decode(self, data: bytes, cls: type[Any]) -> Any:
        if self.name == "proto":
            return cls.FromString(data)
        return json_format.Parse(data.decode("utf-8") or "{}", cls())

    def encode(self, msg: Any) -> bytes:
        if isinstance(msg, bytes):  # pre-serialised protobuf
            if self.name == "proto":
                return msg
            raise TypeError("a pre-serialised message cannot be sent as JSON")
        if self.name == "proto":
            out: bytes = msg.SerializeToString()
            return out
        return str(
            json_format.MessageToJson(msg, preserving_proto_field_name=True, indent=None)
        ).encode()


CODECS = {
    c.content_type: c
    for c in (
        Codec("application/json", "json", False),
        Codec("application/proto", "proto", False),
        Codec("application/connect+json", "json", True),
        Codec("application/connect+proto", "proto", True),
    )
}
"""Every content type served, by its ``Content-Type``."""


class HttpAbort(Exception):
    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(details)
        self.code = code
        self.details = details

    @property
    def connect_code(self) -> str:
        return connect_code(self.code)


def connect_code(code: grpc.StatusCode) -> str:
    """Connect's name of a gRPC status code (``NOT_FOUND`` -> ``not_found``)."""
    return "canceled" if code is grpc.StatusCode.CANCELLED else str(code.name).lower()


class HttpContext:
    """The subset of ``grpc.ServicerContext`` the services use."""

    def __init__(
        self,
        headers: Mapping[str, str],
        deadline: float | None = None,
        alive: Callable[[], bool] | None = None,
    ) -> None:
        self._md = [(k.lower(), v) for k, v in headers.items()]
        self._alive = alive
        self._active = True
        self._callbacks: list[Any] = []
        self._deadline = deadline
        self._code: grpc.StatusCode | None = None
        self._details = ""

    def invocation_metadata(self) -> list[tuple[str, str]]:
        return self._md

    def abort(self, code: grpc.StatusCode, details: str) -> None:
        raise HttpAbort(code, details)

    def set_code(self, code: grpc.StatusCode) -> None:
        self._code = code

    def set_details(self, details: str) -> None:
        self._details = details

    def time_remaining(self) -> float | None:
        """Seconds left before the ``Connect-Timeout-Ms`` deadline (None: no deadline)."""
        return None if self._deadline is None else max(0.0, self._deadline - time.monotonic())

    def expired(self) -> bool:
        """The ``Connect-Timeout-Ms`` deadline has passed."""
        return self._deadline is not None and time.monotonic() >= self._deadline

    def peer(self) -> str:
        return "http"

    def is_active(self) -> bool:
        """Not closed, before the deadline, and the client is still connected."""
        if not self._active or self.expired():
            return False
        return self._alive is None or self._alive()

    def add_callback(self, cb: Any) -> bool:
        self._callbacks.append(cb)
        return True

    def as_abort(self, exc: BaseException) -> HttpAbort:
        """What an exception escaping a servicer answers: the code set with ``set_code``
        (the generated base class does that for an unimplemented method), else INTERNAL."""
        if isinstance(exc, HttpAbort):
            return exc
        if self._code is not None and self._code is not grpc.StatusCode.OK:
            return HttpAbort(self._code, self._details or str(exc))
        return HttpAbort(grpc.StatusCode.INTERNAL, f"{type(exc).__name__}: {exc}")

    def close(self) -> None:
        self._active = False
        callbacks, self._callbacks = self._callbacks, []
        for cb in callbacks:
            try:
                cb()
            except Exception:  # a failing cleanup must not mask the response
                continue


def envelope(flags: int, payload: bytes) -> bytes:
    """One Connect envelope: flags byte, big-endian length, payload."""
    return struct.pack(">BI", flags, len(payload)) + payload


@dataclass(frozen=True, slots=True)
class Reply:
    """An HTTP answer: status, content type, the body chunks, and its length when it is known
    before sending (unary answers; None for a stream)."""

    status: int
    content_type: str
    chunks: Iterator[bytes]
    length: int | None = None


def _error(status: int, code: str, message: str) -> Reply:
    body = json.dumps({"code": code, "message": message}).encode()
    return Reply(status, "application/json", iter([body]), len(body))


def _header(headers: Mapping[str, str], name: str) -> str:
    for k, v in headers.items():
        if k.lower() == name:
            return v
    return ""


class BodyTooLarge(Exception):
    """A request body is larger than the limit, before or after decompression."""

    def __init__(self, limit: int) -> None:
        super().__init__(
            f"request body larger than {limit} bytes (after decompression); "
            "raise health.max_body if that is expected"
        )


def _gunzip(data: bytes, limit: int) -> bytes:
    """Every gzip member of ``data``; stops at ``limit`` bytes of output (a gzip bomb is
    never inflated in full)."""
    out = bytearray()
    rest = data
    while rest:
        d = zlib.decompressobj(wbits=31)
        out += d.decompress(rest, limit + 1 - len(out))
        if len(out) > limit:
            raise BodyTooLarge(limit)
        if not d.eof:
            raise ValueError("bad gzip body: truncated")
        rest = d.unused_data
    return bytes(out)


def _decompress(data: bytes, encoding: str, limit: int = DEFAULT_MAX_BODY) -> bytes:
    enc = encoding.strip().lower()
    if enc in ("", "identity"):
        return data
    if enc == "gzip":
        try:
            return _gunzip(data, limit)
        except zlib.error as exc:
            raise ValueError(f"bad gzip body: {exc}") from None
    raise LookupError(f"unsupported compression {encoding!r} (use gzip or identity)")


def _deadline(headers: Mapping[str, str]) -> float | None:
    """The call's deadline from ``Connect-Timeout-Ms`` (None: none); ``ValueError`` when the
    header is not 1 to 10 digits (the Connect protocol's limit)."""
    text = _header(headers, "connect-timeout-ms").strip()
    if not text:
        return None
    if not (text.isascii() and text.isdigit()) or len(text) > 10:
        raise ValueError(
            "Connect-Timeout-Ms: must be a positive integer of at most 10 digits (milliseconds)"
        )
    return time.monotonic() + int(text) / 1000


def _allowed(streaming: bool) -> str:
    names = [c for c, codec in CODECS.items() if codec.streaming == streaming]
    return " or ".join(names)


def method_of(servicers: Mapping[str, Any], path: str) -> Any:
    """The servicer method ``POST path`` calls (None: no such RPC)."""
    _, _, rest = path.partition("/")
    service, _, method = rest.partition("/")
    servicer = servicers.get(service)
    return getattr(servicer, method, None) if servicer is not None and method else None


def handle(
    servicers: Mapping[str, Any],
    path: str,
    headers: Mapping[str, str],
    body: bytes,
    *,
    max_body: int = DEFAULT_MAX_BODY,
    alive: Callable[[], bool] | None = None,
) -> Reply:
    """The answer to ``POST /<service>/<method>`` (see the module docstring); a body that
    inflates past ``max_body`` bytes is refused (413) without inflating the rest. ``alive``
    tells whether the client is still connected (a stream ends when it left)."""
    _, _, rest = path.partition("/")
    service, _, method = rest.partition("/")
    module = _MODULES.get(service)
    servicer = servicers.get(service)
    desc = module.DESCRIPTOR.services_by_name.get(service.rsplit(".", 1)[-1]) if module else None
    mdesc = desc.methods_by_name.get(method) if desc is not None else None
    if servicer is None or mdesc is None or module is None:
        return _error(404, "unimplemented", f"no RPC {path!r}: use /<service>/<method>")
    streaming = bool(mdesc.server_streaming)
    ctype = _header(headers, "content-type").split(";")[0].strip().lower()
    codec = CODECS.get(ctype)
    if codec is None or codec.streaming != streaming:
        kind = "server-streaming" if streaming else "unary"
        return _error(
            415, "invalid_argument", f"{method} is {kind}: send Content-Type {_allowed(streaming)}"
        )
    request_cls = getattr(module, mdesc.input_type.name)
    fn: Callable[..., Any] = getattr(servicer, method)
    try:
        deadline = _deadline(headers)
    except ValueError as exc:
        return _error(400, "invalid_argument", str(exc))
    ctx = HttpContext(headers, deadline, alive)
    if streaming:
        return Reply(
            200,
            codec.content_type,
            _stream(
                fn,
                ctx,
                codec,
                request_cls=request_cls,
                headers=headers,
                body=body,
                max_body=max_body,
            ),
        )
    try:
        raw = _decompress(body, _header(headers, "content-encoding"), max_body)
        request = codec.decode(raw, request_cls)
    except BodyTooLarge as exc:
        return _error(413, "resource_exhausted", str(exc))
    except LookupError as exc:
        return _error(HTTP_STATUS["unimplemented"], "unimplemented", str(exc))
    except (json_format.ParseError, DecodeError, UnicodeDecodeError, ValueError) as exc:
        return _error(400, "invalid_argument", f"bad {codec.name} request: {exc}")
    try:
        resp = fn(request, ctx)
        data = codec.encode(resp)
    except Exception as exc:
        err = ctx.as_abort(exc)
        return _error(HTTP_STATUS.get(err.connect_code, 500), err.connect_code, err.details)
    finally:
        ctx.close()
    return Reply(200, codec.content_type, iter([data]), len(data))


def _read_request(
    codec: Codec, request_cls: type[Any], headers: Mapping[str, str], body: bytes, max_body: int
) -> Any:
    if len(body) < 5:
        raise ValueError("missing the enveloped request message")
    flags, n = struct.unpack(">BI", body[:5])
    payload = body[5 : 5 + n]
    if len(payload) != n:
        raise ValueError(f"truncated envelope: {len(payload)} of {n} bytes")
    if flags & COMPRESSED:
        encoding = _header(headers, "connect-content-encoding") or "gzip"
        payload = _decompress(payload, encoding, max_body)
    return codec.decode(payload, request_cls)


def _stream(
    fn: Callable[..., Any],
    ctx: HttpContext,
    codec: Codec,
    *,
    request_cls: type[Any],
    headers: Mapping[str, str],
    body: bytes,
    max_body: int,
) -> Iterator[bytes]:
    """The envelopes of a server-streaming call; every error goes in the end-of-stream
    message (the HTTP status is already 200)."""
    end: dict[str, Any] = {}
    try:
        try:
            request = _read_request(codec, request_cls, headers, body, max_body)
        except BodyTooLarge as exc:
            raise HttpAbort(grpc.StatusCode.RESOURCE_EXHAUSTED, str(exc)) from None
        except LookupError as exc:
            raise HttpAbort(grpc.StatusCode.UNIMPLEMENTED, str(exc)) from None
        except (json_format.ParseError, DecodeError, UnicodeDecodeError, ValueError) as exc:
            raise HttpAbort(
                grpc.StatusCode.INVALID_ARGUMENT, f"bad {codec.name} request: {exc}"
            ) from None
        for msg in fn(request, ctx):
            yield envelope(0, codec.encode(msg))
        if ctx.expired():
            raise HttpAbort(grpc.StatusCode.DEADLINE_EXCEEDED, "the call's deadline passed")
    except GeneratorExit:  # the client went away: end the call now
        ctx.close()
        raise
    except Exception as exc:
        err = ctx.as_abort(exc)
        end = {"error": {"code": err.connect_code, "message": err.details}}
    finally:
        ctx.close()
    yield envelope(END_STREAM, json.dumps({**end, "metadata": {}}).encode())
