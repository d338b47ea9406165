"""PostgresSource against a real PostgreSQL: discovery, validation, baseline + stream, values."""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable
from datetime import date, datetime, timedelta
from decimal import Decimal
from typing import Any
from uuid import UUID

import psycopg
import pytest
from laredo.errors import ReBaselineRequired, TransientError
from laredo.testing import free_port
from laredo.types import ChangeAction, ChangeEvent, SourceConfig, SourceState, TableIdentifier
from laredo_source_pg.lsn import parse_lsn
from laredo_source_pg.pytest_plugin import PgTestDb
from laredo_source_pg.source import PostgresSource
from laredo_source_pg.testing import RecordingHandler, StreamThread, wait_until

pytestmark = pytest.mark.integration

USERS = TableIdentifier("public", "users")


def _start(
    src: PostgresSource, tables: list[TableIdentifier]
) -> tuple[dict[TableIdentifier, list[dict[str, Any]]], int, RecordingHandler, StreamThread]:
    src.init(SourceConfig(tables))
    rows: dict[TableIdentifier, list[dict[str, Any]]] = {t: [] for t in tables}
    pos = src.baseline(tables, lambda t, r: rows[t].append(r))
    h = RecordingHandler()
    th = StreamThread(src, pos, h)
    th.start()
    wait_until(lambda: src.state() is SourceState.STREAMING, what="streaming")
    return rows, pos, h, th


def test_discovery_reports_columns_keys_and_oids(
    pg_database: PgTestDb, make_source: Callable[..., PostgresSource]
) -> None:
    pg_database.execute(
        "CREATE TABLE users (tenant int, id bigint, name text NOT NULL, email varchar(80), "
        "created timestamptz DEFAULT now(), PRIMARY KEY (id, tenant))"
    )
    src = make_source()
    schemas = src.init(SourceConfig([USERS, TableIdentifier("public", "nope")]))
    assert list(schemas) == [USERS]  # the missing table is left to validate_tables
    cols = {c.name: c for c in schemas[USERS]}
    assert list(cols) == ["tenant", "id", "name", "email", "created"]
    assert (cols["id"].primary_key, cols["id"].primary_key_ordinal) == (True, 1)
    assert (cols["tenant"].primary_key, cols["tenant"].primary_key_ordinal) == (True, 2)
    assert not cols["name"].primary_key and not cols["name"].nullable
    assert cols["email"].nullable and cols["email"].max_length == 80
    assert (cols["id"].type, cols["id"].type_oid) == ("int8", 20)
    assert (cols["created"].type, cols["created"].type_oid) == ("timestamptz", 1184)
    assert cols["created"].default_value == "now()"
    assert src.state() is SourceState.CONNECTED


