"""Real fan-out servers and clients over 127.0.0.1, fed by an engine with the test source."""

from __future__ import annotations

import ipaddress
import threading
import uuid
from datetime import UTC, datetime, timedelta, timezone
from decimal import Decimal
from typing import Any
from zoneinfo import ZoneInfo

import click
import grpc
import laredo
import pytest
from click.testing import CliRunner as ClickRunner
from laredo.plugins import get_plugin_manager
from laredo.testing import TestSource
from laredo.testing.source import columns
from laredo_target_fanout import FanOutClient
from laredo_target_fanout._proto import replication_pb2 as pb
from laredo_target_fanout.cli import register as register_cli
from laredo_target_fanout.client import (
    build_request,
    fetch_snapshot,
    list_snapshots,
    replication_status,
    sync_stub,
)
from laredo_target_fanout.testing import USERS, Rig, SlowClient, same_rows, user, wait_until

pytestmark = pytest.mark.integration


def caught_up(client: FanOutClient, rig: Rig) -> bool:
    return client.last_sequence == rig.target.current_sequence and same_rows(
        client.all(), rig.target.all()
    )


def raw_call(rig: Rig, client_id: str = "", **kw: Any) -> tuple[Any, Any]:
    """A Sync call that reads only when the test iterates it (a slow client)."""
    ch = grpc.insecure_channel(
        rig.address,
        options=[
            ("grpc.http2.bdp_probe", 0),
            ("grpc.http2.lookahead_bytes", 65536),
            ("grpc.max_receive_message_length", 64 << 20),
        ],
    )
    kw.setdefault("max_batch", 1)
    call = sync_stub(ch)(build_request(USERS, client_id, **kw), timeout=60)
    return ch, call


def read_until(it: Any, kind: str) -> Any:
    for msg in it:
        if msg.WhichOneof("msg") == kind:
            return msg
    raise AssertionError(f"stream ended before {kind}")


def test_fifty_clients_converge_while_changes_stream(rig: Rig) -> None:
    src, t = rig.source, rig.table
    clients = [
        FanOutClient(
            rig.address, USERS, client_id=f"c{i}", indexes=[laredo.Index("by_team", ["team"])]
        )
        for i in range(50)
    ]
    stop = threading.Event()

    def writer() -> None:
        i = 1000
        while not stop.is_set() and i < 2500:
            src.transaction(
                [
                    ("INSERT", t, user(i), None),
                    ("UPDATE", t, user(i % 100, name=f"v{i}"), None),
                    ("DELETE", t, None, {"id": i - 3}),
                ]
            )
            i += 1

    w = threading.Thread(target=writer)
    w.start()
    for c in clients:
        c.start()
    try:
        for c in clients:
            assert c.await_ready(30), c.status()
        w.join(60)
        stop.set()
        rig.settle()
        for c in clients:
            wait_until(lambda c=c: caught_up(c, rig), 30, f"client {c.client_id} to converge")
        assert same_rows(clients[0].all(), src.rows(t))
        assert clients[7].lookup_all("by_team", 3) == [
            r for r in clients[7].all() if r["team"] == 3
        ] or sorted(map(repr, clients[7].lookup_all("by_team", 3))) == sorted(
            repr(r) for r in clients[7].all() if r["team"] == 3
        )
        st = replication_status(rig.address, USERS)
        assert st.connected_clients == 50
        assert {c.client_id for c in st.clients} == {f"c{i}" for i in range(50)}
        assert all(c.connected_at_unix_ms > 0 for c in st.clients)
    finally:
        stop.set()
        for c in clients:
            c.stop(save=False)


def test_restart_with_local_snapshot_receives_only_the_delta(rig: Rig, tmp_path: Any) -> None:
    path = tmp_path / "users.replica"
    c = FanOutClient(rig.address, USERS, local_snapshot_path=path, client_id="svc").start()
    assert c.await_ready(10)
    for i in range(20):
        rig.source.insert(rig.table, user(500 + i))
    rig.settle()
    wait_until(lambda: caught_up(c, rig))
    c.stop()
    assert path.exists() and (path.stat().st_mode & 0o777) == 0o600
    for i in range(30):
        rig.source.update(rig.table, user(i, name=f"changed{i}"))
    rig.settle()
    c2 = FanOutClient(rig.address, USERS, local_snapshot_path=path, client_id="svc")
    assert c2.count() == 120  # restored before connecting
    c2.start()
    try:
        assert c2.await_ready(10)
        wait_until(lambda: caught_up(c2, rig))
        assert c2.mode is laredo.SyncMode.DELTA
        assert c2.snapshots_received == 0
        assert c2.entries_applied == 30
        assert c2.get(3)["name"] == "changed3"
    finally:
        c2.stop()


