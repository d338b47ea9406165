"""First-run defaults without a database: the gRPC default and ``grpc.port = 0``, the startup
summary and the address the CLI needs, ``laredo check`` with nothing to check, and the starter
configuration ``laredo init`` renders."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest
from laredo.errors import ConfigError
from laredo.types import PipelineState, TableIdentifier
from laredo_server import cli
from laredo_server.addresses import cli_address
from laredo_server.config import load_string
from laredo_server.runtime import Listeners
from laredo_server.serve import runtime_from_config
from laredo_server.starter import hocon_string, render_config
from laredo_server.startup import listening_line
from typer.testing import CliRunner

QUICK = """
sources { src { type = quicktest } }
tables = [ { source = src, table = users, targets = [ { type = indexed-memory } ] } ]
"""


def test_grpc_listens_on_loopback_4001_unless_configured(quicktest_plugin: None) -> None:
    model = load_string(QUICK, env={}).model
    assert model is not None and model.grpc is not None
    assert (model.grpc.host, model.grpc.port) == ("127.0.0.1", 4001) and model.grpc_enabled
    assert (model.health.host, model.health.port) == ("127.0.0.1", 8080)
    # a grpc section without a port is valid now (it used to need one)
    model = load_string(QUICK + 'grpc { auth { token = "t" } }', env={}).model
    assert model is not None and model.grpc is not None and model.grpc.port == 4001
    # grpc.port = 0 turns the listener off
    model = load_string(QUICK + "grpc { port = 0 }\nhealth { enabled = false }", env={}).model
    assert model is not None and not model.grpc_enabled
    rt = runtime_from_config(model)
    rt.start()
    try:
        assert rt.listeners == Listeners(None, None)
    finally:
        rt.stop(grace=5)
    # the default gRPC port taken by health: the message names the default and the way out
    with pytest.raises(ConfigError) as ei:
        load_string(QUICK + "health { port = 4001 }", env={})
    (problem,) = ei.value.problems
    assert "defaults to 4001" in problem and "grpc.port = 0" in problem


def test_cli_address_is_omitted_when_the_default_reaches_the_server() -> None:
    assert cli_address("127.0.0.1", 4001) is None
    assert cli_address("0.0.0.0", 4001) is None
    assert cli_address("127.0.0.1", 5000) == "127.0.0.1:5000"
    assert cli_address("0.0.0.0", 5000) == "localhost:5000"
    assert cli_address("::1", 5000) == "[::1]:5000"
    assert cli_address("10.0.0.5", 4001) == "10.0.0.5:4001"


def test_the_startup_summary_says_where_everything_listens_and_what_to_try(
    quicktest_plugin: None,
) -> None:
    streaming = [PipelineState.STREAMING, PipelineState.STREAMING, PipelineState.ERROR]
    model = load_string(QUICK, env={}).model
    assert model is not None
    line = listening_line(model, Listeners(4001, 8080), streaming)
    assert line.startswith("laredo ") and "serving 3 pipeline(s) (1 error, 2 streaming)" in line
    assert "gRPC (OAM, Query) on 127.0.0.1:4001" in line
    assert "HTTP (health, metrics, JSON) on http://127.0.0.1:8080" in line
    assert line.endswith("next: laredo status")
    model = load_string(
        QUICK
        + 'grpc { port = 4100, host = "0.0.0.0", auth { token = "t", protect_reads = true } }',
        env={},
    ).model
    assert model is not None
    line = listening_line(model, Listeners(4100, None), [])
    assert "HTTP off (health.enabled = false)" in line
    assert line.endswith("next: LAREDO_TOKEN=... laredo --address localhost:4100 status")
    model = load_string(QUICK + "grpc { port = 0 }", env={}).model
    assert model is not None
    line = listening_line(model, Listeners(None, 8081), [])
    assert "gRPC off (grpc.port = 0)" in line
    assert line.endswith("next: curl -s http://127.0.0.1:8081/health/ready")


def test_check_with_no_checked_plugin_passes(quicktest_plugin: None, tmp_path: Path) -> None:
    cfg = tmp_path / "q.conf"
    cfg.write_text(QUICK)
    r = CliRunner().invoke(cli.app, ["check", "--config", str(cfg)])
    assert r.exit_code == 0 and "nothing to check" in r.output
    r = CliRunner().invoke(cli.app, ["-o", "json", "check", "--config", str(cfg)])
    assert r.exit_code == 0 and '"passed": true' in r.output
    bad = tmp_path / "bad.conf"
    bad.write_text(QUICK + "grpc { port = nope }")
    r = CliRunner().invoke(cli.app, ["check", "--config", str(bad)])
    assert r.exit_code == 2 and "grpc.port" in r.output


@dataclass(frozen=True)
class Table:
    table: TableIdentifier
    key: tuple[str, ...]
    problem: str | None = None
    estimated_rows: int = 0

    def identity_problem(self) -> str | None:
        return self.problem


def test_starter_config_quotes_names_and_validates(quicktest_plugin: None) -> None:
    odd = Table(TableIdentifier("My Schema", "true"), ("Id", "order"))
    plain = Table(TableIdentifier("public", "users"), ("id",), estimated_rows=1200)
    nokey = Table(TableIdentifier("public", "log"), (), "no primary key")
    text, skipped = render_config(
        "postgresql://app@db/app", [nokey, odd, plain], slot_mode="stateful", slot_name="s1"
    )
    assert [s.table for s in skipped] == [nokey.table]
    assert 'schema = "My Schema", table = "true"' in text
    assert "lookup_fields = [Id, order]" in text and "~1,200 rows" in text
    assert "slot_mode = stateful" in text and "named s1_pub" in text
    assert text.index("table = users") < text.index("public.log is left out")
    # it validates, with the source swapped for the test plugin (no database here)
    swapped = text.replace("type = postgresql", "type = quicktest").replace(
        'connection = "postgresql://app@db/app"', ""
    )
    swapped = "\n".join(
        line for line in swapped.splitlines() if not line.strip().startswith("slot_")
    )
    loaded = load_string(swapped, env={})
    assert loaded.model is not None
    assert [(t.schema_, t.table) for t in loaded.model.tables] == [
        ("My Schema", "true"),
        ("public", "users"),
    ]
    assert loaded.model.tables[0].targets[0].options() == {"lookup_fields": ["Id", "order"]}
    with pytest.raises(ConfigError, match="no primary key"):
        render_config("x", [nokey])
    assert hocon_string("null") == '"null"' and hocon_string("a_b1") == "a_b1"
