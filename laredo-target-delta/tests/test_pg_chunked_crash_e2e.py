"""End to end: a chunked baseline (``baseline { mode = chunked }``) from PostgreSQL into a
``delta`` target through ``laredo serve``, killed (-9) part way and started again.

Writers change the table while the first server reads chunks; it is killed once the Delta log
holds ~40 % of the chunks (each chunk's progress record is in the commit holding its rows).
The restarted server continues after that record's key — PostgreSQL's ``pg_stat_user_tables``
shows it reads only the rest of the table — and the Delta table ends equal to ``SELECT *``."""

from __future__ import annotations

import json
import random
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from laredo.testing import ServedLaredo, free_port, wait_until
from laredo_target_delta import ArchiveError, history, progress_of, rows_as_of

pytestmark = [pytest.mark.integration, pytest.mark.e2e]

N = 20_000
CHUNK = 200

CONFIG = """
sources {{
  pg {{
    type = postgresql
    connection = "set by LAREDO_SOURCES__PG__CONNECTION"
    slot_mode = stateful
    slot_name = {slot}
    publication {{ name = {publication}, create = true }}
    status_interval = 100ms
    baseline {{ mode = chunked, chunk_rows = {chunk} }}
  }}
}}
tables = [
  {{ source = pg, schema = public, table = items,
     targets = [ {{ type = delta, uri = "{uri}", flush_interval = 200ms,
                    flush_rows = {chunk} }} ] }}
]
grpc {{ port = {grpc} }}
health {{ port = {health} }}
observability {{ log_level = info }}
"""


def _done(uri: str) -> int:
    """The last key the Delta log holds as done (0: none yet)."""
    try:
        record = progress_of(history(uri))
    except ArchiveError:
        return 0  # no table yet
    key = None if record is None else json.loads(record)["last_key"]
    return 0 if key is None else int(key[0])


def _write(db: Any, stop: threading.Event, counts: list[int]) -> None:
    rnd = random.Random(3)
    conn = db.connect()
    try:
        while not stop.is_set():
            k = rnd.randrange(1, N + 1)
            op = rnd.randrange(4)
            with conn.transaction():
                if op == 0:
                    conn.execute("UPDATE items SET v = v + 1, name = 'upd' WHERE id = %s", (k,))
                elif op == 1:
                    conn.execute("DELETE FROM items WHERE id = %s", (k,))
                elif op == 2:
                    conn.execute(
                        "INSERT INTO items VALUES (%s, 'ins', 1) ON CONFLICT (id) DO NOTHING",
                        (k + N,),
                    )
                else:  # a key change
                    conn.execute(
                        "UPDATE items SET id = %s WHERE id = %s AND NOT EXISTS "
                        "(SELECT 1 FROM items WHERE id = %s)",
                        (k + 2 * N, k, k + 2 * N),
                    )
            counts[0] += 1
            time.sleep(0.002)
    finally:
        conn.close()


def test_kill_9_mid_chunks_then_restart_continues_and_equals_select_star(
    pg_database: Any, tmp_path: Path
) -> None:
    db = pg_database
    db.execute("CREATE TABLE items (id int PRIMARY KEY, name text, v int NOT NULL)")
    db.execute(f"INSERT INTO items SELECT g, 'n' || g, 0 FROM generate_series(1, {N}) g")
    uri = str(tmp_path / "delta" / "items")
    cfg = tmp_path / "laredo.conf"
    cfg.write_text(
        CONFIG.format(
            slot=db.slot_name,
            publication=db.publication,
            uri=uri,
            chunk=CHUNK,
            grpc=free_port(),
            health=free_port(),
        )
    )
    env = {"LAREDO_SOURCES__PG__CONNECTION": db.dsn}
    log = tmp_path / "serve.log"
    stop, counts = threading.Event(), [0]
    writer = threading.Thread(target=_write, args=(db, stop, counts))
    server = ServedLaredo(cfg, env=env, log=log)
    writer.start()
    try:
        wait_until(lambda: _done(uri) >= 0.4 * N, 120, "40 % of the chunks", interval=0.01)
        server.kill()
        done = _done(uri)
        assert 0.4 * N <= done < 0.9 * N, done  # killed part way, its progress in the log
    finally:
        stop.set()
        writer.join()
        server.stop(timeout=30)
    before = db.rows_read("items")
    server = ServedLaredo(cfg, env=env, log=log)
    try:
        wait_until(lambda: progress_of(history(uri)) is None, 120, "the chunked baseline's end")
    finally:
        server.stop()  # a clean stop commits what is buffered
    reread = db.rows_read("items") - before  # (backends report their counters when they exit)
    conn = db.connect()
    try:
        expected = {
            r[0]: {"id": r[0], "name": r[1], "v": r[2]}
            for r in conn.execute("SELECT id, name, v FROM items")
        }
    finally:
        conn.close()
    rows = rows_as_of(uri, "FFFFFFFF/FFFFFFFF")[0]
    assert {r["id"]: r for r in rows} == expected and len(rows) == len(expected)
    assert counts[0] > 50, counts  # the writer ran during the first server's chunks
    assert reread <= 0.7 * N, (reread, done)
    assert "resuming the chunked baseline of public.items after key" in log.read_text()
    assert "Traceback" not in log.read_text()
    print(f"killed after key {done} of {N}; the restart read {reread} tuples ({reread / N:.0%})")
