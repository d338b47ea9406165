"""Reads need a token off loopback (round-4 review, H1 residual), against ``laredo serve`` on a
real PostgreSQL bound to 0.0.0.0 (called over 127.0.0.1, as an outside client would):

* with a token and no ``protect_reads``, GetRow, ListRows and GetStatus over gRPC and Connect
  are refused without a token or with a wrong one;
* the read token (``auth.read_token_file``) answers them, the status page's GetStatus and
  ``laredo status`` included, and is refused on admin RPCs;
* ``protect_reads = false`` off loopback is a WARNING at start and in GetStatus.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import grpc
import pytest
from laredo_server._proto.laredo_proto.v1 import oam_pb2 as oam
from laredo_server._proto.laredo_proto.v1 import query_pb2 as q
from laredo_server._proto.laredo_proto.v1 import query_pb2_grpc
from laredo_server.config import load_string
from laredo_server.serve import runtime_from_config

from .seckit import curl, run_laredo
from .test_security import OAM, TOKEN, code_of, oam_stub, pg, serve_off_loopback

__all__ = ["pg"]

pytestmark = [pytest.mark.e2e, pytest.mark.integration]

READ_TOKEN = "r3ad-only-token"
QUERY = "laredo.v1.LaredoQueryService"
TABLE = q.TableRef(schema="public", table="accounts")


def _bearer(token: str) -> list[tuple[str, str]]:
    return [("authorization", f"Bearer {token}")]


def test_off_loopback_with_a_token_reads_need_the_admin_or_read_token(
    pg: tuple[Any, str], tmp_path: Path
) -> None:
    _, base = pg
    read_file = tmp_path / "read-token"
    read_file.write_text(READ_TOKEN + "\n")
    auth = f'token = "{TOKEN}", read_token_file = "{read_file}"'
    s, http = serve_off_loopback(base, tmp_path, auth)
    try:
        stub = oam_stub(s.grpc_port)
        query = query_pb2_grpc.LaredoQueryServiceStub(  # type: ignore[no-untyped-call]
            grpc.insecure_channel(f"127.0.0.1:{s.grpc_port}")
        )
        get_row = q.GetRowRequest(table=TABLE, primary_key=["7"])
        list_rows = q.ListRowsRequest(table=TABLE, page_size=5)
        reads = [
            (query.GetRow, get_row),
            (query.ListRows, list_rows),
            (stub.GetStatus, oam.GetStatusRequest()),
        ]
        unauth = grpc.StatusCode.UNAUTHENTICATED
        # gRPC: no token, a wrong token: refused; the read and the admin token: answered
        for call, req in reads:
            assert code_of(call, req) == unauth, call
            assert code_of(call, req, metadata=_bearer("nope")) == unauth, call
            assert code_of(call, req, metadata=_bearer(READ_TOKEN)) == grpc.StatusCode.OK
            assert code_of(call, req, metadata=_bearer(TOKEN)) == grpc.StatusCode.OK
        row = query.GetRow(get_row, metadata=_bearer(READ_TOKEN), timeout=10)
        assert "u7@x" in str(row)
        # the read token is refused on admin RPCs (gRPC)
        pause = oam.PauseSyncRequest(source_id="pg")
        assert code_of(stub.PauseSync, pause, metadata=_bearer(READ_TOKEN)) == (
            grpc.StatusCode.PERMISSION_DENIED
        )
        # Connect on the HTTP port: the same rule
        ref = '{"schema":"public","table":"accounts"}'
        bodies = {
            f"{QUERY}/GetRow": f'{{"table":{ref},"primary_key":["7"]}}',
            f"{QUERY}/ListRows": f'{{"table":{ref},"page_size":5}}',
            f"{OAM}/GetStatus": "{}",
        }
        for path, body in bodies.items():
            code, text = curl(f"{http}/{path}", data=body)
            assert code == 401 and json.loads(text)["code"] == "unauthenticated", (path, text)
            code, _ = curl(f"{http}/{path}", "-H", "Authorization: Bearer nope", data=body)
            assert code == 401, path
            code, text = curl(
                f"{http}/{path}", "-H", f"Authorization: Bearer {READ_TOKEN}", data=body
            )
            assert code == 200, (path, text)
        code, text = curl(
            f"{http}/{OAM}/PauseSync",
            "-H",
            f"Authorization: Bearer {READ_TOKEN}",
            data='{"source_id":"pg"}',
        )
        assert code == 403 and json.loads(text)["code"] == "permission_denied", text
        # /health/ready: a summary without a token, the detail with the read token
        code, text = curl(f"{http}/health/ready")
        assert all(set(p) == {"state", "ready"} for p in json.loads(text)["pipelines"].values())
        _, text = curl(f"{http}/health/ready", "-H", f"Authorization: Bearer {READ_TOKEN}")
        assert all("rows" in p for p in json.loads(text)["pipelines"].values())
        # `laredo status` with the read token (what dashboards and the page use)
        addr = ["--address", f"127.0.0.1:{s.grpc_port}"]
        assert run_laredo(*addr, "--timeout", "5", "status").returncode != 0
        ok = run_laredo(*addr, "-o", "json", "status", env={"LAREDO_TOKEN": READ_TOKEN})
        assert ok.returncode == 0 and json.loads(ok.stdout)["ready"] is True, ok.stderr
    finally:
        assert s.stop() == 0, s.text()[-3000:]
    assert TOKEN not in s.text() and READ_TOKEN not in s.text()


def test_explicitly_open_reads_off_loopback_are_a_security_warning(
    quicktest_plugin: None,
) -> None:
    def runtime(grpc_block: str) -> Any:
        loaded = load_string(
            "sources { src { type = quicktest } }\n"
            "tables = [ { source = src, table = users,\n"
            "             targets = [ { type = indexed-memory } ] } ]\n"
            f"grpc {{ {grpc_block} }}\nhealth {{ port = 0 }}\n",
            env={},
        )
        assert loaded.model is not None
        return runtime_from_config(loaded.model)

    # the default off loopback with a token: reads protected, no warning
    rt = runtime(f'host = "0.0.0.0", port = 4999, auth {{ token = "{TOKEN}" }}')
    assert rt.protect_reads is True and rt.security_warnings == []
    # explicitly open: a warning (logged at start, in GetStatus and `laredo status`)
    rt = runtime(
        f'host = "0.0.0.0", port = 4999, auth {{ token = "{TOKEN}", protect_reads = false }}'
    )
    (warning,) = rt.security_warnings
    assert rt.protect_reads is False
    assert "WITHOUT a token (grpc.auth.protect_reads = false)" in warning
    assert "0.0.0.0" in warning and TOKEN not in warning
    # on loopback, open reads are the default and no warning
    rt = runtime(f'port = 4999, auth {{ token = "{TOKEN}" }}')
    assert rt.protect_reads is False and rt.security_warnings == []


def test_a_token_without_tls_off_loopback_is_warned(quicktest_plugin: None) -> None:
    """N16: the token (admin or read, typed into the status page) travels in clear over a
    plain listener off loopback: a WARNING at start names the listener and the fix."""
    from laredo_server.config import cleartext_token_warnings

    def warnings(extra: str) -> list[str]:
        loaded = load_string(
            "sources { src { type = quicktest } }\n"
            "tables = [ { source = src, table = users,\n"
            "             targets = [ { type = indexed-memory } ] } ]\n" + extra,
            env={},
        )
        assert loaded.model is not None
        return cleartext_token_warnings(loaded.model)

    both = warnings(
        f'grpc {{ host = "0.0.0.0", port = 4999, auth {{ token = "{TOKEN}" }} }}\n'
        'health { host = "0.0.0.0", port = 8999 }\n'
    )
    assert len(both) == 2 and "no grpc.tls" in both[0] and "no health.tls" in both[1]
    assert all("travel in clear" in w and TOKEN not in w for w in both)
    assert warnings(f'grpc {{ port = 4999, auth {{ token = "{TOKEN}" }} }}\n') == []