def test_validation_codes(
    pg_database: PgTestDb, make_source: Callable[..., PostgresSource]
) -> None:
    db = pg_database
    db.execute("CREATE TABLE ok (id int PRIMARY KEY)")
    db.execute("CREATE TABLE nopk (v int)")
    db.execute("CREATE TABLE nothing (id int PRIMARY KEY)")
    db.execute("ALTER TABLE nothing REPLICA IDENTITY NOTHING")
    db.execute("CREATE TABLE full_ident (v int)")
    db.execute("ALTER TABLE full_ident REPLICA IDENTITY FULL")
    db.execute("CREATE TABLE secret (id int PRIMARY KEY)")
    db.execute("CREATE TABLE outside (id int PRIMARY KEY)")
    role = f"r_{db.slot_name}"
    db.execute(f"CREATE ROLE {role} LOGIN")
    db.execute(f"GRANT SELECT ON ok, nopk, nothing, full_ident, outside TO {role}")
    t = {
        n: TableIdentifier("public", n)
        for n in ("ok", "nopk", "nothing", "full_ident", "secret", "outside", "gone")
    }

    # No publication and create=false: PUBLICATION_NOT_FOUND.
    src = make_source(publication={"create": False})
    src.init(SourceConfig([t["ok"]]))
    codes = {(e.table, e.code) for e in src.validate_tables([t["ok"]])}
    assert codes == {(None, "PUBLICATION_NOT_FOUND")}

    db.execute(
        f"CREATE PUBLICATION {db.publication} FOR TABLE ok, nopk, nothing, full_ident, secret"
    )
    src = make_source(connection=db.dsn_for(user=role), publication={"create": False}, lease=False)
    tables = list(t.values())
    src.init(SourceConfig(tables))
    errors = src.validate_tables(tables)
    got = {(e.table.table if e.table else None, e.code) for e in errors}
    assert got == {
        (None, "MISSING_REPLICATION_PRIVILEGE"),
        ("gone", "TABLE_NOT_FOUND"),
        ("nopk", "REPLICA_IDENTITY"),
        ("nothing", "REPLICA_IDENTITY"),
        ("secret", "MISSING_SELECT_PRIVILEGE"),
        ("outside", "TABLE_NOT_IN_PUBLICATION"),
    }
    for e in errors:  # every message names the fix
        assert any(w in e.message for w in ("ALTER", "GRANT", "CREATE", "check", "add"))

    # The superuser, with a publication created for it: only the real identity problems remain.
    src = make_source(publication={"create": True, "name": f"{db.slot_name}_p2"})
    src.init(SourceConfig([t["ok"], t["full_ident"]]))
    assert src.validate_tables([t["ok"], t["full_ident"]]) == []


def test_baseline_and_stream_align_under_concurrent_writers(
    pg_database: PgTestDb, make_source: Callable[..., PostgresSource]
) -> None:
    db = pg_database
    db.execute("CREATE TABLE users (id int PRIMARY KEY, v int NOT NULL, note text)")
    db.execute("INSERT INTO users SELECT g, 0, 'seed' FROM generate_series(1, 20000) g")
    stop = threading.Event()
    errors: list[BaseException] = []

    def writer(seed: int) -> None:
        rnd = random.Random(seed)
        try:
            with db.connect() as conn:
                next_id = 100_000 * (seed + 1)
                while not stop.is_set():
                    with conn.transaction():
                        for _ in range(rnd.randint(1, 5)):
                            op = rnd.random()
                            if op < 0.4:
                                next_id += 1
                                conn.execute(
                                    "INSERT INTO users VALUES (%s, %s, 'w')", (next_id, seed)
                                )
                            elif op < 0.8:
                                conn.execute(
                                    "UPDATE users SET v = v + 1 WHERE id = %s",
                                    (rnd.randint(1, 20000),),
                                )
                            else:
                                conn.execute(
                                    "DELETE FROM users WHERE id = %s", (rnd.randint(1, 20000),)
                                )
        except BaseException as exc:
            errors.append(exc)

    writers = [threading.Thread(target=writer, args=(i,)) for i in range(3)]
    for w in writers:
        w.start()
    src = make_source()
    # Widen the window between slot creation and the table scan: writers keep committing in
    # it, so reading outside the exported snapshot would duplicate or lose changes.
    original = src._baseline.copy_table

    def slow_copy(*args: Any) -> int:
        time.sleep(0.3)
        return original(*args)

    src._baseline.copy_table = slow_copy  # type: ignore[method-assign]
    try:
        wait_until(lambda: db.scalar("SELECT count(*) FROM users WHERE note = 'w'") > 20)
        rows, pos, h, th = _start(src, [USERS])
        wait_until(lambda: len(h.events) > 200, what="changes while writers run")
    finally:
        stop.set()
        for w in writers:
            w.join()
    assert not errors, errors
    final_lsn = (
        psycopg.connect(db.dsn, autocommit=True)
        .execute("SELECT pg_current_wal_lsn()::text")
        .fetchone()
    )
    assert final_lsn is not None
    end = parse_lsn(final_lsn[0])
    wait_until(
        lambda: src._run.received >= end or src._run.delivered >= end, 20, what="stream caught up"
    )
    # Apply strictly: an insert of an existing key is a duplicate, an update/delete of a
    # missing key is a gap.
    state = {r["id"]: r for r in rows[USERS]}
    for e in h.snapshot():
        assert e.position > pos
        if e.action is ChangeAction.INSERT:
            assert e.new_values is not None
            assert e.new_values["id"] not in state, f"duplicate insert {e}"
            state[e.new_values["id"]] = e.new_values
        elif e.action is ChangeAction.UPDATE:
            assert e.new_values is not None
            assert e.new_values["id"] in state, f"update of a row the baseline missed: {e}"
            state[e.new_values["id"]] = e.new_values
        elif e.action is ChangeAction.DELETE:
            assert e.old_values is not None
            assert state.pop(e.old_values["id"], None) is not None, f"gap: {e}"
    expected = {
        r[0]: {"id": r[0], "v": r[1], "note": r[2]}
        for r in db.execute("SELECT id, v, note FROM users")
    }
    assert state == expected
    positions = [e.position for e in h.snapshot()]
    assert positions == sorted(positions)
    th.stop()
    assert th.error is None


