"""Security rules of the server's listeners, in process on real sockets (the end-to-end tests
on PostgreSQL are in test_security.py): plugin services need the token (L9), the HTTP port's
body limits hold whatever the framing (M6), long calls are limited over Connect too (M7), and
the configuration rejects what would bypass client certificates (H2)."""

from __future__ import annotations

import contextlib
import gzip
import http.client
import json
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import laredo
import pytest
from laredo.errors import ConfigError
from laredo_server.config import load_string
from laredo_server.httpjson import envelope

from .testkit import Harness, wait_for

TOKEN = "unit-token"
OAM = "laredo.v1.LaredoOAMService"


class EchoPlugin:
    """A plugin adding the service ``test.Echo`` through ``laredo_register_services``."""

    @laredo.hookimpl
    def laredo_register_services(self, server: Any) -> None:
        handler = grpc.method_handlers_generic_handler(
            "test.Echo",
            {"Ping": grpc.unary_unary_rpc_method_handler(lambda req, _ctx: req)},
        )
        server.add_generic_rpc_handlers((handler,))


@pytest.fixture
def secured(tmp_path: Path) -> Iterator[Harness]:
    pm = laredo.get_plugin_manager()
    plugin = EchoPlugin()
    pm.register(plugin, name="echo-plugin")
    h = Harness(tmp_path, token=TOKEN).start()
    try:
        yield h
    finally:
        h.stop()
        pm.unregister(plugin)


def test_plugin_services_need_the_token(secured: Harness) -> None:
    ping = secured.channel.unary_unary("/test.Echo/Ping")
    with pytest.raises(grpc.RpcError) as ei:
        ping(b"hi", timeout=5)
    assert ei.value.code() == grpc.StatusCode.UNAUTHENTICATED
    with pytest.raises(grpc.RpcError) as ei:
        ping(b"hi", timeout=5, metadata=[("authorization", "Bearer nope")])
    assert ei.value.code() == grpc.StatusCode.UNAUTHENTICATED
    assert ping(b"hi", timeout=5, metadata=[("authorization", f"Bearer {TOKEN}")]) == b"hi"


def _post(port: int, path: str, body: bytes, headers: dict[str, str]) -> tuple[int, Any]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("POST", path, body=body, headers=headers)
        resp = conn.getresponse()
        data = resp.read()
        return resp.status, json.loads(data) if data.startswith(b"{") else data
    finally:
        conn.close()


AUTH = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}


def test_bodies_past_the_cap_are_refused_whatever_the_framing(secured: Harness) -> None:
    port = secured.rt.listeners.health_port
    assert port
    status = f"/{OAM}/GetStatus"
    # gzip: 64 MiB inflated from ~64 kB
    bomb = gzip.compress(b"{" + b" " * (64 << 20) + b"}")
    code, body = _post(port, status, bomb, {**AUTH, "Content-Encoding": "gzip"})
    assert code == 413 and body["code"] == "resource_exhausted"
    # chunked: refused as soon as the chunks pass the cap (6.4 MiB offered)
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        head = "".join(f"{k}: {v}\r\n" for k, v in AUTH.items())
        te = "Transfer-Encoding: chunked"
        sock.sendall(f"POST {status} HTTP/1.1\r\nHost: 127.0.0.1\r\n{te}\r\n{head}\r\n".encode())
        with contextlib.suppress(OSError):  # the server answers and closes before the end
            for _ in range(100):
                sock.sendall(b"10000\r\n" + b"x" * 65536 + b"\r\n")
        assert sock.makefile("rb").readline().split()[1] == b"413"
    # a small gzip body and a small chunked body still work
    code, body = _post(port, status, gzip.compress(b"{}"), {**AUTH, "Content-Encoding": "gzip"})
    assert code == 200 and "state" in body
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.request("POST", status, body=iter([b"{", b"}"]), headers=AUTH, encode_chunked=True)
    assert conn.getresponse().status == 200
    conn.close()
    # a stream's compressed envelope is capped too
    payload = envelope(1, gzip.compress(b"{" + b" " * (64 << 20) + b"}"))
    code, body = _post(
        port,
        f"/{OAM}/WatchStatus",
        payload,
        {**AUTH, "Content-Type": "application/connect+json"},
    )
    assert code == 200 and b"resource_exhausted" in body


