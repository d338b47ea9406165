"""Helpers of the security tests: ``laredo serve`` as a subprocess, curl calls and the peak
memory of a process (certificates: :mod:`laredo.testing.pki`)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from .testkit import wait_for

LAREDO = str(Path(sys.executable).parent / "laredo")


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
