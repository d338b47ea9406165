"""Fan-out port security against real servers and clients (issue 21: H4, H5, M9, L5): the
token on every RPC, fail-closed binding off loopback, client certificates (real CA, server and
client certificates made here), same-port options, and a decimal filter that cannot freeze the
process."""

from __future__ import annotations

import logging
import threading
import time
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import grpc
import laredo
import pytest
from laredo.errors import ConfigError
from laredo.snapshots.jsonl import JsonlSerializer
from laredo.snapshots.local import LocalSnapshotStore
from laredo.testing import free_port
from laredo.testing.pki import make_pki
from laredo.types import SnapshotMetadata, TableSnapshotInfo
from laredo_target_fanout import FanOutClient, FanOutSource, ReplicationServer
from laredo_target_fanout._filters import compile_filters, normalize_filters
from laredo_target_fanout._proto import replication_pb2 as pb
from laredo_target_fanout.calls import (
    FETCH_SNAPSHOT,
    LIST_SNAPSHOTS,
    STATUS,
    Credentials,
    build_request,
    fetch_snapshot,
    replication_status,
    sync_stub,
)
from laredo_target_fanout.options import GrpcOptions
from laredo_target_fanout.testing import USERS, Rig, wait_until

pytestmark = pytest.mark.integration

TOKEN = "fan-out-s3cret"


# -- helpers ----------------------------------------------------------------------------------


def _channel(address: str) -> grpc.Channel:
    return grpc.insecure_channel(address)


def _code(fn: Any) -> grpc.StatusCode:
    try:
        result = fn()
        if hasattr(result, "__iter__") and not hasattr(result, "ListFields"):
            list(result)
    except grpc.RpcError as exc:
        code: grpc.StatusCode = exc.code()
        return code
    return grpc.StatusCode.OK


def _every_rpc(ch: grpc.Channel, metadata: Any = None) -> dict[str, grpc.StatusCode]:
    """The status of each RPC of the service on ``ch`` (with ``metadata``)."""
    t = dict(schema=USERS.schema, table=USERS.table)
    unary = {
        "GetReplicationStatus": (
            STATUS,
            pb.GetReplicationStatusRequest,
            pb.GetReplicationStatusResponse,
        ),
        "ListSnapshots": (LIST_SNAPSHOTS, pb.ListSnapshotsRequest, pb.ListSnapshotsResponse),
    }
    out = {}
    for name, (path, req, resp) in unary.items():
        fn = ch.unary_unary(
            path, request_serializer=req.SerializeToString, response_deserializer=resp.FromString
        )
        out[name] = _code(lambda fn=fn, req=req: fn(req(**t), timeout=5, metadata=metadata))
    fetch = ch.unary_stream(
        FETCH_SNAPSHOT,
        request_serializer=pb.FetchSnapshotRequest.SerializeToString,
        response_deserializer=pb.SyncResponse.FromString,
    )
    out["FetchSnapshot"] = _code(
        lambda: fetch(
            pb.FetchSnapshotRequest(snapshot_id="nope", **t), timeout=5, metadata=metadata
        )
    )

    def first_sync_message() -> Any:
        call = sync_stub(ch)(build_request(USERS, "probe"), timeout=5, metadata=metadata)
        try:
            return next(iter(call))
        finally:
            call.cancel()

    out["Sync"] = _code(first_sync_message)
    return out


# -- H4: token, fail closed, client certificates ----------------------------------------------


