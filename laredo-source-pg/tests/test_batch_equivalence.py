"""The batch path (pgoutput decoded into value tuples, applied as ``ChangeBatch`` es) and the
reference path (``ChangeEvent`` s applied change by change) leave targets in the same state.

Random transactions of inserts, updates (with and without a key change, with unchanged TOAST
values, with NULLs), deletes and truncates are encoded as pgoutput messages, decoded both ways and
applied to IndexedTargets of every storage (with and without secondary indexes, with a listener):
the stored rows, their value types and what listeners saw must be identical.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from datetime import UTC, date, datetime
from decimal import Decimal
from typing import Any

import laredo
from hypothesis import given, settings
from hypothesis import strategies as st
from laredo.batches import ChangeBatch
from laredo.deadletter import MemoryDeadLetterStore
from laredo.pipeline_ops import apply_change
from laredo.types import ColumnDefinition, Index, TableIdentifier
from laredo_source_pg.baseline import _FAST_CHUNKS
from laredo_source_pg.binary import binary_plan
from laredo_source_pg.pgoutput import PgOutputDecoder, SchemaItem
from laredo_source_pg.pytest_plugin import PgTestDb
from laredo_source_pg.source import PostgresSource
from laredo_source_pg.testing import wait_until
from laredo_target_memory import IndexedTarget
from psycopg.rows import dict_row

T = TableIdentifier("public", "t")
ACCT = TableIdentifier("public", "acct")
COLS = [
    ColumnDefinition("id", "int4", 1, False, True, 1, type_oid=23),
    ColumnDefinition("body", "text", 2, type_oid=25),
    ColumnDefinition("n", "int4", 3, type_oid=23),
    ColumnDefinition("price", "numeric", 4, type_oid=1700),
]
LOADERS: dict[int, Any] = {
    23: lambda b: int(bytes(b)),
    25: lambda b: bytes(b).decode(),
    1700: lambda b: Decimal(bytes(b).decode()),
}


def _s(text: str) -> bytes:
    return text.encode() + b"\0"


RELATION = (
    b"R"
    + struct.pack(">I", 1)
    + _s("public")
    + _s("t")
    + b"d"
    + struct.pack(">h", len(COLS))
    + b"".join(
        bytes([1 if c.primary_key else 0]) + _s(c.name) + struct.pack(">Ii", c.type_oid, -1)
        for c in COLS
    )
)


def _tuple(values: list[Any]) -> bytes:
    out = struct.pack(">h", len(values))
    for v in values:
        if v is None:
            out += b"n"
        elif v == "<unchanged>":
            out += b"u"
        else:
            data = str(v).encode()
            out += b"t" + struct.pack(">I", len(data)) + data
    return out


ids = st.integers(min_value=1, max_value=12)
texts = st.one_of(st.none(), st.text(max_size=6))
ints = st.one_of(st.none(), st.integers(min_value=-5, max_value=5))
prices = st.one_of(st.none(), st.decimals(places=2, min_value=-99, max_value=99, allow_nan=False))
row = st.tuples(ids, texts, ints, prices).map(list)

change = st.one_of(
    st.tuples(st.just("I"), row),
    st.tuples(st.just("U"), row, st.booleans(), st.one_of(st.none(), ids)),
    st.tuples(st.just("D"), ids),
    st.tuples(st.just("T")),
)


def _messages(txs: list[list[Any]]) -> list[bytes]:
    """pgoutput messages of the transactions (one Relation first)."""
    out = [b"B" + struct.pack(">QqI", 10, 0, 1), RELATION]
    lsn = 100
    first = True
    for tx in txs:
        if not first:
            out.append(b"B" + struct.pack(">QqI", lsn, 0, lsn))
        first = False
        for ch in tx:
            kind = ch[0]
            if kind == "I":
                out.append(b"I" + struct.pack(">I", 1) + b"N" + _tuple(ch[1]))
            elif kind == "U":
                new = list(ch[1])
                if ch[2]:  # the body was not sent (unchanged TOAST)
                    new[1] = "<unchanged>"
                msg = b"U" + struct.pack(">I", 1)
                if ch[3] is not None:  # a key change: the old key
                    msg += b"K" + _tuple([ch[3], None, None, None])
                out.append(msg + b"N" + _tuple(new))
            elif kind == "D":
                out.append(b"D" + struct.pack(">I", 1) + b"K" + _tuple([ch[1], None, None, None]))
            else:
                out.append(b"T" + struct.pack(">IbI", 1, 0, 1))
        out.append(b"C" + struct.pack(">bQQq", 0, lsn, lsn + 10, 0))
        lsn += 100
    return out


def _decode(messages: list[bytes], batches: bool) -> list[Any]:
    """The reference path fed each message alone; the batch path fed each inside an XLogData
    frame, as the stream's reader passes it (``feed(frame, 25)``)."""
    d = PgOutputDecoder(lambda oid: LOADERS[oid], lambda s, n: T, batches=batches)
    out = []
    header = b"w" + bytes(range(1, 25))
    for m in messages:
        tx = d.feed(header + m, 25) if batches else d.feed(m)
        if tx is not None:
            out.append(tx)
    return out