def test_without_the_token_the_body_is_never_read(secured: Harness) -> None:
    port = secured.rt.listeners.health_port
    assert port
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(
            f"POST /{OAM}/ReloadAll HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            "Content-Type: application/json\r\n"
            "Content-Length: 1000000\r\n\r\n".encode()
        )
        # answered at once although none of the announced body was sent
        assert s.makefile("rb").readline().split()[1] == b"401"


def test_connect_streams_count_against_max_streams(tmp_path: Path) -> None:
    h = Harness(tmp_path, max_streams=2).start()
    port = h.rt.listeners.health_port
    assert port
    socks = []
    try:
        req = envelope(0, b"{}")
        for _ in range(2):
            s = socket.create_connection(("127.0.0.1", port), timeout=5)
            s.sendall(
                f"POST /{OAM}/WatchStatus HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                "Content-Type: application/connect+json\r\n"
                f"Content-Length: {len(req)}\r\n\r\n".encode()
                + req
            )
            got = b""
            while b"STATE_" not in got:  # the first event: the stream holds its slot
                got += s.recv(4096)
            assert got.startswith(b"HTTP/1.0 200")
            socks.append(s)

        def refused() -> bool:
            code, body = _post(port, f"/{OAM}/WatchStatus", req, short)
            return code == 200 and b"resource_exhausted" in body and b"max_streams" in body

        short = {"Content-Type": "application/connect+json", "Connect-Timeout-Ms": "300"}
        assert wait_for(refused, 5)
        # a client that leaves gives its slot back: the next stream runs to its deadline
        socks.pop().close()
        assert wait_for(lambda: not refused(), 5)
    finally:
        for s in socks:
            with contextlib.suppress(OSError):
                s.close()
        h.stop()


def test_client_certificates_on_grpc_cannot_be_bypassed_over_http(tmp_path: Path) -> None:
    for name in ("s.crt", "s.key", "ca.crt"):
        (tmp_path / name).write_text("x")
    tls = (
        f'tls {{ cert_file = "{tmp_path}/s.crt", key_file = "{tmp_path}/s.key", '
        f'client_ca_file = "{tmp_path}/ca.crt" }}'
    )
    base = (
        'sources { src { type = postgresql, connection = "host=db" } }\n'
        "tables = [ { source = src, table = t, targets = [ { type = indexed-memory } ] } ]\n"
        f"grpc {{ port = 4101, {tls} }}\n"
    )
    with pytest.raises(ConfigError) as ei:
        load_string(base, env={})
    assert "health.tls" in str(ei.value) and "health.connect = false" in str(ei.value)
    assert load_string(base + "health { connect = false }", env={}).model is not None
    assert load_string(base + f"health {{ {tls} }}", env={}).model is not None
    # the health port without its own client CA does not count
    server_only = f'tls {{ cert_file = "{tmp_path}/s.crt", key_file = "{tmp_path}/s.key" }}'
    with pytest.raises(ConfigError):
        load_string(base + f"health {{ {server_only} }}", env={})


def test_max_workers_must_exceed_max_streams() -> None:
    conf = (
        'sources { src { type = postgresql, connection = "host=db" } }\n'
        "tables = [ { source = src, table = t, targets = [ { type = indexed-memory } ] } ]\n"
        "grpc { port = 4101, max_workers = 8, max_streams = 8 }\n"
    )
    with pytest.raises(ConfigError, match=r"grpc\.max_workers: 8 must be more than"):
        load_string(conf, env={})


