"""``laredo serve`` on real PostgreSQL for the operator's-view tests (status page, metrics of
the alert rules and dashboard): two streaming tables into memory targets and one table into an
HTTP target whose receiver refuses every change, so that pipeline fails (dead letter, then
ERROR) as soon as a row of it changes."""

from __future__ import annotations

import json
import subprocess
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from laredo.testing import PG_CONNECTION_ENV, ServedLaredo, pg_serve_config, wait_until

until = wait_until  # the one polling helper (status page tests import it from here)

TOKEN = "ops-page-token"
OAM = "/laredo.v1.LaredoOAMService/"

TABLES = """
  { source = pg, schema = public, table = accounts,
     targets = [ { type = indexed-memory, lookup_fields = [email] } ] }
  { source = pg, table = orders, targets = [ { type = indexed-memory } ] } #orders
  { source = pg, schema = public, table = events,
     targets = [ { type = http-sync, id = events-http, base_url = "%(receiver)s",
                   batch_size = 1, flush_interval = 0, retry_count = 0,
                   error_handling { max_retries = 0, on_persistent_failure = isolate } } ] }
"""
REST = """
snapshot { store = local, store_config { path = "%(snaps)s" }, schedule = %(schedule)s }
dead_letter { store = local, store_config { path = "%(dead)s" } }
observability { log_format = json, log_level = info, lag_interval = 1s }
shutdown { grace_period = 20s }
"""


class RefusingReceiver:
    """An HTTP receiver that accepts baselines, and changes until ``refuse`` is set; then it
    answers 500 to every change."""

    def __init__(self) -> None:
        paths: list[str] = []
        self.paths = paths
        self.refuse = False
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                return

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                paths.append(self.path)
                code = 500 if outer.refuse and "/baseline" not in self.path else 200
                self.send_response(code)
                self.send_header("Content-Length", "0")
                self.end_headers()

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/sync"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def prepare(db: Any) -> None:
    db.execute("CREATE TABLE accounts (id bigint PRIMARY KEY, email text UNIQUE NOT NULL, n int)")
    db.execute("CREATE TABLE orders (id bigint PRIMARY KEY, total numeric(12,2))")
    db.execute("CREATE TABLE events (id bigint PRIMARY KEY, what text)")
    db.execute("INSERT INTO accounts SELECT g, 'u' || g || '@x', g FROM generate_series(1, 300) g")
    db.execute("INSERT INTO orders SELECT g, g * 1.5 FROM generate_series(1, 50) g")
    db.execute("INSERT INTO events VALUES (1, 'first')")


class OpsServer:
    """``laredo serve`` as a subprocess (see the module docstring)."""

    def __init__(
        self, db: Any, tmp: Path, *, protect_reads: bool = True, schedule: str = "3s"
    ) -> None:
        prepare(db)
        self.db = db
        self.receiver = RefusingReceiver()
        self.cfg = cfg = tmp / "laredo.conf"
        cfg.write_text(
            pg_serve_config(
                db,
                TABLES % {"receiver": self.receiver.url},
                grpc=f'auth {{ token = "{TOKEN}", protect_reads = {str(protect_reads).lower()} }}',
                health="history_interval = 500ms",
                rest=REST % {"snaps": tmp / "snaps", "dead": tmp / "dead", "schedule": schedule},
            )
        )
        self.log = tmp / "serve.log"
        env = {PG_CONNECTION_ENV: db.dsn}
        self.served = ServedLaredo(cfg, env=env, log=self.log, timeout=90)
        self.proc = self.served.proc
        self.base = self.served.health_url
        self.grpc_address = self.served.grpc_address
        self.pid = self.proc.pid
        # the ready file means "listening"; a change committed before the baseline's snapshot
        # arrives in the baseline, not as a change, so the tests write only once it is ready
        until(lambda: self.call("GetStatus").get("ready"), 90, "the server to be ready")

    def call(self, method: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        """A Connect JSON call with the token."""
        req = urllib.request.Request(
            self.base + OAM + method,
            data=json.dumps(body or {}).encode(),
            headers={"Content-Type": "application/json", "Authorization": f"Bearer {TOKEN}"},
        )
        with urllib.request.urlopen(req, timeout=30) as r:
            out: dict[str, Any] = json.loads(r.read())
            return out

    def get_json(self, path: str) -> Any:
        """A GET of the HTTP port with the token (``/status/history``)."""
        req = urllib.request.Request(self.base + path, headers={"Authorization": f"Bearer {TOKEN}"})
        with urllib.request.urlopen(req, timeout=30) as r:
            return json.loads(r.read())

    def metrics(self) -> str:
        with urllib.request.urlopen(self.base + "/metrics", timeout=30) as r:
            return str(r.read().decode())

    def states(self) -> dict[str, str]:
        return {p["pipeline_id"]: p["state"] for p in self.call("GetStatus")["pipelines"]}

    def drop_orders(self) -> dict[str, Any]:
        """Remove the orders table from the configuration file and reload it."""
        lines = self.cfg.read_text().splitlines()
        self.cfg.write_text("\n".join(ln for ln in lines if not ln.endswith("#orders")) + "\n")
        return self.call("ReloadConfig")

    def _change_events(self, what: str, done: Any) -> None:
        self.db.execute("UPDATE events SET what = %s WHERE id = 1", (what,))
        until(done, 30, f"the events change ({what}) to reach its pipeline")

    def fail_events(self) -> None:
        """Change a row of ``events`` the receiver refuses: its HTTP pipeline dead-letters it
        and goes to ERROR."""
        self.receiver.refuse = True
        self._change_events(
            "refused", lambda: self.states().get("events-http") == "PIPELINE_STATE_ERROR"
        )

    def stop(self) -> None:
        try:
            self.served.stop(timeout=30)
        except subprocess.TimeoutExpired:
            self.served.kill()
        self.receiver.close()
        print(self.log.read_text()[-4000:])  # shown by pytest when the test failed


@contextmanager
def ops_server(db: Any, tmp: Path, **kw: Any) -> Iterator[OpsServer]:
    server = OpsServer(db, tmp, **kw)
    try:
        yield server
    finally:
        server.stop()


def http_status(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return int(r.status)
    except urllib.error.HTTPError as e:
        return int(e.code)
