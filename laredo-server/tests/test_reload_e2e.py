"""End to end: `laredo serve` on real PostgreSQL, the config file edited while writers run on
every table, then SIGHUP / `laredo config reload`: table b joins (only it is baselined), table a
leaves, a broken edit changes nothing and is reported."""

from __future__ import annotations

import json
import random
import signal
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from laredo.testing import free_port
from laredo_server._proto.laredo_proto.v1 import oam_pb2 as oam
from laredo_server._proto.laredo_proto.v1 import query_pb2 as q

from .test_e2e import TOKEN, Server
from .testkit import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.integration]

HEAD = """
sources {{
  pg {{
    type = postgresql
    connection = "set by LAREDO_SOURCES__PG__CONNECTION"
    slot_name = {slot}
    publication {{ name = {publication} }}
    status_interval = 200ms
  }}
}}
grpc {{ port = {grpc}, auth {{ token = "{token}" }} }}
health {{ port = {health} }}
observability {{ log_format = json, log_level = info }}
"""

TABLE = (
    "  {{ source = pg, schema = public, table = {name}, "
    "targets = [ {{ type = indexed-memory }} ] }}"
)


def write_config(cfg: Path, head: str, tables: list[str], extra: str = "") -> None:
    body = ",\n".join(TABLE.format(name=t) for t in tables)
    cfg.write_text(head + f"tables = [\n{body}\n]\n" + extra)


def rows(db: Any, table: str) -> int:
    return int(db.scalar(f"SELECT count(*) FROM {table}"))


def test_sighup_and_reload_command_apply_only_the_difference(
    pg_database: Any, tmp_path: Path
) -> None:
    db = pg_database
    for t in ("a", "b"):
        db.execute(f"CREATE TABLE {t} (id int PRIMARY KEY, v int)")
        db.execute(f"INSERT INTO {t} SELECT g, 0 FROM generate_series(1, 200) g")
    head = HEAD.format(
        slot=db.slot_name,
        publication=db.publication,
        grpc=free_port(),
        health=free_port(),
        token=TOKEN,
    )
    cfg = tmp_path / "laredo.conf"
    write_config(cfg, head, ["a"])
    env = {"LAREDO_SOURCES__PG__CONNECTION": db.dsn}
    log = tmp_path / "serve.log"
    server = Server(cfg, env, log)
    stop = threading.Event()

    def writer(seed: int) -> None:
        rnd = random.Random(seed)
        with db.connect() as conn:
            n = 1_000_000 * (seed + 1)
            while not stop.is_set():
                for t in ("a", "b"):
                    n += 1
                    conn.execute(f"INSERT INTO {t} VALUES (%s, 1)", (n,))
                    conn.execute(f"UPDATE {t} SET v = v + 1 WHERE id = %s", (rnd.randint(1, 200),))
                time.sleep(0.002)

    def count(table: str) -> int:
        ref = q.TableRef(schema="public", table=table)
        return int(server.query.CountRows(q.CountRowsRequest(table=ref)).count)

    writers = [threading.Thread(target=writer, args=(i,)) for i in range(2)]
    try:
        assert wait_for(lambda: server.health("/health/ready") == 200, 60)
        for w in writers:
            w.start()
        # 1. add b: SIGHUP after editing the file
        write_config(cfg, head, ["a", "b"])
        server.proc.send_signal(signal.SIGHUP)
        assert wait_for(
            lambda: (
                "b" in {p.table for p in server.oam.GetStatus(oam.GetStatusRequest()).pipelines}
            ),
            60,
        )
        status = server.oam.GetStatus(oam.GetStatusRequest())
        assert status.config_generation == 2
        # 2. a broken edit: rejected with every problem, nothing changes
        write_config(cfg, head, ["a", "b"], extra="bogus_section { x = 1 }\n")
        r = server.cli("config", "reload", token=True)
        assert r.returncode == 1
        out = json.loads(r.stdout)
        assert out["accepted"] is False and any("bogus_section" in e for e in out["errors"])
        assert server.oam.GetStatus(oam.GetStatusRequest()).config_generation == 2
        # 3. remove a with the CLI (dry run first)
        write_config(cfg, head, ["b"])
        dry = json.loads(server.cli("config", "reload", "--dry-run", token=True).stdout)
        assert [c["kind"] for c in dry["changes"]] == ["pipeline_removed"]
        done = json.loads(server.cli("config", "reload", token=True).stdout)
        assert done["accepted"] and done["generation"] == 3
        assert [c["kind"] for c in done["changes"]] == ["pipeline_removed"]
        time.sleep(0.5)
    finally:
        stop.set()
        for w in writers:
            if w.is_alive():
                w.join()
    try:
        assert wait_for(lambda: count("b") == rows(db, "b"), 30), (count("b"), rows(db, "b"))
        pipes = server.oam.GetStatus(oam.GetStatusRequest()).pipelines
        assert [p.table for p in pipes] == ["b"]
        text = log.read_text()
        assert text.count("configuration reloaded (generation 2)") == 1
        assert "configuration reload rejected" in text
        # a was baselined once (at start), b once (when added): nothing else re-baselined
        started = {
            line.split('pipeline="')[1].split('"')[0]: float(line.rsplit(" ", 1)[1])
            for line in server.metrics().splitlines()
            if line.startswith("laredo_baselines_started_total{")
        }
        assert started == {"pg:public.a:indexed-memory": 1.0, "pg:public.b:indexed-memory": 1.0}
    finally:
        assert server.stop() == 0