def test_client_behind_the_journal_gets_a_full_snapshot(tmp_path: Any) -> None:
    rig = Rig(journal={"max_entries": 10, "max_age": None})
    path = tmp_path / "r"
    try:
        c = FanOutClient(rig.address, USERS, local_snapshot_path=path).start()
        assert c.await_ready(10)
        c.stop()
        for i in range(40):
            rig.source.insert(rig.table, user(1000 + i))
        rig.settle()
        assert rig.target.oldest_sequence > 1
        c2 = FanOutClient(rig.address, USERS, local_snapshot_path=path).start()
        try:
            assert c2.await_ready(10)
            wait_until(lambda: caught_up(c2, rig))
            assert c2.mode is laredo.SyncMode.FULL_SNAPSHOT and c2.snapshots_received == 1
        finally:
            c2.stop(save=False)
    finally:
        rig.stop()


BIG = "x" * 100_000  # big rows fill the transport buffers quickly


def _slow_client(rig: Rig, client_id: str) -> SlowClient:
    """A :class:`SlowClient` the server already counts as live: it marks a session live just
    after the snapshot's end reaches the client, and checks buffers of live sessions only (a
    flood written before that is never backpressure)."""
    slow = SlowClient(rig.address, client_id)
    wait_until(
        lambda: any(
            c["client_id"] == client_id and c["state"] == "live"
            for c in rig.target.status()["clients"]
        ),
        10,
    )
    return slow


def _flood(rig: Rig, n: int, start: int = 10_000) -> None:
    for i in range(n):
        rig.source.insert(rig.table, {"id": start + i, "name": BIG, "team": 1})


def test_slow_client_is_disconnected_under_drop_disconnect() -> None:
    obs = laredo.RecordingObserver()
    rig = Rig(client_buffer={"size": 20, "policy": "drop_disconnect"}, observer=obs)
    good = FanOutClient(rig.address, USERS, client_id="good").start()
    slow = _slow_client(rig, "slow")
    try:
        slow.freeze()
        assert good.await_ready(10)
        _flood(rig, 300)
        rig.settle(30)  # the writer never waits under drop_disconnect
        assert obs.wait_for("on_fanout_client_backpressure", 1, 20)
        wait_until(
            lambda: "slow" not in {c["client_id"] for c in rig.target.status()["clients"]}, 20
        )
        slow.thaw()
        end = slow.until_end()
        assert end["code"] in ("RESOURCE_EXHAUSTED", "CANCELLED"), end
        assert end["entries"] < 300  # it never got everything: no silent gap, a disconnect
        # a reading client converges (if it was dropped too, it reconnected and caught up)
        wait_until(lambda: caught_up(good, rig), 20)
        assert rig.target.stats["dropped_clients"] >= 1
        assert any(a[1] == "slow" for a in obs.of("on_fanout_client_backpressure"))
    finally:
        slow.kill()
        good.stop(save=False)
        rig.stop()


def test_slow_client_slows_the_writer_down_under_slow_down() -> None:
    obs = laredo.RecordingObserver()
    rig = Rig(client_buffer={"size": 20, "policy": "slow_down", "max_wait": 60}, observer=obs)
    slow = _slow_client(rig, "slow")
    try:
        slow.freeze()
        _flood(rig, 300)
        assert obs.wait_for("on_fanout_client_backpressure", 1, 20)
        # the writer is held back: the target stays behind the source while the client stalls
        wait_until(lambda: rig.target.status()["clients"][0]["state"] == "backpressured", 10)
        held = rig.target.current_sequence
        assert held < 300 and rig.target.position != rig.source.position
        # reading again releases the writer; the client gets every entry
        slow.thaw()
        rig.settle(30)
        wait_until(lambda: slow.events[-1].get("n") == 300 or slow.next_event().get("n") == 300, 30)
        assert rig.target.current_sequence == 300
    finally:
        slow.kill()
        rig.stop()


