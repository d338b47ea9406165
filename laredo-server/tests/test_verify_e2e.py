"""End to end on PostgreSQL: a plain pipeline with inserts and deletes validates as a match at
every interval; `laredo verify` finds a faithful replica equal to PostgreSQL while writers run,
and names exactly the keys of a replica made to differ (changes made while the table was out of
the publication never reached it)."""

from __future__ import annotations

import json
import random
import threading
import time
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from laredo.testing import free_port

from .test_e2e import TOKEN, Server
from .testkit import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.integration]

CONFIG = """
sources {{
  pg {{
    type = postgresql
    connection = "set by LAREDO_SOURCES__PG__CONNECTION"
    slot_name = {slot}
    publication {{ name = {publication} }}
    status_interval = 200ms
  }}
}}
tables = [ {{ source = pg, schema = public, table = items,
             targets = [ {{ type = indexed-memory }} ],
             validation {{ interval = 300ms, action = warn }} }} ]
grpc {{ port = {grpc}, auth {{ token = "{token}" }} }}
health {{ port = {health} }}
observability {{ log_format = json, log_level = info }}
"""


def runs(metrics: str, result: str = "match") -> float:
    """Validations with ``result`` so far (every series is exported from the start, at 0)."""
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in metrics.splitlines()
        if line.startswith("laredo_validation_runs_total{") and f'result="{result}"' in line
    )


def serve_items(db: Any, tmp_path: Path, config: str) -> tuple[Server, Path]:
    """A table ``items`` of 300 rows and ``laredo serve`` on ``config`` (a template with
    ``slot``, ``publication``, ``grpc``, ``health`` and ``token``); the server and its log."""
    db.execute("CREATE TABLE items (id int PRIMARY KEY, v int NOT NULL, note text)")
    db.execute("INSERT INTO items SELECT g, g, 'n' || g FROM generate_series(1, 300) g")
    cfg = tmp_path / "laredo.conf"
    cfg.write_text(
        config.format(
            slot=db.slot_name,
            publication=db.publication,
            grpc=free_port(),
            health=free_port(),
            token=TOKEN,
        )
    )
    log = tmp_path / "serve.log"
    return Server(cfg, {"LAREDO_SOURCES__PG__CONNECTION": db.dsn}, log), log


def verify_items(server: Server) -> tuple[int, dict[str, Any]]:
    """``laredo verify public.items`` (admin): its exit code and JSON answer."""
    r = server.cli("verify", "public.items", "--wait", "60", token=True)
    return r.returncode, json.loads(r.stdout)


def test_validation_and_verify_compare_with_postgresql(pg_database: Any, tmp_path: Path) -> None:
    db = pg_database
    server, log = serve_items(db, tmp_path, CONFIG)
    verify = partial(verify_items, server)

    try:
        assert wait_for(lambda: server.health("/health/ready") == 200, 60)
        # the case: 2 inserts and a delete on a plain pipeline, validated every 300 ms
        db.execute("INSERT INTO items VALUES (1001, 1, 'a'), (1002, 2, 'b')")
        db.execute("DELETE FROM items WHERE id = 5")
        before = runs(server.metrics())
        assert wait_for(lambda: runs(server.metrics()) >= before + 3, 10)  # 3 runs after
        assert "validation mismatch" not in log.read_text()
        assert runs(server.metrics(), "mismatch") == 0
        stop = threading.Event()
        written = [0]

        def writer() -> None:
            rnd = random.Random(7)
            n = 5000
            with db.connect() as conn:
                while not stop.is_set():
                    n += 1
                    conn.execute("INSERT INTO items VALUES (%s, 0, 'w')", (n,))
                    conn.execute("UPDATE items SET v = v + 1 WHERE id = %s", (rnd.randint(1, 300),))
                    if n % 4 == 0:
                        conn.execute("DELETE FROM items WHERE id = %s", (n - 2,))
                    written[0] += 1
                    time.sleep(0.002)

        w = threading.Thread(target=writer)
        w.start()
        try:
            wait_for(lambda: written[0] >= 50, 30, "the writer under way")  # verify under writes
            for _ in range(3):
                code, out = verify()
                assert code == 0 and out["match"], out
                assert int(out["source_rows"]) == int(out["target_rows"]) > 300
        finally:
            stop.set()
            w.join()
        # make the replica differ: changes while the table is out of the publication
        db.execute(f"ALTER PUBLICATION {db.publication} DROP TABLE items")
        db.execute("DELETE FROM items WHERE id = 7")
        db.execute("UPDATE items SET note = 'changed' WHERE id = 8")
        db.execute("INSERT INTO items VALUES (9998, 0, 'new'), (9999, 0, 'new')")
        db.execute(f"ALTER PUBLICATION {db.publication} ADD TABLE items")
        code, out = verify()
        assert code == 1 and out["match"] is False, out
        assert out["extra_keys"] == ["7"] and out["different_keys"] == ["8"], out
        assert out["missing_keys"] == ["9998", "9999"], out
        assert "MISMATCH" in out["message"]
        # periodic validation counts PostgreSQL too: the two rows it never received show
        assert wait_for(lambda: "row-count validation mismatch" in log.read_text(), 10)
        r = server.cli("verify", "public.items", token=True)
        assert r.returncode == 1
    finally:
        assert server.stop() == 0
