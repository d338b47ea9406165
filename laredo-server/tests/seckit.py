"""Helpers of the security tests: ``laredo serve`` as a subprocess, curl calls and the peak
memory of a process (certificates: :mod:`laredo.testing.pki`)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from laredo.testing import ServedLaredo
from laredo.testing.serving import LAREDO


def run_laredo(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [LAREDO, *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, "COLUMNS": "250", **(env or {})},
    )


class Served(ServedLaredo):
    """``laredo serve --config cfg`` until ``stop``; the bound ports come from its ready file."""

    def peak_rss_kb(self) -> int:
        """The process's peak resident memory (VmHWM), in kB."""
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
        raise AssertionError("no VmHWM")


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
