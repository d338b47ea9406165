"""Every RPC answers the same over native gRPC, Connect with JSON and Connect with binary
protobuf (unary and server-streaming), and the Connect rules for errors, envelopes,
compression and content types hold."""

from __future__ import annotations

import http.client
import json
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from laredo_server.httpjson import CODECS, HTTP_STATUS

from .connectkit import MODULES, Answer, connect_call, grpc_call, method_desc
from .testkit import Harness

OAM = "laredo.v1.LaredoOAMService"
QUERY = "laredo.v1.LaredoQueryService"
USERS_REF = {"table": "public.users"}

# One request per RPC: (service, method) -> request (protobuf JSON mapping). "$snapshot" is
# replaced with the id of a snapshot taken for the test.
REQUESTS: dict[tuple[str, str], dict[str, Any]] = {
    (OAM, "GetStatus"): {},
    (OAM, "GetTableStatus"): {"schema": "public", "table": "users"},
    (OAM, "GetPipelineStatus"): {"pipeline_id": "users"},
    (OAM, "WatchStatus"): {},
    (OAM, "CheckReady"): {"source": "src"},
    (OAM, "GetSourceInfo"): {},
    (OAM, "ReloadTable"): {"source_id": "src", "schema": "public", "table": "orders"},
    (OAM, "ReloadAll"): {"source_id": "src"},
    (OAM, "PauseSync"): {"source_id": "src"},
    (OAM, "ResumeSync"): {"source_id": "src"},
    (OAM, "ResetSource"): {"source_id": "src", "confirm": False},
    (OAM, "ListTables"): {},
    (OAM, "GetTableSchema"): {"schema": "public", "table": "orders"},
    (OAM, "CreateSnapshot"): {"user_meta_json": '{"by": "test"}'},
    (OAM, "ListSnapshots"): {"limit": 1},
    (OAM, "InspectSnapshot"): {"snapshot_id": "$snapshot"},
    (OAM, "RestoreSnapshot"): {"snapshot_id": "no-such-snapshot", "confirm": True},
    (OAM, "DeleteSnapshot"): {"snapshot_id": "no-such-snapshot"},
    (OAM, "PruneSnapshots"): {"keep": 100},
    (OAM, "ListDeadLetters"): {"pipeline_id": "users"},
    (OAM, "ReplayDeadLetters"): {"pipeline_id": "users"},
    (OAM, "PurgeDeadLetters"): {"pipeline_id": "users"},
    (OAM, "StartReplay"): {"snapshot_id": "no-such-snapshot"},
    (OAM, "GetReplayStatus"): {"replay_id": "no-such-replay"},
    (OAM, "StopReplay"): {"replay_id": "no-such-replay"},
    (OAM, "DrainReplication"): {},
    (OAM, "ReloadConfig"): {"dry_run": True},
    (OAM, "VerifyTable"): {"schema": "public", "table": "users", "timeout_seconds": 30},
    (OAM, "BackfillTable"): {"schema": "public", "table": "users", "wait_seconds": 30},
    (QUERY, "Lookup"): {"table": USERS_REF, "key_values": ['"u1@x"']},
    (QUERY, "LookupAll"): {"table": USERS_REF, "index_name": "by_team", "key_values": ["1"]},
    (QUERY, "GetRow"): {"table": {"table": "public.orders"}, "primary_key": ['"eu"', "1"]},
    (QUERY, "ListRows"): {"table": USERS_REF, "page_size": 5},
    (QUERY, "CountRows"): {"table": USERS_REF},
    (QUERY, "WaitForPosition"): {"source_id": "src", "position": "0", "timeout_ms": 100},
    (QUERY, "Subscribe"): {"table": USERS_REF, "replay_existing": True},
}

STREAM_MESSAGES = {"WatchStatus": 2, "Subscribe": 1}
"""Messages each stream sends at once (WatchStatus: the state of both pipelines; Subscribe:
the existing rows in one batch)."""

