"""The ``laredo.testing`` test kit's ``ServedLaredo`` and ``served_laredo``: ``laredo serve`` as
a subprocess, ready when its ports are, stopped after the test, its log shown on failure."""

from __future__ import annotations

import os
import textwrap
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from laredo.testing import PG_CONNECTION_ENV, ServedLaredo, pg_serve_config

pytest_plugins = ["pytester"]

TABLES = "{ source = pg, schema = public, table = items, targets = [ { type = indexed-memory } ] }"


def _config(db: Any, tmp: Path) -> Path:
    db.execute("CREATE TABLE items (id int PRIMARY KEY)")
    cfg = tmp / "laredo.conf"
    cfg.write_text(pg_serve_config(db, TABLES, slot_mode="ephemeral", status_interval=None))
    return cfg


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"


def test_a_server_that_exits_before_ready_fails_with_its_log(tmp_path: Path) -> None:
    cfg = tmp_path / "laredo.conf"
    cfg.write_text("tables = [ { source = nowhere } ]\n")
    with pytest.raises(
        AssertionError,
        match=r"(?s)laredo serve exited with [1-9].*tables\.0\.table: Field required",
    ):
        ServedLaredo(cfg, timeout=60)


@pytest.mark.integration
def test_served_laredo_is_ready_on_its_ports_and_stops_cleanly(
    pg_database: Any, tmp_path: Path, served_laredo: Any
) -> None:
    db = pg_database
    served = served_laredo(_config(db, tmp_path), env={PG_CONNECTION_ENV: db.dsn})
    with urllib.request.urlopen(served.health_url + "/health/live", timeout=10) as r:
        assert r.status == 200
    assert served.grpc_address == f"127.0.0.1:{served.grpc_port}"
    assert served.stop() == 0
    assert not _alive(served.pid)


@pytest.mark.integration
def test_a_failed_test_shows_the_log_and_its_server_is_stopped(
    pg_database: Any, tmp_path: Path, pytester: pytest.Pytester
) -> None:
    db = pg_database
    cfg = _config(db, tmp_path)
    pid_file = tmp_path / "pid"
    pytester.makepyfile(
        textwrap.dedent(
            f"""
            from pathlib import Path

            def test_fails(served_laredo):
                served = served_laredo(
                    Path({str(cfg)!r}), env={{"LAREDO_SOURCES__PG__CONNECTION": {db.dsn!r}}}
                )
                Path({str(pid_file)!r}).write_text(str(served.pid))
                assert False, "the test body failed"
            """
        )
    )
    result = pytester.inline_run("-p", "no:randomly", "-p", "no:xdist", "-p", "no:cacheprovider")
    result.assertoutcome(failed=1)
    (report,) = [r for r in result.getreports("pytest_runtest_logreport") if r.when == "call"]
    sections = dict(report.sections)
    (log,) = [text for name, text in sections.items() if name.startswith("laredo serve log #0")]
    assert "preflight passed: sources.pg" in log  # the server's own log lines
    assert not _alive(int(pid_file.read_text()))
