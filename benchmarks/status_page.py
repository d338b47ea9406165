"""What the status page costs the server: CPU of the ``laredo serve`` process with the page
closed, then open in headless Chromium, then closed again.

    .venv/bin/python benchmarks/status_page.py [--pipelines 200] [--seconds 30]

``laredo serve`` runs as a subprocess on an embedded PostgreSQL with ``--pipelines`` tables,
each into an indexed-memory target, idle unless ``--writes N`` updates N rows per second (the
write load's own CPU then adds noise to every phase). The server's CPU time
(``/proc/<pid>/stat``, user + system) is read over ``--seconds`` in each phase. The page polls
``GetStatus`` every 2 s (its default); the limit is 1 % of one core for one open page. "closed"
twice shows the server does no work for the page when nobody looks at it.

Needs PostgreSQL binaries, the ``playwright`` package and Debian's ``chromium``.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

from laredo.testing import ServedLaredo, free_port, wait_until
from laredo_source_pg.embedded import EmbeddedPostgres
from playwright.sync_api import sync_playwright

LAREDO = str(Path(sys.executable).parent / "laredo")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process (all its threads)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def threads(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Threads:"):
            return int(line.split()[1])
    return 0


def measure(pid: int, seconds: float) -> float:
    """Percent of one core the process used over ``seconds``."""
    c0, t0 = cpu_seconds(pid), time.monotonic()
    time.sleep(seconds)
    return 100.0 * (cpu_seconds(pid) - c0) / (time.monotonic() - t0)


def poll_cost(pid: int, base: str, n: int) -> float:
    """Server CPU seconds per ``GetStatus`` call, from ``n`` calls in a row."""
    url = base + "/laredo.v1.LaredoOAMService/GetStatus"
    headers = {"Content-Type": "application/json"}
    c0 = cpu_seconds(pid)
    for _ in range(n):
        req = urllib.request.Request(url, data=b"{}", headers=headers)
        with urllib.request.urlopen(req, timeout=30) as r:
            r.read()
    return (cpu_seconds(pid) - c0) / n


def config(tables: list[str], health: int) -> str:
    entries = ",\n".join(
        f"  {{ source = pg, table = {t}, targets = [ {{ type = indexed-memory }} ] }}"
        for t in tables
    )
    return f"""
sources {{ pg {{ type = postgresql, connection = "set by env", slot_name = bench_status,
               publication {{ name = bench_status_pub, create = true }} }} }}
tables = [
{entries}
]
grpc.port = 0
health {{ port = {health} }}
observability {{ log_level = warning }}
"""


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pipelines", type=int, default=200)
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--screenshot", help="save a screenshot of the open page to this file")
    ap.add_argument(
        "--writes", type=float, default=0.0, help="row updates per second during the run"
    )
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="laredo-bench-status-"))
    pg = EmbeddedPostgres()
    pg.start()
    stop = threading.Event()
    proc = None
    try:
        pg.create_database("bench")
        dsn = pg.dsn("bench")
        import psycopg

        tables = [f"t{i:03d}" for i in range(args.pipelines)]
        with psycopg.connect(dsn, autocommit=True) as conn:
            for t in tables:
                conn.execute(f"CREATE TABLE {t} (id bigint PRIMARY KEY, v int)")
                conn.execute(f"INSERT INTO {t} SELECT g, 0 FROM generate_series(1, 100) g")
        health = free_port()
        cfg = tmp / "laredo.conf"
        cfg.write_text(config(tables, health))
        try:
            served = ServedLaredo(
                cfg,
                env={"LAREDO_SOURCES__PG__CONNECTION": dsn},
                log=tmp / "serve.log",
                timeout=120,
            )
        except AssertionError as exc:
            print(exc)
            return 1
        proc = served.proc
        base = served.health_url

        def writer() -> None:
            with psycopg.connect(dsn, autocommit=True) as conn:
                n = 0
                while not stop.is_set():
                    for t in tables:
                        conn.execute(f"UPDATE {t} SET v = v + 1 WHERE id = {1 + n % 100}")
                        if stop.wait(1.0 / args.writes):
                            return
                    n += 1

        if args.writes > 0:
            threading.Thread(target=writer, daemon=True).start()
        time.sleep(5)  # settle after the baseline
        closed1 = measure(proc.pid, args.seconds)
        t_closed = threads(proc.pid)
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            page.goto(base + "/")
            wait_until(
                lambda: int(page.locator("body").get_attribute("data-polls") or 0) >= 2,
                30,
                "the page to refresh",
                interval=0.2,
            )
            rows = page.locator("tr[data-pipeline]").count()
            opened = measure(proc.pid, args.seconds)
            polls = int(page.locator("body").get_attribute("data-polls") or 0)
            if args.screenshot:
                page.screenshot(path=args.screenshot)
            browser.close()
        closed2 = measure(proc.pid, args.seconds)
        t_after = threads(proc.pid)
        per_poll = poll_cost(proc.pid, base, 100)
        closed = (closed1 + closed2) / 2
        cost = opened - closed
        print(f"pipelines on the page: {rows}; page polls while measured: {polls}")
        print(f"server threads: {t_closed} before the page, {t_after} after it closed")
        print(f"{'phase':<22}{'server CPU (% of a core)':>26}")
        print(f"{'page closed (before)':<22}{closed1:>26.2f}")
        print(f"{'page open':<22}{opened:>26.2f}")
        print(f"{'page closed (after)':<22}{closed2:>26.2f}")
        ratio = opened / closed if closed > 0 else float("inf")
        verdict = "OK" if cost < 1.0 else "OVER"
        print(
            f"one open page costs {cost:.2f}% of a core (limit 1%: {verdict}); "
            f"open/closed ratio {ratio:.2f}"
        )
        print(
            f"one GetStatus poll costs the server {per_poll * 1000:.1f} ms of CPU "
            f"(100 polls in a row): {100 * per_poll / 2.0:.2f}% of a core at one poll per 2 s"
        )
        return 0 if cost < 1.0 else 1
    finally:
        stop.set()
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
        pg.close()


if __name__ == "__main__":
    raise SystemExit(main())