def test_slow_down_gives_up_on_a_client_after_max_wait() -> None:
    rig = Rig(client_buffer={"size": 20, "policy": "slow_down", "max_wait": 0.5})
    slow = _slow_client(rig, "stuck")
    try:
        slow.freeze()
        _flood(rig, 300)
        rig.settle(30)  # the writer went on without the stuck client
        assert rig.target.stats["dropped_clients"] == 1
        slow.thaw()
        end = slow.until_end()
        assert end["code"] in ("RESOURCE_EXHAUSTED", "CANCELLED") and end["entries"] < 300
    finally:
        slow.kill()
        rig.stop()


def test_max_clients_and_duplicate_client_ids() -> None:
    rig = Rig(grpc={"port": 0, "max_clients": 2})
    a = FanOutClient(rig.address, USERS, client_id="a").start()
    ch, call_b = raw_call(rig, "b")
    try:
        assert a.await_ready(10)
        read_until(call_b, "snapshot_end")
        ch3, call_c = raw_call(rig, "c")
        with pytest.raises(grpc.RpcError) as ei:
            next(iter(call_c))
        assert ei.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "max clients reached (2)" in ei.value.details()
        ch3.close()
        # the same id again replaces the old connection (it is not a third client)
        ch4, call_b2 = raw_call(rig, "b")
        read_until(call_b2, "snapshot_end")
        with pytest.raises(grpc.RpcError) as ei:
            for _ in call_b:
                pass
        assert ei.value.code() == grpc.StatusCode.ABORTED
        assert "replaced by a new connection" in ei.value.details()
        assert rig.target.status()["connected_clients"] == 2
        ch4.close()
    finally:
        a.stop(save=False)
        ch.close()
        rig.stop()


def test_drain_sends_go_away_then_ends_streams_and_refuses_new_ones() -> None:
    rig = Rig()
    ch, call = raw_call(rig, "d")
    try:
        read_until(call, "snapshot_end")
        rig.target.drain("admin", 0.6)
        msg = read_until(call, "go_away")
        assert msg.go_away.reason == "admin" and msg.go_away.drain_deadline_unix_ms > 0
        rig.source.insert(rig.table, user(777))  # still served until the deadline
        got = read_until(call, "journal")
        assert got.journal.entries[0].action == pb.ACTION_INSERT
        for _ in call:  # then the stream ends cleanly
            pass
        assert call.code() == grpc.StatusCode.OK
        ch2, call2 = raw_call(rig, "e")
        with pytest.raises(grpc.RpcError) as ei:
            next(iter(call2))
        assert ei.value.code() == grpc.StatusCode.UNAVAILABLE
        ch2.close()
        assert replication_status(rig.address, USERS).draining
    finally:
        ch.close()
        rig.stop()


def test_heartbeats_carry_the_current_sequence(rig: Rig) -> None:
    rig.source.insert(rig.table, user(900))
    rig.settle()
    ch, call = raw_call(rig, "hb")
    try:
        msg = read_until(call, "heartbeat")
        assert msg.heartbeat.current_sequence == rig.target.current_sequence == 1
    finally:
        ch.close()


def test_truncate_and_schema_change_mid_stream(rig: Rig) -> None:
    c = FanOutClient(rig.address, USERS).start()
    try:
        assert c.await_ready(10)
        src, t = rig.source, rig.table
        src.insert(t, user(300))
        src.truncate(t)
        src.insert(t, user(301))
        new_cols = columns("id", "name", "team", "email")
        src.schema_change(t, new_cols)
        src.insert(t, {"id": 302, "name": "e", "team": 1, "email": "a@b.c"})
        rig.settle()
        wait_until(lambda: caught_up(c, rig))
        assert sorted(r["id"] for r in c.all()) == [301, 302]
        assert [col.name for col in c.columns] == ["id", "name", "team", "email"]
        seqs = [s.sequence for s in rig.target.snapshots()]
        assert 2 in seqs and 4 in seqs  # right after the truncate and the schema change
    finally:
        c.stop(save=False)


