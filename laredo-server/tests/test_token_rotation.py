"""A token rotates without a restart: ``laredo serve`` (real PostgreSQL, real gRPC and Connect
clients) re-reads ``grpc.auth.token_file`` and ``read_token_file`` on a reload (SIGHUP and the
``ReloadConfig`` RPC); the new token works and the old one is refused on both listeners. A
token file that became empty or unreadable rejects the reload naming the key, never the token,
and the running token stays."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import grpc
import pytest
from laredo_server._proto.laredo_proto.v1 import oam_pb2 as oam
from laredo_server.config import load_string
from laredo_server.serve import runtime_from_config

from .seckit import curl
from .test_security import OAM, code_of, oam_stub, pg, serve_off_loopback
from .testkit import wait_for

__all__ = ["pg"]

pytestmark = [pytest.mark.e2e, pytest.mark.integration]

OK, UNAUTH = grpc.StatusCode.OK, grpc.StatusCode.UNAUTHENTICATED


def _bearer(token: str) -> list[tuple[str, str]]:
    return [("authorization", f"Bearer {token}")]


def _put(path: Path, token: str) -> None:
    path.write_text(token + "\n")
    path.chmod(0o600)


def _grpc_code(stub: Any, token: str, *, admin: bool) -> grpc.StatusCode:
    if admin:  # an admin RPC that changes nothing: a dry-run reload
        return code_of(
            stub.ReloadConfig, oam.ReloadConfigRequest(dry_run=True), metadata=_bearer(token)
        )
    return code_of(stub.GetStatus, oam.GetStatusRequest(), metadata=_bearer(token))


def _connect_code(http: str, token: str) -> int:
    return curl(f"{http}/{OAM}/GetStatus", "-H", f"Authorization: Bearer {token}", data="{}")[0]


def _reload(stub: Any, token: str) -> Any:
    return stub.ReloadConfig(oam.ReloadConfigRequest(), metadata=_bearer(token), timeout=30)


def test_token_files_are_re_read_on_reload(pg: tuple[Any, str], tmp_path: Path) -> None:
    _, base = pg
    admin_file, read_file = tmp_path / "admin-token", tmp_path / "read-token"
    _put(admin_file, "admin-one")
    _put(read_file, "read-one")
    auth = f'token_file = "{admin_file}", read_token_file = "{read_file}"'
    s, http = serve_off_loopback(base, tmp_path, auth)
    try:
        stub = oam_stub(s.grpc_port)
        assert _grpc_code(stub, "admin-one", admin=True) == OK
        assert _grpc_code(stub, "read-one", admin=False) == OK
        assert _connect_code(http, "admin-one") == 200

        # rotate both through the ReloadConfig RPC (called with the old admin token)
        _put(admin_file, "admin-two")
        _put(read_file, "read-two")
        answer = _reload(stub, "admin-one")
        assert answer.accepted, answer
        for old in ("admin-one", "read-one"):
            assert _grpc_code(stub, old, admin=False) == UNAUTH, old
            assert _connect_code(http, old) == 401, old
        assert _grpc_code(stub, "admin-one", admin=True) == UNAUTH
        assert _grpc_code(stub, "admin-two", admin=True) == OK
        assert _grpc_code(stub, "read-two", admin=False) == OK
        assert _grpc_code(stub, "read-two", admin=True) == grpc.StatusCode.PERMISSION_DENIED
        assert _connect_code(http, "admin-two") == 200
        assert _connect_code(http, "read-two") == 200

        # SIGHUP re-reads them too
        _put(admin_file, "admin-three")
        os.kill(s.proc.pid, signal.SIGHUP)
        assert wait_for(lambda: _grpc_code(stub, "admin-three", admin=True) == OK, 30)
        assert _grpc_code(stub, "admin-two", admin=True) == UNAUTH
        assert _connect_code(http, "admin-two") == 401

        # an empty or unreadable file: the reload is refused naming the key; the token stays
        admin_file.write_text("\n")
        answer = _reload(stub, "admin-three")
        assert not answer.accepted
        assert any("grpc.auth.token_file" in e and "is empty" in e for e in answer.errors)
        _put(admin_file, "admin-four")
        read_file.unlink()  # (chmod 0 does not stop root, who may run the tests)
        answer = _reload(stub, "admin-three")
        assert not answer.accepted
        assert any(
            "grpc.auth.read_token_file" in e and "cannot read" in e for e in answer.errors
        ), answer.errors
        text = str(answer) + s.text()
        assert "admin-four" not in text and "admin-three" not in text and "read-two" not in text
        assert _grpc_code(stub, "admin-three", admin=True) == OK
        assert _grpc_code(stub, "admin-four", admin=True) == UNAUTH
        assert _connect_code(http, "admin-three") == 200
        assert _grpc_code(stub, "read-two", admin=False) == OK
        _put(read_file, "read-two")
        assert _reload(stub, "admin-three").accepted  # readable again: rotated
        assert _grpc_code(stub, "admin-four", admin=True) == OK
    finally:
        s.stop()


def test_a_token_file_emptied_during_the_reload_keeps_the_running_token(
    quicktest_plugin: None, tmp_path: Path
) -> None:
    """The file is valid when the configuration is read, empty when the token is re-read (a
    rotation that truncates before it writes): the reload is refused naming the key."""
    token_file = tmp_path / "token"
    _put(token_file, "first-token")
    text = (
        "sources { src { type = quicktest } }\n"
        "tables = [ { source = src, table = users, targets = [ { type = indexed-memory } ] } ]\n"
        f'grpc {{ port = 4999, auth {{ token_file = "{token_file}" }} }}\n'
    )

    loads = []

    def load() -> Any:
        model = load_string(text, env={}).model
        if not loads:
            token_file.write_text("")  # truncated after the configuration was read
        loads.append(model)
        return model

    rt = runtime_from_config(load_string(text, env={}).model, load)
    assert rt.admin_token == "first-token" and rt.reloader is not None
    result = rt.reloader.reload()
    assert not result.accepted
    assert result.errors == (
        f"grpc.auth.token_file: {token_file} is empty; write the token into it",
    )
    assert rt.admin_token == "first-token"
    _put(token_file, "second-token")
    assert rt.reloader.reload(dry_run=True).accepted
    assert rt.admin_token == "first-token"  # a dry run changes nothing
