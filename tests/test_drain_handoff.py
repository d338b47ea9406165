"""Drain, end to end: ``laredo serve`` with ``shutdown.drain`` (``--drain-grace``) is stopped;
readiness turns 503, fan-out clients get GoAway carrying the deadline and keep receiving
changes until it, the server stops (snapshot on shutdown), and the same server started again
on the same snapshot takes the client back: no gap and no duplicate."""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import laredo
import pytest
from laredo.testing import TestSource, free_port
from laredo.testing.source import columns
from laredo_server import cli
from laredo_server._proto.laredo_proto.v1 import oam_pb2
from laredo_server.config import load_string
from laredo_server.runtime import ServerRuntime
from laredo_server.serve import serve
from laredo_target_fanout import FanOutClient
from laredo_target_fanout.testing import USERS, same_rows, user, wait_until

pytestmark = pytest.mark.integration


class SharedSource:
    """Registers the ``handoff-test`` source: the same TestSource for every server started
    (two instances of a server on one database)."""

    def __init__(self) -> None:
        self.source = TestSource(supports_resume=True)
        self.table = self.source.add_table(
            USERS, columns("id", "name", "team"), rows=[user(i) for i in range(30)]
        )

    @laredo.hookimpl
    def laredo_register_sources(self, registry: Any) -> None:
        registry.add("handoff-test", lambda: self.source)


@pytest.fixture
def shared() -> Iterator[SharedSource]:
    plugin = SharedSource()
    pm = laredo.get_plugin_manager()
    pm.register(plugin, name="handoff-test")
    yield plugin
    pm.unregister(plugin)


class Server:
    """``serve()`` in a thread, stopped like SIGTERM stops it."""

    def __init__(self, config: str) -> None:
        loaded = load_string(config)
        assert loaded.model is not None
        self.stop_event = threading.Event()
        self.started = threading.Event()
        self.rt: ServerRuntime | None = None
        self.code: int | None = None

        def started(rt: ServerRuntime) -> None:
            self.rt = rt
            self.started.set()

        def run() -> None:
            self.code = serve(
                loaded.model, on_started=started, stop_event=self.stop_event, checks=False
            )

        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()
        assert self.started.wait(20), "server did not start"

    def ready_status(self) -> int:
        assert self.rt is not None
        url = f"http://127.0.0.1:{self.rt.listeners.health_port}/health/ready"
        try:
            with urllib.request.urlopen(url, timeout=5) as r:
                return int(r.status)
        except urllib.error.HTTPError as exc:
            return int(exc.code)

    def stop(self) -> None:
        self.stop_event.set()

    def join(self) -> int | None:
        self.thread.join(60)
        return self.code


def test_drain_then_restart_hands_the_client_over_with_no_gap(
    shared: SharedSource, tmp_path: Path
) -> None:
    fanout, health = free_port(), free_port()
    config = f"""
    sources {{ s {{ type = handoff-test }} }}
    tables = [ {{ source = s, schema = public, table = users, targets = [
        {{ type = replication-fanout, grpc {{ port = {fanout} }}, heartbeat_interval = 200ms }}
    ] }} ]
    snapshot {{ store = local, on_shutdown = true, store_config {{ path = "{tmp_path}/s" }} }}
    grpc {{ port = 0 }}
    health {{ port = {health} }}
    shutdown {{ drain = 1500ms, grace_period = 20s }}
    """
    src, table = shared.source, shared.table
    applied: list[tuple[Any, Any]] = []
    client = FanOutClient(f"127.0.0.1:{fanout}", USERS, client_id="app-1", reconnect_initial=1.0)
    client.listen(lambda old, new: applied.append((old, new)))
    first = Server(config)
    try:
        assert first.rt is not None and first.rt.engine.await_ready(15)
        assert first.ready_status() == 200
        client.start()
        assert client.await_ready(10)
        for i in range(10):
            src.update(table, user(i, name=f"before-{i}"))
        wait_until(lambda: same_rows(client.all(), src.rows(table)), 10, "the client to follow")
        journal = client.journal_id

        stopped_at = time.time()
        first.stop()  # what SIGTERM does
        wait_until(lambda: client.go_away != "", 10, "GoAway")
        assert client.go_away == "server shutting down"
        deadline = client.drain_deadline_unix_ms / 1000
        assert stopped_at + 1.0 < deadline < stopped_at + 3.0  # shutdown.drain = 1.5 s
        assert first.ready_status() == 503  # load balancers move away
        for i in range(10, 15):  # still served until the deadline: no gap while draining
            src.update(table, user(i, name=f"draining-{i}"))
        wait_until(lambda: same_rows(client.all(), src.rows(table)), 10, "changes while draining")
        assert first.join() == 0
        assert time.time() >= deadline  # the server stopped after the drain, not before
    finally:
        first.stop()
        first.join()

    for i in range(15, 20):  # while no server runs
        src.update(table, user(i, name=f"down-{i}"))
    second = Server(config)  # the same server again: restores the shutdown snapshot
    try:
        wait_until(lambda: same_rows(client.all(), src.rows(table)), 20, "the client to resume")
        assert client.journal_id != journal and client.mode is laredo.SyncMode.DELTA
        assert client.snapshots_received == 1  # resumed by position: no second full snapshot
        names = [n["name"] for _o, n in applied if n is not None and n["name"][:4] != "user"]
        expected = [f"before-{i}" for i in range(10)] + [f"draining-{i}" for i in range(10, 15)]
        expected += [f"down-{i}" for i in range(15, 20)]
        assert sorted(names) == sorted(expected)  # each change exactly once
    finally:
        client.stop(save=False)
        second.stop()
        assert second.join() == 0


def test_drain_replication_rpc_and_laredo_drain(
    shared: SharedSource, capsys: pytest.CaptureFixture[str]
) -> None:
    fanout, grpc_port = free_port(), free_port()
    server = Server(
        f"""
        sources {{ s {{ type = handoff-test }} }}
        tables = [ {{ source = s, schema = public, table = users, targets = [
            {{ type = indexed-memory }},
            {{ type = replication-fanout, grpc {{ port = {fanout} }} }}
        ] }} ]
        grpc {{ port = {grpc_port} }}
        health {{ port = 0 }}
        """
    )
    client = FanOutClient(f"127.0.0.1:{fanout}", USERS, client_id="admin-drained")
    addr = f"127.0.0.1:{grpc_port}"
    try:
        client.start()
        assert client.await_ready(10)
        assert cli.main(["drain", "public.nope", "--address", addr]) == 1
        assert "no replication-fanout target for public.nope" in capsys.readouterr().out
        asked = time.time()
        assert (
            cli.main(["drain", "public.users", "--deadline", "20s", "-a", addr, "-o", "json"]) == 0
        )
        resp = json.loads(capsys.readouterr().out)
        assert resp["accepted"] is True
        assert resp["drained_targets"] == ["s:public.users:replication-fanout"]
        wait_until(lambda: client.go_away == "admin", 10, "GoAway")
        assert asked + 19 < client.drain_deadline_unix_ms / 1000 < asked + 22
        with grpc.insecure_channel(addr) as ch:
            drain = ch.unary_unary(
                "/laredo.v1.LaredoOAMService/DrainReplication",
                request_serializer=oam_pb2.DrainReplicationRequest.SerializeToString,
                response_deserializer=oam_pb2.DrainReplicationResponse.FromString,
            )
            with pytest.raises(grpc.RpcError) as ei:
                drain(oam_pb2.DrainReplicationRequest(schema="public"), timeout=10)
            assert ei.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    finally:
        client.stop(save=False)
        server.stop()
        assert server.join() == 0
