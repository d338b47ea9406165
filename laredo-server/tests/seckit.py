"""Helpers of the security tests: a CA with server and client certificates, ``laredo serve``
as a subprocess, curl calls and the peak memory of a process."""

from __future__ import annotations

import datetime as dt
import ipaddress
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .testkit import wait_for

LAREDO = str(Path(sys.executable).parent / "laredo")


@dataclass(frozen=True)
class Pki:
    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path


def make_pki(tmp: Path) -> Pki:
    """A CA, a server certificate for localhost/127.0.0.1 and a client certificate, all
    signed by the CA."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = dt.datetime.now(dt.UTC)

    def name(cn: str) -> Any:
        return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])

    def write_key(key: Any, path: Path) -> Path:
        path.write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )
        return path

    def write_cert(cert: Any, path: Path) -> Path:
        path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        return path

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = (
        x509.CertificateBuilder()
        .subject_name(name("laredo test CA"))
        .issuer_name(name("laredo test CA"))
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=1))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(ca_key, hashes.SHA256())
    )

    def leaf(cn: str, usage: Any, sans: list[Any]) -> tuple[Any, Any]:
        key = ec.generate_private_key(ec.SECP256R1())
        builder = (
            x509.CertificateBuilder()
            .subject_name(name(cn))
            .issuer_name(ca.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=1))
            .not_valid_after(now + dt.timedelta(days=1))
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        )
        if sans:
            builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        return builder.sign(ca_key, hashes.SHA256()), key

    server, server_key = leaf(
        "localhost",
        ExtendedKeyUsageOID.SERVER_AUTH,
        [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))],
    )
    client, client_key = leaf("admin", ExtendedKeyUsageOID.CLIENT_AUTH, [])
    return Pki(
        ca=write_cert(ca, tmp / "ca.crt"),
        server_cert=write_cert(server, tmp / "server.crt"),
        server_key=write_key(server_key, tmp / "server.key"),
        client_cert=write_cert(client, tmp / "client.crt"),
        client_key=write_key(client_key, tmp / "client.key"),
    )


def run_laredo(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [LAREDO, *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, "COLUMNS": "250", **(env or {})},
    )


class Served:
    """``laredo serve --config cfg`` until ``stop``; the bound ports come from its ready file."""

    def __init__(self, cfg: Path, env: dict[str, str] | None = None) -> None:
        self.ready_file = cfg.parent / f"ready-{time.monotonic_ns()}.json"
        self.log = cfg.parent / f"serve-{time.monotonic_ns()}.log"
        self.proc = subprocess.Popen(
            [LAREDO, "serve", "--config", str(cfg), "--ready-file", str(self.ready_file)],
            stdout=subprocess.DEVNULL,
            stderr=self.log.open("wb"),
            env={**os.environ, **(env or {})},
        )
        assert wait_for(lambda: self.ready_file.exists() or self.proc.poll() is not None, 60)
        assert self.proc.poll() is None, self.text()[-3000:]
        ports = json.loads(self.ready_file.read_text())
        self.grpc_port: int = ports["grpc_port"]
        self.health_port: int = ports["health_port"]

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def peak_rss_kb(self) -> int:
        """The process's peak resident memory (VmHWM), in kB."""
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
        raise AssertionError("no VmHWM")

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(30)


def curl(url: str, *args: str, data: str | None = None, timeout: float = 10) -> tuple[int, str]:
    """``(HTTP status, body)`` of a curl call (status 0: no HTTP answer at all)."""
    cmd = ["curl", "-s", "-o", "-", "-w", "\n%{http_code}", "--max-time", str(timeout), *args]
    if data is not None:
        cmd += ["-X", "POST", "-H", "Content-Type: application/json", "--data-binary", data]
    r = subprocess.run(
        [*cmd, url], check=False, capture_output=True, text=True, timeout=timeout + 5
    )
    body, _, code = r.stdout.rpartition("\n")
    return int(code or 0), body
