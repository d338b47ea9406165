"""A standalone Spark cluster on this machine, from the pyspark wheel: for tests and trials.

:func:`standalone_cluster` starts ``org.apache.spark.deploy.master.Master`` and N
``org.apache.spark.deploy.worker.Worker`` JVMs through the wheel's ``bin/spark-class``, bound to
127.0.0.1 with every port chosen (master, web UIs, workers), work and local dirs under the given
directory (each JVM's working directory, so ``leftover_processes`` finds them), small daemon
memory, and stops them when the block ends. The JVMs are always ended:
each runs in its own process group, which is sent SIGTERM then SIGKILL, and on Linux each also
dies with the process that started it (``PR_SET_PDEATHSIG``), even if that one is killed.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import logging
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from laredo.net import free_port

logger = logging.getLogger(__name__)

__all__ = ["StandaloneCluster", "standalone_cluster"]

_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:  # pragma: no cover - runs in the child before exec
    with contextlib.suppress(Exception):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


@dataclass
class StandaloneCluster:
    """A running cluster: ``master_url`` (``spark://127.0.0.1:port``) for ``spark.master``."""

    master_url: str
    web_url: str
    directory: Path
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)
    logs: list[Path] = field(default_factory=list)

    def status(self) -> dict[str, Any]:
        """The master's ``/json/`` status (workers, cores, applications)."""
        with urllib.request.urlopen(f"{self.web_url}/json/", timeout=5) as r:
            data: dict[str, Any] = json.loads(r.read())
        return data

    def log_tail(self, chars: int = 3000) -> str:
        """The end of every JVM's log, for failure messages."""
        return "\n".join(
            f"--- {p.name}\n{p.read_text(errors='replace')[-chars:]}" for p in self.logs
        )

    def leftover_processes(self) -> list[int]:
        """Processes still working in the cluster's directory (executor JVMs run in the work
        dir), found through ``/proc`` (Linux; empty elsewhere)."""
        root = str(self.directory.resolve())
        found = []
        with contextlib.suppress(OSError):
            for entry in os.listdir("/proc"):
                if not entry.isdigit():
                    continue
                with contextlib.suppress(OSError):
                    cwd = os.readlink(f"/proc/{entry}/cwd")
                    if cwd == root or cwd.startswith(root + os.sep):
                        found.append(int(entry))
        return found

    def stop(self) -> None:
        """SIGTERM to each JVM's process group, SIGKILL to what is left after 10 s, then
        SIGKILL to any process still working in the cluster's directory."""
        for proc in reversed(self.processes):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + 10
        for proc in reversed(self.processes):
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(max(0.1, deadline - time.monotonic()))
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        for pid in self.leftover_processes():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def _spark_class() -> Path:
    import pyspark  # noqa: PLC0415 - lazy: only to find the wheel's SPARK_HOME

    return Path(pyspark.__file__).parent / "bin" / "spark-class"


@contextlib.contextmanager
def standalone_cluster(
    directory: str | os.PathLike[str],
    *,
    workers: int = 1,
    cores: int = 1,
    memory: str = "1g",
    daemon_memory: str = "256m",
    env: Mapping[str, str] | None = None,
    timeout: float = 120.0,
) -> Iterator[StandaloneCluster]:
    """Start a master and ``workers`` workers (``cores`` and ``memory`` each) and wait until
    every worker is registered; stop them all when the block ends.

    The JVMs inherit ``env`` (default: this process's environment, so AWS settings and
    ``PYSPARK_PYTHON`` reach the executors), with ``SPARK_HOME`` the wheel, ``SPARK_LOCAL_IP``
    127.0.0.1 and an empty ``SPARK_CONF_DIR`` (no user configuration)."""
    root = Path(directory)
    for sub in ("conf", "work", "local", "logs"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    spark_class = _spark_class()
    props = root / "conf" / "daemon.properties"
    props.write_text(
        "spark.master.rest.enabled false\n"
        "spark.worker.cleanup.enabled false\n"
        f"spark.local.dir {root / 'local'}\n"
    )
    child_env = {
        **(os.environ if env is None else env),
        "SPARK_HOME": str(spark_class.parent.parent),
        "SPARK_CONF_DIR": str(root / "conf"),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_LOCAL_DIRS": str(root / "local"),
        "SPARK_DAEMON_MEMORY": daemon_memory,
        "PYSPARK_PYTHON": sys.executable,
    }
    master_port, web_port = free_port(), free_port()
    cluster = StandaloneCluster(
        f"spark://127.0.0.1:{master_port}", f"http://127.0.0.1:{web_port}", root
    )

    def start(name: str, *args: str) -> None:
        log = root / "logs" / f"{name}.log"
        cluster.logs.append(log)
        with log.open("ab") as out:
            cluster.processes.append(
                subprocess.Popen(
                    [str(spark_class), *args, "--properties-file", str(props)],
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    env=child_env,
                    cwd=root,
                    start_new_session=True,
                    preexec_fn=_die_with_parent if sys.platform == "linux" else None,  # noqa: PLW1509 - no threads run in the child before exec
                )
            )

    try:
        start(
            "master",
            "org.apache.spark.deploy.master.Master",
            "--host",
            "127.0.0.1",
            "--port",
            str(master_port),
            "--webui-port",
            str(web_port),
        )
        for i in range(workers):
            start(
                f"worker-{i}",
                "org.apache.spark.deploy.worker.Worker",
                "--host",
                "127.0.0.1",
                "--port",
                str(free_port()),
                "--webui-port",
                str(free_port()),
                "--cores",
                str(cores),
                "--memory",
                memory,
                "--work-dir",
                str(root / "work"),
                cluster.master_url,
            )
        deadline = time.monotonic() + timeout
        while True:
            dead = [p for p in cluster.processes if p.poll() is not None]
            if dead:
                raise RuntimeError(f"a Spark daemon exited at start:\n{cluster.log_tail()}")
            with contextlib.suppress(OSError, ValueError):
                if int(cluster.status().get("aliveworkers", 0)) >= workers:
                    break
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"{workers} worker(s) not registered in {timeout:.0f}s:\n{cluster.log_tail()}"
                )
            time.sleep(0.5)
        logger.info("standalone Spark cluster at %s (%d worker(s))", cluster.master_url, workers)
        yield cluster
    finally:
        cluster.stop()