def _target(storage: str, indexed: bool, log: list[Any]) -> IndexedTarget:
    indexes = [Index("by_n", ["n"]), Index("by_body", ["body"])] if indexed else []
    t = IndexedTarget(storage=storage, indexes=indexes)  # type: ignore[arg-type]
    t.on_init(T, COLS)
    if log is not None:
        t.listen(lambda old, new: log.append((old, new)))
    return t


def _state(t: IndexedTarget) -> list[str]:
    return sorted(repr(sorted(r.items())) for r in t.all())


@settings(max_examples=150, deadline=None)
@given(st.lists(st.lists(change, min_size=1, max_size=8), min_size=1, max_size=6))
def test_batch_path_equals_reference_path(txs: list[list[Any]]) -> None:
    messages = _messages(txs)
    reference = _decode(messages, batches=False)
    batched = _decode(messages, batches=True)
    for storage in ("packed", "compact", "dict"):
        for indexed in (False, True):
            for listening in (False, True):
                ref_log: list[Any] = []
                fast_log: list[Any] = []
                ref = _target(storage, indexed, ref_log if listening else None)  # type: ignore[arg-type]
                fast = _target(storage, indexed, fast_log if listening else None)  # type: ignore[arg-type]
                for tx in reference:
                    for ev in tx.items:
                        if type(ev) is not SchemaItem:
                            apply_change(ref, T, ev)
                for tx in batched:
                    ops = [op for op in tx.items if type(op) is tuple]
                    if ops:
                        names = ops[0][4].names
                        batch = ChangeBatch(T, names, ops, tx.end_lsn, commit_time=tx.commit_time)
                        assert [e.new_values for e in batch] == [
                            e.new_values for e in tx_events(reference, tx.end_lsn)
                        ]
                        fast.apply_change_batch(T, batch)
                label = f"{storage}, indexed={indexed}, listening={listening}"
                assert _state(fast) == _state(ref), label
                assert repr(fast_log) == repr(ref_log), label
                for r in ref.all():
                    got = fast.get(r["id"])
                    assert got is not None and repr(sorted(got.items())) == repr(
                        sorted(r.items())
                    ), label


def tx_events(reference: list[Any], end_lsn: int) -> list[Any]:
    """The reference path's events of the transaction that ends at ``end_lsn``."""
    for tx in reference:
        if tx.end_lsn == end_lsn:
            return [ev for ev in tx.items if type(ev) is not SchemaItem]
    raise AssertionError(end_lsn)


