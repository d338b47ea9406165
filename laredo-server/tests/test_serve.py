"""`serve()` in-process: drain window, clean stop, snapshot on shutdown; the quickstart."""

from __future__ import annotations

import io
import logging
import re
import socket
import stat
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from laredo.testing import free_port
from laredo_server import server
from laredo_server.config import load_string
from laredo_server.runtime import ServerRuntime
from laredo_server.serve import serve

from .testkit import Harness, wait_for


def status(port: int, path: str) -> int:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as r:
            return int(r.status)
    except urllib.error.HTTPError as e:
        return int(e.code)
    except urllib.error.URLError:
        return 0  # not listening (yet, or any more)


def test_serve_drains_then_stops_with_a_shutdown_snapshot(
    quicktest_plugin: None, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="laredo_server")
    health = free_port()
    loaded = load_string(
        f"""
sources {{ src {{ type = quicktest, rows = 5 }} }}
tables = [ {{ source = src, table = users, targets = [ {{ type = indexed-memory }} ] }} ]
snapshot {{ store = local, store_config {{ path = "{tmp_path / "snaps"}" }}, on_shutdown = true }}
grpc {{ port = 0 }}
health {{ port = {health} }}
shutdown {{ drain = 1s, grace_period = 10s }}
""",
        env={},
    )
    assert loaded.model is not None
    stop = threading.Event()
    started: dict[str, ServerRuntime] = {}
    result: dict[str, Any] = {}
    t = threading.Thread(
        target=lambda: result.setdefault(
            "code",
            serve(
                loaded.model, stop_event=stop, on_started=lambda rt: started.setdefault("rt", rt)
            ),
        ),
        daemon=True,
    )
    t.start()
    assert wait_for(lambda: status(health, "/health/ready") == 200)
    assert wait_for(lambda: "rt" in started)
    rt = started["rt"]
    assert rt.listeners.grpc_port is None  # grpc.port = 0 turns gRPC off
    # the startup log ends with where everything listens and what to try next
    last = [r.getMessage() for r in caplog.records if r.name.startswith("laredo_server")][-1]
    assert "gRPC off (grpc.port = 0)" in last, last
    assert f"HTTP (health, metrics, JSON) on http://127.0.0.1:{health}" in last
    assert last.endswith(f"next: curl -s http://127.0.0.1:{health}/health/ready")
    t0 = time.monotonic()
    stop.set()
    assert wait_for(lambda: status(health, "/health/ready") == 503, 2)  # draining
    assert status(health, "/health/live") == 200  # still alive while draining
    t.join(20)
    assert result["code"] == 0
    assert time.monotonic() - t0 >= 1.0  # waited for the drain window
    assert len(list((tmp_path / "snaps").iterdir())) == 1


@pytest.mark.e2e
@pytest.mark.integration
def test_quickstart_runs_and_cleans_up(tmp_path: Path) -> None:
    pytest.importorskip("laredo_source_pg")
    from laredo_server.quickstart import run_quickstart
    from rich.console import Console

    buf = io.StringIO()
    code = run_quickstart(
        rows=300,
        rate=50,
        grpc_port=0,
        health_port=0,
        duration=4,
        workdir=str(tmp_path / "qs"),
        console=Console(file=buf, width=200, force_terminal=False),
    )
    out = buf.getvalue()
    assert code == 0, out
    assert "STREAMING" in out
    assert "query count public.accounts" in out  # the commands to try next
    assert "changes/s" in out and "ACK lag" in out
    conf = (tmp_path / "qs" / "laredo.conf").read_text()
    assert "type = postgresql" in conf and "indexed-memory" in conf
    # the config holds the embedded PostgreSQL's random password: owner-only file and folder
    assert re.search(r"\bpassword=\S{16,}", conf), conf
    assert stat.S_IMODE((tmp_path / "qs" / "laredo.conf").stat().st_mode) == 0o600
    assert stat.S_IMODE((tmp_path / "qs").stat().st_mode) == 0o700


@pytest.mark.parametrize("flag", ["--health-port", "--grpc-port"])
def test_quickstart_names_its_own_flag_when_a_port_is_taken(flag: str, tmp_path: Path) -> None:
    pytest.importorskip("laredo_source_pg")
    from laredo_server.quickstart import run_quickstart
    from rich.console import Console

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        buf = io.StringIO()
        ports = {"grpc_port": 0, "health_port": 0}
        ports["health_port" if flag == "--health-port" else "grpc_port"] = port
        code = run_quickstart(
            **ports,
            duration=1,
            workdir=str(tmp_path / "qs"),
            console=Console(file=buf, width=200, force_terminal=False),
        )
    out = buf.getvalue()
    assert code == 1, out
    assert f"port {port} on 127.0.0.1 is in use: pass {flag} with a free port" in out, out
    assert "health.port" not in out and "grpc.port" not in out  # keys quickstart does not take
    assert not (tmp_path / "qs").exists()  # refused before anything started


def test_serve_returns_1_when_a_port_is_taken(quicktest_plugin: None, tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        loaded = load_string(
            f"""
sources {{ src {{ type = quicktest }} }}
tables = [ {{ source = src, table = users, targets = [ {{ type = indexed-memory }} ] }} ]
grpc {{ port = 0 }}
health {{ port = {port} }}
""",
            env={},
        )
        assert loaded.model is not None
        assert serve(loaded.model, stop_event=threading.Event()) == 1


def test_the_0_1_runtime_constructor_still_starts_its_listeners(tmp_path: Path) -> None:
    factory = Harness(tmp_path).rt.factory
    rt = server.Runtime(factory, grpc_port=0, health_port=None)
    assert isinstance(rt, ServerRuntime)
    rt.start()
    try:
        assert rt.listeners.grpc_port and rt.listeners.health_port is None
        assert wait_for(rt.is_ready)
    finally:
        rt.stop(grace=5)
