"""The ``laredo`` CLI against a real server (in-process runner) and as a subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from laredo_server import cli
from typer.testing import CliRunner

from .testkit import USERS, Harness, wait_for

runner = CliRunner()


def addr(h: Harness) -> list[str]:
    return ["--address", f"127.0.0.1:{h.rt.listeners.grpc_port}"]


def run(h: Harness | None, *args: str, token: str | None = None, code: int = 0) -> Any:
    pre = ["--address", f"127.0.0.1:{h.rt.listeners.grpc_port}"] if h else []
    if token:
        pre += ["--token", token]
    r = runner.invoke(cli.app, [*pre, *args], catch_exceptions=False, env={"COLUMNS": "250"})
    assert r.exit_code == code, (r.exit_code, r.output)
    return r


def js(h: Harness, *args: str, code: int = 0) -> Any:
    return json.loads(run(h, "--output", "json", *args, code=code).stdout)


def test_status_pipelines_tables_schema_source(harness: Harness) -> None:
    out = run(harness, "status").output
    assert "STREAMING" in out and "users" in out and "orders" in out
    st = js(harness, "status")
    assert st["state"] == "SERVICE_STATE_STREAMING" and st["ready"] is True
    assert {p["pipeline_id"] for p in js(harness, "pipelines")} == {"users", "orders"}
    assert js(harness, "status", "--table", "public.users")["pipelines"][0]["row_count"] == "25"
    assert {t["table"] for t in js(harness, "tables")} == {"users", "orders"}
    cols = js(harness, "schema", "public.orders")
    assert [c["column_name"] for c in cols] == ["region", "id", "total"]
    assert "region" in run(harness, "schema", "orders").output
    assert js(harness, "source", "src")[0]["id"] == "src"
    r = run(harness, "schema", "public.nope", code=1)
    assert "NOT_FOUND" in r.stderr


def test_query_commands(harness: Harness) -> None:
    assert js(harness, "query", "count", "public.users") == {"count": 25}
    assert run(harness, "query", "count", "users").stdout.strip() == "25"
    assert js(harness, "query", "get", "public.users", "3")[0]["email"] == "u3@x"
    assert js(harness, "query", "get", "public.orders", "eu", "1")[0]["total"] == {
        "$type": "decimal",
        "value": "9.50",
    }
    assert "9.50" in run(harness, "query", "get", "public.orders", "eu", "1").output
    assert js(harness, "query", "lookup", "public.users", "u5@x")[0]["id"] == 5
    rows = js(harness, "query", "lookup", "--index", "by_team", "--all", "public.users", "1")
    assert sorted(r["id"] for r in rows) == [1, 4, 7, 10, 13, 16, 19, 22, 25]
    page = js(harness, "query", "list", "public.users", "--limit", "10")
    assert [r["id"] for r in page["rows"]] == list(range(1, 11)) and page["total_count"] == 25
    nxt = js(
        harness,
        "query",
        "list",
        "public.users",
        "--limit",
        "10",
        "--page-token",
        page["next_page_token"],
    )
    assert [r["id"] for r in nxt["rows"]] == list(range(11, 21))
    every = js(harness, "query", "list", "public.users", "--limit", "7", "--all")
    assert [r["id"] for r in every["rows"]] == list(range(1, 26))
    assert "not found" in run(harness, "query", "get", "public.users", "999", code=1).stderr


def test_tables_do_not_wrap_when_piped(harness: Harness) -> None:
    pre = ["--address", f"127.0.0.1:{harness.rt.listeners.grpc_port}"]
    for i in range(3):
        email = f"{'long-address-' * 8}{i}@example.com"
        harness.source.insert(USERS, {"id": 900 + i, "name": "n" * 40, "email": email, "team": 1})
    assert wait_for(lambda: js(harness, "query", "count", "public.users")["count"] == 28, 10)
    r = runner.invoke(cli.app, [*pre, "query", "list", "public.users", "--limit", "100"],
                      catch_exceptions=False, env={"COLUMNS": ""})  # fmt: skip
    rows = [ln for ln in r.stdout.splitlines() if "long-address-" in ln]
    assert len(rows) == 3 and all(len(ln) > 120 for ln in rows), r.stdout  # one line per row
    r = runner.invoke(cli.app, [*pre, "query", "get", "public.users", "999"], env={"COLUMNS": ""})
    assert r.exit_code == 1
    assert "no row of public.users (pipeline users) with id = 999" in " ".join(r.stderr.split())


def test_admin_commands(harness: Harness) -> None:
    assert "reloaded public.users" in run(harness, "reload", "public.users").output
    assert "reloaded 2 table(s)" in run(harness, "reload", "--all").output
    run(harness, "reload", code=2)
    assert "PAUSED" in run(harness, "pause", "src").output
    harness.source.insert(USERS, {"id": 77, "name": "x", "email": "x77", "team": 0})
    assert js(harness, "query", "count", "public.users") == {"count": 25}
    assert "STREAMING" in run(harness, "resume", "src").output
    assert wait_for(lambda: js(harness, "query", "count", "public.users") == {"count": 26})
    r = run(harness, "reset-source", "src", "--yes", code=1)
    assert "FAILED_PRECONDITION" in r.stderr and "cannot be reset" in r.stderr
    r = runner.invoke(
        cli.app,
        ["--address", f"127.0.0.1:{harness.rt.listeners.grpc_port}", "reset-source", "src"],
        input="n\n",
    )
    assert r.exit_code == 1 and "aborted" in r.stderr


def test_snapshot_dead_letter_replay_commands(harness: Harness) -> None:
    sid = run(harness, "snapshot", "create", "--meta", "who=test").stdout.strip()
    assert sid.startswith("snap-")
    listed = js(harness, "snapshot", "list")
    assert [s["snapshot_id"] for s in listed] == [sid]
    info = js(harness, "snapshot", "inspect", sid)
    assert json.loads(info["user_meta_json"]) == {"who": "test"}
    assert info["layout"] == 2
    (users,) = [a for a in info["artifacts"] if a["table"] == "users"]
    assert [(p["format"], int(p["rows"])) for p in users["parts"]] == [("jsonl", 25)]
    text = run(harness, "snapshot", "inspect", sid).output
    assert "public.users" in text and "parts (layout 2)" in text and "part-00000.jsonl" in text
    sid2 = run(harness, "snapshot", "create").stdout.strip()
    assert js(harness, "snapshot", "prune", "--keep", "1")["deleted_ids"] == [sid]
    r = runner.invoke(cli.app, [*addr(harness), "replay", "start", sid2], input="n\n")
    assert r.exit_code == 1 and "aborted" in r.stderr and harness.rt.replays == {}
    r = run(harness, "replay", "start", sid2, "public.orders", "--wait", "--yes")
    assert "completed, 2 rows" in r.output
    rid = run(harness, "replay", "start", sid2, "--speed", "2", "--pipeline", "users", "-y")
    rid = rid.stdout.strip()
    assert js(harness, "replay", "status", rid)["state"] in ("running", "completed")
    assert "stopped" in run(harness, "replay", "stop", rid).output
    assert "restarted from snapshot" in run(harness, "snapshot", "restore", sid2, "--yes").output
    assert run(harness, "snapshot", "delete", sid2).exit_code == 0
    assert js(harness, "dead-letters", "list") == []
    assert "replayed 0" in run(harness, "dead-letters", "replay", "users").output
    assert "purged 0" in run(harness, "dead-letters", "purge").output


def test_ready_exit_code_and_watch(harness: Harness) -> None:
    assert "ready" in run(harness, "ready").output
    run(harness, "ready", "--pipeline", "users")
    harness.rt.begin_drain()
    r = run(harness, "ready", "--source", "src", code=1)
    assert "shutting down" in r.output
    harness.rt.draining = False
    r = run(harness, "--output", "json", "watch", "--count", "2")
    events = [json.loads(line) for line in r.stdout.splitlines()]
    assert {e["type"] for e in events} == {"pipeline_state_change"}
    harness.source.insert(USERS, {"id": 88, "name": "w", "email": "w88", "team": 0})
    r = run(
        harness, "--output", "json", "watch", "public.users", "--replay-existing", "--count", "26"
    )
    evs = [json.loads(line) for line in r.stdout.splitlines()]
    assert len(evs) == 26 and {e["action"] for e in evs} == {"INSERT"}


def test_token_is_sent(tmp_path: Path) -> None:
    h = Harness(tmp_path, token="sekret").start()
    try:
        r = run(h, "pause", "src", code=1)
        assert "UNAUTHENTICATED" in r.stderr
        run(h, "pause", "src", token="sekret")
    finally:
        h.stop()


def test_unreachable_server_is_one_clear_line() -> None:
    r = runner.invoke(cli.app, ["--address", "127.0.0.1:1", "--timeout", "1", "status"])
    assert r.exit_code == 1
    assert "cannot reach the server at 127.0.0.1:1" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_plugins_lists_types() -> None:
    data = json.loads(runner.invoke(cli.app, ["--output", "json", "plugins"]).stdout)
    names = {(t["kind"], t["name"]) for t in data["types"]}
    assert {
        ("target", "indexed-memory"),
        ("observer", "prometheus"),
        ("source", "postgresql"),
    } <= names
    provider = {t["name"]: t["provider"] for t in data["types"] if t["kind"] == "observer"}
    assert provider["prometheus"].startswith("laredo-server 0.1.0")
    assert any("laredo_register_observers" in p["hooks"] for p in data["plugins"])


def test_cli_hook_adds_commands() -> None:
    import laredo

    class P:
        @laredo.hookimpl
        def laredo_register_cli_commands(self, app: Any) -> None:
            @app.command("hello-plugin")
            def hello() -> None:
                print("hi from a plugin")

    pm = laredo.get_plugin_manager()
    p = P()
    pm.register(p, name="cli-test-plugin")
    try:
        app = cli.create_app()
        cli.add_plugin_commands(app)
        r = runner.invoke(app, ["hello-plugin"])
        assert r.exit_code == 0 and "hi from a plugin" in r.stdout
        names = [
            line.split()[1]
            for line in runner.invoke(app, ["--help"]).stdout.splitlines()
            if line.startswith("│ ") and len(line.split()) > 2
        ]
        assert names.index("hello-plugin") > names.index("query")  # after the built-ins
    finally:
        pm.unregister(p)
    assert runner.invoke(cli.app, ["hello-plugin"]).exit_code == 2  # cli.app was not changed


def test_builtin_command_modules_are_laredo_plugins() -> None:
    """Each first-party module implements the hook as declared by laredo's hookspecs, and
    together they register exactly the commands of the help order."""
    import typer
    from laredo.plugins import PluginManager

    pm = PluginManager(autoload=False)
    for module in cli.BUILTIN_MODULES:
        pm.register(module)  # validates the hookimpl against the spec
    app = typer.Typer()
    pm.call_cli_hook(app)
    commands = {c.name or getattr(c.callback, "__name__", "") for c in app.registered_commands}
    assert commands | {g.name for g in app.registered_groups} == set(cli.HELP_ORDER)


def test_help_lists_every_command_in_order() -> None:
    out = runner.invoke(cli.app, ["--help"], env={"COLUMNS": "200"}).stdout
    names = [line.split()[1] for line in out.splitlines() if line.startswith("│ ")]
    listed = [n for n in names if n in cli.HELP_ORDER]
    assert listed == list(cli.HELP_ORDER)


def test_options_are_per_invocation(tmp_path: Path) -> None:
    good = tmp_path / "good.conf"
    good.write_text(
        CONF_BAD.replace(", slotmode = x", "")
        .replace(", bogus = 1", "")
        .replace("port = nope", "port = 4001")
    )
    assert json.loads(run(None, "--output", "json", "config", "validate", str(good)).stdout)[
        "valid"
    ]
    assert "config is valid" in run(None, "config", "validate", str(good)).stdout


CONF_BAD = """
sources { pg { type = postgresql, connection = "postgresql://u:pw@127.0.0.1:1/x", slotmode = x } }
tables = [ { source = pg, table = t, targets = [ { type = indexed-memory, bogus = 1 } ] } ]
grpc { port = nope }
"""


def laredo(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    exe = Path(sys.executable).parent / "laredo"
    return subprocess.run(
        [str(exe), *args],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **(env or {})},
    )


def test_config_validate_and_dump(tmp_path: Path) -> None:
    bad = tmp_path / "bad.conf"
    bad.write_text(CONF_BAD)
    # the real entry point: exit code 2, every problem listed, no password echoed
    r = laredo("config", "validate", str(bad))
    assert r.returncode == 2
    assert "grpc.port" in r.stderr and "sources.pg.slotmode" in r.stderr
    assert "tables.0.targets.0.bogus" in r.stderr and "bad.conf:3" in r.stderr
    assert ":pw@" not in r.stderr
    good = tmp_path / "good.conf"
    good.write_text(
        CONF_BAD.replace(", slotmode = x", "")
        .replace(", bogus = 1", "")
        .replace("port = nope", "port = 4001")
    )
    r = laredo(
        "config",
        "dump",
        str(good),
        "--set",
        "grpc.port=5001",
        env={"LAREDO_SOURCES__PG__SLOT_NAME": "from_env"},
    )
    assert r.returncode == 0
    assert "u:***@" in r.stdout and ":pw@" not in r.stdout
    assert "port = 5001" in r.stdout and 'slot_name = "from_env"' in r.stdout
    r = run(None, "config", "validate", str(good))
    assert "config is valid" in r.stdout
    assert (
        json.loads(run(None, "--output", "json", "config", "dump", str(good)).stdout)["grpc"][
            "port"
        ]
        == 4001
    )
    r = run(None, "serve", "--config", str(bad), code=2)
    assert "invalid configuration" in r.stderr


@pytest.mark.parametrize("args", [["--output", "xml", "status"], ["serve"]])
def test_usage_errors_exit_2(args: list[str]) -> None:
    env = {k: v for k, v in os.environ.items() if k != "LAREDO_CONFIG"}
    r = runner.invoke(cli.app, args, env=env)
    assert r.exit_code == 2


def test_wait_command(harness: Harness) -> None:
    pos = harness.source.insert(USERS, {"id": 900, "name": "w", "email": "w@x", "team": 0})
    out = js(harness, "wait", "src", str(pos), "--timeout", "5s")
    assert out["reached"] is True and int(out["applied_position"]) >= pos
    r = run(harness, "wait", "src", str(pos + 10_000), "--timeout", "200ms", code=1)
    assert "not reached" in r.output
    r = run(harness, "wait", "src", "1", "--timeout", "soon", code=2)
    assert "--timeout" in r.output and "invalid duration" in r.output


def test_status_shows_the_configured_source_type(quicktest_plugin: None) -> None:
    from laredo.testing import free_port
    from laredo_server.config import load_string
    from laredo_server.serve import runtime_from_config

    port = free_port()
    loaded = load_string(
        "sources { src { type = quicktest } }\n"
        "tables = [ { source = src, table = users, targets = [ { type = indexed-memory } ] } ]\n"
        f"grpc.port = {port}\nhealth.enabled = false\n"
    )
    assert loaded.model is not None
    rt = runtime_from_config(loaded.model)
    rt.start()
    try:
        assert rt.engine.await_ready(10)
        pre = ["--address", f"127.0.0.1:{port}"]
        r = runner.invoke(cli.app, [*pre, "-o", "json", "status"], catch_exceptions=False)
        assert [s["source_type"] for s in json.loads(r.stdout)["sources"]] == ["quicktest"]
        text = runner.invoke(cli.app, [*pre, "status"], env={"COLUMNS": "250"}).stdout
        assert "quicktest" in text and "TestSource" not in text
    finally:
        rt.stop(grace=5)


def test_config_reload_dry_run_and_restart_only_changes(
    quicktest_plugin: None, tmp_path: Path
) -> None:
    """``--dry-run`` says "dry run" once; a change that needs a restart is reported by the
    reload that sees it, not again by the later ones."""
    from laredo.testing import free_port
    from laredo_server.config import load_config
    from laredo_server.serve import runtime_from_config

    port = free_port()
    cfg = tmp_path / "laredo.conf"
    base = (
        "sources { src { type = quicktest } }\n"
        "tables = [ { source = src, table = users, targets = [ { type = indexed-memory } ] } ]\n"
        f"grpc.port = {port}\nhealth.enabled = false\n"
    )
    cfg.write_text(base + "observability.lag_interval = 10s\n")

    def load() -> Any:
        return load_config(cfg, conf_dirs=[], env={}).model

    rt = runtime_from_config(load(), load)
    rt.start()
    try:
        assert rt.engine.await_ready(10)
        pre = ["--address", f"127.0.0.1:{port}"]
        cfg.write_text(base + "observability.lag_interval = 5s\n")
        dry = runner.invoke(
            cli.app, [*pre, "config", "reload", "--dry-run"], env={"COLUMNS": "250"}
        )
        assert dry.exit_code == 0, dry.output
        assert dry.stdout.count("dry run") == 1, dry.stdout
        assert "needs restart: observability" in dry.stdout
        first = runner.invoke(cli.app, [*pre, "-o", "json", "config", "reload"])
        assert [c["kind"] for c in json.loads(first.stdout)["changes"]] == ["needs_restart"]
        for _ in range(2):
            later = json.loads(
                runner.invoke(cli.app, [*pre, "-o", "json", "config", "reload"]).stdout
            )
            assert later["accepted"] and later["changes"] == [], later
    finally:
        rt.stop(grace=5)


def test_wait_durable_waits_for_what_survives_a_restart(harness: Harness) -> None:
    """Memory targets behind a snapshot store: a change is applied at once but durable only
    once a snapshot holds it (what the source may then be acknowledged)."""
    pos = harness.source.insert(USERS, {"id": 901, "name": "d", "email": "d@x", "team": 0})
    assert js(harness, "wait", "src", str(pos), "--timeout", "5s")["reached"] is True
    r = run(harness, "wait", "src", str(pos), "--durable", "--timeout", "300ms", code=1)
    assert "not reached" in r.output and "durable through" in r.output
    harness.rt.engine.create_snapshot()
    out = js(harness, "wait", "src", str(pos), "--durable", "--timeout", "5s")
    assert out["reached"] is True and int(out["durable_position"]) >= pos
