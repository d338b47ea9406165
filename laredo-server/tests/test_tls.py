"""gRPC over TLS (self-signed certificate generated for the test) from the config."""

from __future__ import annotations

import datetime as dt
import ipaddress
from pathlib import Path

import grpc
import pytest
from laredo.testing import free_port
from laredo_server.config import load_string
from laredo_server.serve import runtime_from_config

from .testkit import wait_for

x509 = pytest.importorskip("cryptography.x509")


def make_cert(tmp: Path) -> tuple[Path, Path]:
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=1))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_file = tmp / "server.crt"
    key_file = tmp / "server.key"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_file, key_file


def test_grpc_tls_and_cli_tls_ca(quicktest_plugin: None, tmp_path: Path) -> None:
    cert, key = make_cert(tmp_path)
    loaded = load_string(
        f"""
sources {{ src {{ type = quicktest }} }}
tables = [ {{ source = src, table = users, targets = [ {{ type = indexed-memory }} ] }} ]
grpc {{ port = {free_port()}, tls {{ cert_file = "{cert}", key_file = "{key}" }} }}
health {{ enabled = false }}
""",
        env={},
    )
    assert loaded.model is not None
    rt = runtime_from_config(loaded.model)
    rt.start()
    try:
        assert rt.engine.await_ready(10)
        addr = f"localhost:{rt.listeners.grpc_port}"
        from laredo_server._proto.laredo_proto.v1 import oam_pb2, oam_pb2_grpc

        creds = grpc.ssl_channel_credentials(root_certificates=cert.read_bytes())
        with grpc.secure_channel(addr, creds) as ch:
            st = oam_pb2_grpc.LaredoOAMServiceStub(ch).GetStatus(oam_pb2.GetStatusRequest())
            assert st.ready
        with grpc.insecure_channel(addr) as ch:  # plaintext is refused
            with pytest.raises(grpc.RpcError) as ei:
                oam_pb2_grpc.LaredoOAMServiceStub(ch).GetStatus(
                    oam_pb2.GetStatusRequest(), timeout=2
                )
            assert ei.value.code() == grpc.StatusCode.UNAVAILABLE
        from laredo_server import cli
        from typer.testing import CliRunner

        r = CliRunner().invoke(
            cli.app, ["--address", addr, "--tls-ca", str(cert), "--output", "json", "ready"]
        )
        assert r.exit_code == 0, r.output
        assert wait_for(rt.is_ready)
    finally:
        rt.stop(grace=5)


def test_tls_files_must_exist(quicktest_plugin: None, tmp_path: Path) -> None:
    from laredo.errors import ConfigError

    with pytest.raises(ConfigError) as ei:
        load_string(
            f"""
sources {{ src {{ type = quicktest }} }}
tables = [ {{ source = src, table = users, targets = [ {{ type = indexed-memory }} ] }} ]
grpc {{ port = 0, tls {{ cert_file = "{tmp_path}/nope.crt", key_file = "{tmp_path}/k" }} }}
""",
            env={},
        )
    assert "grpc.tls.cert_file" in str(ei.value) and "grpc.tls.key_file" in str(ei.value)