def test_error_text_goes_out_masked(tmp_path: Path) -> None:
    """A source error that embeds a password (a third-party source may not mask it) is masked
    in /health/ready and GetStatus (L14)."""
    from laredo_server._proto.laredo_proto.v1 import oam_pb2, oam_pb2_grpc

    h = Harness(tmp_path).start()
    try:
        h.source.fail_stream(RuntimeError("lost postgresql://app:hunter2@db/app?sslpassword=k3y"))
        port = h.rt.listeners.health_port
        assert wait_for(lambda: not h.rt.is_ready(), 10)
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        conn.request("GET", "/health/ready")
        resp = conn.getresponse()
        body = resp.read().decode()
        conn.close()
        assert resp.status == 503 and "postgresql://app:***@db/app" in body
        stub = oam_pb2_grpc.LaredoOAMServiceStub(h.channel)  # type: ignore[no-untyped-call]
        st = stub.GetStatus(oam_pb2.GetStatusRequest(), timeout=5)
        text = str(st)
        assert "app:***@db" in text
        for secret in ("hunter2", "k3y"):
            assert secret not in body and secret not in text
    finally:
        h.stop()


def test_an_open_fanout_port_is_a_security_warning_in_status(quicktest_plugin: None) -> None:
    """A fan-out port serving without a token shows in GetStatus / ``laredo status`` like the
    server's own listeners (once per port), through the plugin-neutral listener claims."""
    from laredo_server.serve import runtime_from_config

    def warnings(auth: str) -> list[str]:
        fan = (
            "{ type = replication-fanout, "
            f'grpc {{ host = "0.0.0.0", port = 4777, auth {{ {auth} }} }} }}'
        )
        loaded = load_string(
            "sources { src { type = quicktest } }\n"
            f"tables = [ {{ source = src, table = users, targets = [ {fan} ] }},\n"
            f"           {{ source = src, table = orders, targets = [ {fan} ] }} ]\n"
            "grpc { port = 0 }\nhealth { port = 0 }\n",
            env={},
        )
        assert loaded.model is not None
        return runtime_from_config(loaded.model).security_warnings

    [open_port] = warnings("allow_unauthenticated = true")
    assert open_port.startswith("tables.0.targets.0 (pipeline 'src:public.users:replication")
    assert "0.0.0.0:4777 accepts calls WITHOUT authentication" in open_port
    assert "grpc.auth.allow_unauthenticated = true" in open_port
    assert warnings(f'token = "{TOKEN}"') == []


def test_object_store_credentials_are_masked_everywhere_error_text_goes(tmp_path: Path) -> None:
    """N2: a source error that embeds object-store options (a dict repr, as delta-rs errors
    did) is masked in /health/ready, GetStatus and GetSourceInfo; the delta archive's own
    error text masks them at the source."""
    from laredo_server._proto.laredo_proto.v1 import oam_pb2, oam_pb2_grpc

    secrets = {
        "azure_storage_account_key": "AZ-ACCOUNT-KEY-SECRET==",
        "google_service_account_key": '{"private_key": "GCP-PRIVATE-KEY"}',
    }
    opts = {"azure_storage_account_name": "acct", **secrets}
    h = Harness(tmp_path).start()
    try:
        h.source.fail_stream(RuntimeError(f"cannot open az://c/t: storage_options {opts!r}"))
        assert wait_for(lambda: not h.rt.is_ready(), 10)
        conn = http.client.HTTPConnection("127.0.0.1", h.rt.listeners.health_port, timeout=10)
        conn.request("GET", "/health/ready")
        body = conn.getresponse().read().decode()
        conn.close()
        stub = oam_pb2_grpc.LaredoOAMServiceStub(h.channel)  # type: ignore[no-untyped-call]
        status = str(stub.GetStatus(oam_pb2.GetStatusRequest(), timeout=5))
        info = str(stub.GetSourceInfo(oam_pb2.GetSourceInfoRequest(), timeout=5))
        for text in (body, status, info):
            assert "azure_storage_account_key" in text, text
            assert "AZ-ACCOUNT-KEY" not in text and "GCP-PRIVATE-KEY" not in text, text
    finally:
        h.stop()
    pytest.importorskip("deltalake")
    from laredo_target_delta.archive import ArchiveError, open_table

    with pytest.raises(ArchiveError) as err:
        open_table(str(tmp_path / "no-table"), opts)
    assert "storage_options" in str(err.value) and "acct" in str(err.value)
    assert "AZ-ACCOUNT-KEY" not in str(err.value) and "GCP-PRIVATE-KEY" not in str(err.value)


