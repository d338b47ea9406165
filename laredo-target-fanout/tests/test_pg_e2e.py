"""End to end: PostgreSQL -> engine -> replication-fanout -> client replicas over gRPC."""

from __future__ import annotations

import threading
from datetime import UTC, date, datetime
from typing import Any

import laredo
import pytest
from laredo_target_fanout import FanOutClient
from laredo_target_fanout.testing import USERS, same_rows, wait_until

pytestmark = pytest.mark.integration

pg = pytest.importorskip("laredo_source_pg.source")
dict_row = pytest.importorskip("psycopg.rows").dict_row


def test_postgres_changes_reach_every_client_with_their_types(pg_database: Any) -> None:
    db = pg_database
    db.execute(
        "CREATE TABLE users (id int PRIMARY KEY, name text, team int, amount numeric(12,2), "
        "at timestamptz, uid uuid, blob bytea, doc jsonb)"
    )
    db.execute(
        "INSERT INTO users SELECT g, 'u' || g, g % 5, g * 1.25, "
        "'2026-01-01 00:00:00+00'::timestamptz + g * interval '1 minute', "
        "md5(g::text)::uuid, decode(lpad(to_hex(g), 8, '0'), 'hex'), "
        "jsonb_build_object('g', g, 'tags', jsonb_build_array('a', g)) "
        "FROM generate_series(1, 500) g"
    )
    src = pg.PostgresSource(
        db.dsn, slot_name=db.slot_name, publication={"create": True}, status_interval=0.2
    )
    target = laredo.target("replication-fanout", grpc={"port": 0}, heartbeat_interval=0.5)
    obs = laredo.RecordingObserver()
    # the engine binds the target (PipelineAware): LSNs travel as "X/Y" text, events reach obs
    eng = laredo.Engine(
        sources={"pg": src}, pipelines=[laredo.Pipeline("pg", USERS, target)], observers=[obs]
    )
    eng.start()
    clients: list[FanOutClient] = []
    try:
        assert eng.await_ready(30)
        clients = [
            FanOutClient(target.address, USERS, client_id=f"pg{i}").start() for i in range(5)
        ]
        assert obs.wait_for("fanout_client_connected", 5, 20)
        assert target.codec.to_string(src.position_from_string("0/10")) == "0/10"
        team2 = FanOutClient(
            target.address, USERS, client_id="team2", filters=[{"field": "team", "equals": 2}]
        ).start()
        clients.append(team2)
        stop = threading.Event()

        def writer() -> None:
            with db.connect() as conn:
                n = 1000
                while not stop.is_set() and n < 1300:
                    with conn.transaction():
                        conn.execute(
                            "INSERT INTO users VALUES (%s, 'new', %s, 9.99, now(), "
                            "gen_random_uuid(), '\\x00ff', '[1, 2.5]')",
                            (n, n % 5),
                        )
                        conn.execute(
                            "UPDATE users SET amount = amount + 1, team = (team + 1) %% 5 "
                            "WHERE id = %s",
                            (n % 500 + 1,),
                        )
                        conn.execute("DELETE FROM users WHERE id = %s", (n - 700,))
                    n += 1

        w = threading.Thread(target=writer)
        w.start()
        for c in clients:
            assert c.await_ready(30), c.status()
        w.join(60)
        stop.set()
        assert db.scalar("SELECT count(*) FROM users WHERE id >= 1000") == 300
        with db.connect(row_factory=dict_row) as conn:
            expected = conn.execute("SELECT * FROM users").fetchall()
        wait_until(lambda: same_rows(target.all(), expected), 30, "the fan-out target")
        for c in clients[:-1]:
            wait_until(lambda c=c: same_rows(c.all(), expected), 30, f"client {c.client_id}")
        wait_until(
            lambda: same_rows(team2.all(), [r for r in expected if r["team"] == 2]), 30, "team2"
        )
        row = clients[0].get(1000)
        assert row is not None and row == next(r for r in expected if r["id"] == 1000)
        assert "/" in clients[0].source_position  # PostgreSQL LSNs are stamped on entries
        assert src.compare_positions(src.position_from_string(clients[0].source_position), 0) > 0
    finally:
        for c in clients:
            c.stop(save=False)
        eng.stop()


def test_date_and_timestamp_infinities_reach_clients_unchanged(pg_database: Any) -> None:
    """``'infinity'``/``'-infinity'`` (issue 29): ``date.max``/``datetime.max`` and minimums
    (UTC for ``timestamptz``), baselined and streamed, arrive at a client over the wire as the
    same values."""
    db = pg_database
    db.execute("CREATE TABLE users (id int PRIMARY KEY, d date, ts timestamp, tz timestamptz)")
    db.execute("INSERT INTO users VALUES (1, 'infinity', 'infinity', 'infinity')")
    src = pg.PostgresSource(
        db.dsn, slot_name=db.slot_name, publication={"create": True}, status_interval=0.2
    )
    target = laredo.target("replication-fanout", grpc={"port": 0}, heartbeat_interval=0.5)
    eng = laredo.Engine(sources={"pg": src}, pipelines=[laredo.Pipeline("pg", USERS, target)])
    top = {"d": date.max, "ts": datetime.max, "tz": datetime.max.replace(tzinfo=UTC)}
    bottom = {"d": date.min, "ts": datetime.min, "tz": datetime.min.replace(tzinfo=UTC)}
    eng.start()
    client: FanOutClient | None = None
    try:
        assert eng.await_ready(30)
        client = FanOutClient(target.address, USERS, client_id="inf").start()
        assert client.await_ready(30), client.status()
        db.execute("INSERT INTO users VALUES (2, '-infinity', '-infinity', '-infinity')")
        wait_until(lambda: client is not None and client.get(2) is not None, 30, "row 2")
        for key, expected in ((1, top), (2, bottom)):
            row = client.get(key)
            assert row is not None and {c: row[c] for c in expected} == expected
            assert row["tz"].utcoffset().total_seconds() == 0 and row["ts"].tzinfo is None
    finally:
        if client is not None:
            client.stop(save=False)
        eng.stop()