def test_off_loopback_without_token_is_a_config_error_naming_the_keys(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as err:
        laredo.target("replication-fanout", grpc={"host": "0.0.0.0", "port": 0})
    assert "grpc.auth.token" in str(err.value) and "allow_unauthenticated" in str(err.value)
    for bad in ("", "   "):
        with pytest.raises(ConfigError) as err:
            laredo.target("replication-fanout", grpc={"port": 0, "auth": {"token": bad}})
        assert "grpc.auth.token" in str(err.value) and "empty" in str(err.value)
    empty = tmp_path / "token"
    empty.write_text(" \n")
    with pytest.raises(ConfigError) as err:
        laredo.target(
            "replication-fanout",
            grpc={"host": "0.0.0.0", "port": 0, "auth": {"token_file": str(empty)}},
        )
    assert "grpc.auth.token_file" in str(err.value) and "empty" in str(err.value)
    # the value of a token never shows in an error
    with pytest.raises(ConfigError) as err:
        laredo.target(
            "replication-fanout", grpc={"port": 0, "auth": {"token": TOKEN, "token_file": "x"}}
        )
    assert TOKEN not in str(err.value)


def test_fanout_port_follows_the_core_auth_rule(tmp_path: Path) -> None:
    """One rule, one home: a fan-out port's problems are laredo.auth's, word for word."""
    from laredo.auth import AuthConfig, auth_problems
    from laredo_target_fanout.options import FANOUT_PORT

    empty = tmp_path / "token"
    empty.write_text("\n")
    cases: list[tuple[dict[str, Any], str]] = [
        ({}, "0.0.0.0"),
        ({"token": " "}, "127.0.0.1"),
        ({"token_file": str(empty)}, "0.0.0.0"),
        ({"token_file": str(tmp_path / "missing")}, "127.0.0.1"),
    ]
    for auth, host in cases:
        expected = auth_problems(
            AuthConfig.model_validate(auth), key="grpc.auth", host=host, serves=FANOUT_PORT
        )
        assert expected
        with pytest.raises(ConfigError) as err:
            laredo.target("replication-fanout", grpc={"host": host, "port": 0, "auth": auth})
        for problem in expected:
            assert problem in str(err.value)
    # protect_reads means nothing on a port where every RPC reads rows: said, not ignored
    with pytest.raises(ConfigError, match=r"grpc\.auth: protect_reads does not apply"):
        laredo.target(
            "replication-fanout", grpc={"port": 0, "auth": {"token": TOKEN, "protect_reads": True}}
        )


def test_allow_unauthenticated_off_loopback_starts_with_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="laredo_target_fanout.service")
    rig = Rig(grpc={"host": "0.0.0.0", "port": 0, "auth": {"allow_unauthenticated": True}})
    try:
        address = f"127.0.0.1:{rig.target.address.rsplit(':', 1)[1]}"
        c = FanOutClient(address, USERS).start()
        try:
            assert c.await_ready(10) and c.count() == 100
        finally:
            c.stop(save=False)
    finally:
        rig.stop()
    assert any(
        "WITHOUT authentication" in r.getMessage()
        and "grpc.auth.allow_unauthenticated = true" in r.getMessage()
        for r in caplog.records
    ), caplog.text


def test_token_is_checked_on_every_rpc() -> None:
    rig = Rig(grpc={"port": 0, "auth": {"token": TOKEN}})
    try:
        with _channel(rig.address) as ch:
            unauth = grpc.StatusCode.UNAUTHENTICATED
            assert _every_rpc(ch) == dict.fromkeys(_every_rpc(ch), unauth)
            wrong = [("authorization", "Bearer wrong")]
            assert set(_every_rpc(ch, wrong).values()) == {unauth}
            good = _every_rpc(ch, [("authorization", f"Bearer {TOKEN}")])
            assert good == {
                "GetReplicationStatus": grpc.StatusCode.OK,
                "ListSnapshots": grpc.StatusCode.OK,
                "FetchSnapshot": grpc.StatusCode.NOT_FOUND,
                "Sync": grpc.StatusCode.OK,
            }
        c = FanOutClient(rig.address, USERS, token=TOKEN, client_id="good").start()
        bad = FanOutClient(rig.address, USERS, client_id="bad", reconnect_initial=0.05).start()
        try:
            assert c.await_ready(10) and c.count() == 100
            wait_until(lambda: bad.reconnects >= 2, 10, "unauthenticated client retries")
            assert not bad.ready and bad.count() == 0 and "token" in bad.last_error
            creds = Credentials(token=TOKEN)
            assert replication_status(rig.address, USERS, creds).row_count == 100
            with pytest.raises(grpc.RpcError) as err:
                replication_status(rig.address, USERS)
            assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
        finally:
            c.stop(save=False)
            bad.stop(save=False)
    finally:
        rig.stop()


