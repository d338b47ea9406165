"""Secure by default (issue 21, review findings H1-H3, M5-M7, M10, L9, L11), against
``laredo serve`` on a real PostgreSQL, called with curl, gRPC clients and the CLI:

* bound to 0.0.0.0 without a token, ``serve``, ``config validate`` and ``check`` refuse and
  name the keys to set; an empty token file is an error (H1, H3);
* with a token, gRPC and Connect calls without it get UNAUTHENTICATED / 401, before a body is
  read; probes and metrics stay open; ``/health/ready`` is a summary under ``protect_reads``
  (H1, L11);
* with mTLS on gRPC, a plain Connect call never reaches a service (H2);
* a gzip bomb or 50 idle streams leave ``/health/live`` and an authenticated GetStatus
  answering within a second (M6, M7);
* ``ResetSource`` on a running server re-baselines in place (M5); a slot that cannot advance
  is warned about (M10); ``allow_unauthenticated`` warns at start and in ``laredo status``.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import json
import socket
import threading
import time
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from laredo.testing import free_port
from laredo.testing.pki import Pki, make_pki
from laredo_server._proto.laredo_proto.v1 import oam_pb2 as oam
from laredo_server._proto.laredo_proto.v1 import oam_pb2_grpc

from .seckit import Served, curl, run_laredo
from .testkit import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.integration]

TOKEN = "s3c-admin-token"
OAM = "laredo.v1.LaredoOAMService"

BASE = """
sources {{
  pg {{
    type = postgresql
    connection = "{dsn}"
    slot_mode = stateful
    slot_name = {slot}
    publication {{ name = {publication}, create = true }}
    status_interval = 200ms
  }}
}}
tables = [ {{ source = pg, schema = public, table = accounts,
              targets = [ {{ type = indexed-memory }} ] }} ]
snapshot {{ store = local, store_config {{ path = "{snaps}" }} }}
observability {{ log_level = info }}
shutdown {{ grace_period = 10s }}
"""


@pytest.fixture
def pg(pg_database: Any, tmp_path: Path) -> Iterator[tuple[Any, str]]:
    """A database with 50 accounts, and the engine sections of a config reading it."""
    db = pg_database
    db.execute("CREATE TABLE accounts (id bigint PRIMARY KEY, email text NOT NULL)")
    db.execute("INSERT INTO accounts SELECT g, 'u' || g || '@x' FROM generate_series(1, 50) g")
    base = BASE.format(
        dsn=db.dsn,
        slot=db.slot_name,
        publication=db.publication,
        snaps=tmp_path / "snaps",
    )
    yield db, base
    with contextlib.suppress(Exception):
        db.execute(f"SELECT pg_drop_replication_slot('{db.slot_name}')")


def write(tmp: Path, text: str) -> Path:
    cfg = tmp / f"laredo-{time.monotonic_ns()}.conf"
    cfg.write_text(text)
    return cfg


def serve_off_loopback(base: str, tmp_path: Path, auth: str) -> tuple[Served, str]:
    """``laredo serve`` on ``base`` with gRPC and HTTP on 0.0.0.0 (free ports) and ``auth`` as
    the body of ``grpc.auth``, once ready: the process and the HTTP port's base URL."""
    cfg = write(
        tmp_path,
        base
        + f'grpc {{ host = "0.0.0.0", port = {free_port()}, auth {{ {auth} }} }}\n'
        + f'health {{ host = "0.0.0.0", port = {free_port()} }}\n',
    )
    s = Served(cfg)
    http = f"http://127.0.0.1:{s.health_port}"
    if not wait_for(lambda: curl(f"{http}/health/ready")[0] == 200, 60):
        s.stop()
        raise AssertionError(f"laredo serve did not get ready: {s.text()[-3000:]}")
    return s, http


def oam_stub(port: int, creds: grpc.ChannelCredentials | None = None) -> Any:
    addr = f"localhost:{port}"
    ch = grpc.secure_channel(addr, creds) if creds else grpc.insecure_channel(addr)
    return oam_pb2_grpc.LaredoOAMServiceStub(ch)  # type: ignore[no-untyped-call]


AUTH = [("authorization", f"Bearer {TOKEN}")]


def code_of(call: Any, request: Any, **kw: Any) -> grpc.StatusCode:
    try:
        call(request, timeout=10, **kw)
    except grpc.RpcError as exc:
        return exc.code()  # type: ignore[no-any-return]
    return grpc.StatusCode.OK


# -- H1, H3: fail closed ----------------------------------------------------------------------