TYPES_DDL = """
CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy');
CREATE DOMAIN posint AS int CHECK (VALUE > 0);
CREATE TABLE typed (
  id int PRIMARY KEY, i2 int2, i8 int8, num numeric(12,3), numnan numeric, f4 float4, f8 float8,
  b bool, t text, vc varchar(10), ch char(3), by bytea, d date, tm time, tmz timetz,
  ts timestamp, tstz timestamptz, iv interval, u uuid, j json, jb jsonb, ia int[], ta text[],
  m mood, ma mood[], inet_ inet, cidr_ cidr, mac macaddr, pt point, rng int4range, nul text,
  big numeric, dom posint
)
"""

TYPES_ROW = """
INSERT INTO typed VALUES ({id}, -7, 9007199254740993, 12345.678, 'NaN', 1.5, 3.141592653589793,
  true, 'héllo ''q''', 'varchar', 'ab', '\\x00ff10'::bytea, '2024-02-29', '13:14:15.123456',
  '13:14:15+02', '2024-01-02 03:04:05.678901', '2024-01-02 03:04:05.678901+05:30',
  '1 year 2 mons 3 days 04:05:06.7', 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11',
  '{{"a": [1, 2.5, null], "b": "x"}}', '{{"k": {{"n": 1}}, "l": [true, false]}}',
  '{{1,NULL,3}}', '{{"a b","c,d",NULL}}', 'happy', '{{sad,ok}}', '192.168.0.1/24', '10.0.0.0/8',
  '08:00:2b:01:02:03', '(1.5,2)', '[1,10)', NULL, 123456789012345678901234567890.123456789, 42)
"""


def test_values_have_identical_types_on_baseline_and_stream(
    pg_database: PgTestDb, make_source: Callable[..., PostgresSource]
) -> None:
    db = pg_database
    with db.connect() as conn:
        conn.execute(TYPES_DDL)
        conn.execute(TYPES_ROW.format(id=1))
    t = TableIdentifier("public", "typed")
    src = make_source()
    rows, _pos, h, th = _start(src, [t])
    with db.connect() as conn:
        conn.execute(TYPES_ROW.format(id=2))
    (event,) = h.wait_for_events(1)
    th.stop()
    base = rows[t][0]
    streamed = event.new_values
    assert streamed is not None
    assert base.keys() == streamed.keys()
    for col in base:
        if col == "id":
            continue
        b, s = base[col], streamed[col]
        assert type(b) is type(s), f"{col}: {type(b)} vs {type(s)}"
        if col == "numnan":
            assert b.is_nan() and s.is_nan()
        else:
            assert b == s, f"{col}: {b!r} vs {s!r}"
        if hasattr(b, "tzinfo"):
            assert b.tzinfo == s.tzinfo, col
    # Spot-check the Python types themselves.
    assert isinstance(base["num"], Decimal) and isinstance(base["big"], Decimal)
    assert isinstance(base["tstz"], datetime) and base["tstz"].tzinfo is not None
    assert isinstance(base["d"], date) and isinstance(base["iv"], timedelta)
    assert isinstance(base["u"], UUID) and isinstance(base["by"], bytes)
    assert base["j"] == {"a": [1, 2.5, None], "b": "x"}
    assert base["jb"] == {"k": {"n": 1}, "l": [True, False]}
    assert base["ia"] == [1, None, 3] and base["ta"] == ["a b", "c,d", None]
    assert base["m"] == "happy" and isinstance(base["m"], str)
    assert base["nul"] is None and base["i8"] == 9007199254740993
    assert base["dom"] == 42  # a domain loads as its base type on both paths