def test_not_found_lists_tables_only_to_an_authenticated_caller() -> None:
    for auth, listed in (({}, False), ({"token": TOKEN}, True)):
        rig = Rig(grpc={"port": 0, "auth": auth})
        try:
            creds = Credentials(token=auth.get("token"))
            with pytest.raises(grpc.RpcError) as err:
                replication_status(rig.address, "public.other", creds)
            assert err.value.code() == grpc.StatusCode.NOT_FOUND
            assert ("public.users" in (err.value.details() or "")) is listed
        finally:
            rig.stop()


def test_mtls_client_certificate_and_token(tmp_path: Path) -> None:
    pki = make_pki(tmp_path)
    tls = {
        "cert_file": str(pki.server_cert),
        "key_file": str(pki.server_key),
        "client_ca_file": str(pki.ca),
    }
    rig = Rig(grpc={"port": 0, "tls": tls, "auth": {"token": TOKEN}})
    ca = pki.ca.read_bytes()
    cert, key = pki.client_cert.read_bytes(), pki.client_key.read_bytes()
    good = FanOutClient(
        rig.address, USERS, root_certificates=ca, client_cert=cert, client_key=key, token=TOKEN
    ).start()
    no_cert = FanOutClient(
        rig.address, USERS, root_certificates=ca, token=TOKEN, reconnect_initial=0.05
    ).start()
    try:
        assert good.await_ready(10) and good.count() == 100
        wait_until(lambda: no_cert.reconnects >= 2, 10, "client without a certificate retries")
        assert not no_cert.ready and no_cert.count() == 0
        # the cascade source presents the same credentials from files
        token_file = tmp_path / "token"
        token_file.write_text(TOKEN + "\n")
        src = laredo.source(
            "fanout",
            address=rig.address,
            token_file=str(token_file),
            root_certificates_file=str(pki.ca),
            client_cert_file=str(pki.client_cert),
            client_key_file=str(pki.client_key),
        )
        assert isinstance(src, FanOutSource)
        replica = laredo.target("indexed-memory")
        engine = laredo.Engine(
            sources={"up": src}, pipelines=[laredo.Pipeline("up", USERS, replica)]
        )
        engine.start()
        try:
            assert engine.await_ready(15)
            assert replica.count() == 100
        finally:
            engine.stop()
    finally:
        good.stop(save=False)
        no_cert.stop(save=False)
        rig.stop()


def test_fanout_source_options_reject_half_credentials() -> None:
    with pytest.raises(ConfigError, match="client_cert_file and client_key_file"):
        laredo.source("fanout", address="127.0.0.1:1", client_cert_file="c.pem")
    with pytest.raises(ConfigError, match="token"):
        laredo.source("fanout", address="127.0.0.1:1", token=" ")


# -- M9: one port, one set of grpc options ----------------------------------------------------


def test_targets_sharing_a_port_need_the_same_grpc_options() -> None:
    port = free_port()
    first = ReplicationServer.acquire(GrpcOptions(port=port))
    try:
        with pytest.raises(ConfigError) as err:
            ReplicationServer.acquire(GrpcOptions(port=port, auth={"token": TOKEN}))
        assert "grpc.auth" in str(err.value) and TOKEN not in str(err.value)
        same = ReplicationServer.acquire(GrpcOptions(port=port))
        assert same is first
        same.release()
    finally:
        first.release()
    # the port is free again once its last user released it
    again = ReplicationServer.acquire(GrpcOptions(port=port, auth={"token": TOKEN}))
    again.release()


