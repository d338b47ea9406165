"""The first run, as a new user meets it (issue 16), against real PostgreSQL:

* the smallest config (a source, one table) -> ``laredo serve`` -> ``laredo status`` and
  ``laredo query count`` answer with no flag (gRPC on 127.0.0.1:4001 by default, the
  publication created because it was absent);
* ``laredo check`` on a cluster with ``wal_level = replica``, a table without a key and a role
  without REPLICATION lists the three problems with their fixes and exits 1;
* ``laredo init`` writes a config that ``laredo config validate`` accepts and that serves.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from laredo_server import cli
from laredo_server.config import load_config
from laredo_server.runtime import ServerRuntime
from laredo_server.serve import serve
from laredo_source_pg.embedded import EmbeddedPostgres
from laredo_source_pg.pytest_plugin import PgTestDb
from laredo_source_pg.testing import wait_until
from typer.testing import CliRunner

pytestmark = [pytest.mark.e2e, pytest.mark.integration]

LAREDO = str(Path(sys.executable).parent / "laredo")
runner = CliRunner()


def invoke(*args: str, code: int | None = None) -> Any:
    r = runner.invoke(cli.app, list(args), catch_exceptions=False, env={"COLUMNS": "250"})
    if code is not None:
        assert r.exit_code == code, (r.exit_code, r.output)
    return r


def clean_env(**extra: str) -> dict[str, str]:
    """The environment without any LAREDO_ setting (no address, no override), plus ``extra``."""
    return {**{k: v for k, v in os.environ.items() if not k.startswith("LAREDO_")}, **extra}


def port_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


@contextlib.contextmanager
def default_ports(timeout: float = 300) -> Iterator[dict[str, str]]:
    """Take turns with every other test process of this machine that serves on the default
    ports (a lock file); skip when a foreign process holds 4001. Yields the environment for
    ``laredo serve`` (the health listener moves off 8080 only if something else holds it)."""
    with open(Path(tempfile.gettempdir()) / "laredo-default-ports.lock", "w") as lock:

        def locked() -> bool:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return False
            return True

        try:
            wait_until(locked, timeout, "the default ports' lock", interval=0.1)
        except AssertionError:
            pytest.skip("another test held the default ports for too long")
        if not port_free(4001):
            pytest.skip("port 4001 is in use by another process: this test needs the default")
        yield clean_env() if port_free(8080) else clean_env(LAREDO_HEALTH__PORT="0")


@pytest.fixture
def app_role(pg_database: PgTestDb) -> Iterator[str]:
    """A role as a new user has it: LOGIN and REPLICATION, CREATE on its database (so it may
    create the publication); the objects it owns are dropped with it afterwards."""
    db = pg_database
    role = f"app_{uuid.uuid4().hex[:10]}"
    db.execute(f"CREATE ROLE {role} LOGIN REPLICATION")
    db.execute(f'GRANT CREATE ON DATABASE "{db.dbname}" TO {role}')
    yield role
    db.execute(f"DROP OWNED BY {role}")
    db.execute(f"DROP ROLE {role}")


MINIMAL = """
sources {{ pg {{ type = postgresql, connection = "{url}" }} }}
tables = [ {{ source = pg, schema = public, table = users,
              targets = [ {{ type = indexed-memory }} ] }} ]