def test_unchanged_toast_is_named_not_dropped(
    pg_database: PgTestDb, make_source: Callable[..., PostgresSource]
) -> None:
    db = pg_database
    db.execute("CREATE TABLE docs (id int PRIMARY KEY, body text, n int)")
    db.execute("CREATE TABLE docs_full (id int, body text, n int)")
    db.execute("ALTER TABLE docs_full REPLICA IDENTITY FULL")
    big = "".join(random.choice("abcdefghijklmnopqrstuvwxyz0123456789") for _ in range(200_000))
    for table in ("docs", "docs_full"):
        db.execute(f"INSERT INTO {table} VALUES (1, %s, 0)", (big,))
    tables = [TableIdentifier("public", "docs"), TableIdentifier("public", "docs_full")]
    src = make_source()
    rows, _pos, h, th = _start(src, tables)
    assert rows[tables[0]][0]["body"] == big
    db.execute("UPDATE docs SET n = 1 WHERE id = 1")
    db.execute("UPDATE docs_full SET n = 1 WHERE id = 1")
    db.execute("UPDATE docs SET body = 'small', n = 2 WHERE id = 1")
    e1, e2, e3 = h.wait_for_events(3)
    th.stop()
    for e in (e1, e2):
        assert e.action is ChangeAction.UPDATE
        assert e.new_values is not None
        assert "body" not in e.new_values  # not None, not dropped silently: absent and named
        assert e.unchanged_toast == frozenset({"body"})
        assert e.new_values["n"] == 1
    assert e3.new_values == {"id": 1, "body": "small", "n": 2}
    assert e3.unchanged_toast == frozenset()


def test_identity_default_full_no_pk_and_key_change(
    pg_database: PgTestDb, make_source: Callable[..., PostgresSource]
) -> None:
    db = pg_database
    db.execute("CREATE TABLE d (id int PRIMARY KEY, v text)")
    db.execute("CREATE TABLE f (id int PRIMARY KEY, v text)")
    db.execute("ALTER TABLE f REPLICA IDENTITY FULL")
    db.execute("CREATE TABLE nopk (a int, b text)")
    db.execute("ALTER TABLE nopk REPLICA IDENTITY FULL")
    for t in ("d", "f"):
        db.execute(f"INSERT INTO {t} VALUES (1, 'one'), (2, 'two')")
    db.execute("INSERT INTO nopk VALUES (1, 'x')")
    tables = [TableIdentifier("public", n) for n in ("d", "f", "nopk")]
    src = make_source()
    rows, _pos, h, th = _start(src, tables)
    assert len(rows[tables[2]]) == 1
    with db.connect() as conn, conn.transaction():
        conn.execute("UPDATE d SET v = 'uno' WHERE id = 1")
        conn.execute("UPDATE d SET id = 10 WHERE id = 2")  # key change
        conn.execute("DELETE FROM d WHERE id = 1")
        conn.execute("UPDATE f SET v = 'uno' WHERE id = 1")
        conn.execute("DELETE FROM f WHERE id = 2")
        conn.execute("UPDATE nopk SET b = 'y'")
        conn.execute("DELETE FROM nopk")
    evs = h.wait_for_events(7)
    th.stop()
    assert len({e.position for e in evs}) == 1  # one transaction, one commit position
    assert len({e.xid for e in evs}) == 1 and evs[0].xid > 0
    upd, keychg, dele, fupd, fdel, nupd, ndel = evs
    assert upd.old_values is None and upd.new_values == {"id": 1, "v": "uno"}
    assert keychg.old_values == {"id": 2} and keychg.new_values == {"id": 10, "v": "two"}
    assert dele.old_values == {"id": 1}
    assert fupd.old_values == {"id": 1, "v": "one"}
    assert fdel.old_values == {"id": 2, "v": "two"}
    assert nupd.old_values == {"a": 1, "b": "x"} and nupd.new_values == {"a": 1, "b": "y"}
    assert ndel.old_values == {"a": 1, "b": "y"}
    assert [e.table.table for e in evs] == ["d", "d", "d", "f", "f", "nopk", "nopk"]


