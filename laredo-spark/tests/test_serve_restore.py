"""`laredo spark baseline --config F` then `laredo serve --config F`, one file for both runners:
the server restores the Spark-written multi-part snapshot and streams on from the slot's
consistent point, with writers running throughout: no gap, no duplicate. Once on the local
session, once on a standalone cluster (master + worker JVMs) with the snapshot on S3 (moto), a
connection provider that only the source's own connection code applies, and Spark's event log
checked for the connection's passwords."""

from __future__ import annotations

import os
import random
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import grpc
import pytest
from laredo.serialization import loads_row
from laredo.snapshots.local import LocalSnapshotStore
from laredo.testing import ServedLaredo, free_port, wait_until

from ._support import pg_rows

pytestmark = [pytest.mark.spark, pytest.mark.integration, pytest.mark.e2e]

LAREDO = str(Path(sys.executable).parent / "laredo")

# one file for `laredo spark baseline` and `laredo serve`: the server's sections and the
# streaming phase's keys are left to serve by the Spark runner, the `spark` section to Spark
CONFIG = """
sources {{
  pg {{
    type = postgresql
    connection = "{connection}"
    {provider}
    slot_mode = stateful
    slot_name = {slot}
    publication {{ create = true }}
    status_interval = 200ms
  }}
}}
tables = [
  {{ source = pg, schema = public, table = accounts,
     targets = [ {{ type = indexed-memory, buffer {{ max_size = 20000 }} }} ] }}
]
snapshot {{ {store}, serializer = parquet, schedule = 1h }}
grpc {{ port = {grpc} }}
health {{ port = {health} }}
shutdown {{ grace_period = 20s }}
spark {{
  {master}
  partitions = 3
  conf {{
    spark.sql.shuffle.partitions = 2
    spark.network.timeout = 300s
    spark.executor.memory = 768m
    {conf}
  }}
}}
"""


def write_config(path: Path, **fields: str) -> Path:
    values = {"provider": "", "master": "", "conf": "", **fields}
    path.write_text(CONFIG.format(grpc=free_port(), health=free_port(), **values))
    return path


def accounts_config(db: Any, tmp_path: Path, **fields: str) -> tuple[Path, Path]:
    """The ``accounts`` table (:func:`make_accounts`) and a config (:func:`write_config`) for
    it with a local snapshot store: the config's path and the store's directory."""
    make_accounts(db)
    snaps = tmp_path / "snaps"
    config = write_config(
        tmp_path / "laredo.conf",
        connection=db.dsn,
        slot=db.slot_name,
        store=f'store = local, store_config {{ path = "{snaps}" }}',
        **fields,
    )
    return config, snaps


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


def make_accounts(db: Any) -> None:
    db.execute(
        "CREATE TABLE accounts (id bigint PRIMARY KEY, name text, balance numeric(12,2), "
        "at timestamptz)"
    )
    db.execute(
        "INSERT INTO accounts SELECT g, 'a' || g, g * 1.5, now() FROM generate_series(1, 3000) g"
    )


def serve_equals_table(
    db: Any, config: Path, tmp_path: Path, *, counter: list[int], stop: Any, w: threading.Thread
) -> None:
    """`laredo serve --config F` restores the Spark snapshot (one restore, counted by its
    metrics), streams on while the writer runs, and serves exactly the table's rows."""
    served = ServedLaredo(config, log=tmp_path / "serve.log", timeout=90)
    ports = served.ports
    try:

        def restores() -> list[str]:
            url = f"http://127.0.0.1:{ports['health_port']}/metrics"
            with urllib.request.urlopen(url) as r:
                text = r.read().decode()
            return [x for x in text.splitlines() if x.startswith("laredo_snapshot_restores")]

        # every series is exported from the first scrape (at 0): wait for the count
        wait_until(
            lambda: 'laredo_snapshot_restores_total{outcome="completed"} 1' in restores(),
            60,
            "the restore",
            interval=0.1,
        )
        assert sorted(restores()) == [
            'laredo_snapshot_restores_total{outcome="completed"} 1',
            'laredo_snapshot_restores_total{outcome="started"} 1',
        ]
        writes = counter[0]
        wait_until(
            lambda: counter[0] > writes + 200, 60, what="writes after the restore", interval=0.1
        )
        stop.set()
        w.join()
        want = pg_rows(db, "accounts")
        channel = grpc.insecure_channel(f"127.0.0.1:{ports['grpc_port']}")
        try:
            wait_until(
                lambda: served_rows(channel) == want, 60, "served rows == SELECT *", interval=0.1
            )
        finally:
            channel.close()
    finally:
        served.stop(timeout=30)


