"""Keys as users type them, on real PostgreSQL: text keys are converted to the key columns'
types (bigint, uuid, numeric, timestamptz, date) over the CLI, gRPC and Connect, and
``not found`` names the table, the pipeline and the key fields."""

from __future__ import annotations

import json
import urllib.request
import uuid
from collections.abc import Iterator
from typing import Any

import grpc
import laredo
import pytest
from laredo.serialization import object_hook
from laredo_server import cli
from laredo_server._proto.laredo_proto.v1 import query_pb2 as q
from laredo_server._proto.laredo_proto.v1 import query_pb2_grpc
from laredo_server.config import Built
from laredo_server.runtime import ServerRuntime
from laredo_server.serve import attach_frontends
from laredo_source_pg import PostgresSource
from laredo_target_memory import IndexedTarget
from typer.testing import CliRunner

pytestmark = [pytest.mark.integration]

ACCOUNTS = laredo.Table("public", "accounts")
EVENTS = laredo.Table("public", "events_log")
EVENT_ID = uuid.UUID("6f1c1c7e-8a43-4f4e-9b7a-2d3c4e5f6a7b")
runner = CliRunner()


class Server:
    def __init__(self, db: Any) -> None:
        def factory(observers: Any, store_override: Any) -> Built:
            source = PostgresSource(
                db.dsn,
                slot_mode="ephemeral",
                slot_name=db.slot_name,
                publication={"create": True},
                status_interval="200ms",
            )
            events = IndexedTarget(
                indexes=[
                    laredo.Index("by_day", ["day", "amount"]),
                    laredo.Index("by_at", ["at"], unique=True),
                ]
            )
            eng = laredo.Engine(
                sources={"pg": source},
                pipelines=[
                    laredo.Pipeline("pg", ACCOUNTS, IndexedTarget(), id="accounts"),
                    laredo.Pipeline("pg", EVENTS, events, id="events"),
                ],
                observers=list(observers),
            )
            return Built(eng, None, None, None)

        self.rt = attach_frontends(ServerRuntime(factory))
        self.rt.start()
        assert self.rt.engine.await_ready(60)
        self.address = f"127.0.0.1:{self.rt.listeners.grpc_port}"
        self.channel = grpc.insecure_channel(self.address)
        self.query = query_pb2_grpc.LaredoQueryServiceStub(self.channel)

    def cli(self, *args: str, code: int = 0) -> Any:
        r = runner.invoke(
            cli.app, ["--address", self.address, *args], catch_exceptions=False, env={"COLUMNS": ""}
        )
        assert r.exit_code == code, (r.exit_code, r.output)
        return r

    def connect(self, method: str, body: dict[str, Any]) -> dict[str, Any]:
        port = self.rt.listeners.health_port
        req = urllib.request.Request(
            f"http://127.0.0.1:{port}/laredo.v1.LaredoQueryService/{method}",
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(req, timeout=30) as r:
            out: dict[str, Any] = json.loads(r.read())
            return out

    def stop(self) -> None:
        self.channel.close()
        self.rt.stop(grace=20)


@pytest.fixture
def server(pg_database: Any) -> Iterator[Server]:
    db = pg_database
    db.execute("CREATE TABLE accounts (id bigint PRIMARY KEY, email text NOT NULL)")
    db.execute("INSERT INTO accounts SELECT g, 'u' || g || '@x' FROM generate_series(1, 50) g")
    db.execute(
        "CREATE TABLE events_log (id uuid PRIMARY KEY, at timestamptz NOT NULL, "
        "day date NOT NULL, amount numeric(12,2) NOT NULL)"
    )
    db.execute(
        "INSERT INTO events_log VALUES (%s, '2026-11-27 10:00:00+00', '2026-11-27', 12.50)",
        (str(EVENT_ID),),
    )
    s = Server(db)
    try:
        yield s
    finally:
        s.stop()


def test_cli_keys_typed_as_text(server: Server) -> None:
    got = json.loads(server.cli("-o", "json", "query", "get", "public.accounts", '"42"').stdout)
    assert got[0]["email"] == "u42@x"
    got = json.loads(
        server.cli("-o", "json", "query", "get", "public.events_log", str(EVENT_ID)).stdout
    )
    assert got[0]["amount"] == {"$type": "decimal", "value": "12.50"}
    rows = json.loads(
        server.cli(
            "-o", "json", "query", "lookup", "--index", "by_day", "--all",
            "public.events_log", "2026-11-27", "12.5",
        ).stdout
    )  # fmt: skip
    assert len(rows) == 1
    r = server.cli(
        "query", "lookup", "--index", "by_at", "public.events_log", "2026-11-27T11:00+01:00"
    )
    assert str(EVENT_ID) in r.stdout  # the same instant, written in another offset

    missing = server.cli("query", "get", "public.accounts", "4242", code=1).stderr
    assert "not found" in missing and "public.accounts" in missing
    assert "pipeline accounts" in missing and "id = 4242" in missing
    bad = server.cli("query", "get", "public.events_log", "not-a-uuid", code=1).stderr
    assert "'id'" in bad and "uuid" in bad and "not-a-uuid" in bad


def test_grpc_and_connect_convert_text_keys(server: Server) -> None:
    events = q.TableRef(table="public.events_log")
    got = server.query.GetRow(q.GetRowRequest(table=events, primary_key=[str(EVENT_ID)]))
    assert got.found and json.loads(got.row.json, object_hook=object_hook)["id"] == EVENT_ID
    got = server.query.GetRow(q.GetRowRequest(table=events, primary_key=[f'"{EVENT_ID}"']))
    assert got.found  # the JSON string form too
    accounts = q.TableRef(table="public.accounts")
    assert server.query.GetRow(q.GetRowRequest(table=accounts, primary_key=['"7"'])).found
    with pytest.raises(grpc.RpcError) as ei:
        server.query.GetRow(q.GetRowRequest(table=accounts, primary_key=['"7x"']))
    assert ei.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "'id'" in str(ei.value.details()) and "int8" in str(ei.value.details())

    body = {"table": {"table": "public.accounts"}, "primary_key": ['"9"']}
    assert server.connect("GetRow", body)["found"] is True
    body = {"table": {"table": "public.events_log"}, "index_name": "by_at",
            "key_values": ['"2026-11-27 10:00:00Z"']}  # fmt: skip
    assert server.connect("Lookup", body)["found"] is True
