"""A small Connect-protocol client (unary and server-streaming, JSON and binary codecs) and a
gRPC caller with the same shape, so tests can call one RPC every way and compare the answers.

``call(...)`` returns ``Answer(code, messages, error)``: ``code`` is the Connect code
(``"ok"`` on success), ``messages`` the decoded responses as dicts (one for a unary call, the
first ``limit`` for a stream).
"""

from __future__ import annotations

import gzip
import http.client
import json
import struct
from dataclasses import dataclass, field
from typing import Any

import grpc
from google.protobuf import json_format
from laredo_server._proto.laredo_proto.v1 import oam_pb2, query_pb2

MODULES = {"laredo.v1.LaredoOAMService": oam_pb2, "laredo.v1.LaredoQueryService": query_pb2}


@dataclass
class Answer:
    code: str
    messages: list[dict[str, Any]] = field(default_factory=list)
    error: str = ""
    http_status: int = 200


def method_desc(service: str, method: str) -> Any:
    module = MODULES[service]
    return module.DESCRIPTOR.services_by_name[service.rsplit(".", 1)[1]].methods_by_name[method]


def classes(service: str, method: str) -> tuple[type[Any], type[Any], bool]:
    module = MODULES[service]
    m = method_desc(service, method)
    return (
        getattr(module, m.input_type.name),
        getattr(module, m.output_type.name),
        bool(m.server_streaming),
    )


def to_dict(msg: Any) -> dict[str, Any]:
    out: dict[str, Any] = json_format.MessageToDict(msg, preserving_proto_field_name=True)
    return out


def connect_call(
    port: int,
    service: str,
    method: str,
    request: dict[str, Any],
    *,
    codec: str = "proto",
    limit: int = 1,
    headers: dict[str, str] | None = None,
    gzip_request: bool = False,
    timeout: float = 10.0,
) -> Answer:
    """Call ``service/method`` over Connect with the ``json`` or ``proto`` codec."""
    req_cls, resp_cls, streaming = classes(service, method)
    msg = json_format.ParseDict(request, req_cls())
    payload = (
        msg.SerializeToString() if codec == "proto" else json_format.MessageToJson(msg).encode()
    )
    hdrs = {"Connect-Protocol-Version": "1", **(headers or {})}
    if streaming:
        hdrs["Content-Type"] = f"application/connect+{codec}"
        flags = 0
        if gzip_request:
            payload, flags = gzip.compress(payload), 1
            hdrs["Connect-Content-Encoding"] = "gzip"
        body = struct.pack(">BI", flags, len(payload)) + payload
    else:
        hdrs["Content-Type"] = f"application/{codec}"
        body = payload
        if gzip_request:
            body = gzip.compress(body)
            hdrs["Content-Encoding"] = "gzip"
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("POST", f"/{service}/{method}", body, hdrs)
        r = conn.getresponse()
        if not streaming:
            data = r.read()
            if r.status != 200:
                err = json.loads(data)
                return Answer(err["code"], error=err.get("message", ""), http_status=r.status)
            assert r.getheader("Content-Type") == f"application/{codec}"
            return Answer("ok", [to_dict(decode(codec, data, resp_cls))])
        assert r.status == 200, r.read()
        assert r.getheader("Content-Type") == f"application/connect+{codec}"
        out: list[dict[str, Any]] = []
        while True:
            flags, n = struct.unpack(">BI", r.read(5))
            data = r.read(n)
            if flags & 2:
                end = json.loads(data)
                err = end.get("error")
                if err:
                    return Answer(err["code"], out, err.get("message", ""))
                return Answer("ok", out)
            out.append(to_dict(decode(codec, data, resp_cls)))
            if len(out) >= limit:
                return Answer("ok", out)
    finally:
        conn.close()


def decode(codec: str, data: bytes, cls: type[Any]) -> Any:
    if codec == "proto":
        return cls.FromString(data)
    return json_format.Parse(data.decode(), cls())


def grpc_call(
    channel: grpc.Channel,
    service: str,
    method: str,
    request: dict[str, Any],
    *,
    limit: int = 1,
    timeout: float = 10.0,
) -> Answer:
    """Call ``service/method`` over native gRPC."""
    req_cls, resp_cls, streaming = classes(service, method)
    msg = json_format.ParseDict(request, req_cls())
    path = f"/{service}/{method}"
    if not streaming:
        fn = channel.unary_unary(
            path,
            request_serializer=req_cls.SerializeToString,
            response_deserializer=resp_cls.FromString,
        )
        try:
            return Answer("ok", [to_dict(fn(msg, timeout=timeout))])
        except grpc.RpcError as exc:
            return Answer(exc.code().name.lower(), error=exc.details() or "")
    sfn = channel.unary_stream(
        path,
        request_serializer=req_cls.SerializeToString,
        response_deserializer=resp_cls.FromString,
    )
    call = sfn(msg, timeout=timeout)
    out: list[dict[str, Any]] = []
    try:
        for resp in call:
            out.append(to_dict(resp))
            if len(out) >= limit:
                break
        else:
            return Answer("ok", out)
    except grpc.RpcError as exc:
        return Answer(exc.code().name.lower(), out, exc.details() or "")
    finally:
        call.cancel()
    return Answer("ok", out)
