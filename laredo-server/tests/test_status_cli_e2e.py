"""``laredo status`` against ``laredo serve`` on real PostgreSQL: the fields the status page
reads (WAL the slot retains, changes applied, errors and dead letters per pipeline, the latest
snapshot and its schedule, the last reload) in the table and in ``-o json``."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from laredo_server import cli
from laredo_server.cli.status import age_text, size_text
from typer.testing import CliRunner

from .opskit import TOKEN, OpsServer, ops_server, until

pytestmark = [pytest.mark.e2e, pytest.mark.integration]

runner = CliRunner()


@pytest.fixture
def server(pg_database: Any, tmp_path: Path) -> Iterator[OpsServer]:
    with ops_server(pg_database, tmp_path, schedule="1h") as s:
        yield s


def laredo(server: OpsServer, *args: str) -> str:
    r = runner.invoke(
        cli.app,
        ["--address", server.grpc_address, "--token", TOKEN, *args],
        catch_exceptions=False,
        env={"COLUMNS": "300"},
    )
    assert r.exit_code == 0, r.output
    return str(r.stdout)


def status_json(server: OpsServer) -> dict[str, Any]:
    out: dict[str, Any] = json.loads(laredo(server, "--output", "json", "status"))
    return out


def test_status_shows_what_the_status_page_shows(server: OpsServer) -> None:
    db = server.db
    db.execute("UPDATE accounts SET n = n + 1 WHERE id <= 7")
    server.fail_events()  # one refused change: a dead letter, an error, ERROR
    until(lambda: _applied(server, "public.accounts") == 7, 30, "7 account changes applied")
    snap_id = server.call("CreateSnapshot")["snapshot_id"]
    reload = server.drop_orders()
    assert reload["accepted"] is True

    # the stateful slot holds WAL back (read with the lag, at most once a second)
    st = until(lambda: _with_wal(status_json(server)), 30, "the WAL the slot retains")
    (src,) = st["sources"]
    pipes = {f"{p['schema']}.{p['table']}": p for p in st["pipelines"]}
    assert "public.orders" not in pipes  # removed by the reload
    assert pipes["public.accounts"]["changes_applied"] == "7"
    assert pipes["public.accounts"]["dead_letters"] == "0"
    events = pipes["public.events"]
    assert int(events["change_errors"]) >= 1 and events["dead_letters"] == "1"
    snap = st["snapshot_status"]
    assert snap["last_snapshot_id"] == snap_id and snap["schedule_seconds"] == "3600"
    assert int(snap["last_snapshot_size_bytes"]) > 0
    last = st["last_reload"]
    assert last["generation"] == st["config_generation"] == "2"
    assert {(c["kind"], c["id"]) for c in last["changes"]} == {
        (c["kind"], c["id"]) for c in reload["changes"]
    }
    assert any(c["kind"] == "pipeline_removed" for c in last["changes"])

    text = laredo(server, "status")
    assert "WAL retained" in text and "dead letters" in text and "applied" in text
    wal = size_text(int(src["wal_retained_bytes"]))
    assert re.search(rf"│ pg .*│ {re.escape(wal)} ", text), text
    acc = next(ln for ln in text.splitlines() if "public.accounts" in ln)
    assert re.search(r"│ 7\s+│ 0\s+│ 0\s+│", acc), acc
    ev = next(ln for ln in text.splitlines() if "public.events" in ln)
    assert re.search(rf"│ {events['change_errors']}\s+│ 1\s+│", ev), ev
    size = size_text(int(snap["last_snapshot_size_bytes"]))
    assert f"snapshots: latest {snap_id} (" in text and f" old, {size}); schedule every 1h 0m" in (
        text
    )
    assert "last reload: applied at " in text and "generation 2" in text
    for c in last["changes"]:
        assert f"  {c['kind']} {c['id']}" in text


def _with_wal(st: dict[str, Any]) -> dict[str, Any] | None:
    return st if int(st["sources"][0]["wal_retained_bytes"]) > 0 else None


def _applied(server: OpsServer, table: str) -> int:
    for p in server.call("GetStatus")["pipelines"]:
        if f"{p['schema']}.{p['table']}" == table:
            return int(p.get("changes_applied", 0))
    return -1


def test_sizes_and_ages_read_like_people_write_them() -> None:
    assert [size_text(n) for n in (-1, 0, 512, 1536, 5 * 2**30)] == [
        "-",
        "0 B",
        "512 B",
        "1.5 KiB",
        "5.0 GiB",
    ]
    assert [age_text(s) for s in (-3, 42, 303, 7800, 3 * 86400 + 4 * 3600)] == [
        "0s",
        "42s",
        "5m 3s",
        "2h 10m",
        "3d 4h",
    ]
