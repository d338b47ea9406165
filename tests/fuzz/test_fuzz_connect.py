"""The Connect gateway's request parser (``laredo_server.httpjson.handle``: content types,
envelopes, compression, JSON and protobuf bodies) answers every input with an HTTP reply or an
end-of-stream error, never an exception; a service only ever sees a decoded request."""

from __future__ import annotations

import gzip
import json
import struct
import time
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from laredo_server._proto.laredo_proto.v1 import oam_pb2, query_pb2
from laredo_server.httpjson import CODECS, HTTP_STATUS, handle

pytestmark = pytest.mark.fuzz

MODULES = {"laredo.v1.LaredoOAMService": oam_pb2, "laredo.v1.LaredoQueryService": query_pb2}


class Echo:
    """A servicer answering every method with an empty reply of its type."""

    def __init__(self, module: Any, service: str) -> None:
        self.desc = module.DESCRIPTOR.services_by_name[service.rsplit(".", 1)[-1]]
        self.module = module

    def __getattr__(self, method: str) -> Any:
        mdesc = self.desc.methods_by_name[method]
        out = getattr(self.module, mdesc.output_type.name)
        request_cls = getattr(self.module, mdesc.input_type.name)

        def unary(request: Any, context: Any) -> Any:
            assert isinstance(request, request_cls)
            return out()

        def stream(request: Any, context: Any) -> Any:
            assert isinstance(request, request_cls)
            yield out()

        return stream if mdesc.server_streaming else unary


SERVICERS = {name: Echo(m, name) for name, m in MODULES.items()}
METHODS = [
    f"/{name}/{m.name}"
    for name, mod in MODULES.items()
    for m in mod.DESCRIPTOR.services_by_name[name.rsplit(".", 1)[-1]].methods
]
json_bodies = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda c: (
        st.lists(c, max_size=3)
        | st.dictionaries(
            st.sampled_from(["table", "schema", "source_id", "limit", "filters", "snapshot_id"])
            | st.text(max_size=6),
            c,
            max_size=3,
        )
    ),
    max_leaves=10,
).map(lambda v: json.dumps(v).encode())


def _envelope(flags: int, payload: bytes, length: int | None = None) -> bytes:
    return struct.pack(">BI", flags, len(payload) if length is None else length) + payload


payloads = st.binary(max_size=40) | json_bodies
bodies = (
    payloads
    | st.builds(_envelope, st.integers(0, 255), payloads)
    | st.builds(_envelope, st.integers(0, 3), payloads, st.integers(0, 2**32 - 1))
    | st.builds(lambda p: _envelope(1, gzip.compress(p)), payloads)
    | st.builds(gzip.compress, payloads)
)
headers = st.fixed_dictionaries(
    {"Content-Type": st.sampled_from([*CODECS, "text/plain", "application/json; charset=utf-8"])},
    optional={
        "Content-Encoding": st.sampled_from(["gzip", "identity", "br", " GZIP "]),
        "Connect-Content-Encoding": st.sampled_from(["gzip", "identity", "zstd"]),
        "Connect-Timeout-Ms": st.sampled_from(["0", "1", "100000", "-5", "x", "9" * 5000])
        | st.text(max_size=12),
    },
)
STATUSES = {200, 404, 415, *HTTP_STATUS.values()}


@settings.get_profile("laredo-fuzz")
@given(st.sampled_from(METHODS) | st.text(max_size=20), headers, bodies)
@example(
    "/laredo.v1.LaredoQueryService/ListRows", {"Content-Type": "application/json"}, b"[" * 100_000
)
@example(
    "/laredo.v1.LaredoOAMService/WatchStatus",
    {"Content-Type": "application/connect+json"},
    _envelope(0, b"[" * 100_000),
)
def test_every_request_gets_a_reply(path: str, hdrs: dict[str, str], body: bytes) -> None:
    t0 = time.monotonic()
    reply = handle(SERVICERS, path, hdrs, body)
    assert reply.status in STATUSES
    chunks = list(reply.chunks)
    if reply.status != 200:
        err = json.loads(b"".join(chunks))
        assert err["code"] != "internal", err  # a bad request is never an internal error
    elif CODECS[hdrs["Content-Type"].split(";")[0]].streaming:
        end = chunks[-1]
        assert end[0] == 2  # the end-of-stream envelope
        error = json.loads(end[5:]).get("error")
        assert error is None or error["code"] != "internal", error
    assert time.monotonic() - t0 < 2


@settings.get_profile("laredo-fuzz")
@given(
    st.none() | st.text(max_size=80),
    st.none() | st.text(max_size=80) | st.just("null"),
    st.none() | st.text(max_size=80).map(lambda t: f"Bearer {t}"),
    st.lists(st.text(max_size=20), max_size=3).map(tuple),
)
@example("[::1", "http://[::1", "Bearer ", ("*",))
def test_the_header_checks_answer_every_host_origin_and_token(
    host: str | None, origin: str | None, auth: str | None, allowed: tuple[str, ...]
) -> None:
    """The checks before a body is read (``Host``/``Origin``, the token) never raise: a
    refusal is a message, and a reason never echoes the token."""
    from laredo.auth import Access
    from laredo_server.http_server import host_refusal

    why = host_refusal(host, origin, allowed)
    assert isinstance(why, str)
    metadata = [] if auth is None else [("authorization", auth)]
    for admin in (False, True):
        refusal = Access("adm1n-token", "r3ad-token", True).check(metadata, admin=admin)
        if refusal is not None:
            assert refusal.code in ("UNAUTHENTICATED", "PERMISSION_DENIED")
            assert "adm1n-token" not in refusal.message and "r3ad-token" not in refusal.message