VOLATILE = frozenset(
    {
        "started_at",
        "last_change_at",
        "last_snapshot_at",
        "timestamp",
        "created_at",
        "written_at",
        "elapsed_seconds",
        "snapshot_id",
        "replay_id",
        "message",
        "lag_seconds",
    }
)
"""Fields that differ between two calls made one after the other."""


def stable(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: stable(v) for k, v in value.items() if k not in VOLATILE}
    if isinstance(value, list):
        return [stable(v) for v in value]
    return value


def all_rpcs() -> list[tuple[str, str]]:
    out = []
    for service, module in MODULES.items():
        desc = module.DESCRIPTOR.services_by_name[service.rsplit(".", 1)[1]]
        out += [(service, m.name) for m in desc.methods]
    return out


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Harness]:
    # streams are opened and dropped back to back here; a dropped stream frees its
    # grpc.max_streams slot only within 0.25 s, so allow more than the default 8 at once
    h = Harness(tmp_path_factory.mktemp("connect"), max_streams=64).start()
    yield h
    h.stop()


def test_the_matrix_covers_every_rpc() -> None:
    assert sorted(REQUESTS) == sorted(all_rpcs())


@pytest.mark.parametrize(("service", "method"), sorted(REQUESTS), ids=str)
def test_every_rpc_answers_alike_over_grpc_connect_json_and_connect_proto(
    server: Harness, service: str, method: str
) -> None:
    request = dict(REQUESTS[(service, method)])
    if "$snapshot" in request.values():
        snap = grpc_call(server.channel, OAM, "CreateSnapshot", {})
        assert snap.code == "ok", snap.error
        request = {
            k: snap.messages[0]["snapshot_id"] if v == "$snapshot" else v
            for k, v in request.items()
        }
    streaming = method_desc(service, method).server_streaming
    limit = STREAM_MESSAGES.get(method, 1)
    port = server.rt.listeners.health_port
    assert port
    answers: dict[str, Answer] = {
        "grpc": grpc_call(server.channel, service, method, request, limit=limit),
        "connect+json": connect_call(port, service, method, request, codec="json", limit=limit),
        "connect+proto": connect_call(port, service, method, request, codec="proto", limit=limit),
    }
    if method == "PauseSync":  # leave the source as the other tests expect it
        grpc_call(server.channel, OAM, "ResumeSync", {"source_id": "src"})
    codes = {k: a.code for k, a in answers.items()}
    assert len(set(codes.values())) == 1, codes
    bodies = {k: stable(a.messages) for k, a in answers.items()}
    assert bodies["connect+json"] == bodies["connect+proto"] == bodies["grpc"]
    errors = {k: a.error for k, a in answers.items()}
    assert len(set(errors.values())) == 1, errors
    if streaming:
        assert codes["grpc"] == "ok" and len(bodies["grpc"]) == limit
    for a in answers.values():  # an error is a Connect code with Connect's HTTP status
        assert a.code == "ok" or a.code in HTTP_STATUS
        if not streaming and a.code != "ok" and a.http_status != 200:
            assert a.http_status == HTTP_STATUS[a.code]


def test_gzip_requests_both_codecs(server: Harness) -> None:
    port = server.rt.listeners.health_port
    assert port
    for codec in ("json", "proto"):
        unary = connect_call(
            port, QUERY, "CountRows", {"table": USERS_REF}, codec=codec, gzip_request=True
        )
        assert unary.code == "ok" and unary.messages == [{"count": "25"}]
        stream = connect_call(
            port,
            QUERY,
            "Subscribe",
            {"table": USERS_REF, "replay_existing": True},
            codec=codec,
            gzip_request=True,
        )
        assert stream.code == "ok" and stream.messages[0]["events"][0]["action"] == "INSERT"