def test_batch_events_carry_what_the_reference_events_carry() -> None:
    messages = _messages(
        [
            [("I", [1, "a", 1, Decimal("1.50")]), ("U", [2, "b", None, None], True, 1)],
            [("D", 2), ("T",)],
        ]
    )
    reference = [
        ev for tx in _decode(messages, False) for ev in tx.items if type(ev) is not SchemaItem
    ]
    events = []
    for tx in _decode(messages, True):
        ops = [op for op in tx.items if type(op) is tuple]
        batch = ChangeBatch(
            T, ops[0][4].names, ops, tx.end_lsn, commit_time=tx.commit_time, xid=tx.xid
        )
        events += list(batch)
    assert events == reference
    assert events[1].unchanged_toast == frozenset({"body"})
    assert "body" not in (events[1].new_values or {})


def _engine_per_storage(
    db: PgTestDb, make_source: Callable[..., PostgresSource], table: TableIdentifier
) -> tuple[dict[str, IndexedTarget], list[laredo.Engine]]:
    """An IndexedTarget per storage, each fed by its own engine and slot (not started)."""
    targets = {s: IndexedTarget(storage=s) for s in ("packed", "compact", "dict")}  # type: ignore[arg-type]
    engines = [
        laredo.Engine(
            sources={"pg": make_source(slot_name=f"{db.slot_name}_{s}")},
            pipelines=[laredo.Pipeline("pg", table, t)],
        )
        for s, t in targets.items()
    ]
    return targets, engines


def _rows_of(db: PgTestDb) -> dict[Any, str]:
    with db.connect() as conn:
        cur = conn.cursor(row_factory=dict_row)
        return {r["id"]: repr(r) for r in cur.execute("SELECT * FROM acct")}


def test_engine_batch_path_equals_select_star(
    pg_database: PgTestDb, make_source: Callable[..., PostgresSource]
) -> None:
    """Baseline (value tuples, numeric loaded as text) and stream (ChangeBatches) into packed,
    compact and dict IndexedTargets give exactly ``SELECT *``: values, types and reprs
    (NaN, tiny exponents, NULLs, time zones, unchanged TOAST, key changes, truncate)."""
    assert _FAST_CHUNKS  # psycopg's chunk internals are where row_chunks expects them
    db = pg_database
    db.execute(
        "CREATE TABLE acct (id int PRIMARY KEY, price numeric, at timestamptz, big text, n int8)"
    )
    db.execute("ALTER TABLE acct ALTER big SET STORAGE EXTERNAL")
    db.execute(
        "INSERT INTO acct SELECT g, g / 7.0, timestamptz '2024-01-01 00:00+02' + g * interval "
        "'1.5 s', repeat('x', 3000) || g, g FROM generate_series(1, 3000) g"
    )
    db.execute("INSERT INTO acct VALUES (-1, 'NaN', NULL, NULL, NULL), (-2, 1e-20, now(), 'b', -5)")
    targets, engines = _engine_per_storage(db, make_source, ACCT)
    try:
        for eng in engines:
            eng.start()
            assert eng.await_ready(30)
        expected = _rows_of(db)
        for s, t in targets.items():
            assert {r["id"]: repr(r) for r in t.all()} == expected, s
        with db.connect() as conn:
            conn.execute("UPDATE acct SET n = n + 1 WHERE id <= 500")  # big: unchanged TOAST
            conn.execute("UPDATE acct SET id = id + 10000 WHERE id > 2900")  # key changes
            conn.execute("DELETE FROM acct WHERE id BETWEEN 100 AND 200")
            conn.execute("INSERT INTO acct VALUES (-3, '-0.000', now(), NULL, 0)")
        expected = _rows_of(db)
        for s, t in targets.items():
            wait_until(lambda t=t: {r["id"]: repr(r) for r in t.all()} == expected, 30, what=s)
            assert repr(t.get(1)) == expected[1]
        db.execute("TRUNCATE acct")
        db.execute("INSERT INTO acct VALUES (7, 7, NULL, 'after', 7)")
        expected = _rows_of(db)
        for s, t in targets.items():
            wait_until(lambda t=t: {r["id"]: repr(r) for r in t.all()} == expected, 30, what=s)
    finally:
        for eng in engines:
            eng.stop()