"""


def test_minimal_config_serves_and_answers_status_and_query_with_no_flag(
    pg_database: PgTestDb, app_role: str, tmp_path: Path
) -> None:
    db = pg_database
    db.execute("CREATE TABLE users (id int PRIMARY KEY, email text NOT NULL)")
    db.execute("INSERT INTO users SELECT g, 'u' || g || '@x' FROM generate_series(1, 3) g")
    db.execute(f"ALTER TABLE users OWNER TO {app_role}")
    cluster = db.cluster
    cfg = tmp_path / "laredo.conf"
    cfg.write_text(
        MINIMAL.format(url=f"postgresql://{app_role}@127.0.0.1:{cluster.port}/{db.dbname}")
    )
    # the preflight passes (it only says what serve will create) and creates nothing
    r = invoke("check", "--config", str(cfg), code=0)
    assert "PUBLICATION_WILL_BE_CREATED" in r.output and "all checks passed" in r.output
    assert db.scalar("SELECT count(*) FROM pg_publication") == 0

    log = tmp_path / "serve.log"
    with default_ports() as env:
        proc = subprocess.Popen(
            [LAREDO, "serve", "--config", str(cfg)],
            stdout=subprocess.DEVNULL,
            stderr=log.open("wb"),
            env=env,
        )
        try:
            wait_until(
                lambda: "next: laredo status" in log.read_text() or proc.poll() is not None,
                timeout=60,
                what="the startup log's last line",
            )
            assert proc.poll() is None, log.read_text()[-3000:]

            def status() -> str:
                r = subprocess.run(
                    [LAREDO, "status"],
                    check=False,
                    capture_output=True,
                    text=True,
                    env={**env, "COLUMNS": "200"},
                    timeout=60,
                )
                return r.stdout if r.returncode == 0 and "STREAMING" in r.stdout else ""

            out = wait_until(status, timeout=60, interval=0.2, what="laredo status: STREAMING")
            assert "users" in out
            count = subprocess.run(
                [LAREDO, "query", "count", "public.users"],
                check=False,
                capture_output=True,
                text=True,
                env=env,
                timeout=60,
            )
            assert (count.returncode, count.stdout.strip()) == (0, "3"), count.stderr
        finally:
            proc.send_signal(signal.SIGTERM)
            code = proc.wait(30)
    text = log.read_text()
    assert code == 0, text[-3000:]
    assert "created publication laredo_slot_pub for public.users" in text
    assert "gRPC (OAM, Query) on 127.0.0.1:4001" in text
    assert "check PUBLICATION_WILL_BE_CREATED" in text  # serve ran the same checks
    assert db.scalar("SELECT count(*) FROM pg_publication WHERE pubname = 'laredo_slot_pub'") == 1


@pytest.fixture
def replica_cluster() -> Iterator[EmbeddedPostgres]:
    """A cluster of its own with ``wal_level = replica`` (logical replication impossible)."""
    with EmbeddedPostgres(settings={"wal_level": "replica"}, auth="trust") as pg:
        pg.execute("CREATE DATABASE app")
        pg.execute("CREATE ROLE app LOGIN")
        pg.execute("CREATE TABLE users (id int PRIMARY KEY, email text)", "app")
        pg.execute("CREATE TABLE events (at timestamptz, what text)", "app")
        pg.execute("ALTER TABLE users OWNER TO app", "app")
        pg.execute("ALTER TABLE events OWNER TO app", "app")
        yield pg


def test_check_lists_every_database_problem_with_its_fix_and_exits_1(
    replica_cluster: EmbeddedPostgres, tmp_path: Path
) -> None:
    pg = replica_cluster
    cfg = tmp_path / "laredo.conf"
    cfg.write_text(
        MINIMAL.format(url=pg.uri("app").replace("postgres@", "app@")).replace(
            "tables = [",
            "tables = [ { source = pg, table = events, targets = [ { type = indexed-memory } ] },",
        )
    )
    r = invoke("check", "--config", str(cfg), code=1)
    out = r.output
    for code, fix in (
        ("WAL_LEVEL", "ALTER SYSTEM SET wal_level = logical"),
        ("MISSING_REPLICATION_PRIVILEGE", 'ALTER ROLE "app" REPLICATION'),
        ("REPLICA_IDENTITY", 'ALTER TABLE "public"."events" REPLICA IDENTITY FULL'),
    ):
        assert code in out and fix in out, out
    doc = json.loads(invoke("--output", "json", "check", "--config", str(cfg), code=1).stdout)
    assert doc["ok"] is False and doc["passed"] is False
    errors = {(f["code"], f["where"]) for f in doc["findings"] if f["severity"] == "error"}
    assert {
        ("WAL_LEVEL", "sources.pg"),
        ("MISSING_REPLICATION_PRIVILEGE", "sources.pg"),
        ("REPLICA_IDENTITY", "tables.0"),
    } <= errors
    assert all(f["fix"] for f in doc["findings"] if f["severity"] == "error")


def test_init_writes_a_config_that_validates_and_serves(
    pg_database: PgTestDb, tmp_path: Path
) -> None:
    db = pg_database
    db.execute("CREATE TABLE users (id int PRIMARY KEY, email text)")
    db.execute("CREATE TABLE orders (region text, id int, PRIMARY KEY (region, id))")
    db.execute("CREATE TABLE events (at timestamptz, what text)")
    db.execute("INSERT INTO users VALUES (1, 'a@x'), (2, 'b@x')")
    db.execute("INSERT INTO orders VALUES ('eu', 1)")
    cfg = tmp_path / "laredo.conf"
    dsn = db.dsn_for(password="not-written")
    args = ["init", "--connection", dsn, "--config", str(cfg), "--slot-name", db.slot_name]
    r = invoke(*args, code=0)
    assert "left out public.events: no primary key" in r.output
    assert "password was not written" in r.output
    text = cfg.read_text()
    assert "not-written" not in text and "slot_mode = ephemeral" in text
    assert "lookup_fields = [id]" in text and "lookup_fields = [region, id]" in text
    assert "# Fix: ALTER TABLE public.events ADD PRIMARY KEY" in text
    assert "#   source = pg, schema = public, table = events" in text  # commented out
    # an existing file is kept unless --force
    r = invoke(*args, code=1)
    assert "exists" in r.output and cfg.read_text() == text
    invoke(*args, "--tables", "users", "--force", code=0)
    assert "table = orders" not in cfg.read_text()
    invoke(*args, "--tables", "public.users,orders", "--force", code=0)
    r = invoke(*args, "--tables", "nope", "--force", code=1)
    assert "no such table: nope" in r.output

    assert "config is valid" in invoke("config", "validate", str(cfg), code=0).output
    loaded = load_config(cfg, conf_dirs=[], sets=["grpc.port=0", "health.port=0"])
    assert loaded.model is not None
    stop = threading.Event()
    started: dict[str, ServerRuntime] = {}
    t = threading.Thread(
        target=serve,
        args=(loaded.model,),
        kwargs={"stop_event": stop, "on_started": lambda rt: started.setdefault("rt", rt)},
        daemon=True,
    )
    t.start()
    try:
        rt = wait_until(lambda: started.get("rt"), timeout=30, what="server started")
        assert rt.engine.await_ready(30)
        counts = {str(p.table): p.row_count for p in rt.engine.pipelines()}
        assert counts == {"public.users": 2, "public.orders": 1}
    finally:
        stop.set()
        t.join(30)


def test_init_with_delta_resumes_and_check_warns_an_ephemeral_slot(
    pg_database: PgTestDb, tmp_path: Path
) -> None:
    """A durable target keeps what it received: ``laredo init --delta-uri`` writes a stateful
    slot, and ``laredo check`` warns (naming ``slot_mode = stateful``) when one is ephemeral."""
    db = pg_database
    db.execute("CREATE TABLE users (id int PRIMARY KEY, email text)")
    cfg = tmp_path / "laredo.conf"
    lake = tmp_path / "lake"
    args = ["init", "--connection", db.dsn, "--slot-name", db.slot_name, "--delta-uri", str(lake)]
    invoke(*args, "--config", str(cfg), code=0)
    text = cfg.read_text()
    assert "slot_mode = stateful" in text
    assert f'{{ type = delta, uri = "{lake}/public.users" }}' in text
    assert "config is valid" in invoke("config", "validate", str(cfg), code=0).output
    r = invoke("check", "--config", str(cfg))
    assert "DURABLE_TARGET_EPHEMERAL_SOURCE" not in r.output

    eph = tmp_path / "ephemeral.conf"
    r = invoke(*args, "--slot-mode", "ephemeral", "--config", str(eph), code=0)
    assert "every start writes a full new baseline version" in r.output
    r = invoke("check", "--config", str(eph))
    assert "DURABLE_TARGET_EPHEMERAL_SOURCE" in r.output, r.output
    assert "sources.pg.slot_mode = stateful" in r.output
    assert "tables.0.targets.1 (delta)" in r.output