def test_filters_apply_to_snapshot_and_live_changes(rig: Rig) -> None:
    filters = [{"field": "team", "in": [1, 2]}, {"field": "name", "prefix": "user"}]
    c = FanOutClient(rig.address, USERS, filters=filters).start()
    src, t = rig.source, rig.table

    def expected() -> list[dict[str, Any]]:
        return [r for r in src.rows(t) if r["team"] in (1, 2) and r["name"].startswith("user")]

    try:
        assert c.await_ready(10)
        assert same_rows(c.all(), expected()) and c.count() == 40
        src.insert(t, user(201))  # team 1: in
        src.insert(t, user(203))  # team 3: out
        src.update(t, user(1, team=4))  # leaves the subscription -> delete on the client
        src.update(t, user(3, team=2))  # enters it
        src.update(t, user(2, name="zzz"))  # prefix no longer matches
        src.delete(t, {"id": 6})
        rig.settle()
        wait_until(lambda: same_rows(c.all(), expected()), 10, "the filtered replica")
        assert c.get(1) is None and c.get(3) is not None and c.get(2) is None
        src.truncate(t)  # TRUNCATE always passes
        rig.settle()
        wait_until(lambda: c.count() == 0)
    finally:
        c.stop(save=False)


TYPED = laredo.Table("public", "typed")


def test_typed_values_arrive_identical() -> None:
    src = TestSource()
    cols = columns("id", "amount", "at", "at_zone", "uid", "blob", "doc", "big", "ratio", "day")
    rows = [
        {
            "id": i,
            "amount": Decimal("12.50") + i,
            "at": datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=timezone(timedelta(hours=-5))),
            "at_zone": datetime(2026, 3, 29, 2, 30, tzinfo=ZoneInfo("Europe/Paris")),
            "uid": uuid.UUID(int=i + 1),
            "blob": bytes(range(i, i + 8)),
            "doc": {"a": [1, 2.5, None, {"b": True}], "$t": "not a tag"},
            "big": 2**62 + i,
            "ratio": 0.1 * i,
            "day": datetime(2026, 1, 1, tzinfo=UTC).date(),
        }
        for i in range(5)
    ]
    t = src.add_table(TYPED, cols, rows=rows)
    target = laredo.target("replication-fanout", grpc={"port": 0})
    eng = laredo.Engine(sources={"s": src}, pipelines=[laredo.Pipeline("s", t, target)])
    eng.start()
    c = None
    try:
        assert eng.await_ready(10)
        c = FanOutClient(target.address, TYPED).start()
        assert c.await_ready(10)
        extra = dict(rows[0], id=99, amount=Decimal("-0.000001"), blob=b"\x00\xff")
        src.insert(t, extra)
        wait_until(lambda: c.count() == 6)
        for want in [*rows, extra]:
            got = c.get(want["id"])
            assert got == want
            assert {k: type(v) for k, v in got.items()} == {k: type(v) for k, v in want.items()}
            assert got["at_zone"].tzinfo == ZoneInfo("Europe/Paris")
            assert str(got["amount"]) == str(want["amount"])
    finally:
        if c is not None:
            c.stop(save=False)
        eng.stop()


def test_cascade_source_feeds_a_second_engine(rig: Rig) -> None:
    down = laredo.target("indexed-memory")
    source = laredo.source("fanout", address=rig.address, table="public.users")
    eng2 = laredo.Engine(sources={"up": source}, pipelines=[laredo.Pipeline("up", USERS, down)])
    eng2.start()
    try:
        assert eng2.await_ready(15)
        assert down.count() == 100
        for i in range(50):
            rig.source.update(rig.table, user(i, name=f"cascade{i}"))
        rig.source.delete(rig.table, {"id": 99})
        rig.settle()
        wait_until(lambda: same_rows(down.all(), rig.target.all()), 15, "the cascaded replica")
        # a cascaded fan-out can serve clients of its own
        assert down.get(5)["name"] == "cascade5"
    finally:
        eng2.stop()


