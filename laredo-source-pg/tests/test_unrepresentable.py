"""Values Python's ``datetime`` cannot hold (issue 29, items 5 and 7), on real PostgreSQL.

``'infinity'``/``'-infinity'`` read as ``date.max``/``datetime.max`` (and minimums; UTC for
``timestamptz``) on the baseline's text and binary paths and on the stream alike; a value with
no Python equivalent (year 10000, a BC date, ``time '24:00'``) goes to the dead letters naming
table, key and column while every other row and table keeps streaming.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, date, datetime
from typing import Any

import laredo
import pytest
from laredo.deadletter import MemoryDeadLetterStore
from laredo.testing.recording import RecordingTarget
from laredo.types import SourceConfig, TableIdentifier, Unrepresentable
from laredo_source_pg.pytest_plugin import PgTestDb
from laredo_source_pg.source import PostgresSource
from laredo_source_pg.testing import wait_until

pytestmark = pytest.mark.integration

EV = TableIdentifier("public", "ev")
OTHER = TableIdentifier("public", "other")

INF = {
    "d": date.max,
    "ts": datetime.max,
    "tz": datetime.max.replace(tzinfo=UTC),
}
MINUS_INF = {
    "d": date.min,
    "ts": datetime.min,
    "tz": datetime.min.replace(tzinfo=UTC),
}


def _engine(
    src: PostgresSource, targets: dict[TableIdentifier, Any], store: Any = None
) -> laredo.Engine:
    return laredo.Engine(
        sources={"pg": src},
        pipelines=[laredo.Pipeline("pg", t, target) for t, target in targets.items()],
        dead_letter_store=store,
    )


def _tables(db: PgTestDb, extra: str = "") -> None:
    db.execute(f"CREATE TABLE ev (id int PRIMARY KEY, d date, ts timestamp, tz timestamptz{extra})")
    db.execute("CREATE TABLE other (id int PRIMARY KEY, v text)")


@pytest.mark.parametrize("path", ["binary", "text"])
def test_infinity_reads_the_same_in_baseline_and_stream_and_after_a_restart(
    pg_database: PgTestDb, make_source: Callable[..., PostgresSource], path: str
) -> None:
    db = pg_database
    # an interval column keeps the baseline on the text path (binary reads only some types)
    _tables(db, ", iv interval" if path == "text" else "")
    db.execute("INSERT INTO ev (id, d, ts, tz) VALUES (1, 'infinity', 'infinity', 'infinity')")
    db.execute("INSERT INTO ev (id, d, ts, tz) VALUES (2, '-infinity', '-infinity', '-infinity')")
    db.execute("INSERT INTO other VALUES (1, 'a')")
    ev, other = RecordingTarget(durable=True), RecordingTarget(durable=True)
    eng = _engine(make_source(), {EV: ev, OTHER: other})
    eng.start()
    try:
        assert eng.await_ready(30)
        baseline = dict(ev.items())
        assert {k: {c: r[c] for c in INF} for k, r in baseline.items()} == {
            (1,): INF,
            (2,): MINUS_INF,
        }
        db.execute("INSERT INTO ev (id, d, ts, tz) VALUES (3, 'infinity', 'infinity', 'infinity')")
        db.execute(
            "INSERT INTO ev (id, d, ts, tz) VALUES (4, '-infinity', '-infinity', '-infinity')"
        )
        db.execute("INSERT INTO other VALUES (2, 'b')")
        wait_until(lambda: (2,) in dict(other.items()), what="the other table streams on")
        wait_until(lambda: len(dict(ev.items())) == 4, what="the infinity rows stream")
        streamed = dict(ev.items())
        for k, expected in (((3,), INF), ((4,), MINUS_INF)):
            row = streamed[k]
            assert {c: row[c] for c in INF} == expected
            assert {c: type(row[c]) for c in INF} == {c: type(v) for c, v in expected.items()}
            assert row["tz"].tzinfo is not None and row["tz"].utcoffset().total_seconds() == 0
        assert all(s.name == "STREAMING" for s in _states(eng))
    finally:
        eng.stop()
    # a restart baselines the table again, infinities included (the source used to refuse it)
    ev2 = RecordingTarget(durable=True)
    eng2 = _engine(make_source(), {EV: ev2, OTHER: RecordingTarget(durable=True)})
    eng2.start()
    try:
        assert eng2.await_ready(30)
        assert dict(ev2.items()) == streamed
    finally:
        eng2.stop()


def _states(eng: laredo.Engine) -> list[Any]:
    return [p.state for p in _infos(eng)]


def _infos(eng: laredo.Engine) -> list[Any]:
    return sorted(eng.pipelines(), key=lambda p: str(p.table))


@pytest.mark.parametrize("path", ["binary", "text"])
def test_unrepresentable_values_go_to_the_dead_letters_and_the_rest_streams(
    pg_database: PgTestDb, make_source: Callable[..., PostgresSource], path: str
) -> None:
    db = pg_database
    extra = ", t time" if path == "text" else ""
    _tables(db, extra)
    db.execute("INSERT INTO ev (id, ts) VALUES (1, '2020-01-01'), (2, '10000-01-01')")
    db.execute("INSERT INTO ev (id, d) VALUES (3, '0044-03-15 BC')")
    db.execute("INSERT INTO other VALUES (1, 'a')")
    store = MemoryDeadLetterStore()
    ev, other = RecordingTarget(durable=True), RecordingTarget(durable=True)
    eng = _engine(make_source(), {EV: ev, OTHER: other}, store)
    eng.start()
    try:
        assert eng.await_ready(30)
        assert set(dict(ev.items())) == {(1,)}  # the baseline went on without rows 2 and 3
        pid = _infos(eng)[0].id
        letters = store.read(pid)
        assert len(letters) == 2
        by_key = {dl.change.new_values["id"]: dl for dl in letters}  # type: ignore[index]
        assert "public.ev" in by_key[2].error.message and "{'id': 2}" in by_key[2].error.message
        # the same text on both paths (binary renders PostgreSQL's text of the raw value)
        assert "column 'ts' holds timestamp '10000-01-01 00:00:00'" in by_key[2].error.message
        assert "column 'd' holds date '0044-03-15 BC'" in by_key[3].error.message
        assert type(by_key[2].change.new_values["ts"]) is Unrepresentable  # type: ignore[index]
        # the stream: a bad row is dead-lettered, the rows around it and the other table go on
        db.execute(
            "BEGIN; INSERT INTO ev (id, ts) VALUES (10, '2021-01-01'); "
            "INSERT INTO ev (id, ts) VALUES (11, '12345-06-07 08:00');"
            "INSERT INTO ev (id, d) VALUES (12, '0001-01-01 BC');"
            "INSERT INTO ev (id, ts) VALUES (13, '2022-01-01'); COMMIT"
        )
        if path == "text":
            db.execute("INSERT INTO ev (id, t) VALUES (14, '24:00')")
        db.execute("INSERT INTO other VALUES (2, 'b')")
        wait_until(lambda: (2,) in dict(other.items()), what="the other table streams on")
        wait_until(lambda: {(10,), (13,)} <= set(dict(ev.items())), what="good rows stream")
        expect = {2, 3, 11, 12} | ({14} if path == "text" else set())
        wait_until(lambda: len(store.read(pid)) == len(expect), what="dead letters")
        letters = store.read(pid)
        assert {dl.change.new_values["id"] for dl in letters} == expect  # type: ignore[index]
        streamed = {dl.change.new_values["id"]: dl for dl in letters}  # type: ignore[index]
        assert "{'id': 11}" in streamed[11].error.message
        assert "column 'ts' holds timestamp '12345-06-07 08:00:00'" in streamed[11].error.message
        assert "column 'd' holds date '0001-01-01 BC'" in streamed[12].error.message
        if path == "text":
            assert "column 't' holds time '24:00:00'" in streamed[14].error.message
        assert set(dict(ev.items())) == {(1,), (10,), (13,)}
        assert all(s.name == "STREAMING" for s in _states(eng))
    finally:
        eng.stop()


def test_without_a_dead_letter_store_only_that_pipeline_stops(
    pg_database: PgTestDb, make_source: Callable[..., PostgresSource]
) -> None:
    db = pg_database
    _tables(db)
    ev, other = RecordingTarget(durable=True), RecordingTarget(durable=True)
    eng = _engine(make_source(), {EV: ev, OTHER: other})
    eng.start()
    try:
        assert eng.await_ready(30)
        db.execute("INSERT INTO ev (id, ts) VALUES (1, '10000-01-01')")
        db.execute("INSERT INTO other VALUES (1, 'a')")
        wait_until(lambda: (1,) in dict(other.items()), what="the other table streams on")
        wait_until(lambda: _states(eng)[0].name == "ERROR", what="the ev pipeline stops")
        error = _infos(eng)[0].error or ""
        assert "public.ev" in error and "column 'ts'" in error and "{'id': 1}" in error
        db.execute("INSERT INTO other VALUES (2, 'b')")
        wait_until(lambda: (2,) in dict(other.items()), what="the other table still streams")
    finally:
        eng.stop()


@pytest.mark.parametrize("path", ["binary", "text"])
def test_a_row_callback_baseline_gets_every_row_the_bad_value_as_a_marker(
    pg_database: PgTestDb, make_source: Callable[..., PostgresSource], path: str
) -> None:
    """``baseline(tables, row_callback)`` (no engine, no dead letters) loses no row: the one
    with a value Python cannot hold comes with an ``Unrepresentable`` marker in that column."""
    db = pg_database
    _tables(db, ", iv interval" if path == "text" else "")
    db.execute(
        "INSERT INTO ev (id, ts, tz) VALUES (1, '10000-01-01', 'infinity'), (2, now(), now())"
    )
    src = make_source()
    src.init(SourceConfig([EV]))
    rows: list[dict[str, Any]] = []
    src.baseline([EV], lambda _t, r: rows.append(r))
    by_id = {r["id"]: r for r in rows}
    assert set(by_id) == {1, 2}
    marker = by_id[1]["ts"]
    assert type(marker) is Unrepresentable and marker.type_name == "timestamp"
    assert by_id[1]["tz"] == datetime.max.replace(tzinfo=UTC)


def test_a_partition_move_beside_an_unrepresentable_value_keeps_both_right(
    pg_database: PgTestDb, make_source: Callable[..., PostgresSource]
) -> None:
    """A transaction of a partitioned parent with a moved row (merged into one UPDATE) and a
    row Python cannot hold: the move applies as an UPDATE, the bad row is dead-lettered."""
    db = pg_database
    db.execute(
        "CREATE TABLE pt (id int, region text, ts timestamp, PRIMARY KEY (id, region)) "
        "PARTITION BY LIST (region)"
    )
    db.execute("CREATE TABLE pt_eu PARTITION OF pt FOR VALUES IN ('eu')")
    db.execute("CREATE TABLE pt_us PARTITION OF pt FOR VALUES IN ('us')")
    db.execute("INSERT INTO pt VALUES (1, 'eu', 'infinity')")
    pt = TableIdentifier("public", "pt")
    store = MemoryDeadLetterStore()
    target = RecordingTarget(durable=True)
    eng = _engine(make_source(), {pt: target}, store)
    eng.start()
    try:
        assert eng.await_ready(30)
        db.execute(
            "BEGIN; UPDATE pt SET region = 'us' WHERE id = 1; "
            "INSERT INTO pt VALUES (2, 'eu', '10000-01-01'); "
            "INSERT INTO pt VALUES (3, 'eu', now());"
            "COMMIT"
        )
        wait_until(lambda: (3, "eu") in dict(target.items()), what="the good insert")
        # again, now that the session knows the relation (the move is merged into an UPDATE)
        db.execute(
            "BEGIN; UPDATE pt SET region = 'us' WHERE id = 3; "
            "INSERT INTO pt VALUES (4, 'eu', '0044-03-15 BC'); "
            "INSERT INTO pt VALUES (5, 'eu', now());"
            "COMMIT"
        )
        wait_until(lambda: (5, "eu") in dict(target.items()), what="the second good insert")
        wait_until(lambda: len(store.read(_infos(eng)[0].id)) == 2, what="the dead letters")
        assert set(dict(target.items())) == {(1, "us"), (3, "us"), (5, "eu")}
        assert dict(target.items())[(1, "us")]["ts"] == datetime.max
        letters = store.read(_infos(eng)[0].id)
        assert ["'id': 2" in dl.error.message for dl in letters] == [True, False]
        assert ["'id': 4" in dl.error.message for dl in letters] == [False, True]
        assert all("column 'ts'" in dl.error.message for dl in letters)
        assert not any(
            type(v) is Unrepresentable for _k, row in target.items() for v in row.values()
        )
    finally:
        eng.stop()