SCALARS_DDL = """
CREATE TABLE scal (
  id int PRIMARY KEY, i2 int2, i8 int8, o oid, t text, vc varchar(10), ch char(3), b bool,
  f8 float8, by bytea, num numeric, n12 numeric(12, 3), d date, ts timestamp, tstz timestamptz
)
"""
SCALARS_ROWS = """
INSERT INTO scal VALUES
  ({id}, -7, 9007199254740993, 4000000000, 'héllo', 'vc', 'ab', true, 0.1, '\\x00ff'::bytea,
   'NaN', 12345.678, '2024-02-29', '2024-01-02 03:04:05.678901',
   '2024-11-03 01:30:00-05'),
  ({id} + 1, NULL, NULL, NULL, NULL, NULL, NULL, NULL, 'Infinity', NULL, '-Infinity', NULL,
   '0001-01-01', '9999-12-31 23:59:59.999999', '1970-01-01 00:00:00+00'),
  ({id} + 2, 0, 0, 0, '', '', '', false, -0.0, '', 1e-20, -0.001, NULL, NULL, NULL)
"""


def test_a_binary_baseline_equals_select_star_and_the_stream(
    pg_database: PgTestDb, make_source: Callable[..., PostgresSource]
) -> None:
    """Every type the baseline reads in binary (as scalar tuples: numeric as text, timestamps
    and dates as integers) gives what psycopg's text loaders give, in a session time zone
    with daylight saving time (a fold, the ends of datetime's range, NULLs, NaN, infinities):
    in packed, compact and dict storage, equal to ``SELECT *`` and to the same rows streamed."""
    db = pg_database
    db.execute(f"ALTER DATABASE {db.dbname} SET timezone TO 'America/New_York'")
    db.execute(SCALARS_DDL)
    db.execute(SCALARS_ROWS.format(id=1))
    table = TableIdentifier("public", "scal")
    targets, engines = _engine_per_storage(db, make_source, table)

    def select_star() -> dict[Any, str]:
        with db.connect() as conn:
            cur = conn.cursor(row_factory=dict_row)
            return {r["id"]: repr(r) for r in cur.execute("SELECT * FROM scal")}

    try:
        for eng in engines:
            eng.start()
            assert eng.await_ready(30)
        expected = select_star()
        assert "fold=1" in expected[1] and "America/New_York" in expected[1]
        for s, t in targets.items():
            assert {r["id"]: repr(r) for r in t.all()} == expected, s
            assert repr(t.get(1)) == expected[1], s
        db.execute(SCALARS_ROWS.format(id=11))  # the same values, streamed
        expected = select_star()
        for s, t in targets.items():
            wait_until(lambda t=t: len(t.all()) == 6, 30, what=s)
            got = {r["id"]: repr(r) for r in t.all()}
            assert got == expected, s
            for base_id in (1, 2, 3):  # baseline row and streamed row: same values and types
                assert got[base_id] == got[base_id + 10].replace(
                    f"'id': {base_id + 10}", f"'id': {base_id}"
                )
    finally:
        for eng in engines:
            eng.stop()


def test_float8_is_read_as_text_where_the_session_rounds_it(pg_database: PgTestDb) -> None:
    """Under ``extra_float_digits = 0`` the text of a float8 (what the stream sends) is rounded:
    the baseline then reads the table as text, so both give the same value."""
    cols = [
        ColumnDefinition("id", "int4", 1, False, True, 1, type_oid=23),
        ColumnDefinition("f", "float8", 2, type_oid=701),
    ]
    with pg_database.connect() as conn:
        assert binary_plan(conn.cursor(), cols) is not None
        conn.execute("SET extra_float_digits = 0")
        assert binary_plan(conn.cursor(), cols) is None
        assert binary_plan(conn.cursor(), cols[:1]) is not None  # no float8: binary still