def test_list_and_fetch_snapshots(rig: Rig) -> None:
    snaps = list_snapshots(rig.address, USERS)
    assert snaps and snaps[0].row_count == 100
    begin, rows = fetch_snapshot(rig.address, USERS, snaps[0].snapshot_id)
    assert begin.snapshot_id == snaps[0].snapshot_id and same_rows(rows, rig.source.rows(rig.table))
    with pytest.raises(grpc.RpcError) as ei:
        fetch_snapshot(rig.address, USERS, "nope")
    assert ei.value.code() == grpc.StatusCode.NOT_FOUND
    with pytest.raises(grpc.RpcError) as ei:
        list_snapshots(rig.address, "public.other")
    assert ei.value.code() == grpc.StatusCode.NOT_FOUND


def test_observer_events_for_a_client() -> None:
    obs = laredo.RecordingObserver()
    rig = Rig(observer=obs)
    try:
        c = FanOutClient(rig.address, USERS, client_id="watched").start()
        assert c.await_ready(10)
        assert obs.wait_for("on_fanout_client_connected", 1, 5)
        assert obs.wait_for("on_fanout_client_caught_up", 1, 5)
        c.stop(save=False)
        assert obs.wait_for("on_fanout_client_disconnected", 1, 5)
        _pid, cid, mode = obs.of("on_fanout_client_connected")[0]
        assert cid == "watched" and mode is laredo.SyncMode.FULL_SNAPSHOT
        assert obs.count("on_fanout_snapshot_created") >= 1
    finally:
        rig.stop()


def test_cli_commands(rig: Rig) -> None:
    @click.group()
    def app() -> None:
        pass

    get_plugin_manager().call_cli_hook(app)
    c = FanOutClient(rig.address, USERS, client_id="cli-client").start()
    try:
        assert c.await_ready(10)
        runner = ClickRunner()
        args = ["--address", rig.address, "--table", "public.users"]
        out = runner.invoke(app, ["fanout", "status", *args])
        assert out.exit_code == 0, out.output
        assert "row_count" in out.output and "100" in out.output
        out = runner.invoke(app, ["fanout", "clients", *args])
        assert out.exit_code == 0 and "cli-client" in out.output
        out = runner.invoke(app, ["fanout", "snapshots", *args, "--json"])
        assert out.exit_code == 0 and '"rows": 100' in out.output
        out = runner.invoke(app, ["fanout", "status", "--address", rig.address, "--table", "x.y"])
        assert out.exit_code != 0 and "NOT_FOUND" in out.output
    finally:
        c.stop(save=False)


def test_cli_commands_on_a_typer_app(rig: Rig) -> None:
    typer = pytest.importorskip("typer")
    from typer.testing import CliRunner

    app = typer.Typer()

    @app.command()
    def other() -> None:  # a second command, so typer keeps sub-command routing
        pass

    register_cli(app)
    out = CliRunner().invoke(
        app, ["fanout", "status", "--address", rig.address, "--table", "public.users", "--json"]
    )
    assert out.exit_code == 0, out.output
    assert '"row_count": 100' in out.output


def _self_signed(tmp_path: Any) -> tuple[str, str, bytes]:
    x509 = pytest.importorskip("cryptography.x509")
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.now(UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(days=1))
        .not_valid_after(now + timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    pem = cert.public_bytes(serialization.Encoding.PEM)
    cert_file, key_file = tmp_path / "server.pem", tmp_path / "server.key"
    cert_file.write_bytes(pem)
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return str(cert_file), str(key_file), pem


def test_tls(tmp_path: Any) -> None:
    cert, key, pem = _self_signed(tmp_path)
    rig = Rig(grpc={"port": 0, "tls": {"cert_file": cert, "key_file": key}})
    c = FanOutClient(rig.address, USERS, root_certificates=pem).start()
    plain = FanOutClient(rig.address, USERS, reconnect_initial=0.05).start()
    try:
        assert c.await_ready(10) and c.count() == 100
        # a plaintext client cannot talk to a TLS server: it keeps failing and retrying
        wait_until(lambda: plain.reconnects >= 2, 10, "plaintext reconnect attempts")
        assert not plain.ready and plain.count() == 0
    finally:
        c.stop(save=False)
        plain.stop(save=False)
        rig.stop()