def test_truncate_multi_table_order_and_untracked_tables(
    pg_database: PgTestDb, make_source: Callable[..., PostgresSource]
) -> None:
    db = pg_database
    for n in ("a", "b", "other"):
        db.execute(f"CREATE TABLE {n} (id int PRIMARY KEY)")
    db.execute(f"CREATE PUBLICATION {db.publication} FOR TABLE a, b, other")
    tables = [TableIdentifier("public", "a"), TableIdentifier("public", "b")]
    src = make_source(publication={"create": False})
    _rows, _pos, h, th = _start(src, tables)
    db.execute("INSERT INTO other VALUES (1)")  # published but not configured: skipped
    with db.connect() as conn, conn.transaction():
        conn.execute("INSERT INTO b VALUES (1)")
        conn.execute("INSERT INTO a VALUES (1)")
        conn.execute("INSERT INTO other VALUES (2)")
        conn.execute("INSERT INTO b VALUES (2)")
    db.execute("TRUNCATE a, b, other")
    evs = h.wait_for_events(5)
    th.stop()
    assert [(e.table.table, e.action) for e in evs] == [
        ("b", ChangeAction.INSERT),
        ("a", ChangeAction.INSERT),
        ("b", ChangeAction.INSERT),
        ("a", ChangeAction.TRUNCATE),
        ("b", ChangeAction.TRUNCATE),
    ]
    assert evs[0].position == evs[2].position < evs[3].position == evs[4].position
    assert evs[0].commit_timestamp is not None


def test_schema_change_is_reported_in_stream_order(
    pg_database: PgTestDb, make_source: Callable[..., PostgresSource]
) -> None:
    db = pg_database
    db.execute("CREATE TABLE users (id int PRIMARY KEY, name text)")
    src = make_source()
    _rows, _pos, h, th = _start(src, [USERS])
    db.execute("INSERT INTO users VALUES (1, 'a')")
    h.wait_for_events(1)
    db.execute("ALTER TABLE users ADD COLUMN age int")
    db.execute("INSERT INTO users VALUES (2, 'b', 30)")
    evs = h.wait_for_events(2)
    wait_until(lambda: h.schema_changes, what="schema change")
    th.stop()
    assert evs[1].new_values == {"id": 2, "name": "b", "age": 30}
    ((table, old, new, position),) = h.schema_changes
    assert table == USERS
    assert [c.name for c in old] == ["id", "name"]
    assert [c.name for c in new] == ["id", "name", "age"]
    assert new[2].type == "int4" and new[2].type_oid == 23
    assert new[0].primary_key
    assert evs[0].position < position <= evs[1].position
    # The schema-change callback came before the insert that uses the new column.
    assert h.batches[-1][0] is evs[1]


