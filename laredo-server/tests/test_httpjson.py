"""The services over plain HTTP + JSON (Connect protocol) on the health port."""

from __future__ import annotations

import http.client
import json
import struct
from pathlib import Path
from typing import Any

from .testkit import USERS, Harness


def post(
    port: int, path: str, body: Any, ctype: str = "application/json", **headers: str
) -> tuple[int, Any]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.request("POST", path, json.dumps(body), {"Content-Type": ctype, **headers})
    r = conn.getresponse()
    data = r.read()
    conn.close()
    return r.status, json.loads(data)


def test_unary_json(harness: Harness) -> None:
    port = harness.rt.listeners.health_port
    assert port
    code, st = post(port, "/laredo.v1.LaredoOAMService/GetStatus", {})
    assert code == 200 and st["state"] == "SERVICE_STATE_STREAMING" and st["ready"] is True
    code, got = post(
        port,
        "/laredo.v1.LaredoQueryService/GetRow",
        {"table": {"table": "public.orders"}, "primary_key": ['"eu"', "1"]},
    )
    assert code == 200 and got["found"] is True
    assert json.loads(got["row"]["json"])["total"] == {"$type": "decimal", "value": "9.50"}
    code, err = post(port, "/laredo.v1.LaredoOAMService/GetPipelineStatus", {"pipeline_id": "x"})
    assert code == 404 and err["code"] == "not_found" and "unknown pipeline" in err["message"]
    code, err = post(port, "/laredo.v1.LaredoOAMService/Nope", {})
    assert code == 404
    code, err = post(port, "/laredo.v1.LaredoOAMService/GetStatus", {"bogus": 1})
    assert code == 400 and err["code"] == "invalid_argument"
    code, err = post(port, "/laredo.v1.LaredoOAMService/GetStatus", {}, ctype="text/plain")
    assert code == 415


def test_admin_token_over_http(tmp_path: Path) -> None:
    h = Harness(tmp_path, token="tk").start()
    try:
        port = h.rt.listeners.health_port
        assert port
        code, err = post(port, "/laredo.v1.LaredoOAMService/PauseSync", {"source_id": "src"})
        assert code == 401 and err["code"] == "unauthenticated"
        code, resp = post(
            port,
            "/laredo.v1.LaredoOAMService/PauseSync",
            {"source_id": "src"},
            Authorization="Bearer tk",
        )
        assert code == 200 and resp["pipelines"][0]["state"] == "PIPELINE_STATE_PAUSED"
    finally:
        h.stop()


def test_server_streaming_with_connect_envelopes(harness: Harness) -> None:
    port = harness.rt.listeners.health_port
    assert port
    req = json.dumps({"table": {"table": "public.users"}, "replay_existing": True}).encode()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.request(
        "POST",
        "/laredo.v1.LaredoQueryService/Subscribe",
        struct.pack(">BI", 0, len(req)) + req,
        {"Content-Type": "application/connect+json"},
    )
    r = conn.getresponse()
    assert r.status == 200 and r.getheader("Content-Type") == "application/connect+json"
    events: list[Any] = []
    harness.source.insert(USERS, {"id": 500, "name": "h", "email": "h@x", "team": 0})
    while len(events) < 26:
        flags, n = struct.unpack(">BI", r.read(5))
        assert flags == 0
        events.extend(json.loads(r.read(n))["events"])
    assert {e["action"] for e in events[:25]} == {"INSERT"}
    assert json.loads(events[25]["new_values"]["json"])["id"] == 500
    conn.close()
    # a streaming error ends the stream with an end-of-stream frame carrying the error
    bad = json.dumps({"table": {"table": "public.nope"}}).encode()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.request(
        "POST",
        "/laredo.v1.LaredoQueryService/Subscribe",
        struct.pack(">BI", 0, len(bad)) + bad,
        {"Content-Type": "application/connect+json"},
    )
    r = conn.getresponse()
    flags, n = struct.unpack(">BI", r.read(5))
    end = json.loads(r.read(n))
    assert flags == 2 and end["error"]["code"] == "not_found"
    conn.close()