def test_laredo_serve_restores_a_spark_snapshot_and_streams_on(
    spark: Any, pg_database: Any, tmp_path: Path
) -> None:
    from laredo_spark.cli import baseline

    db = pg_database
    config, snaps = accounts_config(db, tmp_path)
    stop = threading.Event()
    counter = [0]
    w = threading.Thread(target=writer, args=(db, stop, counter))
    w.start()
    try:
        wait_until(lambda: counter[0] > 50, 60, what="the writer", interval=0.1)
        assert baseline(str(config)) == 0  # the `laredo spark baseline` path, this session
        # the free-form map reached the session as written (HOCON reads them as durations)
        assert spark.conf.get("spark.executor.memory") == "768m"
        assert spark.conf.get("spark.network.timeout") == "300s"
        (desc,) = LocalSnapshotStore(snaps).list()
        store = LocalSnapshotStore(snaps)
        assert len(store.manifest(desc.snapshot_id).artifacts[0].parts) >= 2  # multi-part
        serve_equals_table(db, config, tmp_path, counter=counter, stop=stop, w=w)
    finally:
        stop.set()
        w.join()


def test_laredo_spark_baseline_on_a_standalone_cluster_then_laredo_serve(
    pg_database: Any, moto_server: Any, s3_bucket: str, tmp_path: Path
) -> None:
    """The same file on a real cluster: `spark.master = spark://...`, executors in a worker JVM
    connect through the source's connection provider (the configured `connection` points at
    a closed port), the parts go to S3, no password reaches Spark's event log, and `laredo
    serve` restores the snapshot from S3 and streams on under concurrent writers."""
    from laredo_snapshot_s3 import S3SnapshotStore
    from laredo_spark.standalone import standalone_cluster

    db = pg_database
    make_accounts(db)
    provided, configured = f"pw-{uuid.uuid4().hex}", f"pw-{uuid.uuid4().hex}"
    secret_file = tmp_path / "pg-connection"
    secret_file.write_text(db.dsn_for(password=provided) + "\n")
    events = tmp_path / "events"
    events.mkdir()
    store = (
        f'store = s3, store_config {{ bucket = "{s3_bucket}", '
        f'endpoint_url = "{moto_server.endpoint_url}", region = "{moto_server.region}" }}'
    )
    with standalone_cluster(tmp_path / "cluster", env={**os.environ}) as cluster:
        assert cluster.leftover_processes(), "the daemons work in the cluster's directory"
        config = write_config(
            tmp_path / "laredo.conf",
            connection=f"postgresql://postgres:{configured}@127.0.0.1:1/nowhere",
            provider=(
                f'connection_provider {{ type = file, path = "{secret_file}", field = connection }}'
            ),
            slot=db.slot_name,
            store=store,
            master=f'master = "{cluster.master_url}"',
            conf=(
                "spark.eventLog.enabled = true\n"
                "spark.eventLog.compress = false\n"
                "spark.sql.ui.explainMode = extended\n"  # logical plans too
                f'spark.eventLog.dir = "file://{events}"\n'
                "spark.cores.max = 1\n"
                "spark.driver.host = 127.0.0.1\n"
                f"spark.driver.port = {free_port()}\n"
                f"spark.blockManager.port = {free_port()}\n"
            ),
        )
        stop = threading.Event()
        counter = [0]
        w = threading.Thread(target=writer, args=(db, stop, counter))
        w.start()
        try:
            wait_until(lambda: counter[0] > 50, 60, what="the writer", interval=0.1)
            out = subprocess.run(
                [LAREDO, "spark", "baseline", "--config", str(config)],
                capture_output=True,
                text=True,
                env={**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"},
                timeout=300,
                check=False,
            )
            assert out.returncode == 0, out.stderr[-4000:] + cluster.log_tail()
            assert "left to laredo serve" in out.stderr
            assert "rows at" in out.stdout
            s3 = S3SnapshotStore(
                s3_bucket, endpoint_url=moto_server.endpoint_url, region=moto_server.region
            )
            (desc,) = s3.list()
            assert len(s3.manifest(desc.snapshot_id).artifacts[0].parts) >= 2
            logs = [p for p in events.rglob("*") if p.is_file()]  # rolling: a directory
            assert logs, "no event log written"
            text = "".join(p.read_text() for p in logs)
            # executors of the cluster ran the tasks; the settings arrived as written
            assert '"Event":"SparkListenerExecutorAdded"' in text
            assert f'"spark.master":"{cluster.master_url}"' in text
            assert '"spark.executor.memory":"768m"' in text
            assert '"Event":"SparkListenerTaskEnd"' in text
            assert "BatchScan laredo-pg-slices-" in text  # the slice reads' plans are logged
            for secret in (provided, configured):
                assert secret not in text
            serve_equals_table(db, config, tmp_path, counter=counter, stop=stop, w=w)
        finally:
            stop.set()
            w.join()
    # the master, the worker and the executors it started are gone
    assert all(p.poll() is not None for p in cluster.processes)
    assert wait_until(lambda: not cluster.leftover_processes(), 10, what="no JVM left")
