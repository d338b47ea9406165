"""End to end: PostgreSQL -> ``laredo serve`` -> ``delta`` target, through a kill -9.

Writers change rows concurrently (inserts, updates that leave a TOASTed column unchanged,
deletes); ``laredo serve`` is killed with SIGKILL mid-stream and started again on the same slot
and the same Delta table. The Delta table then equals ``SELECT *`` (nothing lost, nothing
applied twice), every commit carries a source position, and for positions recorded while the
writers were paused the table read ``--as-of`` that position equals the table at that moment.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from laredo.serialization import loads_row
from laredo.testing import PG_CONNECTION_ENV, ServedLaredo, pg_serve_config, wait_until
from laredo.testing.serving import LAREDO
from laredo_target_delta import history, rows_as_of
from laredo_target_delta.archive import position_order

pytestmark = [pytest.mark.integration, pytest.mark.e2e]

KEYS = 120

TABLES = """
  { source = pg, schema = public, table = items,
     targets = [ { type = delta, uri = "%s", flush_interval = 300ms, flush_rows = 200 } ] }
"""


class Writers:
    """Threads changing random rows until stopped; ``pause()`` holds them between changes."""

    def __init__(self, db: Any, n: int = 3) -> None:
        self.db = db
        self.stop_flag = threading.Event()
        self.gate = threading.Event()
        self.gate.set()
        self.idle = [threading.Event() for _ in range(n)]
        self.threads = [threading.Thread(target=self._run, args=(i,)) for i in range(n)]
        self.changes = 0
        for t in self.threads:
            t.start()

    def _run(self, i: int) -> None:
        rnd = random.Random(i)
        conn = self.db.connect()
        try:
            while not self.stop_flag.is_set():
                if not self.gate.is_set():
                    self.idle[i].set()
                    self.gate.wait(0.1)
                    continue
                self.idle[i].clear()
                key = rnd.randrange(KEYS)
                op = rnd.random()
                with conn.transaction():
                    if op < 0.45:
                        conn.execute(
                            "INSERT INTO items VALUES (%s, %s, %s, now(), %s, %s) "
                            "ON CONFLICT (id) DO UPDATE SET name = excluded.name, "
                            "price = excluded.price",
                            (
                                key,
                                f"n{rnd.random()}",
                                rnd.randrange(10**6) / 100,
                                json.dumps({"k": key, "v": [1, 2]}),
                                os.urandom(3000).hex(),
                            ),
                        )
                    elif op < 0.85:  # big stays untouched: an unchanged TOAST value
                        conn.execute(
                            "UPDATE items SET name = %s, doc = %s WHERE id = %s",
                            (f"u{rnd.random()}", json.dumps({"u": rnd.random()}), key),
                        )
                    else:
                        conn.execute("DELETE FROM items WHERE id = %s", (key,))
                self.changes += 1
                time.sleep(0.002)
        finally:
            conn.close()

    def pause(self) -> None:
        self.gate.clear()
        for e in self.idle:
            assert e.wait(10)

    def resume(self) -> None:
        self.gate.set()

    def finish(self) -> None:
        self.stop_flag.set()
        self.gate.set()
        for t in self.threads:
            t.join(30)


def _pg_rows(db: Any) -> dict[int, dict[str, Any]]:
    conn = db.connect()
    try:
        cur = conn.execute("SELECT * FROM items")
        names = [d.name for d in cur.description]
        return {r[0]: dict(zip(names, r, strict=True)) for r in cur.fetchall()}
    finally:
        conn.close()


def _delta_rows(uri: str, position: Any = "FFFFFFFF/FFFFFFFF") -> dict[int, dict[str, Any]]:
    rows, _, _ = rows_as_of(uri, position)
    by_id = {r["id"]: r for r in rows}
    assert len(by_id) == len(rows), "a key is in the Delta table twice"
    return by_id


def _confirmed(db: Any) -> int:
    text = db.scalar(
        "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = %s",
        (db.slot_name,),
    )
    return position_order(text) or 0


def test_kill_9_during_writes_then_restart_equals_select_star(
    pg_database: Any, tmp_path: Path
) -> None:
    db = pg_database
    db.execute(
        "CREATE TABLE items (id int PRIMARY KEY, name text, price numeric(10,2), "
        "at timestamptz, doc jsonb, big text)"
    )
    db.execute(
        "INSERT INTO items SELECT g, 'n' || g, g * 1.25, now(), '{\"a\": 1}', "
        "repeat(md5(g::text), 100) FROM generate_series(0, 59) g"
    )
    uri = str(tmp_path / "delta" / "items")
    cfg = tmp_path / "laredo.conf"
    cfg.write_text(
        pg_serve_config(
            db, TABLES % uri, status_interval="100ms", rest="observability { log_level = info }"
        )
    )
    env = {PG_CONNECTION_ENV: db.dsn}
    log = tmp_path / "serve.log"
    recorded: list[tuple[str, dict[int, dict[str, Any]]]] = []

    server = ServedLaredo(cfg, env=env, log=log)
    writers = Writers(db)
    try:
        wait_until(
            lambda: Path(uri, "_delta_log").exists(), 60, "the baseline version", interval=0.1
        )
        for _ in range(2):  # positions recorded with the writers paused around each
            time.sleep(1.0)
            writers.pause()
            lsn = db.scalar("SELECT pg_current_wal_lsn()::text")
            expected = _pg_rows(db)
            # acknowledged => committed: once the slot confirms lsn, the Delta log holds it all
            target = position_order(lsn) or 0
            wait_until(lambda t=target: _confirmed(db) >= t, 30, f"ack of {lsn}", interval=0.1)
            recorded.append((lsn, expected))
            writers.resume()
        time.sleep(1.0)
        server.kill()  # mid-writes: buffered changes and maybe an unfinished commit are lost
        time.sleep(0.5)
        server = ServedLaredo(cfg, env=env, log=log)
        time.sleep(1.5)
    finally:
        writers.finish()
    try:
        expected = _pg_rows(db)
        wait_until(
            lambda: _delta_rows(uri) == expected,
            60,
            "the Delta table to equal SELECT *",
            interval=0.1,
        )
    finally:
        server.stop()
    assert writers.changes > 100
    commits = history(uri)
    assert commits[0].kind == "baseline"
    assert all(c.position for c in commits), [c for c in commits if not c.position]
    orders = [c.order for c in commits if not c.partial]
    assert orders == sorted(orders)  # positions only move forward, across the restart too
    for lsn, rows in recorded:
        assert _delta_rows(uri, lsn) == rows, f"as of {lsn}"
    # the CLI gives the same rows (typed JSON lines) for the first recorded position
    lsn, rows = recorded[0]
    out = subprocess.run(
        [LAREDO, "archive", "reconstruct", uri, "--as-of", lsn],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    assert {r["id"]: r for r in map(loads_row, out.stdout.splitlines())} == rows
    assert "Traceback" not in log.read_text()
