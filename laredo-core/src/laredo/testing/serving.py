"""``free_port``, ``pg_serve_config`` and ``ServedLaredo``: ``laredo serve`` as a subprocess for
end-to-end tests.

``ServedLaredo(config)`` starts ``laredo serve --config config --ready-file ...``, waits (through
``wait_until``) until the ready file appears, and exposes the bound ports. If the process exits
before it is ready, the ``AssertionError`` carries the tail of its log. ``stop()`` sends SIGTERM
and returns the exit code; the ``served_laredo`` fixture stops what a test left running and
attaches each server's log to a failed test's report."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Protocol

from ..net import free_port
from .waiting import wait_until

__all__ = ["LAREDO", "PG_CONNECTION_ENV", "ServedLaredo", "free_port", "pg_serve_config"]

LAREDO = str(Path(sys.executable).parent / "laredo")
"""The ``laredo`` console script of the running interpreter's environment."""


PG_CONNECTION_ENV = "LAREDO_SOURCES__PG__CONNECTION"
"""The variable :func:`pg_serve_config`'s source reads its connection string from (by default),
so that a password never sits in the file."""


class SlotAndPublication(Protocol):
    """What :func:`pg_serve_config` needs of a test database (the ``pg_database`` fixture)."""

    @property
    def slot_name(self) -> str: ...
    @property
    def publication(self) -> str: ...


def pg_serve_config(
    db: SlotAndPublication,
    tables: str,
    *,
    slot_mode: str | None = "stateful",
    create_publication: bool = True,
    status_interval: str | None = "200ms",
    connection: str | None = None,
    source: str = "",
    grpc: str = "",
    health: str = "",
    rest: str = "",
) -> str:
    """The HOCON of ``laredo serve`` reading ``db`` as source ``pg`` into ``tables`` (the
    entries of ``tables = [...]``), with gRPC and health on free ports.

    ``slot_mode``, ``status_interval``: None leaves the source's default. ``connection``: the
    connection string (default: read from :data:`PG_CONNECTION_ENV`). ``source``, ``grpc``,
    ``health``: more keys of those sections; ``rest``: more sections."""
    conn = connection or f"set by {PG_CONNECTION_ENV}"
    mode = f"slot_mode = {slot_mode}" if slot_mode else ""
    create = ", create = true" if create_publication else ""
    interval = f"status_interval = {status_interval}" if status_interval else ""
    more_grpc = f", {grpc}" if grpc else ""
    more_health = f", {health}" if health else ""
    return f"""
sources {{
  pg {{
    type = postgresql
    connection = "{conn}"
    {mode}
    slot_name = {db.slot_name}
    publication {{ name = {db.publication}{create} }}
    {interval}
    {source}
  }}
}}
tables = [
{tables}
]
grpc {{ port = {free_port()}{more_grpc} }}
health {{ port = {free_port()}{more_health} }}
{rest}
"""


class ServedLaredo:
    """``laredo serve --config config`` until ``stop``; ports come from its ready file.

    ``env`` is laid over ``os.environ``; stderr goes to ``log`` (appended; default
    ``serve-<n>.log`` beside the config), stdout to ``stdout`` (default discarded)."""

    def __init__(
        self,
        config: Path,
        *,
        env: Mapping[str, str] | None = None,
        log: Path | None = None,
        args: Sequence[str] = (),
        timeout: float = 60.0,
        stdout: Path | None = None,
    ) -> None:
        stamp = time.monotonic_ns()
        self.config = config
        self.ready_file = config.parent / f"ready-{stamp}.json"
        self.log = log or config.parent / f"serve-{stamp}.log"
        cmd = [LAREDO, "serve", "--config", str(config), "--ready-file", str(self.ready_file)]
        with contextlib.ExitStack() as files:
            err = files.enter_context(self.log.open("ab"))
            out = files.enter_context(stdout.open("ab")) if stdout else subprocess.DEVNULL
            self.proc = subprocess.Popen(
                [*cmd, *args], stdout=out, stderr=err, env={**os.environ, **(env or {})}
            )
        self.pid = self.proc.pid
        try:
            wait_until(lambda: self.ready_file.exists() or self.proc.poll() is not None, timeout)
        except AssertionError:
            self.stop(signal.SIGKILL)
            raise AssertionError(
                f"laredo serve not ready after {timeout:g}s; log:\n{self.tail()}"
            ) from None
        assert self.proc.poll() is None, (
            f"laredo serve exited with {self.proc.returncode}; log:\n{self.tail()}"
        )
        wait_until(lambda: self.ready_file.read_text().strip(), 10, "ready file content")
        self.ports: dict[str, int] = json.loads(self.ready_file.read_text())
        self.grpc_port: int = self.ports["grpc_port"]
        self.health_port: int = self.ports["health_port"]

    @property
    def grpc_address(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    @property
    def health_url(self) -> str:
        return f"http://127.0.0.1:{self.health_port}"

    def text(self) -> str:
        """The whole log so far."""
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def tail(self, chars: int = 3000) -> str:
        return self.text()[-chars:]

    def running(self) -> bool:
        return self.proc.poll() is None

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 60.0) -> int:
        """Send ``sig`` (if still running) and return the exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        return self.proc.wait(timeout)

    def kill(self) -> int:
        """SIGKILL (a crash) and return the exit code."""
        return self.stop(signal.SIGKILL)
