"""Acknowledgements, resume, reconnects, invalidation and leases against a real PostgreSQL."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest
from laredo.errors import ConfigError, ReBaselineRequired, SourceError
from laredo.types import ChangeAction, SourceConfig, SourceState, TableIdentifier
from laredo_source_pg.embedded import EmbeddedPostgres
from laredo_source_pg.lsn import parse_lsn
from laredo_source_pg.pytest_plugin import PgTestDb
from laredo_source_pg.source import PostgresSource
from laredo_source_pg.testing import RecordingHandler, StreamThread, wait_until

pytestmark = pytest.mark.integration

USERS = TableIdentifier("public", "users")


def _slot(db: PgTestDb, name: str) -> dict[str, Any] | None:
    rows = db.execute(
        "SELECT confirmed_flush_lsn::text, active_pid, wal_status FROM pg_replication_slots "
        "WHERE slot_name = %s",
        (name,),
    )
    if not rows:
        return None
    confirmed, pid, wal_status = rows[0]
    return {"confirmed": parse_lsn(confirmed), "pid": pid, "wal_status": wal_status}


def _walsender_write(db: PgTestDb, slot: str) -> int:
    rows = db.execute(
        "SELECT r.write_lsn::text FROM pg_stat_replication r JOIN pg_replication_slots s "
        "ON s.active_pid = r.pid WHERE s.slot_name = %s",
        (slot,),
    )
    return parse_lsn(rows[0][0]) if rows and rows[0][0] else 0


def _kill_walsender(db: PgTestDb, slot: str) -> int:
    pid = wait_until(lambda: (_slot(db, slot) or {}).get("pid"), what="active walsender")
    db.execute("SELECT pg_terminate_backend(%s)", (pid,))
    return int(pid)


def _stream(src: PostgresSource, pos: Any) -> tuple[RecordingHandler, StreamThread]:
    h = RecordingHandler()
    th = StreamThread(src, pos, h)
    th.start()
    wait_until(lambda: src.state() is SourceState.STREAMING, what="streaming")
    return h, th


def test_slot_confirms_only_acked_positions_and_idle_slot_advances(
    pg_database: PgTestDb, make_source: Callable[..., PostgresSource]
) -> None:
    db = pg_database
    db.execute("CREATE TABLE users (id int PRIMARY KEY)")
    db.execute("CREATE TABLE unpublished (id int)")
    src = make_source()
    src.init(SourceConfig([USERS]))
    pos = src.baseline([USERS], lambda t, r: None)
    h, th = _stream(src, pos)
    for i in range(3):
        db.execute("INSERT INTO users VALUES (%s)", (i,))
    evs = h.wait_for_events(3)
    p1, _p2, p3 = (e.position for e in evs)
    # The source has reported receiving everything...
    wait_until(lambda: _walsender_write(db, db.slot_name) >= p3, what="status with write >= p3")
    # ...but confirmed nothing beyond what was acked (nothing yet).
    slot = _slot(db, db.slot_name)
    assert slot is not None and slot["confirmed"] == pos
    # Heartbeats say "nothing more up to here": never before what was delivered (the engine
    # orders them after the changes it queued and acknowledges its minimum).
    assert all(hb > p3 for hb in h.heartbeats)
    src.ack(p1)
    wait_until(lambda: _slot(db, db.slot_name)["confirmed"] == p1, what="confirmed == p1")  # type: ignore[index]
    src.ack(p3)
    wait_until(lambda: _slot(db, db.slot_name)["confirmed"] == p3, what="confirmed == p3")  # type: ignore[index]
    # Idle for our tables, busy elsewhere: heartbeats carry the server position forward.
    db.execute("INSERT INTO unpublished SELECT generate_series(1, 1000)")
    end = parse_lsn(db.scalar("SELECT pg_current_wal_lsn()::text"))
    hb = wait_until(
        lambda: [p for p in h.heartbeats if p >= end], what="heartbeat past the WAL end"
    )[0]
    assert hb > p3
    src.ack(hb)
    wait_until(lambda: _slot(db, db.slot_name)["confirmed"] >= hb, what="idle slot advanced")  # type: ignore[index]
    lag = src.get_lag()
    assert lag.lag_bytes >= 0 and lag.lag_time is not None
    th.stop()
    assert th.error is None


def test_stateful_restart_resumes_after_the_last_ack_exactly(
    pg_database: PgTestDb, make_source: Callable[..., PostgresSource]
) -> None:
    db = pg_database
    db.execute("CREATE TABLE users (id int PRIMARY KEY)")
    db.execute("INSERT INTO users VALUES (0)")
    src = make_source(slot_mode="stateful")
    src.init(SourceConfig([USERS]))
    assert src.supports_resume() and src.last_acked_position() is None  # fresh slot
    pos = src.baseline([USERS], lambda t, r: None)
    h, th = _stream(src, pos)
    for i in (1, 2, 3):
        db.execute("INSERT INTO users VALUES (%s)", (i,))
    evs = h.wait_for_events(3)
    src.ack(evs[0].position)  # only the first is durable
    wait_until(lambda: _slot(db, db.slot_name)["confirmed"] == evs[0].position)  # type: ignore[index]
    th.stop()
    src.close()  # "crash": changes 2 and 3 were delivered but never acked
    db.execute("INSERT INTO users VALUES (4)")

    src2 = make_source(slot_mode="stateful")
    src2.init(SourceConfig([USERS]))
    assert src2.last_acked_position() == evs[0].position
    with pytest.raises(ReBaselineRequired, match="older than the slot"):
        src2.stream(evs[0].position - 1, RecordingHandler())  # e.g. an old snapshot's position
    h2, th2 = _stream(src2, src2.last_acked_position())
    evs2 = h2.wait_for_events(3)
    db.execute("INSERT INTO users VALUES (5)")
    evs2 = h2.wait_for_events(4)
    th2.stop()
    assert [e.new_values["id"] for e in evs2 if e.new_values] == [2, 3, 4, 5]
    assert [e.position for e in evs2[:2]] == [e.position for e in evs[1:]]

    # always_baseline: the slot is re-created and no resume position is offered.
    src2.close()
    src3 = make_source(slot_mode="stateful", always_baseline=True)
    src3.init(SourceConfig([USERS]))
    assert src3.supports_resume() and src3.last_acked_position() is None
    rows: list[dict[str, Any]] = []
    src3.baseline([USERS], lambda t, r: rows.append(r))
    assert sorted(r["id"] for r in rows) == [0, 1, 2, 3, 4, 5]


def test_stateful_crash_during_baseline_leaves_no_slot_to_resume_from(
    pg_database: PgTestDb, make_source: Callable[..., PostgresSource]
) -> None:
    db = pg_database
    db.execute("CREATE TABLE users (id int PRIMARY KEY)")
    db.execute("INSERT INTO users SELECT generate_series(1, 100)")
    src = make_source(slot_mode="stateful", batch_size=10)
    src.init(SourceConfig([USERS]))

    def crash(table: TableIdentifier, row: dict[str, Any]) -> None:
        if row["id"] == 50:
            raise RuntimeError("process dies mid-baseline")

    with pytest.raises(RuntimeError):
        src.baseline([USERS], crash)
    src.close()
    assert _slot(db, db.slot_name) is None
    again = make_source(slot_mode="stateful")
    again.init(SourceConfig([USERS]))
    assert again.last_acked_position() is None  # so the engine baselines again
    rows: list[dict[str, Any]] = []
    again.baseline([USERS], lambda t, r: rows.append(r))
    assert len(rows) == 100
    assert _slot(db, db.slot_name) is not None


def test_stateful_reconnects_after_walsender_kill_without_duplicates(
    pg_database: PgTestDb, make_source: Callable[..., PostgresSource]
) -> None:
    db = pg_database
    db.execute("CREATE TABLE users (id int PRIMARY KEY)")
    src = make_source(slot_mode="stateful")
    src.init(SourceConfig([USERS]))
    h, th = _stream(src, src.baseline([USERS], lambda t, r: None))
    db.execute("INSERT INTO users VALUES (1)")
    db.execute("INSERT INTO users VALUES (2)")
    evs = h.wait_for_events(2)
    src.ack(evs[0].position)  # 2 is delivered but not acked when the connection dies
    for round_ in range(2):  # twice: the backoff and attempt count reset after success
        old = _kill_walsender(db, db.slot_name)
        wait_until(
            lambda old=old: (_slot(db, db.slot_name) or {}).get("pid") not in (None, old),
            what="reconnected walsender",
        )
        db.execute("INSERT INTO users VALUES (%s)", (10 + round_,))
        h.wait_for_events(3 + round_)
    th.stop()
    assert th.error is None
    ids = [e.new_values["id"] for e in h.snapshot() if e.new_values]
    assert ids == [1, 2, 10, 11]  # 2 is not delivered twice
    assert src.reconnect_attempts_total >= 2


def test_connection_lost_mid_transaction_delivers_the_transaction_once(
    pg_database: PgTestDb, make_source: Callable[..., PostgresSource]
) -> None:
    db = pg_database
    db.execute("CREATE TABLE users (id int PRIMARY KEY)")
    src = make_source(slot_mode="stateful", batch_size=50_000)
    src.init(SourceConfig([USERS]))
    h, th = _stream(src, src.baseline([USERS], lambda t, r: None))
    # one transaction, big enough (~15 MB of WAL messages) that the kill lands mid-way
    # even when the socket buffers hold several MB of it
    n = 300_000
    db.execute("INSERT INTO users SELECT generate_series(1, %s)", (n,))

    def mid_transaction() -> bool:
        d = src._replication.decoder
        return d is not None and d.tx is not None and d.tx.changes > 1000

    wait_until(mid_transaction, what="part of the transaction received")
    _kill_walsender(db, db.slot_name)
    evs = h.wait_for_events(n, timeout=60)
    # the reconnect is noticed when the source reads the killed connection's end: wait for
    # it rather than stopping first (a loaded box may deliver the rows before that read)
    wait_until(lambda: src.reconnect_attempts_total >= 1, what="the source reconnected")
    th.stop()
    assert [e.new_values["id"] for e in evs if e.new_values] == list(range(1, n + 1))
    assert h.completes[-1] is True and h.completes.count(True) == 1
    assert src.reconnect_attempts_total >= 1


def test_big_transaction_is_passed_on_in_chunks_and_resumes_exactly_after_a_lost_connection(
    pg_database: PgTestDb, make_source: Callable[..., PostgresSource]
) -> None:
    db = pg_database
    db.execute("CREATE TABLE users (id int PRIMARY KEY, pad text)")
    src = make_source(slot_mode="stateful", batch_size=1000)
    src.init(SourceConfig([USERS]))
    h = RecordingHandler()
    killed = threading.Event()
    held: list[int] = []
    after_reconnect: list[int] = []

    def on_batch(batch: list[Any]) -> None:
        if src.reconnect_attempts_total:
            after_reconnect.append(batch[0].new_values["id"])
        d = src._replication.decoder
        if d is not None and d.tx is not None:
            held.append(len(d.tx.items))  # what the source holds while passing a chunk on
        if len(h.batches) == 3 and not killed.is_set():
            killed.set()  # mid-transaction, after some chunks were delivered
            _kill_walsender(db, db.slot_name)

    h.on_batch = on_batch
    th = StreamThread(src, src.baseline([USERS], lambda t, r: None), h)
    th.start()
    wait_until(lambda: src.state() is SourceState.STREAMING, what="streaming")
    n = 200_000
    db.execute("INSERT INTO users SELECT g, repeat('x', 50) FROM generate_series(1, %s) g", (n,))
    evs = h.wait_for_events(n, timeout=120)
    th.stop()
    assert th.error is None and killed.is_set()
    assert src.reconnect_attempts_total >= 1
    assert 3000 < after_reconnect[0] < n  # the same transaction continued after the reconnect
    # exactly once, in order, across the reconnect: the resent start was skipped
    assert [e.new_values["id"] for e in evs if e.new_values] == list(range(1, n + 1))
    assert all(len(b) <= 1000 for b in h.batches)
    assert h.completes == [False] * (len(h.batches) - 1) + [True]
    assert max(held) <= 1  # the chunk taken, nothing of the transaction is held
    early = {e.position for b, c in zip(h.batches, h.completes, strict=True) if not c for e in b}
    last = {e.position for e in h.batches[-1]}
    assert len(early) == 1 and len(last) == 1 and min(early) < min(last)


def test_ephemeral_connection_loss_rebaselines_on_a_new_slot(
    pg_database: PgTestDb, make_source: Callable[..., PostgresSource]
) -> None:
    db = pg_database
    db.execute("CREATE TABLE users (id int PRIMARY KEY)")
    db.execute("INSERT INTO users VALUES (1)")
    src = make_source()
    src.init(SourceConfig([USERS]))
    _h, th = _stream(src, src.baseline([USERS], lambda t, r: None))
    _kill_walsender(db, db.slot_name)
    th.join(10)
    assert isinstance(th.error, ReBaselineRequired)
    assert _slot(db, db.slot_name) is None  # the temporary slot died with its connection
    db.execute("INSERT INTO users VALUES (2)")  # lands between the slots: the baseline has it
    rows: list[dict[str, Any]] = []
    pos = src.baseline([USERS], lambda t, r: rows.append(r))
    assert sorted(r["id"] for r in rows) == [1, 2]
    h2, th2 = _stream(src, pos)
    db.execute("INSERT INTO users VALUES (3)")
    (e,) = h2.wait_for_events(1)
    th2.stop()
    assert e.new_values == {"id": 3}


def test_reload_baseline_while_streaming_splits_the_stream_exactly(
    pg_database: PgTestDb, make_source: Callable[..., PostgresSource]
) -> None:
    db = pg_database
    db.execute("CREATE TABLE users (id int PRIMARY KEY)")
    src = make_source()
    src.init(SourceConfig([USERS]))
    h, th = _stream(src, src.baseline([USERS], lambda t, r: None))
    stop = threading.Event()

    def writer() -> None:
        with db.connect() as conn:
            i = 0
            while not stop.is_set():
                i += 1
                conn.execute("INSERT INTO users VALUES (%s)", (i,))

    w = threading.Thread(target=writer)
    w.start()
    try:
        wait_until(lambda: len(h.events) > 20)
        rows: list[dict[str, Any]] = []
        pos = src.baseline([USERS], lambda t, r: rows.append(r))  # while streaming
    finally:
        stop.set()
        w.join()
    last = db.scalar("SELECT max(id) FROM users")
    wait_until(lambda: any(e.new_values == {"id": last} for e in h.snapshot()))
    th.stop()
    before = {e.new_values["id"] for e in h.snapshot() if e.position <= pos and e.new_values}
    after = {e.new_values["id"] for e in h.snapshot() if e.position > pos and e.new_values}
    in_baseline = {r["id"] for r in rows}
    assert in_baseline == before  # exactly the changes at or before the position
    assert not in_baseline & after
    assert in_baseline | after == set(range(1, last + 1))


def test_server_restart_and_exhausted_reconnects(private_cluster: EmbeddedPostgres) -> None:
    pg = private_cluster
    pg.execute("CREATE TABLE users (id int PRIMARY KEY)", "app")
    src = PostgresSource(
        pg.dsn("app"),
        slot_mode="stateful",
        slot_name="s",
        publication={"create": True},
        reconnect={"max_attempts": 3, "initial_backoff": 0.05, "max_backoff": 0.1},
        status_interval=0.2,
    )
    try:
        src.init(SourceConfig([USERS]))
        h, th = _stream(src, src.baseline([USERS], lambda t, r: None))
        pg.restart()
        pg.execute("INSERT INTO users VALUES (1)", "app")
        (e,) = h.wait_for_events(1, timeout=20)
        assert src.state() is SourceState.STREAMING
        # A fast shutdown waits for walsenders until the client confirms what it was sent:
        # acknowledge first (as the engine does once targets are durable).
        src.ack(e.position)
        pg.stop()
        th.join(20)
        assert isinstance(th.error, SourceError) and "3 reconnect attempts" in str(th.error)
        assert src.state() is SourceState.ERROR
    finally:
        src.close()


def test_invalidated_slot_is_recreated_and_rebaselined(private_cluster: EmbeddedPostgres) -> None:
    pg = private_cluster
    pg.execute("CREATE TABLE users (id int PRIMARY KEY, pad text)", "app")
    pg.execute("INSERT INTO users VALUES (1, 'x')", "app")

    def make(**kw: Any) -> PostgresSource:
        return PostgresSource(
            pg.dsn("app"), slot_mode="stateful", slot_name="s", publication={"create": True}, **kw
        )

    src = make()
    src.init(SourceConfig([USERS]))
    src.baseline([USERS], lambda t, r: None)
    src.close()
    for _ in range(4):  # push the slot's WAL out of max_slot_wal_keep_size
        pg.execute(
            "INSERT INTO users SELECT g, repeat('x', 1000) FROM generate_series(2, 3000) g "
            "ON CONFLICT DO NOTHING",
            "app",
        )
        pg.execute("DELETE FROM users WHERE id > 1", "app")
        pg.execute("SELECT pg_switch_wal()")
        pg.execute("CHECKPOINT")
    wait_until(
        lambda: (
            pg.execute("SELECT wal_status FROM pg_replication_slots WHERE slot_name = 's'")[0][0]
            == "lost"
        ),
        what="slot invalidated",
    )
    strict = make(on_slot_invalidated="fail", lease=False)
    try:
        strict.init(SourceConfig([USERS]))
        codes = [e.code for e in strict.validate_tables([USERS])]
        assert codes == ["SLOT_INVALIDATED"]
    finally:
        strict.close()
    src = make()
    try:
        src.init(SourceConfig([USERS]))  # drops the lost slot
        assert src.validate_tables([USERS]) == []
        assert src.last_acked_position() is None  # so the engine baselines
        rows: list[dict[str, Any]] = []
        pos = src.baseline([USERS], lambda t, r: rows.append(r))
        assert [r["id"] for r in rows] == [1]
        h, th = _stream(src, pos)
        pg.execute("INSERT INTO users VALUES (7, 'y')", "app")
        assert h.wait_for_events(1)[0].action is ChangeAction.INSERT
        th.stop()
    finally:
        src.close()


def test_stateful_lease_lets_one_instance_consume_and_a_standby_take_over(
    pg_database: PgTestDb, make_source: Callable[..., PostgresSource]
) -> None:
    db = pg_database
    db.execute("CREATE TABLE users (id int PRIMARY KEY)")
    first = make_source(slot_mode="stateful")
    first.init(SourceConfig([USERS]))
    assert first.holds_lease
    standby = make_source(slot_mode="stateful")
    done = threading.Event()

    def wait_for_lease() -> None:
        standby.init(SourceConfig([USERS]))
        done.set()

    t = threading.Thread(target=wait_for_lease, daemon=True)
    t.start()
    wait_until(
        lambda: (
            db.scalar(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s",
                (f"laredo:{db.slot_name}",),
            )
            >= 2
        ),
        what="standby connected",
    )
    assert not done.wait(0.3)  # still waiting for the holder
    first.close()
    assert done.wait(10)
    assert standby.holds_lease
    timed = make_source(slot_mode="stateful", lease_timeout=0.2)
    with pytest.raises(SourceError, match="held by another"):
        timed.init(SourceConfig([USERS]))


def test_reset_source_drops_slot_and_publication(
    pg_database: PgTestDb, make_source: Callable[..., PostgresSource]
) -> None:
    db = pg_database
    db.execute("CREATE TABLE users (id int PRIMARY KEY)")
    src = make_source(slot_mode="stateful")
    src.init(SourceConfig([USERS]))
    _h, th = _stream(src, src.baseline([USERS], lambda t, r: None))
    src.reset_source(drop_publication=True)
    th.join(10)
    assert not th.is_alive()
    assert _slot(db, db.slot_name) is None
    assert (
        db.scalar("SELECT count(*) FROM pg_publication WHERE pubname = %s", (db.publication,)) == 0
    )
    assert src.last_acked_position() is None


def test_a_foreign_slot_with_our_name_is_refused_clearly(
    pg_database: PgTestDb, make_source: Callable[..., PostgresSource]
) -> None:
    db = pg_database
    db.execute("CREATE TABLE users (id int PRIMARY KEY)")
    db.execute("SELECT pg_create_logical_replication_slot(%s, 'test_decoding')", (db.slot_name,))
    src = make_source(slot_mode="stateful")
    with pytest.raises(
        ConfigError, match=r"output plugin 'test_decoding'.*pg_drop_replication_slot"
    ):
        src.init(SourceConfig([USERS]))


def test_slot_invalidated_while_streaming_turns_into_a_rebaseline(
    private_cluster: EmbeddedPostgres,
) -> None:
    pg = private_cluster
    pg.execute("CREATE TABLE users (id int PRIMARY KEY)", "app")
    pg.execute("CREATE TABLE noise (pad text)", "app")
    src = PostgresSource(
        pg.dsn("app"),
        slot_mode="stateful",
        slot_name="s",
        publication={"create": True},
        reconnect={"initial_backoff": 0.05, "max_backoff": 0.1},
        status_interval=0.2,
    )
    try:
        src.init(SourceConfig([USERS]))
        h, th = _stream(src, src.baseline([USERS], lambda t, r: None))

        def invalidated() -> bool:
            pg.execute(
                "INSERT INTO noise SELECT repeat('x', 1000) FROM generate_series(1, 3000)", "app"
            )
            pg.execute("SELECT pg_switch_wal()")
            pg.execute("CHECKPOINT")
            return not th.is_alive()

        wait_until(invalidated, timeout=60, interval=0.05, what="stream ended by invalidation")
        assert isinstance(th.error, ReBaselineRequired), repr(th.error)
        pg.execute("INSERT INTO users VALUES (1)", "app")
        rows: list[dict[str, Any]] = []
        pos = src.baseline([USERS], lambda t, r: rows.append(r))  # a new slot
        assert rows == [{"id": 1}]
        h2, th2 = _stream(src, pos)
        pg.execute("INSERT INTO users VALUES (2)", "app")
        assert h2.wait_for_events(1)[0].new_values == {"id": 2}
        th2.stop()
        assert not h.events
    finally:
        src.close()


@pytest.mark.parametrize("create", [False, None, True])
def test_reset_source_never_drops_a_publication_laredo_does_not_manage(
    pg_database: PgTestDb, make_source: Callable[..., PostgresSource], create: bool | None
) -> None:
    """M4 (issue 21): a hand-made publication shared with other consumers survives
    ``reset_source(drop_publication=True)``, whatever ``publication.create`` says, and the
    refusal comes before the slot is touched."""
    db = pg_database
    db.execute("CREATE TABLE users (id int PRIMARY KEY)")
    db.execute(f'CREATE PUBLICATION "{db.publication}" FOR TABLE users')
    src = make_source(slot_mode="stateful", publication={"create": create})
    src.init(SourceConfig([USERS]))
    src.baseline([USERS], lambda t, r: None)
    with pytest.raises(ConfigError, match="not dropped"):
        src.reset_source(drop_publication=True)
    count = "SELECT count(*) FROM pg_publication WHERE pubname = %s"
    assert db.scalar(count, (db.publication,)) == 1
    assert _slot(db, db.slot_name) is not None  # nothing was reset
    src.reset_source()  # without drop_publication: the slot goes, the publication stays
    assert _slot(db, db.slot_name) is None
    assert db.scalar(count, (db.publication,)) == 1
