"""PostgresSource driven by laredo.Engine into real targets."""

from __future__ import annotations

import random
import threading
from collections.abc import Callable
from typing import Any

import laredo
import pytest
from laredo.testing.recording import RecordingTarget
from laredo.types import TableIdentifier
from laredo_source_pg.lsn import parse_lsn
from laredo_source_pg.pytest_plugin import PgTestDb
from laredo_source_pg.source import PostgresSource
from laredo_source_pg.testing import wait_until

pytestmark = pytest.mark.integration

USERS = TableIdentifier("public", "users")


def _engine(src: PostgresSource, target: Any, **kw: Any) -> laredo.Engine:
    return laredo.Engine(
        sources={"pg": src}, pipelines=[laredo.Pipeline("pg", USERS, target, **kw)]
    )


def test_engine_baseline_then_stream_into_a_target_equals_select_star(
    pg_database: PgTestDb, make_source: Callable[..., PostgresSource]
) -> None:
    db = pg_database
    db.execute("CREATE TABLE users (id int PRIMARY KEY, v int, doc jsonb, at timestamptz)")
    db.execute("INSERT INTO users SELECT g, 0, '{\"k\": 1}', now() FROM generate_series(1, 2000) g")
    stop = threading.Event()

    def writer(seed: int) -> None:
        rnd = random.Random(seed)
        with db.connect() as conn:
            n = 10_000 * (seed + 1)
            while not stop.is_set():
                op = rnd.random()
                if op < 0.4:
                    n += 1
                    conn.execute("INSERT INTO users VALUES (%s, 1, '[1]', now())", (n,))
                elif op < 0.8:
                    conn.execute(
                        "UPDATE users SET v = v + 1, at = now() WHERE id = %s",
                        (rnd.randint(1, 2000),),
                    )
                else:
                    conn.execute("DELETE FROM users WHERE id = %s", (rnd.randint(1, 2000),))

    writers = [threading.Thread(target=writer, args=(i,)) for i in range(2)]
    for w in writers:
        w.start()
    target = RecordingTarget(durable=True)
    eng = _engine(make_source(), target)
    try:
        eng.start()
        assert eng.await_ready(30)
        wait_until(lambda: len(target.calls) > 2100)
    finally:
        stop.set()
        for w in writers:
            w.join()
    expected = {
        (r[0],): {"id": r[0], "v": r[1], "doc": r[2], "at": r[3]}
        for r in db.execute("SELECT id, v, doc, at FROM users")
    }
    wait_until(lambda: dict(target.items()) == expected, 20, what="target == SELECT *")
    # Acks reach the slot: its confirmed position follows what the durable target applied.
    slot = db.execute("SELECT slot_name FROM pg_replication_slots")
    assert slot
    wait_until(
        lambda: (
            parse_lsn(db.scalar("SELECT confirmed_flush_lsn::text FROM pg_replication_slots")) > 0
        )
    )
    eng.stop()


def test_engine_unchanged_toast_keeps_the_stored_value(
    pg_database: PgTestDb, make_source: Callable[..., PostgresSource]
) -> None:
    db = pg_database
    db.execute("CREATE TABLE users (id int PRIMARY KEY, body text, n int)")
    big = "".join(random.choice("abcdef0123456789") for _ in range(100_000))
    db.execute("INSERT INTO users VALUES (1, %s, 0)", (big,))
    target = RecordingTarget(durable=True)
    eng = _engine(make_source(), target)
    eng.start()
    try:
        assert eng.await_ready(30)
        db.execute("UPDATE users SET n = 1")
        wait_until(lambda: dict(target.items()).get((1,), {}).get("n") == 1)
        assert dict(target.items())[(1,)]["body"] == big
    finally:
        eng.stop()