def test_a_changed_numeric_precision_is_a_schema_change_and_an_unchanged_one_is_not(
    pg_database: PgTestDb, make_source: Callable[..., PostgresSource]
) -> None:
    db = pg_database
    db.execute(
        "CREATE TABLE users (id int PRIMARY KEY, amount numeric(12,2), name varchar(20), "
        "at timestamptz(3), bits bit(4))"
    )
    src = make_source()
    _rows, _pos, h, th = _start(src, [USERS])
    db.execute("INSERT INTO users VALUES (1, 1.5, 'a', now(), B'1010')")
    h.wait_for_events(1)
    assert not h.schema_changes  # the Relation message's type modifiers match the catalog's
    db.execute("ALTER TABLE users ALTER COLUMN amount TYPE numeric(14,2)")
    db.execute("INSERT INTO users VALUES (2, 123456789012.25, 'b', now(), B'0101')")
    evs = h.wait_for_events(2)
    wait_until(lambda: h.schema_changes, what="the precision change")
    th.stop()
    ((table, old, new, position),) = h.schema_changes
    assert table == USERS
    assert (old[1].precision, old[1].scale) == (12, 2)
    assert (new[1].precision, new[1].scale) == (14, 2)
    assert evs[0].position < position <= evs[1].position


def test_connection_errors_are_clear_and_masked(
    make_source: Callable[..., PostgresSource], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)

    port = free_port()  # nothing listens there
    src = make_source(connection=f"postgresql://bob:hunter2@127.0.0.1:{port}/db", connect_timeout=2)
    with pytest.raises(TransientError) as info:
        src.init(SourceConfig([USERS]))
    assert "hunter2" not in str(info.value)
    assert "***" in str(info.value) and "query connection" in str(info.value)
    assert src.state() is SourceState.ERROR
    assert "hunter2" not in repr(src) and "hunter2" not in caplog.text


@pytest.mark.parametrize("proto", [1, 2])
def test_stream_events_are_change_events(
    pg_database: PgTestDb, make_source: Callable[..., PostgresSource], proto: int
) -> None:
    pg_database.execute("CREATE TABLE users (id int PRIMARY KEY)")
    src = make_source(batch_size=100, proto_version=proto)
    _rows, pos, h, th = _start(src, [USERS])
    pg_database.execute("INSERT INTO users SELECT generate_series(1, 250)")
    evs = h.wait_for_events(250)
    th.stop()
    assert all(isinstance(e, ChangeEvent) for e in evs)
    assert [len(b) for b in h.batches] == [100, 100, 50]  # one transaction, chunked
    # Passed on while received: the early chunks stand inside the transaction (not
    # acknowledgeable), the last at its commit end LSN.
    early, end = ({e.position for e in b} for b in (h.batches[0] + h.batches[1], h.batches[2]))
    assert len(early) == 1 and len(end) == 1
    assert (
        pos
        < min(early)
        < min(end)
        <= parse_lsn(pg_database.scalar("SELECT pg_current_wal_lsn()::text"))
    )
    assert h.completes == [False, False, True]


def test_stop_stream_then_stream_again(
    pg_database: PgTestDb, make_source: Callable[..., PostgresSource]
) -> None:
    db = pg_database
    db.execute("CREATE TABLE users (id int PRIMARY KEY)")
    eph = make_source(slot_name=db.slot_name + "_e")
    _rows, pos, _h, th = _start(eph, [USERS])
    th.stop()
    with pytest.raises(ReBaselineRequired):  # its temporary slot went with the connection
        eph.stream(pos, RecordingHandler())
    src = make_source(slot_mode="stateful")  # the named slot stays: streaming continues
    _rows, _pos, h, th = _start(src, [USERS])
    db.execute("INSERT INTO users VALUES (1)")
    (e1,) = h.wait_for_events(1)
    th.stop()
    assert th.error is None
    db.execute("INSERT INTO users VALUES (2)")  # while nobody streams
    h2 = RecordingHandler()
    th2 = StreamThread(src, e1.position, h2)
    th2.start()
    wait_until(lambda: h2.events or th2.error, what="event or error")
    assert th2.error is None, repr(th2.error)
    (e2,) = h2.wait_for_events(1)
    th2.stop()
    assert e2.new_values == {"id": 2}