def test_targets_sharing_a_port_with_different_grpc_are_a_config_error() -> None:
    """Caught when the configuration is checked (config validate, check, serve), naming both
    pipelines and the differing keys, never the values; the runtime check stays as a net."""
    from laredo.config import EngineConfig, reference_problems

    def problems(*grpcs: dict[str, Any]) -> list[str]:
        tree = {
            "sources": {"src": {"type": "postgresql"}},
            "tables": [
                {
                    "source": "src",
                    "table": f"t{i}",
                    "targets": [{"type": "replication-fanout", "id": f"fan{i}", "grpc": g}],
                }
                for i, g in enumerate(grpcs)
            ],
        }
        return [str(p) for p in reference_problems(EngineConfig.model_validate(tree))]

    port = 4555
    [msg] = problems(
        {"port": port, "auth": {"token": TOKEN}},
        {"port": port, "auth": {"token": "other-token"}, "max_clients": 3},
    )
    assert msg.startswith("tables.1.targets.0: pipeline 'fan1'") and "'fan0'" in msg
    assert "grpc.auth.token, grpc.max_clients" in msg and f"127.0.0.1:{port}" in msg
    assert TOKEN not in msg and "other-token" not in msg
    # the same section, different ports and free ports (0) are fine
    same = {"port": port, "auth": {"token": TOKEN}}
    assert problems(same, dict(same)) == []
    assert problems({"port": port}, {"port": port + 1, "max_clients": 3}) == []
    assert problems({"port": 0}, {"port": 0, "max_clients": 3}) == []


# -- H5: a decimal filter cannot freeze the process -------------------------------------------


def test_huge_decimal_filter_is_rejected_quickly_while_the_server_keeps_answering() -> None:
    rig = Rig(grpc={"port": 0})
    gaps: list[float] = []
    stop = threading.Event()

    def tick() -> None:
        last = time.monotonic()
        while not stop.is_set():
            time.sleep(0.01)
            now = time.monotonic()
            gaps.append(now - last)
            last = now

    ticker = threading.Thread(target=tick, daemon=True)
    ticker.start()
    try:
        with _channel(rig.address) as ch:
            # 1e200001 first: before the fix it was accepted (and expanded, ~2 s) instead of
            # hanging the process like 1e100000000
            for value in ("1e200001", "1e100000000", "-1E-100000000"):
                req = pb.SyncRequest(
                    schema="public",
                    table="users",
                    filters=[
                        pb.FieldPredicate(
                            field="id",
                            equals=pb.TypedValue(
                                json=f'{{"$type":"decimal","value":"{value}"}}'.encode()
                            ),
                        )
                    ],
                )
                t0 = time.monotonic()
                with pytest.raises(grpc.RpcError) as err:
                    next(iter(sync_stub(ch)(req, timeout=10)))
                assert time.monotonic() - t0 < 2
                assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT, err.value
                assert "decimal" in (err.value.details() or "")
            # inside the limit: accepted, and compared without building a 150000-digit int
            big = pb.SyncRequest(
                schema="public",
                table="users",
                filters=[
                    pb.FieldPredicate(
                        field="id",
                        equals=pb.TypedValue(json=b'{"$type":"decimal","value":"1e150000"}'),
                    )
                ],
            )
            t0 = time.monotonic()
            call = sync_stub(ch)(big, timeout=10)
            assert next(iter(call)).WhichOneof("msg") == "handshake"
            call.cancel()
            assert time.monotonic() - t0 < 0.5
            t0 = time.monotonic()
            assert replication_status(rig.address, USERS).row_count == 100
            assert time.monotonic() - t0 < 1
    finally:
        stop.set()
        ticker.join(5)
        rig.stop()
    assert max(gaps) < 0.5, f"a thread stalled for {max(gaps):.2f} s"