def _call(port: int, path: str, headers: dict[str, str]) -> tuple[int, dict[str, Any]]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request(
            "POST",
            path,
            body=b'{"source_id":"src"}' if path.endswith("PauseSync") else b"{}",
            headers={**headers, "Content-Type": "application/json"},
        )
        resp = conn.getresponse()
        return resp.status, json.loads(resp.read() or b"{}")
    finally:
        conn.close()


def test_dns_rebinding_a_foreign_host_or_origin_never_reaches_a_service(tmp_path: Path) -> None:
    """N4: a loopback server without a token (the default, and quickstart) refuses a Connect
    call naming a Host it does not know, or sent from a page of another origin."""
    from laredo_server.http_server import HttpFrontend, HttpLimits
    from laredo_server.services import make_servicers

    h = Harness(tmp_path).start()
    named = HttpFrontend(
        h.rt, make_servicers(h.rt), limits=HttpLimits(allowed_hosts=("laredo.internal",))
    )
    port = h.rt.listeners.health_port or 0
    try:
        pause = f"/{OAM}/PauseSync"
        code, body = _call(port, pause, {"Host": "attacker.example:8080"})
        assert code == 403 and body["code"] == "permission_denied"
        assert "health.allowed_hosts" in body["message"] and "attacker.example" in body["message"]
        code, body = _call(
            port, pause, {"Host": f"127.0.0.1:{port}", "Origin": "http://attacker.example:8080"}
        )
        assert code == 403 and "Origin" in body["message"]
        assert [p.state.value for p in h.rt.engine.pipelines()] == ["STREAMING", "STREAMING"]
        # IP literals, localhost and a same-origin page go through
        status = f"/{OAM}/GetStatus"
        assert _call(port, status, {"Host": f"127.0.0.1:{port}"})[0] == 200
        assert _call(port, status, {"Host": f"localhost:{port}"})[0] == 200
        same = {"Host": f"localhost:{port}", "Origin": f"http://localhost:{port}"}
        assert _call(port, status, same)[0] == 200
        # health.allowed_hosts admits a configured name
        h.rt.listeners.health_port = None
        named.start()
        other = h.rt.listeners.health_port or 0
        assert _call(other, status, {"Host": f"laredo.internal:{other}"})[0] == 200
        assert _call(other, status, {"Host": f"attacker.example:{other}"})[0] == 403
    finally:
        named.close()
        h.stop()


def test_a_network_include_is_refused_before_anything_is_fetched(tmp_path: Path) -> None:
    """L2: ``include url(...)`` would fetch configuration at every load and reload."""
    from laredo_server.config import load_config

    inner = tmp_path / "inner.conf"
    inner.write_text('include required(url("http://127.0.0.1:9/evil.conf"))\n')
    main = tmp_path / "laredo.conf"
    main.write_text('include "inner.conf"\nsources {}\ntables = []\n')
    with pytest.raises(ConfigError) as err:
        load_config(main, env={})
    assert f"{inner}:1: include url(...) is not allowed" in str(err.value)


def test_every_built_in_rpc_declares_its_access() -> None:
    """The gRPC token interceptor and the Connect gateway read ``@rpc(admin=...)``; a method
    without it would fall back to admin-only, so each one declares it."""
    from laredo_server._proto.laredo_proto.v1 import oam_pb2, query_pb2
    from laredo_server.services import OamService, QueryService

    for servicer, module, name in (
        (OamService, oam_pb2, "LaredoOAMService"),
        (QueryService, query_pb2, "LaredoQueryService"),
    ):
        for method in module.DESCRIPTOR.services_by_name[name].methods:
            assert hasattr(getattr(servicer, method.name), "laredo_admin"), (name, method.name)