def test_any_address_without_a_token_refuses_to_start_naming_the_keys(
    pg: tuple[Any, str], tmp_path: Path
) -> None:
    _, base = pg
    cfg = write(
        tmp_path,
        base
        + f'grpc {{ host = "0.0.0.0", port = {free_port()} }}\n'
        + f'health {{ host = "0.0.0.0", port = {free_port()} }}\n',
    )
    for args in (["serve", "--config"], ["config", "validate"], ["check", "--config"]):
        r = run_laredo(*args, str(cfg))
        assert r.returncode == 2, (args, r.stdout, r.stderr)
        out = r.stdout + r.stderr
        for key in (
            "grpc.auth.token",
            "grpc.auth.token_file",
            "grpc.auth.allow_unauthenticated",
            "health.connect = false",
        ):
            assert key in out, (args, out)
    # an empty token file is an error, not "no token" (it used to turn auth off silently)
    empty = tmp_path / "token"
    empty.write_text(" \n")
    cfg = write(
        tmp_path,
        base + f'grpc {{ port = {free_port()}, auth {{ token_file = "{empty}" }} }}\n',
    )
    r = run_laredo("config", "validate", str(cfg))
    assert r.returncode == 2 and "grpc.auth.token_file" in r.stderr and "is empty" in r.stderr


def test_fanout_targets_sharing_a_port_with_different_grpc_refuse_before_start(
    pg: tuple[Any, str], tmp_path: Path
) -> None:
    """M9 at config time: it used to surface only as a pipeline ERROR once serving."""
    _, base = pg
    port = free_port()
    fan = "{{ type = replication-fanout, id = {id}, grpc {{ port = {port}, {extra} }} }}"
    text = base.replace(
        "targets = [ { type = indexed-memory } ]",
        "targets = [ "
        + fan.format(id="fan-a", port=port, extra='auth { token = "tok-a" }')
        + ", "
        + fan.format(id="fan-b", port=port, extra='auth { token = "tok-b" }, max_clients = 2')
        + " ]",
    )
    assert "fan-b" in text
    cfg = write(
        tmp_path, text + f"grpc {{ port = {free_port()} }}\nhealth {{ port = {free_port()} }}\n"
    )
    for args in (["config", "validate"], ["check", "--config"], ["serve", "--config"]):
        r = run_laredo(*args, str(cfg))
        out = r.stdout + r.stderr
        assert r.returncode == 2, (args, out)
        assert "'fan-a'" in out and "'fan-b'" in out, (args, out)
        assert "grpc.auth.token, grpc.max_clients" in out, (args, out)
        assert "tok-a" not in out and "tok-b" not in out


# -- H1, L11, M6, M7: the token, before the body; probes open; limits ---------------------------