def test_raw_key_columns_match_streamed_keys(
    pg_database: PgTestDb, make_source: Callable[..., PostgresSource]
) -> None:
    """A numeric or timestamptz primary key (a raw column of the binary baseline) is stored
    under its real value, so ``get()`` finds it and the stream updates and deletes it."""
    db = pg_database
    db.execute("CREATE TABLE knum (k numeric PRIMARY KEY, v int)")
    db.execute("CREATE TABLE kts (k timestamptz PRIMARY KEY, v int)")
    db.execute("INSERT INTO knum VALUES (1.50, 0), (2, 0)")
    db.execute("INSERT INTO kts VALUES ('2024-01-01 00:00+00', 0), ('2024-06-01 12:00+00', 0)")
    knum, kts = TableIdentifier("public", "knum"), TableIdentifier("public", "kts")
    targets = {
        (tb, s): IndexedTarget(storage=s)  # type: ignore[arg-type]
        for tb in (knum, kts)
        for s in ("packed", "compact")
    }
    eng = laredo.Engine(
        sources={"pg": make_source()},
        pipelines=[
            laredo.Pipeline("pg", tb, t, id=f"{tb.table}_{s}") for (tb, s), t in targets.items()
        ],
    )
    first = {knum: Decimal("1.50"), kts: datetime(2024, 1, 1, tzinfo=UTC)}
    try:
        eng.start()
        assert eng.await_ready(30)
        for (tb, s), t in targets.items():
            row = t.get(first[tb])
            assert row is not None and row["v"] == 0, (tb, s)
            assert type(row["k"]) is type(first[tb])
        db.execute("UPDATE knum SET v = 1 WHERE k = 1.50")
        db.execute("DELETE FROM knum WHERE k = 2")
        db.execute("UPDATE kts SET v = 1 WHERE k = '2024-01-01 00:00+00'")
        db.execute("DELETE FROM kts WHERE k = '2024-06-01 12:00+00'")
        for (tb, s), t in targets.items():
            wait_until(lambda t=t, tb=tb: [r["v"] for r in t.all()] == [1], 30, what=f"{tb} {s}")
    finally:
        eng.stop()


def test_binary_infinities_are_stored_raw_and_read_as_the_streams_values(
    pg_database: PgTestDb, make_source: Callable[..., PostgresSource]
) -> None:
    """``infinity`` read in binary is an integer a packing target stores as it came; it reads
    back as ``datetime.max``/``date.max`` (UTC for timestamptz), exactly what the stream gives
    for the same text. A timestamp no Python value holds (year 10000) is left out of the
    baseline and dead-lettered, naming the column; the other rows load."""
    db = pg_database
    db.execute("CREATE TABLE inf (id int PRIMARY KEY, at timestamptz, d date)")
    db.execute(
        "INSERT INTO inf VALUES (1, now(), now()), (2, 'infinity', 'infinity'), "
        "(3, '-infinity', '-infinity'), (4, '10000-01-01', '2020-01-01')"
    )
    target = IndexedTarget()
    store = MemoryDeadLetterStore()
    eng = laredo.Engine(
        sources={"pg": make_source()},
        pipelines=[laredo.Pipeline("pg", TableIdentifier("public", "inf"), target)],
        dead_letter_store=store,
    )
    top = (datetime.max.replace(tzinfo=UTC), date.max)
    bottom = (datetime.min.replace(tzinfo=UTC), date.min)
    try:
        eng.start()
        assert eng.await_ready(30)
        assert target.count() == 3, [target.get(k) for k in range(1, 5)]
        for key, (at, d) in ((2, top), (3, bottom)):
            row = target.get(key)
            assert row is not None and (row["at"], row["d"]) == (at, d)
            assert row["at"].tzinfo is UTC
        (letter,) = store.read(eng.pipelines()[0].id)
        assert "column 'at'" in letter.error.message and "{'id': 4}" in letter.error.message
        db.execute("INSERT INTO inf VALUES (5, 'infinity', 'infinity')")
        wait_until(lambda: target.get(5) is not None)
        streamed = target.get(5)
        assert (streamed["at"], streamed["d"]) == top and streamed["at"].tzinfo is UTC
    finally:
        eng.stop()