def raw_post(
    port: int, path: str, body: bytes, ctype: str, **headers: str
) -> tuple[int, str, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("POST", path, body, {"Content-Type": ctype, **headers})
        r = conn.getresponse()
        return r.status, r.getheader("Content-Type") or "", r.read()
    finally:
        conn.close()


def test_connect_protocol_edges(server: Harness) -> None:
    port = server.rt.listeners.health_port
    assert port
    status = f"/{OAM}/GetStatus"
    # a streaming content type on a unary RPC (and the reverse) is 415, naming what to send
    code, ctype, body = raw_post(port, status, b"", "application/connect+proto")
    assert code == 415 and ctype == "application/json"
    assert "application/json or application/proto" in json.loads(body)["message"]
    code, _, body = raw_post(port, f"/{QUERY}/Subscribe", b"{}", "application/json")
    assert (
        code == 415
        and "application/connect+json or application/connect+proto" in json.loads(body)["message"]
    )
    # an unknown procedure
    code, _, body = raw_post(port, f"/{OAM}/Nope", b"", "application/proto")
    assert code == 404 and json.loads(body)["code"] == "unimplemented"
    # a malformed binary body is invalid_argument, always answered as JSON
    code, ctype, body = raw_post(
        port, f"/{OAM}/GetPipelineStatus", b"\xff\xff\xff", "application/proto"
    )
    assert (
        code == 400
        and ctype == "application/json"
        and json.loads(body)["code"] == "invalid_argument"
    )
    # an unsupported compression is unimplemented
    code, _, body = raw_post(port, status, b"", "application/proto", **{"Content-Encoding": "br"})
    assert code == HTTP_STATUS["unimplemented"] and json.loads(body)["code"] == "unimplemented"
    # JSON with a charset parameter
    code, _, body = raw_post(port, status, b"{}", "application/json; charset=utf-8")
    assert code == 200 and json.loads(body)["ready"] is True
    # a broken envelope on a stream: HTTP 200, the error in the end-of-stream message
    code, ctype, body = raw_post(
        port, f"/{QUERY}/Subscribe", b"\x00\x00", "application/connect+proto"
    )
    assert code == 200 and ctype == "application/connect+proto"
    flags, n = struct.unpack(">BI", body[:5])
    assert flags == 2 and json.loads(body[5 : 5 + n])["error"]["code"] == "invalid_argument"
    # a stream that fails in the handler ends with the error in the end-of-stream message
    bad = connect_call(port, QUERY, "Subscribe", {"table": {"table": "public.nope"}}, codec="proto")
    assert bad.code == "not_found" and bad.messages == []
    assert sorted(CODECS) == [
        "application/connect+json",
        "application/connect+proto",
        "application/json",
        "application/proto",
    ]


def test_connect_timeout_is_the_calls_deadline(server: Harness) -> None:
    port = server.rt.listeners.health_port
    assert port
    # WaitForPosition waits at most until the deadline the client gives (here 200 ms of 30 s)
    ans = connect_call(
        port,
        QUERY,
        "WaitForPosition",
        {"source_id": "src", "position": "999999", "timeout_ms": 30_000},
        codec="proto",
        headers={"Connect-Timeout-Ms": "200"},
        timeout=5,
    )
    assert ans.code == "ok" and ans.messages[0].get("reached", False) is False


def test_admin_token_over_connect_proto(tmp_path: Path) -> None:
    h = Harness(tmp_path, token="tk").start()
    try:
        port = h.rt.listeners.health_port
        assert port
        denied = connect_call(port, OAM, "PauseSync", {"source_id": "src"}, codec="proto")
        assert denied.code == "unauthenticated" and denied.http_status == 401
        ok = connect_call(
            port,
            OAM,
            "PauseSync",
            {"source_id": "src"},
            codec="proto",
            headers={"Authorization": "Bearer tk"},
        )
        assert (
            ok.code == "ok" and ok.messages[0]["pipelines"][0]["state"] == "PIPELINE_STATE_PAUSED"
        )
        # gRPC says the same
        with grpc.insecure_channel(f"127.0.0.1:{h.rt.listeners.grpc_port}") as ch:
            assert grpc_call(ch, OAM, "PauseSync", {"source_id": "src"}).code == "unauthenticated"
    finally:
        h.stop()