def _gzip_bomb(size: int) -> bytes:
    """``size`` zero bytes of JSON-ish padding, gzip-compressed (about size/1000 bytes)."""
    comp = zlib.compressobj(9, zlib.DEFLATED, 31)
    chunk = b" " * (1 << 20)
    out = [comp.compress(b"{")]
    for _ in range(size // len(chunk)):
        out.append(comp.compress(chunk))
    out.append(comp.compress(b"}"))
    out.append(comp.flush())
    return b"".join(out)


def _post_raw(port: int, path: str, body: bytes, headers: dict[str, str]) -> int:
    """The HTTP status of a POST sent over a plain socket (no client-side limits)."""
    head = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    with socket.create_connection(("127.0.0.1", port), timeout=60) as s:
        s.sendall(f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n{head}\r\n".encode())
        with contextlib.suppress(OSError):  # the server may answer and close before the end
            s.sendall(body)
        status = s.makefile("rb").readline().split()
    return int(status[1])


def _timed(fn: Any) -> float:
    start = time.monotonic()
    fn()
    return time.monotonic() - start


def test_token_guards_grpc_and_connect_and_no_request_starves_the_server(
    pg: tuple[Any, str], tmp_path: Path
) -> None:
    _, base = pg
    s, http = serve_off_loopback(base, tmp_path, f'token = "{TOKEN}", protect_reads = true')
    try:
        stub = oam_stub(s.grpc_port)
        reset = oam.ResetSourceRequest(source_id="pg", confirm=True, drop_publication=True)
        # gRPC: admin and read RPCs without the token, or with a wrong one
        assert code_of(stub.ResetSource, reset) == grpc.StatusCode.UNAUTHENTICATED
        assert code_of(stub.GetStatus, oam.GetStatusRequest()) == grpc.StatusCode.UNAUTHENTICATED
        bad = [("authorization", "Bearer nope")]
        assert (
            code_of(stub.DeleteSnapshot, oam.DeleteSnapshotRequest(snapshot_id="x"), metadata=bad)
            == grpc.StatusCode.UNAUTHENTICATED
        )
        assert code_of(stub.GetStatus, oam.GetStatusRequest(), metadata=AUTH) == grpc.StatusCode.OK
        # Connect on the HTTP port: the same token
        reset_json = '{"source_id":"pg","confirm":true,"drop_publication":true}'
        code, body = curl(f"{http}/{OAM}/ResetSource", data=reset_json)
        assert code == 401 and json.loads(body)["code"] == "unauthenticated"
        code, _ = curl(
            f"{http}/{OAM}/ResetSource", "-H", "Authorization: Bearer nope", data=reset_json
        )
        assert code == 401
        code, body = curl(
            f"{http}/{OAM}/GetStatus", "-H", f"Authorization: Bearer {TOKEN}", data="{}"
        )
        assert code == 200 and json.loads(body)["ready"] is True
        # probes and metrics stay open; /health/ready is a summary without the token
        assert curl(f"{http}/health/live")[0] == 200
        assert curl(f"{http}/metrics")[0] == 200
        code, body = curl(f"{http}/health/ready")
        pipes = json.loads(body)["pipelines"]
        assert code == 200 and pipes and all(set(p) == {"state", "ready"} for p in pipes.values())
        code, body = curl(f"{http}/health/ready", "-H", f"Authorization: Bearer {TOKEN}")
        assert all("rows" in p for p in json.loads(body)["pipelines"].values())

        # M6: a body announced larger than the cap is refused unread; without the token a
        # body is never read (both answer at once, the bytes never sent)
        huge = {"Content-Type": "application/json", "Content-Length": str(10**10)}
        assert _post_raw(s.health_port, f"/{OAM}/GetStatus", b"", huge) == 401
        authed = {**huge, "Authorization": f"Bearer {TOKEN}"}
        assert _post_raw(s.health_port, f"/{OAM}/GetStatus", b"", authed) == 413

        # M6: a gzip bomb (1 GiB inflated) with the token; probes and GetStatus keep answering
        bomb = _gzip_bomb(1 << 30)
        rss_before = s.peak_rss_kb()
        headers = {
            "Content-Type": "application/json",
            "Content-Encoding": "gzip",
            "Content-Length": str(len(bomb)),
            "Authorization": f"Bearer {TOKEN}",
        }
        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            bombs = [
                pool.submit(_post_raw, s.health_port, f"/{OAM}/GetStatus", bomb, headers)
                for _ in range(3)
            ]
            for _ in range(5):
                assert _timed(lambda: curl(f"{http}/health/live")) < 1.0
                assert (
                    _timed(lambda: stub.GetStatus(oam.GetStatusRequest(), metadata=AUTH, timeout=5))
                    < 1.0
                )
            assert [b.result(60) for b in bombs] == [413, 413, 413]
        # the body stops inflating at health.max_body (4 MiB): no GiB-sized allocation
        assert s.peak_rss_kb() - rss_before < 100_000

        # M7: 50 idle streams: those past grpc.max_streams are refused at once, and admin and
        # status calls still find a thread
        streams = [
            stub.WatchStatus(oam.WatchStatusRequest(), metadata=AUTH, timeout=60) for _ in range(50)
        ]
        refused = threading.Event()
        codes: list[grpc.StatusCode] = []

        def first(call: Any) -> None:
            try:
                next(call)
                codes.append(grpc.StatusCode.OK)
            except grpc.RpcError as exc:
                codes.append(exc.code())
                refused.set()

        for call in streams:
            threading.Thread(target=first, args=(call,), daemon=True).start()
        assert wait_for(lambda: len(codes) == 50, 20), len(codes)
        assert codes.count(grpc.StatusCode.RESOURCE_EXHAUSTED) == 42
        for _ in range(5):
            assert (
                _timed(lambda: stub.GetStatus(oam.GetStatusRequest(), metadata=AUTH, timeout=5))
                < 1.0
            )
            assert _timed(lambda: curl(f"{http}/health/live")) < 1.0
        assert code_of(stub.PauseSync, oam.PauseSyncRequest(source_id="pg"), metadata=AUTH) == (
            grpc.StatusCode.OK
        )
        for call in streams:
            call.cancel()
        # the slots come back once the streams end
        assert wait_for(
            lambda: (
                code_of(
                    lambda r, **kw: next(stub.WatchStatus(r, **kw)),
                    oam.WatchStatusRequest(),
                    metadata=AUTH,
                )
                == grpc.StatusCode.OK
            ),
            10,
        )
    finally:
        assert s.stop() == 0, s.text()[-3000:]
    assert TOKEN not in s.text()


# -- H2: mTLS on gRPC is not bypassed over HTTP ------------------------------------------------


def _tls_config(base: str, pki: Pki, health_tls: str) -> str:
    return (
        base
        + f'grpc {{ port = {free_port()}, tls {{ cert_file = "{pki.server_cert}", '
        + f'key_file = "{pki.server_key}", client_ca_file = "{pki.ca}" }} }}\n'
        + f"health {{ port = {free_port()} {health_tls} }}\n"
    )


def test_mtls_on_grpc_a_plain_connect_call_never_reaches_a_service(
    pg: tuple[Any, str], tmp_path: Path
) -> None:
    pytest.importorskip("cryptography")
    _, base = pg
    pki = make_pki(tmp_path)
    # the HTTP port would serve every RPC without a client certificate: refused
    cfg = write(tmp_path, _tls_config(base, pki, ""))
    r = run_laredo("serve", "--config", str(cfg))
    assert r.returncode == 2
    assert "health.tls" in r.stderr and "health.connect = false" in r.stderr

    tls = (
        f', tls {{ cert_file = "{pki.server_cert}", key_file = "{pki.server_key}", '
        f'client_ca_file = "{pki.ca}" }}'
    )
    s = Served(write(tmp_path, _tls_config(base, pki, tls)))
    try:
        https = f"https://localhost:{s.health_port}"
        ca = ["--cacert", str(pki.ca)]
        cert = ["--cert", str(pki.client_cert), "--key", str(pki.client_key)]
        # probes need no client certificate
        assert wait_for(lambda: curl(f"{https}/health/ready", *ca)[0] == 200, 60), s.text()[-2000:]
        # a snapshot to delete, over gRPC with the client certificate
        creds = grpc.ssl_channel_credentials(
            root_certificates=pki.ca.read_bytes(),
            private_key=pki.client_key.read_bytes(),
            certificate_chain=pki.client_cert.read_bytes(),
        )
        stub = oam_stub(s.grpc_port, creds)
        snap = stub.CreateSnapshot(oam.CreateSnapshotRequest(), timeout=30).snapshot_id
        delete = json.dumps({"snapshot_id": snap})
        # plain HTTP: no answer at all; HTTPS without a client certificate: 401
        assert curl(f"http://127.0.0.1:{s.health_port}/{OAM}/DeleteSnapshot", data=delete)[0] in (
            0,
            400,
        )
        code, body = curl(f"{https}/{OAM}/DeleteSnapshot", *ca, data=delete)
        assert code == 401 and "client certificate" in json.loads(body)["message"]
        listed = stub.ListSnapshots(oam.ListSnapshotsRequest(), timeout=10)
        assert [x.snapshot_id for x in listed.snapshots] == [snap]
        # with the client certificate the call goes through
        code, body = curl(f"{https}/{OAM}/DeleteSnapshot", *ca, *cert, data=delete)
        assert code == 200 and json.loads(body)["deleted"] is True
        # the CLI presents a client certificate (--tls-cert/--tls-key); without one it cannot
        addr = ["--address", f"localhost:{s.grpc_port}", "--tls-ca", str(pki.ca)]
        ok = run_laredo(
            *addr,
            "--tls-cert",
            str(pki.client_cert),
            "--tls-key",
            str(pki.client_key),
            "-o",
            "json",
            "status",
        )
        assert ok.returncode == 0 and json.loads(ok.stdout)["ready"] is True, ok.stderr
        assert run_laredo(*addr, "--timeout", "3", "status").returncode != 0
    finally:
        assert s.stop() == 0, s.text()[-3000:]


# -- M5, M10, allow_unauthenticated ------------------------------------------------------------


def _serve_ready(base: str, tmp_path: Path) -> Served:
    """``laredo serve`` on ``base`` (free ports), ready with its 50 accounts."""
    cfg = write(
        tmp_path,
        base + f"grpc {{ port = {free_port()} }}\n" + f"health {{ port = {free_port()} }}\n",
    )
    s = Served(cfg)
    try:
        http = f"http://127.0.0.1:{s.health_port}"
        assert wait_for(lambda: curl(f"{http}/health/ready")[0] == 200, 60), s.text()[-3000:]
        assert wait_for(lambda: _count(["--address", f"127.0.0.1:{s.grpc_port}"]) == 50, 30)
    except BaseException:
        s.stop()
        raise
    return s


def _count(addr: list[str]) -> int:
    r = run_laredo(*addr, "query", "count", "public.accounts")
    return int(r.stdout.strip() or -1)


def test_reset_source_on_a_running_server_rebaselines_in_place(
    pg: tuple[Any, str], tmp_path: Path
) -> None:
    """It used to end the reader silently: the new row never arrived, readiness stayed 200."""
    db, base = pg
    s = _serve_ready(base, tmp_path)
    try:
        http = f"http://127.0.0.1:{s.health_port}"
        addr = ["--address", f"127.0.0.1:{s.grpc_port}"]
        r = run_laredo(*addr, "reset-source", "pg", "-y")
        assert r.returncode == 0, r.stderr
        db.execute("INSERT INTO accounts VALUES (51, 'new@x')")
        # replication goes on after the reset: the new row arrives, and readiness is 200 again
        assert wait_for(lambda: _count(addr) == 51, 60), s.text()[-3000:]
        assert wait_for(lambda: curl(f"{http}/health/ready")[0] == 200, 30)
        db.execute("DELETE FROM accounts WHERE id = 1")
        assert wait_for(lambda: _count(addr) == 50, 60), s.text()[-3000:]
        assert "re-baselining in place" in s.text()
    finally:
        assert s.stop() == 0, s.text()[-3000:]


def test_reset_source_refuses_to_drop_a_publication_laredo_did_not_create(
    pg: tuple[Any, str], tmp_path: Path
) -> None:
    """M4 through the RPC and the CLI: refused with the reason, nothing dropped or stopped."""
    db, base = pg
    db.execute(f"CREATE PUBLICATION {db.publication} FOR TABLE accounts")  # not Laredo's
    s = _serve_ready(base, tmp_path)
    try:
        http = f"http://127.0.0.1:{s.health_port}"
        addr = ["--address", f"127.0.0.1:{s.grpc_port}"]
        r = run_laredo(*addr, "reset-source", "pg", "--drop-publication", "-y")
        assert r.returncode != 0, r.stdout
        assert "FAILED_PRECONDITION" in r.stderr, r.stderr
        assert f"publication '{db.publication}': not dropped" in r.stderr, r.stderr
        assert "drop it by hand" in r.stderr
        # the RPC itself: FAILED_PRECONDITION with the reason
        with pytest.raises(grpc.RpcError) as err:
            oam_stub(s.grpc_port).ResetSource(
                oam.ResetSourceRequest(source_id="pg", confirm=True, drop_publication=True),
                timeout=30,
            )
        assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert "Laredo did not create it" in (err.value.details() or "")
        # nothing was dropped or stopped: the publication and slot stay, changes keep coming
        pubs = db.execute(f"SELECT 1 FROM pg_publication WHERE pubname = '{db.publication}'")
        slots = db.execute(f"SELECT 1 FROM pg_replication_slots WHERE slot_name = '{db.slot_name}'")
        assert pubs and slots
        db.execute("INSERT INTO accounts VALUES (51, 'new@x')")
        assert wait_for(lambda: _count(addr) == 51, 60), s.text()[-3000:]
        assert curl(f"{http}/health/ready")[0] == 200
        assert "re-baselining in place" not in s.text()
    finally:
        assert s.stop() == 0, s.text()[-3000:]


def test_an_open_listener_and_a_slot_that_never_advances_are_warned(
    pg: tuple[Any, str], tmp_path: Path
) -> None:
    _, base = pg
    cfg = write(
        tmp_path,
        base
        + f'grpc {{ host = "0.0.0.0", port = {free_port()}, '
        + "auth { allow_unauthenticated = true } }\n"
        + f"health {{ port = {free_port()} }}\n",
    )
    # M10: a stateful slot, an in-memory target and a store without a schedule
    r = run_laredo("check", "--config", str(cfg))
    assert "SLOT_NEVER_ADVANCES" in r.stdout and "snapshot.schedule" in r.stdout, r.stdout
    s = Served(cfg)
    try:
        http = f"http://127.0.0.1:{s.health_port}"
        assert wait_for(lambda: curl(f"{http}/health/ready")[0] == 200, 60), s.text()[-3000:]
        # the open listener is a WARNING at start, in GetStatus and in `laredo status`
        status = run_laredo("--address", f"127.0.0.1:{s.grpc_port}", "status")
        assert "WITHOUT authentication" in status.stdout, status.stdout
        assert "WARNING" in s.text() and "grpc.auth.allow_unauthenticated = true" in s.text()
        assert "SLOT_NEVER_ADVANCES" in s.text() and "snapshot.schedule" in s.text()
    finally:
        assert s.stop() == 0, s.text()[-3000:]
