"""Chunk rows on the batch path against a real PostgreSQL (issue 32): a chunk is read in
PostgreSQL's binary format where the table's types allow it and handed to the target as one
batch of value tuples (``ChangeBatch.of_rows``), which an ``IndexedTarget`` stores like a
baseline chunk: no event or row dict per row, the same values and types as PostgreSQL's, and
with a key read raw (a timestamp) the merge still drops the rows newer changes touched."""

from __future__ import annotations

import random
from datetime import datetime, timedelta
from typing import Any

import laredo
import psycopg
import pytest
from laredo import Index
from laredo.batches import ChangeBatch
from laredo.testing import Churn
from laredo_source_pg import PostgresSource
from laredo_source_pg.pytest_plugin import PgTestDb
from laredo_target_memory import IndexedTarget

pytestmark = pytest.mark.integration


def _source(db: PgTestDb, chunk_rows: int) -> PostgresSource:
    return PostgresSource(
        db.dsn,
        slot_name=db.slot_name,
        publication={"create": True},
        baseline={"mode": "chunked", "chunk_rows": chunk_rows},
    )


def _rows(db: PgTestDb, table: str, key: str) -> dict[Any, dict[str, Any]]:
    with db.connect() as conn, conn.cursor(row_factory=psycopg.rows.dict_row) as cur:
        return {r[key]: dict(r) for r in cur.execute(f"SELECT * FROM {table}")}


def _got(target: IndexedTarget) -> dict[Any, dict[str, Any]]:
    return {k[0] if isinstance(k, tuple) else k: dict(v) for k, v in target.items()}


def test_chunk_rows_are_stored_as_batches_with_postgres_values_and_types(
    pg_database: PgTestDb, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = pg_database
    db.execute(  # sessions in a zone with DST (the fold of 2024-11-03 01:30 is read too)
        "DO $$ BEGIN EXECUTE format('ALTER DATABASE %I SET timezone = %L', "
        "current_database(), 'America/New_York'); END $$"
    )
    db.execute(
        "CREATE TABLE typed (id bigint PRIMARY KEY, at timestamptz, local timestamp, day date, "
        "price numeric, ratio float8, note text, flag bool, raw bytea)"
    )
    db.execute(
        "INSERT INTO typed SELECT g, timestamptz '2024-11-03 05:30+00' + g * interval '1 min', "
        "timestamp '2020-02-29 12:00' + g * interval '1 h', date '1999-12-31' + g, "
        "g * 1.25, g / 3.0, 'n' || g, g % 2 = 0, int4send(g) "
        "FROM generate_series(1, 900) g"
    )
    db.execute("INSERT INTO typed (id) VALUES (1000)")  # NULLs in every other column
    events = [0]
    stored = [0]
    event = ChangeBatch.event
    upsert = IndexedTarget._upsert_rows

    def counting_event(self: ChangeBatch, op: Any) -> Any:
        events[0] += 1
        return event(self, op)

    def counting_upsert(self: IndexedTarget, chunk: Any, *args: Any) -> None:
        stored[0] += len(chunk)
        upsert(self, chunk, *args)

    monkeypatch.setattr(ChangeBatch, "event", counting_event)
    monkeypatch.setattr(IndexedTarget, "_upsert_rows", counting_upsert)
    target = IndexedTarget()
    table = laredo.Table("public", "typed")
    eng = laredo.Engine(
        sources={"pg": _source(db, 100)}, pipelines=[laredo.Pipeline("pg", table, target)]
    )
    try:
        eng.start()
        assert eng.await_ready(60)
        expected = _rows(db, "typed", "id")
        got = _got(target)
        assert got == expected
        for key, row in expected.items():  # same types and zones, not just equal values
            for name, value in row.items():
                assert type(got[key][name]) is type(value), (key, name)
                if isinstance(value, datetime):
                    assert got[key][name].utcoffset() == value.utcoffset(), (key, name)
    finally:
        eng.stop()
    assert stored[0] == 901  # every chunk row through the batch store
    assert events[0] == 0  # and no per-row event was built for them


# random single-row writes on stamped, keyed by a timestamp
STAMPED_WRITES = (
    "INSERT INTO stamped VALUES (%(k)s, %(seed)s) ON CONFLICT (k) DO UPDATE SET v = stamped.v + 1",
    "UPDATE stamped SET v = v + 1 WHERE k = %(k)s",
    "DELETE FROM stamped WHERE k = %(k)s",
    # a key change to a range maybe not read yet
    "UPDATE stamped SET k = k + interval '5000 s' WHERE k = %(k)s AND NOT EXISTS "
    "(SELECT 1 FROM stamped WHERE k = %(k)s::timestamp + interval '5000 s')",
)


def _stamp(rnd: random.Random) -> datetime:
    return datetime(2020, 1, 1) + timedelta(seconds=rnd.randrange(1, 4_000))


def test_a_timestamp_keyed_table_read_raw_ends_equal_with_writers(pg_database: PgTestDb) -> None:
    db = pg_database
    db.execute("CREATE TABLE stamped (k timestamp PRIMARY KEY, v int NOT NULL)")
    db.execute(
        "INSERT INTO stamped SELECT timestamp '2020-01-01' + g * interval '1 s', 0 "
        "FROM generate_series(1, 4000) g"
    )
    table = laredo.Table("public", "stamped")
    writers = Churn(db, 3, _stamp, STAMPED_WRITES)
    target = IndexedTarget()
    # a secondary index and a listener: chunk rows go the per-row upsert way where a key is held
    indexed = IndexedTarget(indexes=[Index("by_v", ["v"])])
    heard: dict[Any, dict[str, Any]] = {}

    def listener(old: Any, new: Any) -> None:
        if old is not None:
            heard.pop(old["k"], None)
        if new is not None:
            heard[new["k"]] = dict(new)

    indexed.listen(listener)
    pipes = [
        laredo.Pipeline("pg", table, target, id="plain"),
        laredo.Pipeline("pg", table, indexed, id="indexed"),
    ]
    eng = laredo.Engine(sources={"pg": _source(db, 100)}, pipelines=pipes)
    writers.start()
    try:
        eng.start()
        assert eng.await_ready(120)
        writers.settle(eng)
        expected = _rows(db, "stamped", "k")
        assert _got(target) == expected
        assert _got(indexed) == expected and heard == expected
        for v in {r["v"] for r in expected.values()}:
            found = {r["k"] for r in indexed.lookup_all("by_v", v)}
            assert found == {k for k, r in expected.items() if r["v"] == v}, v
    finally:
        writers.stop()
        eng.stop()
    assert sum(writers.counts) > 50, writers.counts  # the writers really ran during the baseline
