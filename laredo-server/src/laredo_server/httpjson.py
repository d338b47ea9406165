"""The OAM and Query services over plain HTTP + JSON (Connect protocol), for ``curl`` users.

Served on the health/metrics port:

    curl -s -X POST localhost:8080/laredo.v1.LaredoOAMService/GetStatus \\
         -H 'Content-Type: application/json' -d '{}'

Unary RPCs take and return the protobuf JSON mapping (``application/json``); server-streaming
RPCs (WatchStatus, Subscribe) use Connect's enveloped ``application/connect+json`` frames
(5-byte header: flags, big-endian length; the last frame has flag 0x02 and carries the end of
stream, with ``error`` on failure). Errors of unary calls are ``{"code": "not_found",
"message": ...}`` with the matching HTTP status. The admin token goes in the
``Authorization: Bearer <token>`` header, exactly as with gRPC.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterator, Mapping
from typing import Any

import grpc
from google.protobuf import json_format

from ._proto.laredo_proto.v1 import oam_pb2, query_pb2

__all__ = ["HttpAbort", "HttpContext", "handle"]

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

_MODULES = {
    "laredo.v1.LaredoOAMService": oam_pb2,
    "laredo.v1.LaredoQueryService": query_pb2,
}


class HttpAbort(Exception):
    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(details)
        self.code = code
        self.details = details

    @property
    def connect_code(self) -> str:
        return str(self.code.name).lower()


class HttpContext:
    """The subset of ``grpc.ServicerContext`` the services use."""

    def __init__(self, headers: Mapping[str, str]) -> None:
        self._md = [(k.lower(), v) for k, v in headers.items()]
        self._active = True
        self._callbacks: list[Any] = []

    def invocation_metadata(self) -> list[tuple[str, str]]:
        return self._md

    def abort(self, code: grpc.StatusCode, details: str) -> None:
        raise HttpAbort(code, details)

    def is_active(self) -> bool:
        return self._active

    def add_callback(self, cb: Any) -> bool:
        self._callbacks.append(cb)
        return True

    def close(self) -> None:
        self._active = False
        for cb in self._callbacks:
            try:
                cb()
            except Exception:  # a failing cleanup must not mask the response
                continue


def _envelope(flags: int, payload: bytes) -> bytes:
    return struct.pack(">BI", flags, len(payload)) + payload


def _to_json(msg: Any) -> str:
    return str(json_format.MessageToJson(msg, preserving_proto_field_name=True, indent=None))


def handle(
    servicers: Mapping[str, Any], path: str, headers: Mapping[str, str], body: bytes
) -> tuple[int, str, Iterator[bytes]]:
    """``(http status, content type, body chunks)`` for ``POST /<service>/<method>``."""
    _, _, rest = path.partition("/")
    service, _, method = rest.partition("/")
    module = _MODULES.get(service)
    servicer = servicers.get(service)
    desc = module.DESCRIPTOR.services_by_name.get(service.rsplit(".", 1)[-1]) if module else None
    mdesc = desc.methods_by_name.get(method) if desc is not None else None
    if servicer is None or mdesc is None or module is None:
        return _error(404, "not_found", f"no RPC {path!r}: use /<service>/<method>")
    streaming = bool(mdesc.server_streaming)
    ctype = headers.get("content-type", headers.get("Content-Type", "")).split(";")[0].strip()
    want = "application/connect+json" if streaming else "application/json"
    if ctype != want:
        return _error(415, "invalid_argument", f"send Content-Type: {want}")
    if streaming:
        if len(body) < 5:
            return _error(400, "invalid_argument", "missing the enveloped request message")
        _flags, n = struct.unpack(">BI", body[:5])
        body = body[5 : 5 + n]
    request_cls = getattr(module, mdesc.input_type.name)
    try:
        request = json_format.Parse(body.decode() or "{}", request_cls())
    except (json_format.ParseError, UnicodeDecodeError) as exc:
        return _error(400, "invalid_argument", f"bad request JSON: {exc}")
    ctx = HttpContext(headers)
    fn = getattr(servicer, method)
    if not streaming:
        try:
            resp = fn(request, ctx)
        except HttpAbort as exc:
            return _error(HTTP_STATUS.get(exc.connect_code, 500), exc.connect_code, exc.details)
        finally:
            ctx.close()
        return 200, "application/json", iter([_to_json(resp).encode()])

    def frames() -> Iterator[bytes]:
        end: dict[str, Any] = {}
        try:
            for msg in fn(request, ctx):
                yield _envelope(0, _to_json(msg).encode())
        except HttpAbort as exc:
            end = {"error": {"code": exc.connect_code, "message": exc.details}}
        except GeneratorExit:
            ctx.close()
            raise
        finally:
            ctx.close()
        yield _envelope(2, json.dumps(end).encode())

    # auth and argument errors surface as the first frame's end-of-stream error
    return 200, "application/connect+json", frames()


def _error(status: int, code: str, message: str) -> tuple[int, str, Iterator[bytes]]:
    return (
        status,
        "application/json",
        iter([json.dumps({"code": code, "message": message}).encode()]),
    )
