"""End to end on PostgreSQL (issue 32): a server whose source baselines in chunks
(``baseline { mode = chunked }``) starts equal to PostgreSQL; `laredo backfill T --where SQL`
(admin) re-syncs a replica made to differ while the table streams, and `laredo verify` then
finds it equal; a ``--where`` that is not one condition is refused."""

from __future__ import annotations

import json
import subprocess
import threading
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from laredo.testing.serving import LAREDO
from laredo_server._proto.laredo_proto.v1 import oam_pb2 as oam

from .test_e2e import TOKEN
from .test_verify_e2e import serve_items, verify_items
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
    baseline {{ mode = chunked, chunk_rows = 50 }}
  }}
}}
tables = [ {{ source = pg, schema = public, table = items,
             targets = [ {{ type = indexed-memory }} ] }} ]
grpc {{ port = {grpc}, auth {{ token = "{token}" }} }}
health {{ port = {health} }}
observability {{ log_format = json, log_level = info }}
"""


def test_chunked_start_and_backfill_on_demand(pg_database: Any, tmp_path: Path) -> None:
    db = pg_database
    server, log = serve_items(db, tmp_path, CONFIG)
    verify = partial(verify_items, server)

    try:
        assert wait_for(lambda: server.health("/health/ready") == 200, 60)
        assert "backfill of public.items: 7 chunk(s), 300 row(s) read" in log.read_text()
        code, out = verify()
        assert code == 0 and out["match"], out
        # the replica drifts: changes while the table is out of the publication
        db.execute(f"ALTER PUBLICATION {db.publication} DROP TABLE items")
        db.execute("UPDATE items SET note = 'changed' WHERE id IN (8, 250)")
        db.execute("INSERT INTO items VALUES (9998, 0, 'new'), (9999, 0, 'new')")
        db.execute("DELETE FROM items WHERE id IN (5, 260)")
        db.execute(f"ALTER PUBLICATION {db.publication} ADD TABLE items")
        code, out = verify()
        assert code == 1 and sorted(out["different_keys"]) == ["250", "8"], out
        assert sorted(out["extra_keys"]) == ["260", "5"], out
        bad = server.cli("backfill", "public.items", "--where", "id > 0; SELECT 1", token=True)
        assert bad.returncode != 0 and "without a ';'" in bad.stderr + bad.stdout
        denied = server.cli("backfill", "public.items")
        assert denied.returncode != 0
        r = server.cli(
            "backfill", "public.items", "--where", "id >= 200", "--wait", "60", token=True
        )
        out = json.loads(r.stdout)
        assert r.returncode == 0 and out["done"], out
        assert int(out["rows_read"]) == 102 and int(out["chunks"]) == 3, out
        assert out["status"]["state"] == "done" and out["status"]["has_eta"], out
        # a subset removes nothing: the replica cannot evaluate the condition
        assert out["status"]["sweep"].startswith("skipped: ") and "where" in out["status"]["sweep"]
        assert int(out.get("rows_removed", 0)) == 0, out
        code, out = verify()  # 8 was outside --where: it still differs; 260 was not removed
        assert code == 1 and out["different_keys"] == ["8"] and not out["missing_keys"], out
        assert sorted(out["extra_keys"]) == ["260", "5"], out
        r = server.cli("backfill", "public.items", "--wait", "60", token=True)
        assert r.returncode == 0, r.stdout + r.stderr
        out = json.loads(r.stdout)  # the whole table: the rows PostgreSQL lacks are removed
        assert int(out["rows_removed"]) == 2 and out["status"]["sweep"] == "done", out
        code, out = verify()
        assert code == 0 and out["match"], out
        metrics = server.metrics()
        labels = 'source="pg",table="public.items"'
        assert f"laredo_backfill_done{{{labels}}} 1" in metrics, metrics
        assert f'laredo_backfill_rows{{{labels},kind="read"}} 300' in metrics, metrics
        assert f'laredo_backfill_rows{{{labels},kind="removed"}} 2' in metrics, metrics
        _progress_while_running(db, server)
    finally:
        assert server.stop() == 0


def _progress_while_running(db: Any, server: Any) -> None:
    """A backfill of 3000 rows in chunks of 10 with writers on: while it runs, ``GetStatus``
    shows it running with rows read of the ``reltuples`` estimate and an ETA; at the end done
    with ETA 0, in ``GetStatus``, ``laredo status`` and the metrics."""
    db.execute("INSERT INTO items SELECT g, g, 'm' FROM generate_series(10001, 12700) g")
    db.execute("ANALYZE items")
    stop = threading.Event()

    def writer() -> None:  # keeps the stream moving past each chunk's high mark
        with db.connect() as conn:
            n = 0
            while not stop.wait(0.002):  # paced: a saturating writer makes the stream lag
                n += 1  # behind it, and each chunk then waits that lag out (up to ~80 s)
                conn.execute("UPDATE items SET v = v + 1 WHERE id = %s", (n % 300 + 1,))

    def status() -> Any:
        (b,) = server.oam.GetStatus(oam.GetStatusRequest()).backfills
        return b

    w = threading.Thread(target=writer)
    w.start()
    try:
        started = server.oam.BackfillTable(
            oam.BackfillTableRequest(schema="public", table="items", chunk_rows=10),
            metadata=[("authorization", f"Bearer {TOKEN}")],
        )
        assert not started.done and started.status.state == "running", started
        seen = []
        while (b := status()).state == "running":
            seen.append(b)
            assert wait_for(
                lambda: status().rows_read > b.rows_read or status().state != "running", 30
            )
    finally:
        stop.set()
        w.join()
    partway = [b for b in seen if 0 < b.rows_read < 3000]
    assert partway, f"no status showed the backfill partway: {seen}"
    mid = partway[0]
    assert (mid.schema, mid.table, mid.source_id) == ("public", "items", "pg"), mid
    assert mid.rows_estimated == 3000 and mid.started_at > 0, mid
    assert all(b.has_eta and b.eta_seconds > 0 for b in partway), partway
    assert b.state == "done" and b.has_eta and b.eta_seconds == 0.0, b
    assert b.rows_read == 3000 and b.chunks == 301 and b.rows_estimated == 3000, b
    text = subprocess.run(
        [LAREDO, "--address", f"127.0.0.1:{server.grpc_port}", "status"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
        env={"COLUMNS": "250", "PATH": ""},
    ).stdout
    assert "backfills" in text and "3000 of ~3000" in text and "removed" in text, text
    metrics = server.metrics()
    labels = 'source="pg",table="public.items"'
    assert f"laredo_backfill_rows_estimated{{{labels}}} 3000" in metrics, metrics
    assert f"laredo_backfill_eta_seconds{{{labels}}} 0\n" in metrics, metrics