def test_a_failing_handler_surfaces_and_ephemeral_then_needs_a_baseline(
    pg_database: PgTestDb, make_source: Callable[..., PostgresSource]
) -> None:
    db = pg_database
    db.execute("CREATE TABLE users (id int PRIMARY KEY)")
    src = make_source()
    _rows, pos, h, th = _start(src, [USERS])

    def boom(batch: list[ChangeEvent]) -> None:
        raise RuntimeError("target exploded")

    h.on_batch = boom
    db.execute("INSERT INTO users VALUES (1)")
    th.join(10)
    assert isinstance(th.error, RuntimeError)
    with pytest.raises(ReBaselineRequired):
        src.stream(pos, RecordingHandler())
    rows: list[dict[str, Any]] = []
    src.baseline([USERS], lambda t, r: rows.append(r))
    assert rows == [{"id": 1}]


class OldDialectHandler(RecordingHandler):
    """The deprecated dialect: ``on_changes(events)`` without the ``complete`` flag."""

    def on_changes(self, events: Any) -> None:  # type: ignore[override]
        super().on_changes(events)


def _old_dialect_stream(
    db: PgTestDb, make_source: Callable[..., PostgresSource], *writes: str
) -> OldDialectHandler:
    """An :class:`OldDialectHandler` streaming ``batch_size=100`` while ``writes`` run, each
    its own transaction; returns it once every event arrived."""
    db.execute("CREATE TABLE users (id int PRIMARY KEY)")
    src = make_source(batch_size=100)
    src.init(SourceConfig([USERS]))
    pos = src.baseline([USERS], lambda t, r: None)
    h = OldDialectHandler()
    th = StreamThread(src, pos, h)
    with pytest.warns(DeprecationWarning, match="without the complete flag"):
        th.start()
        wait_until(lambda: src.state() is SourceState.STREAMING, what="streaming")
        for sql in writes:
            db.execute(sql)
        h.wait_for_events(500)
        th.stop()
    assert th.error is None
    return h


def test_the_first_large_transaction_reaches_an_old_dialect_handler_whole(
    pg_database: PgTestDb, make_source: Callable[..., PostgresSource]
) -> None:
    """The dialect is found by the first call, which is a chunk of a transaction larger than
    ``batch_size`` cut before its commit: that chunk must not reach the handler alone (without
    a flag it would take it for a whole transaction), and no event may carry a position
    inside the transaction."""
    h = _old_dialect_stream(
        pg_database, make_source, "INSERT INTO users SELECT generate_series(1, 500)"
    )
    assert [len(b) for b in h.batches] == [500]
    assert [e.new_values["id"] for e in h.batches[0] if e.new_values] == list(range(1, 501))
    end = parse_lsn(pg_database.scalar("SELECT pg_current_wal_lsn()::text"))
    (position,) = {e.position for e in h.batches[0]}
    assert position <= end  # the commit end LSN, not final_lsn + 1 inside it


def test_an_old_dialect_handler_gets_transactions_larger_than_batch_size_whole(
    pg_database: PgTestDb, make_source: Callable[..., PostgresSource]
) -> None:
    """The deprecation message promises whole transactions: not cut at ``batch_size``."""
    h = _old_dialect_stream(
        pg_database,
        make_source,
        "INSERT INTO users SELECT generate_series(1, 250)",
        "INSERT INTO users SELECT generate_series(251, 500)",
    )
    assert [len(b) for b in h.batches] == [250, 250]
    evs = [e for b in h.batches for e in b]
    assert [e.new_values["id"] for e in evs if e.new_values] == list(range(1, 501))  # once each
    assert [len({e.position for e in b}) for b in h.batches] == [1, 1]