PRODUCTS = (
    "  {{ source = pg, schema = public, table = products, "
    "targets = [ {{ type = {type}, lookup_fields = [{field}] }} ] }}"
)


def test_a_bad_reload_changes_nothing_and_says_every_cause(
    pg_database: Any, tmp_path: Path
) -> None:
    """The issue's reproduction: a typo in ``lookup_fields`` used to remove ``products`` (the
    pipeline, its publication membership) while readiness stayed 200."""
    db = pg_database
    db.execute("CREATE TABLE products (id int PRIMARY KEY, sku text NOT NULL, v int)")
    db.execute("INSERT INTO products SELECT g, 'sku-' || g, 0 FROM generate_series(1, 50) g")
    db.execute("CREATE TABLE a (id int PRIMARY KEY, v int)")
    head = HEAD.format(
        slot=db.slot_name,
        publication=db.publication,
        grpc=free_port(),
        health=free_port(),
        token=TOKEN,
    )
    cfg = tmp_path / "laredo.conf"

    def write(products: str, *others: str) -> None:
        body = ",\n".join([products, *(TABLE.format(name=t) for t in others)])
        cfg.write_text(head + f"tables = [\n{body}\n]\n")

    def published() -> list[str]:
        return sorted(
            r[0]
            for r in db.execute(
                "SELECT tablename FROM pg_publication_tables WHERE pubname = %s",
                (db.publication,),
            )
        )

    def pipelines() -> list[str]:
        return sorted(p.pipeline_id for p in server.oam.GetStatus(oam.GetStatusRequest()).pipelines)

    good = PRODUCTS.format(type="indexed-memory", field="sku")
    write(good, "a")
    log = tmp_path / "serve.log"
    server = Server(cfg, {"LAREDO_SOURCES__PG__CONNECTION": db.dsn}, log)
    try:
        assert wait_for(lambda: server.health("/health/ready") == 200, 60)
        running = pipelines()
        assert published() == ["a", "products"]
        attempts = {
            # change target options: a column the table lacks; the closest one is named
            "bad column": (
                [PRODUCTS.format(type="indexed-memory", field="skux"), "a"],
                ["'skux' is not a column of public.products", "did you mean 'sku'?"],
            ),
            # remove a and add a missing table in the same reload: a stays
            "remove + add": ([good, "missing_t"], ["public.missing_t"]),
            # add a table beside the bad column: every cause is listed
            "add + bad column": (
                [PRODUCTS.format(type="indexed-memory", field="skux"), "a", "missing_t"],
                ["'skux'", "public.missing_t"],
            ),
            # a target type that does not exist
            "bad type": ([PRODUCTS.format(type="indexed-memroy", field="sku"), "a"], ["memroy"]),
        }
        for what, (tables, causes) in attempts.items():
            write(*tables)
            r = server.cli("config", "reload", token=True)
            out = json.loads(r.stdout)
            assert r.returncode == 1 and out["accepted"] is False, (what, out)
            for cause in causes:
                assert any(cause in e for e in out["errors"]), (what, cause, out["errors"])
            assert pipelines() == running, what
            assert published() == ["a", "products"], what
            assert server.health("/health/ready") == 200, what
            assert server.oam.GetStatus(oam.GetStatusRequest()).config_generation == 1
        # products still answers by its lookup field, and still follows the source
        db.execute("INSERT INTO products VALUES (51, 'sku-51', 1)")
        ref = q.TableRef(schema="public", table="products")
        assert wait_for(
            lambda: server.query.CountRows(q.CountRowsRequest(table=ref)).count == 51, 30
        )
        text = log.read_text()
        assert "did you mean 'sku'?" in text and "public.missing_t" in text
        assert "applied partly" not in text
    finally:
        assert server.stop() == 0
