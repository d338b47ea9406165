"""A Connect client nobody on this team wrote: the Buf CLI (``buf curl``, connect-go inside).

``buf curl --protocol connect`` sends binary protobuf (``application/proto``, and
``application/connect+proto`` for streams); ``--protocol grpc`` uses server reflection on the
gRPC port. The CLI comes from npm (``@bufbuild/buf``) and is installed on first use into
``<repo>/.tools`` (git-ignored, kept between runs). The tests are skipped, saying why, only when
npm is missing or cannot reach the registry; ``tests/test_connect.py`` covers both codecs with a
Python Connect client either way.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from .testkit import Harness

REPO = Path(__file__).resolve().parents[2]
TOOLS = REPO / ".tools"
BUF_PACKAGE = "@bufbuild/buf@1.75.0"
PROTO = REPO / "proto"


def _install_buf() -> Path:
    buf = TOOLS / "node_modules" / ".bin" / "buf"
    if buf.exists():
        return buf
    npm = shutil.which("npm")
    if npm is None:
        pytest.skip("the Buf CLI test needs npm (Node.js) to install @bufbuild/buf; npm not found")
    TOOLS.mkdir(exist_ok=True)
    with open(TOOLS / ".install.lock", "w") as lock:  # xdist workers install once
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not buf.exists():
            try:
                done = subprocess.run(
                    [
                        npm,
                        "install",
                        "--prefix",
                        str(TOOLS),
                        "--no-audit",
                        "--no-fund",
                        BUF_PACKAGE,
                    ],
                    capture_output=True,
                    text=True,
                    timeout=300,
                    check=False,
                )
            except subprocess.TimeoutExpired:
                pytest.skip(f"npm install {BUF_PACKAGE} timed out: is the npm registry reachable?")
            if done.returncode != 0 or not buf.exists():
                tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
                pytest.skip(
                    f"npm cannot install {BUF_PACKAGE} (registry unreachable?): {' | '.join(tail)}"
                )
    return buf


@pytest.fixture(scope="module")
def buf() -> Path:
    return _install_buf()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Harness]:
    # streams are opened and dropped back to back here; a dropped stream frees its
    # grpc.max_streams slot only within 0.25 s, so allow more than the default 8 at once
    h = Harness(tmp_path_factory.mktemp("buf"), max_streams=64).start()
    yield h
    h.stop()


def buf_curl(buf: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(buf), "curl", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**os.environ, "BUF_CACHE_DIR": str(TOOLS / "buf-cache")},
    )


def first_message(buf: Path, *args: str) -> dict[str, object]:
    """The first message ``buf curl`` prints for a stream that does not end by itself."""
    proc = subprocess.Popen(
        [str(buf), "curl", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "BUF_CACHE_DIR": str(TOOLS / "buf-cache")},
    )
    try:
        assert proc.stdout is not None
        lines = []
        for line in proc.stdout:
            lines.append(line)
            if line.rstrip() == "}":  # buf prints each message as indented JSON
                break
        else:
            raise AssertionError(proc.stderr.read() if proc.stderr else "no output")
        out: dict[str, object] = json.loads("".join(lines))
        return out
    finally:
        proc.kill()
        proc.wait(10)


def test_buf_curl_connect_binary_unary_and_errors(buf: Path, server: Harness) -> None:
    url = f"http://127.0.0.1:{server.rt.listeners.health_port}"
    got = buf_curl(
        buf,
        "--protocol",
        "connect",
        "--schema",
        str(PROTO),
        "--data",
        '{"table": {"table": "public.users"}}',
        f"{url}/laredo.v1.LaredoQueryService/CountRows",
    )
    assert got.returncode == 0, got.stderr
    assert json.loads(got.stdout) == {"count": "25"}
    got = buf_curl(
        buf,
        "-v",
        "--protocol",
        "connect",
        "--schema",
        str(PROTO),
        "--data",
        "{}",
        f"{url}/laredo.v1.LaredoOAMService/GetStatus",
    )
    assert got.returncode == 0, got.stderr
    assert json.loads(got.stdout)["state"] == "SERVICE_STATE_STREAMING"
    assert "Content-Type: application/proto" in got.stderr  # binary both ways
    got = buf_curl(
        buf,
        "--protocol",
        "connect",
        "--schema",
        str(PROTO),
        "--data",
        '{"pipeline_id": "nope"}',
        f"{url}/laredo.v1.LaredoOAMService/GetPipelineStatus",
    )
    assert got.returncode != 0
    err = json.loads(got.stderr)
    assert err["code"] == "not_found" and "unknown pipeline 'nope'" in err["message"]


def test_buf_curl_connect_binary_server_stream(buf: Path, server: Harness) -> None:
    url = f"http://127.0.0.1:{server.rt.listeners.health_port}"
    msg = first_message(
        buf,
        "--protocol",
        "connect",
        "--schema",
        str(PROTO),
        "--data",
        '{"table": {"table": "public.users"}, "replay_existing": true}',
        f"{url}/laredo.v1.LaredoQueryService/Subscribe",
    )
    events = msg["events"]
    assert isinstance(events, list) and events[0]["action"] == "INSERT"
    # a failing stream: the error arrives in the end-of-stream message
    got = buf_curl(
        buf,
        "--protocol",
        "connect",
        "--schema",
        str(PROTO),
        "--data",
        '{"table": {"table": "public.nope"}}',
        f"{url}/laredo.v1.LaredoQueryService/Subscribe",
    )
    assert got.returncode != 0 and json.loads(got.stderr)["code"] == "not_found"


def test_buf_curl_grpc_with_reflection(buf: Path, server: Harness) -> None:
    url = f"http://127.0.0.1:{server.rt.listeners.grpc_port}"
    got = buf_curl(buf, "--protocol", "grpc", "--http2-prior-knowledge", "--list-services", url)
    assert got.returncode == 0, got.stderr
    assert {
        "laredo.v1.LaredoOAMService",
        "laredo.v1.LaredoQueryService",
        "grpc.health.v1.Health",
    } <= set(got.stdout.split())
    got = buf_curl(
        buf,
        "--protocol",
        "grpc",
        "--http2-prior-knowledge",
        "--data",
        '{"table": {"table": "public.users"}}',
        f"{url}/laredo.v1.LaredoQueryService/CountRows",
    )
    assert got.returncode == 0 and json.loads(got.stdout) == {"count": "25"}