def test_decimal_filters_compare_by_value_without_expanding_the_exponent() -> None:
    big = Decimal("1e150000")  # inside the limit: int() of it would take about a second
    t0 = time.monotonic()
    match = compile_filters(
        normalize_filters([("id", "in", [Decimal("42"), Decimal("0.5"), big, Decimal("NaN")])])
    )
    assert match is not None
    assert match({"id": 42}) and match({"id": 42.0}) and match({"id": Decimal("42.000")})
    assert match({"id": 0.5}) and match({"id": Decimal("0.50")})
    assert match({"id": big}) and match({"id": Decimal("10e149999")})
    assert not match({"id": 43}) and not match({"id": True}) and not match({"id": None})
    assert not match({"id": Decimal("1e-100000000")}) and not match({"id": float("nan")})
    assert time.monotonic() - t0 < 0.5
    with pytest.raises(ConfigError, match="exponent"):
        normalize_filters([("id", "equals", Decimal("1e100000000"))])


# -- L5: FetchSnapshot serves only the target's own snapshots ---------------------------------


def test_fetch_snapshot_does_not_serve_an_engine_snapshot_from_a_shared_store(
    tmp_path: Path,
) -> None:
    store = LocalSnapshotStore(tmp_path / "snaps", fsync=False)
    info = TableSnapshotInfo(USERS, 1, (), target_type="indexed-memory", pipeline_id="other")
    meta = SnapshotMetadata(
        snapshot_id="engine-snap",
        created_at=datetime.now(UTC),
        source_positions={},
        tables=(info,),
    )
    store.save("engine-snap", meta, {USERS: [{"id": 1, "secret": "x"}]}, JsonlSerializer())
    rig = Rig(grpc={"port": 0}, snapshot={"store": store})
    try:
        with pytest.raises(grpc.RpcError) as err:
            fetch_snapshot(rig.address, USERS, "engine-snap")
        assert err.value.code() == grpc.StatusCode.NOT_FOUND
        assert "retained" in (err.value.details() or "")
    finally:
        rig.stop()


def test_fanout_cli_presents_credentials_from_the_environment(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from laredo_target_fanout.cli import run

    rig = Rig(grpc={"port": 0, "auth": {"token": TOKEN}})
    try:
        argv = ["status", "--address", rig.address, "--table", "public.users", "--json"]
        monkeypatch.delenv("LAREDO_FANOUT_TOKEN", raising=False)
        assert run(argv) == 1
        assert "UNAUTHENTICATED" in capsys.readouterr().err
        monkeypatch.setenv("LAREDO_FANOUT_TOKEN", TOKEN)
        assert run(argv) == 0
        assert '"row_count": 100' in capsys.readouterr().out
    finally:
        rig.stop()


def test_preflight_check_warns_about_an_open_or_clear_text_port(tmp_path: Path) -> None:
    from laredo.preflight import CheckRequest
    from laredo_target_fanout._plugin import check_port_security
    from laredo_target_fanout.options import ReplicationFanoutOptions

    def codes(grpc_opts: dict[str, Any]) -> list[str]:
        opts = ReplicationFanoutOptions.model_validate({"grpc": grpc_opts})
        req = CheckRequest("target", "replication-fanout", "tables.0.targets.0", opts)
        return [f.code for f in check_port_security(req)]

    assert codes({"host": "0.0.0.0", "auth": {"allow_unauthenticated": True}}) == [
        "FANOUT_UNAUTHENTICATED"
    ]
    assert codes({"host": "0.0.0.0", "auth": {"token": TOKEN}}) == ["FANOUT_TOKEN_WITHOUT_TLS"]
    pki = make_pki(tmp_path)
    tls = {"cert_file": str(pki.server_cert), "key_file": str(pki.server_key)}
    assert codes({"host": "0.0.0.0", "auth": {"token": TOKEN}, "tls": tls}) == []
    assert codes({"host": "127.0.0.1"}) == []
