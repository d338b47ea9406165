"""End to end: `laredo serve` as a subprocess on an embedded PostgreSQL, driven by the CLI and
gRPC clients; snapshot on SIGTERM, restart restores it without a baseline."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from laredo.serialization import object_hook
from laredo.testing import PG_CONNECTION_ENV, ServedLaredo, pg_serve_config, probing
from laredo.testing.serving import LAREDO
from laredo_server._proto.laredo_proto.v1 import oam_pb2 as oam
from laredo_server._proto.laredo_proto.v1 import oam_pb2_grpc, query_pb2_grpc
from laredo_server._proto.laredo_proto.v1 import query_pb2 as q

from .testkit import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.integration]


TOKEN = "e2e-admin-token"


TABLES = """
  { source = pg, schema = public, table = accounts,
     targets = [ { type = indexed-memory, lookup_fields = [email] } ] }
"""
REST = """
snapshot { store = local, store_config { path = "%s" }, on_shutdown = true }
observability { log_format = json, log_level = info }
shutdown { grace_period = 20s }
"""


class Server(ServedLaredo):
    def __init__(self, cfg: Path, env: dict[str, str], log: Path) -> None:
        super().__init__(cfg, env=env, log=log)
        self.channel = grpc.insecure_channel(f"127.0.0.1:{self.grpc_port}")
        self.oam = oam_pb2_grpc.LaredoOAMServiceStub(self.channel)
        self.query = query_pb2_grpc.LaredoQueryServiceStub(self.channel)

    def health(self, path: str) -> int:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.health_port}{path}") as r:
                return int(r.status)
        except urllib.error.HTTPError as e:
            return int(e.code)

    def metrics(self) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.health_port}/metrics") as r:
            return str(r.read().decode())

    def cli(self, *args: str, token: bool = False) -> subprocess.CompletedProcess[str]:
        pre = ["--address", f"127.0.0.1:{self.grpc_port}", "--output", "json", "--timeout", "60"]
        if token:
            pre += ["--token", TOKEN]
        r = subprocess.run(
            [LAREDO, *pre, *args], capture_output=True, text=True, timeout=120, check=False
        )
        if r.returncode not in (0, 1, 2) or (r.returncode == 0 and not r.stdout.strip()):
            raise AssertionError(f"laredo {' '.join(args)} failed: rc={r.returncode} {r.stderr}")
        return r

    def count(self) -> int:
        return int(
            self.query.CountRows(q.CountRowsRequest(table=q.TableRef(table="accounts"))).count
        )

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30.0) -> int:
        self.channel.close()
        return super().stop(sig, timeout)


def _is_row(event: Any, pk: int) -> bool:
    """Whether a subscription event is about row ``pk`` of accounts."""
    values = event.new_values.json or event.old_values.json
    return bool(json.loads(values, object_hook=object_hook)["id"] == pk)


@pytest.fixture
def setup(pg_database: Any, tmp_path: Path) -> Iterator[tuple[Any, Path, dict[str, str]]]:
    db = pg_database
    db.execute(
        "CREATE TABLE accounts (id bigint PRIMARY KEY, email text UNIQUE NOT NULL, "
        "balance numeric(12,2) NOT NULL, at timestamptz NOT NULL DEFAULT now())"
    )
    db.execute(
        "INSERT INTO accounts (id, email, balance) "
        "SELECT g, 'u' || g || '@x', g * 1.5 FROM generate_series(1, 500) g"
    )
    cfg = tmp_path / "laredo.conf"
    cfg.write_text(
        pg_serve_config(
            db,
            TABLES,
            grpc=f'auth {{ token = "{TOKEN}" }}',
            rest=REST % (tmp_path / "snaps"),
        )
    )
    # the password travels in the environment; it must never appear in logs or dumps
    env = {PG_CONNECTION_ENV: db.dsn + " password=sup3rsecret"}
    yield db, cfg, env
    with contextlib.suppress(Exception):
        db.execute(f"SELECT pg_drop_replication_slot('{db.slot_name}')")


def test_serve_cli_grpc_snapshot_restart(setup: tuple[Any, Path, dict[str, str]]) -> None:
    db, cfg, env = setup
    log = cfg.parent / "server.log"
    s = Server(cfg, env, log)
    try:
        assert wait_for(lambda: s.health("/health/ready") == 200, 60), log.read_text()[-3000:]
        assert s.health("/health/live") == 200 and s.health("/health/startup") == 200
        st = json.loads(s.cli("status").stdout)
        assert st["state"] == "SERVICE_STATE_STREAMING"
        assert s.count() == 500
        got = s.query.GetRow(
            q.GetRowRequest(table=q.TableRef(table="public.accounts"), primary_key=["7"])
        )
        r = json.loads(got.row.json, object_hook=object_hook)
        assert str(r["balance"]) == "10.50" and r["at"].tzinfo is not None
        assert json.loads(s.cli("query", "lookup", "public.accounts", "u9@x").stdout)[0]["id"] == 9

        # watch row changes while rows change
        events: list[Any] = []
        sub = s.query.Subscribe(q.SubscribeRequest(table=q.TableRef(table="accounts")))

        def consume() -> None:
            with contextlib.suppress(grpc.RpcError):
                for resp in sub:
                    events.extend(resp.events)

        threading.Thread(target=consume, daemon=True).start()
        # probe (rewrite row 2 unchanged) until the server's listener is in place: changes
        # made before it would never reach this subscriber
        with probing(lambda _: db.execute("UPDATE accounts SET balance = balance WHERE id = 2")):
            wait_for(lambda: events, 30, "the first probe on the subscription")
        db.execute("INSERT INTO accounts (id, email, balance) VALUES (501, 'n@x', 1)")
        db.execute("UPDATE accounts SET balance = 2 WHERE id = 501")
        db.execute("DELETE FROM accounts WHERE id = 1")
        mine = lambda: [e for e in list(events) if not _is_row(e, 2)]  # noqa: E731
        wait_for(lambda: len(mine()) >= 3, 20, "the three changes on the subscription")
        assert [e.action for e in mine()] == ["INSERT", "UPDATE", "DELETE"]
        assert mine()[0].position  # an LSN
        sub.cancel()

        # admin RPCs need the token
        r = s.cli("pause", "pg")
        assert r.returncode == 1 and "UNAUTHENTICATED" in r.stderr
        with pytest.raises(grpc.RpcError) as ei:
            s.oam.PauseSync(
                oam.PauseSyncRequest(source_id="pg"), metadata=[("authorization", "Bearer no")]
            )
        assert ei.value.code() == grpc.StatusCode.UNAUTHENTICATED
        # pause: changes made meanwhile arrive after resume
        assert s.cli("pause", "pg", token=True).returncode == 0
        db.execute("INSERT INTO accounts (id, email, balance) VALUES (600, 'p@x', 1)")
        time.sleep(0.5)
        assert s.count() == 500
        assert s.cli("resume", "pg", token=True).returncode == 0
        assert wait_for(lambda: s.count() == 501, 20)

        r = s.cli("reload", "public.accounts", token=True)
        assert r.returncode == 0 and s.count() == 501
        r = s.cli("ready")
        assert r.returncode == 0 and json.loads(r.stdout)["ready"] is True
        info = s.oam.GetSourceInfo(oam.GetSourceInfoRequest(source_id="pg")).sources[0]
        assert info.current_position and info.supports_resume
        # the PostgreSQL source's details (issue 29): failovers and lost slots, counted
        assert info.details["failovers_total"] == "0" and info.details["slot_lost_total"] == "0"
        assert info.details["slot"] and "server" in info.details
        snap = json.loads(s.cli("snapshot", "create", token=True).stdout)["snapshot_id"]
        assert snap.startswith("snap-")
        db.execute("INSERT INTO accounts (id, email, balance) VALUES (700, 'q@x', 1)")
        assert wait_for(lambda: s.count() == 502, 20)
        assert "laredo_changes_applied_total" in s.metrics()
    finally:
        code = s.stop()
    assert code == 0, log.read_text()[-3000:]
    snaps = sorted((cfg.parent / "snaps").iterdir())
    assert len(snaps) == 2  # the one we took + the shutdown snapshot
    text = log.read_text()
    assert "sup3rsecret" not in text
    assert all(json.loads(line)["level"] for line in text.splitlines() if line.strip())

    # restart: restores the shutdown snapshot and resumes the slot, no baseline
    db.execute("INSERT INTO accounts (id, email, balance) VALUES (800, 'r@x', 1)")
    s = Server(cfg, env, log)
    try:
        assert wait_for(lambda: s.health("/health/ready") == 200, 60)
        assert wait_for(lambda: s.count() == 503, 20)
        m = s.metrics()
        assert 'laredo_snapshot_restores_total{outcome="completed"} 1' in m
        started = re.findall(r"^laredo_baselines_started_total\{[^}]*\} (\S+)$", m, re.M)
        assert started == ["0"], started  # exported from the start, at zero: no baseline
    finally:
        assert s.stop() == 0
    dump = subprocess.run(
        [LAREDO, "config", "dump", str(cfg)],
        check=False,
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        timeout=60,
    )
    assert dump.returncode == 0 and "sup3rsecret" not in dump.stdout and "***" in dump.stdout