def test_engine_stateful_resume_redelivers_only_after_the_durable_position(
    pg_database: PgTestDb, make_source: Callable[..., PostgresSource]
) -> None:
    db = pg_database
    db.execute("CREATE TABLE users (id int PRIMARY KEY)")
    db.execute("INSERT INTO users VALUES (1)")
    t1 = RecordingTarget(durable=True)
    eng = _engine(make_source(slot_mode="stateful"), t1)
    eng.start()
    assert eng.await_ready(30)
    db.execute("INSERT INTO users VALUES (2)")
    wait_until(lambda: (2,) in dict(t1.items()))
    wait_until(
        lambda: (
            parse_lsn(db.scalar("SELECT confirmed_flush_lsn::text FROM pg_replication_slots"))
            >= t1.position
        )
    )
    eng.stop()
    db.execute("INSERT INTO users VALUES (3)")
    t2 = RecordingTarget(durable=True)
    eng2 = _engine(make_source(slot_mode="stateful"), t2)
    eng2.start()
    try:
        assert eng2.await_ready(30)
        wait_until(lambda: (3,) in dict(t2.items()))
        # Resumed, not re-baselined: only the change after the acked position arrived.
        assert not [c for c in t2.calls if str(c[0]).startswith("on_baseline_row")]
        assert (1,) not in dict(t2.items()) and (2,) not in dict(t2.items())
    finally:
        eng2.stop()


def _expected(db: PgTestDb) -> dict[tuple[int], dict[str, Any]]:
    return {(r[0],): {"id": r[0], "v": r[1]} for r in db.execute("SELECT id, v FROM users")}


def test_engine_reload_while_writers_run_keeps_the_target_exact(
    pg_database: PgTestDb, make_source: Callable[..., PostgresSource]
) -> None:
    db = pg_database
    db.execute("CREATE TABLE users (id int PRIMARY KEY, v int)")
    db.execute("INSERT INTO users SELECT g, 0 FROM generate_series(1, 500) g")
    target = RecordingTarget(durable=True)
    eng = _engine(make_source(), target)
    eng.start()
    stop = threading.Event()

    def writer() -> None:
        rnd = random.Random(1)
        with db.connect() as conn:
            while not stop.is_set():
                conn.execute("UPDATE users SET v = v + 1 WHERE id = %s", (rnd.randint(1, 500),))
                conn.execute(
                    "INSERT INTO users VALUES (%s, 0) ON CONFLICT DO NOTHING",
                    (rnd.randint(501, 5000),),
                )

    w = threading.Thread(target=writer)
    try:
        assert eng.await_ready(30)
        w.start()
        wait_until(lambda: len(target.calls) > 700)
        eng.reload("pg", USERS)  # baseline of one table while the stream runs
        wait_until(lambda: len(target.calls) > 1500)
    finally:
        stop.set()
        if w.is_alive():
            w.join()
    try:
        wait_until(lambda: dict(target.items()) == _expected(db), 20, what="target == SELECT *")
    finally:
        eng.stop()


def test_engine_ephemeral_connection_loss_rebaselines_to_an_exact_target(
    pg_database: PgTestDb, make_source: Callable[..., PostgresSource]
) -> None:
    db = pg_database
    db.execute("CREATE TABLE users (id int PRIMARY KEY, v int)")
    db.execute("INSERT INTO users VALUES (1, 0), (2, 0)")
    target = RecordingTarget(durable=True)
    eng = _engine(make_source(), target)
    eng.start()
    try:
        assert eng.await_ready(30)
        pid = wait_until(
            lambda: db.scalar(
                "SELECT active_pid FROM pg_replication_slots WHERE slot_name = %s",
                (db.slot_name,),
            ),
            what="walsender",
        )
        db.execute("SELECT pg_terminate_backend(%s)", (pid,))
        db.execute(
            "DELETE FROM users WHERE id = 1"
        )  # maybe in no slot at all: the re-baseline has it
        db.execute("INSERT INTO users VALUES (3, 0)")
        wait_until(lambda: dict(target.items()) == _expected(db), 20, what="target == SELECT *")
        db.execute("UPDATE users SET v = 9 WHERE id = 3")
        wait_until(lambda: dict(target.items()) == _expected(db), 20, what="streaming again")
    finally:
        eng.stop()
