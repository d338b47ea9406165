"""`laredo spark baseline` then `laredo serve` on one HOCON configuration: the server restores
the Spark-written multi-part snapshot and streams on from the slot's consistent point, with
writers running throughout: no gap, no duplicate."""

from __future__ import annotations

import json
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import grpc
import pytest
from laredo.serialization import loads_row
from laredo.snapshots.local import LocalSnapshotStore

pytestmark = [pytest.mark.spark, pytest.mark.integration, pytest.mark.e2e]

LAREDO = str(Path(sys.executable).parent / "laredo")

# what `laredo serve` and `laredo spark baseline` share; each has its own file including it
# (the Spark runner refuses the server's sections, the server the runner's)
SHARED = """
sources {{
  pg {{
    type = postgresql
    connection = "{dsn}"
    slot_mode = stateful
    slot_name = {slot}
    publication {{ create = true }}
    status_interval = 200ms
  }}
}}
tables = [
  {{ source = pg, schema = public, table = accounts, targets = [ {{ type = indexed-memory }} ] }}
]
snapshot {{ store = local, store_config {{ path = "{snaps}" }}, serializer = parquet }}
"""
SPARK = """
include "shared.conf"
spark { partitions = 3, conf { spark.sql.shuffle.partitions = 2 } }
"""
SERVE = """
include "shared.conf"
grpc {{ port = {grpc} }}
health {{ port = {health} }}
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for(pred: Any, timeout: float = 60.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def writer(db: Any, stop: threading.Event, counter: list[int]) -> None:
    rnd = random.Random(7)
    n = 1_000_000
    with db.connect() as conn:
        while not stop.is_set():
            op = rnd.random()
            if op < 0.4:
                n += 1
                conn.execute("INSERT INTO accounts VALUES (%s, %s, 1.25, now())", (n, f"w{n}"))
            elif op < 0.8:
                conn.execute(
                    "UPDATE accounts SET balance = balance + 1, at = now() WHERE id = %s",
                    (rnd.randint(1, 3000),),
                )
            else:
                conn.execute("DELETE FROM accounts WHERE id = %s", (rnd.randint(1, 3000),))
            counter[0] += 1
            time.sleep(0.002)


def served_rows(channel: Any) -> dict[Any, dict[str, Any]]:
    from laredo_server._proto.laredo_proto.v1 import query_pb2 as q
    from laredo_server._proto.laredo_proto.v1 import query_pb2_grpc

    stub = query_pb2_grpc.LaredoQueryServiceStub(channel)
    table = q.TableRef(schema="public", table="accounts")
    out: dict[Any, dict[str, Any]] = {}
    token = ""
    while True:
        page = stub.ListRows(q.ListRowsRequest(table=table, page_size=5000, page_token=token))
        for r in page.rows:
            row = loads_row(r.json)
            out[row["id"]] = row
        token = page.next_page_token
        if not token:
            return out


def test_laredo_serve_restores_a_spark_snapshot_and_streams_on(
    spark: Any, pg_database: Any, tmp_path: Path
) -> None:
    from laredo_spark.cli import baseline

    db = pg_database
    db.execute(
        "CREATE TABLE accounts (id bigint PRIMARY KEY, name text, balance numeric(12,2), "
        "at timestamptz)"
    )
    db.execute(
        "INSERT INTO accounts SELECT g, 'a' || g, g * 1.5, now() FROM generate_series(1, 3000) g"
    )
    snaps = tmp_path / "snaps"
    (tmp_path / "shared.conf").write_text(SHARED.format(dsn=db.dsn, slot=db.slot_name, snaps=snaps))
    (tmp_path / "spark.conf").write_text(SPARK)
    serve_conf = tmp_path / "serve.conf"
    serve_conf.write_text(SERVE.format(grpc=free_port(), health=free_port()))
    stop = threading.Event()
    counter = [0]
    w = threading.Thread(target=writer, args=(db, stop, counter))
    w.start()
    proc = None
    try:
        wait_for(lambda: counter[0] > 50, what="the writer")
        assert baseline(str(tmp_path / "spark.conf")) == 0  # the `laredo spark baseline` path
        (desc,) = LocalSnapshotStore(snaps).list()
        store = LocalSnapshotStore(snaps)
        assert len(store.manifest(desc.snapshot_id).artifacts[0].parts) >= 2  # multi-part
        ready = tmp_path / "ready.json"
        log = tmp_path / "serve.log"
        proc = subprocess.Popen(
            [LAREDO, "serve", "--config", str(serve_conf), "--ready-file", str(ready)],
            stdout=subprocess.DEVNULL,
            stderr=log.open("ab"),
            env={**os.environ},
        )
        wait_for(lambda: ready.exists() or proc.poll() is not None, 90, "laredo serve ready")
        assert proc.poll() is None, log.read_text()[-3000:]
        ports = json.loads(ready.read_text())

        def restores() -> list[str]:
            url = f"http://127.0.0.1:{ports['health_port']}/metrics"
            with urllib.request.urlopen(url) as r:
                text = r.read().decode()
            return [x for x in text.splitlines() if x.startswith("laredo_snapshot_restores")]

        wait_for(lambda: any("completed" in x for x in restores()), 60, "the restore")
        assert sorted(restores()) == [
            'laredo_snapshot_restores_total{outcome="completed"} 1',
            'laredo_snapshot_restores_total{outcome="started"} 1',
        ]
        writes = counter[0]
        wait_for(lambda: counter[0] > writes + 200, what="writes after the restore")
        stop.set()
        w.join()
        with db.connect() as conn:
            cur = conn.execute("SELECT * FROM accounts")
            names = [d.name for d in cur.description]
            want = {r[0]: dict(zip(names, r, strict=True)) for r in cur.fetchall()}
        channel = grpc.insecure_channel(f"127.0.0.1:{ports['grpc_port']}")
        try:
            wait_for(lambda: served_rows(channel) == want, 60, "served rows == SELECT *")
        finally:
            channel.close()
    finally:
        stop.set()
        w.join()
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            proc.wait(30)
