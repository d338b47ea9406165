"""A Go Laredo deployment moved over unchanged, against real PostgreSQL: a config in Go's
vocabulary (``type = pg``, ``fanout { grpc { port } }``, fan-out ``snapshot.retention`` and
``max_clients``), the connection in Go's environment form, started with Go's command line
(``laredo-server --config ... --health-port ... --drain-grace ...``). It validates, serves the
gRPC services and the fan-out, logs one deprecation line per Go spelling naming ours, answers
the ``laredo`` CLI written Go's way (flags after the command), and drains on SIGTERM."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from laredo.testing import free_port
from laredo_source_pg.pytest_plugin import PgTestDb
from laredo_source_pg.testing import wait_until
from laredo_target_fanout import FanOutClient

pytestmark = [pytest.mark.e2e, pytest.mark.integration]

BIN = Path(sys.executable).parent
GO_CONFIG = """
sources {{
  pg {{
    type = pg
    connection = "host=replaced-by-the-environment"
    slot_mode = stateful
    slot_name = {slot}
  }}
}}
tables = [
  {{
    source = pg
    schema = public
    table = users
    targets = [
      {{ type = indexed-memory, lookup_fields = [email] }},
      {{
        type = replication-fanout
        journal {{ max_entries = 1000, max_age = 1h }}
        snapshot {{ interval = 5m, retention {{ keep_count = 2 }} }}
        max_clients = 10
        heartbeat_interval = 1s
      }}
    ]
  }}
]
grpc {{ port = {grpc} }}
fanout {{ grpc {{ port = {fanout} }} }}
"""


def ready(port: int) -> int:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health/ready", timeout=5) as r:
            return int(r.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)
    except OSError:
        return 0


def test_a_go_config_and_command_line_serve_unchanged(
    pg_database: PgTestDb, tmp_path: Path
) -> None:
    db = pg_database
    db.execute("CREATE TABLE users (id int PRIMARY KEY, email text NOT NULL)")
    db.execute("INSERT INTO users SELECT g, 'u' || g || '@x' FROM generate_series(1, 5) g")
    grpc, fanout, health = free_port(), free_port(), free_port()
    cfg = tmp_path / "laredo.conf"
    cfg.write_text(GO_CONFIG.format(slot=db.slot_name, grpc=grpc, fanout=fanout))
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAREDO_")}
    env["LAREDO_SOURCES_PG_CONNECTION"] = db.dsn  # Go's override form

    checked = subprocess.run(
        [str(BIN / "laredo-server"), "validate", "--config", str(cfg)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert (checked.returncode, checked.stdout) == (0, "config is valid\n"), checked.stderr
    for note in (
        "sources.pg: type = pg is Go Laredo's spelling; write type = postgresql",
        f"fanout.grpc.port = {fanout} is Go Laredo's spelling; write grpc {{ port = {fanout} }}",
        "snapshot.retention.keep_count is Go Laredo's spelling; write snapshot.keep_count",
        "max_clients is Go Laredo's spelling; write grpc { max_clients = ... }",
        "environment LAREDO_SOURCES_PG_CONNECTION: Go Laredo's override form sets "
        "sources.pg.connection; write LAREDO_SOURCES__PG__CONNECTION",
    ):
        assert checked.stderr.count(note) == 1, (note, checked.stderr)

    log = tmp_path / "server.log"
    proc = subprocess.Popen(
        [
            str(BIN / "laredo-server"),
            "-config",
            str(cfg),
            "--health-port",
            str(health),
            "--log-level=info",
            "--drain-grace",
            "1s",
        ],
        stdout=subprocess.DEVNULL,
        stderr=log.open("wb"),
        env=env,
    )
    try:
        wait_until(lambda: ready(health) == 200 or proc.poll() is not None, 60, what="ready")
        assert proc.poll() is None, log.read_text()[-3000:]

        def laredo(*args: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run(
                [str(BIN / "laredo"), *args],
                capture_output=True,
                text=True,
                env=env,
                timeout=60,
                check=False,
            )

        status = laredo("status", "--address", f"127.0.0.1:{grpc}", "-o", "json")
        assert status.returncode == 0, status.stderr
        assert json.loads(status.stdout)["state"] == "SERVICE_STATE_STREAMING"
        count = laredo("query", "count", "public.users", "--address", f"127.0.0.1:{grpc}")
        assert count.stdout.strip() == "5", count.stderr
        client = FanOutClient(f"127.0.0.1:{fanout}", "public.users").start()
        try:
            assert client.await_ready(20)
            db.execute("INSERT INTO users VALUES (6, 'u6@x')")
            wait_until(lambda: client.count() == 6, 20, what="the change through the fan-out")
        finally:
            client.stop(save=False)
        proc.send_signal(signal.SIGTERM)
        started = time.monotonic()
        wait_until(lambda: ready(health) == 503, 5, what="readiness 503 while draining")
        code = proc.wait(60)
        assert time.monotonic() - started >= 0.9  # --drain-grace 1s: drained before stopping
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    lines = [json.loads(x) for x in log.read_text().splitlines() if x.startswith("{")]
    assert code == 0, log.read_text()[-3000:]
    deprecated = [x["msg"] for x in lines if x["msg"].startswith("deprecated: ")]
    assert len(deprecated) == 5 and len(set(deprecated)) == 5, deprecated
    assert any("draining for 1.0s" in x["msg"] for x in lines)
