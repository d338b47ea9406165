"""Column types from real PostgreSQL into Delta: a ``numeric(12,2)`` column is stored as
``decimal(12,2)`` through the baseline and the stream, an unconstrained ``numeric`` as exact
text, date and timestamp infinities as their extreme values; read back with ``deltalake``."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import laredo
import pyarrow as pa
import pytest
from deltalake import DeltaTable
from laredo.testing import wait_until
from laredo.types import TableIdentifier
from laredo_source_pg.source import PostgresSource
from laredo_target_delta import DeltaTarget, DeltaTargetOptions, history, rows_as_of
from laredo_target_delta.archive import table_reader

pytestmark = pytest.mark.integration

ITEMS = TableIdentifier("public", "items")


def _pg_rows(db: Any) -> dict[int, dict[str, Any]]:
    with db.connect() as conn:
        cur = conn.execute("SELECT * FROM items")
        names = [d.name for d in cur.description]
        return {r[0]: dict(zip(names, r, strict=True)) for r in cur.fetchall()}


def _delta_rows(uri: str) -> dict[int, dict[str, Any]]:
    rows, _, _ = rows_as_of(uri, "FFFFFFFF/FFFFFFFF")
    return {r["id"]: r for r in rows}


def test_numeric_precision_and_scale_reach_delta_through_baseline_and_stream(
    pg_database: Any, tmp_path: Path
) -> None:
    db = pg_database
    db.execute(
        "CREATE TABLE items (id int PRIMARY KEY, amount numeric(12,2), free numeric, "
        "name varchar(20), at timestamptz(3))"
    )
    db.execute(
        "INSERT INTO items SELECT g, g * 1000.25, (10::numeric ^ 40) + g / 7.0, 'n' || g, "
        "timestamptz '2026-01-01 00:00:00.123+00' FROM generate_series(1, 50) g"
    )
    uri = str(tmp_path / "lake" / "items")
    src = PostgresSource(
        connection=db.dsn,
        slot_mode="stateful",
        slot_name=db.slot_name,
        publication={"create": True},
        status_interval=0.2,
    )
    target = DeltaTarget(DeltaTargetOptions(uri=uri, flush_interval="100ms"))
    eng = laredo.Engine(sources={"pg": src}, pipelines=[laredo.Pipeline("pg", ITEMS, target)])
    eng.start()
    try:
        assert eng.await_ready(60)
        schema = pa.schema(DeltaTable(uri).schema().to_arrow())
        baseline = pa.table(DeltaTable(uri).to_pyarrow_table())
        db.execute("UPDATE items SET amount = 9999999999.99 WHERE id = 1")
        db.execute("UPDATE items SET amount = -0.01, free = 0.000000000000000000001 WHERE id = 2")
        db.execute("INSERT INTO items VALUES (100, 12.5, -1e-30, 'new', now())")
        db.execute("DELETE FROM items WHERE id = 3")
        wait_until(lambda: _delta_rows(uri) == _pg_rows(db), 60, "the Delta table", interval=0.2)
    finally:
        eng.stop()
    assert pa.types.is_decimal(schema.field("amount").type)
    assert (schema.field("amount").type.precision, schema.field("amount").type.scale) == (12, 2)
    assert schema.field("free").type == pa.string()  # unconstrained: exact text, nothing lost
    assert pa.types.is_timestamp(schema.field("at").type)
    # the baseline version holds decimals as deltalake reads them, equal to PostgreSQL's
    amounts = dict(zip(baseline["id"].to_pylist(), baseline["amount"].to_pylist(), strict=True))
    assert amounts[7] == Decimal("7001.75") and len(amounts) == 50
    # the streamed changes too, read back directly with deltalake
    now = table_reader(DeltaTable(uri)).read_all()  # the state: change rows folded
    got = dict(zip(now["id"].to_pylist(), now["amount"].to_pylist(), strict=True))
    assert got[1] == Decimal("9999999999.99") and got[2] == Decimal("-0.01")
    assert got[100] == Decimal("12.50") and 3 not in got
    free = dict(zip(now["id"].to_pylist(), now["free"].to_pylist(), strict=True))
    assert Decimal(free[2]) == Decimal("0.000000000000000000001")
    kinds = [c.kind for c in history(uri)]
    assert kinds[0] == "baseline" and "changes" in kinds


def test_date_and_timestamp_infinities_reach_delta_as_the_extreme_values(
    pg_database: Any, tmp_path: Path
) -> None:
    """``'infinity'``/``'-infinity'`` (issue 29): ``date.max``/``datetime.max`` and minimums (UTC
    for ``timestamptz``) through the baseline and the stream, read back unchanged from Delta."""
    db = pg_database
    db.execute("CREATE TABLE items (id int PRIMARY KEY, d date, ts timestamp, tz timestamptz)")
    db.execute("INSERT INTO items VALUES (1, 'infinity', 'infinity', 'infinity')")
    db.execute("INSERT INTO items VALUES (2, '-infinity', '-infinity', '-infinity')")
    uri = str(tmp_path / "lake" / "items")
    src = PostgresSource(
        connection=db.dsn, slot_name=db.slot_name, publication={"create": True}, status_interval=0.2
    )
    target = DeltaTarget(DeltaTargetOptions(uri=uri, flush_interval="100ms"))
    eng = laredo.Engine(sources={"pg": src}, pipelines=[laredo.Pipeline("pg", ITEMS, target)])
    top = {"d": date.max, "ts": datetime.max, "tz": datetime.max.replace(tzinfo=UTC)}
    bottom = {"d": date.min, "ts": datetime.min, "tz": datetime.min.replace(tzinfo=UTC)}
    expected = {1: {"id": 1, **top}, 2: {"id": 2, **bottom}}
    eng.start()
    try:
        assert eng.await_ready(60)
        db.execute("INSERT INTO items VALUES (3, 'infinity', 'infinity', 'infinity')")
        db.execute(
            "UPDATE items SET d = '-infinity', ts = '-infinity', tz = '-infinity' WHERE id = 1"
        )
        expected[3] = {"id": 3, **top}
        expected[1] = {"id": 1, **bottom}
        wait_until(lambda: _delta_rows(uri) == expected, 60, "the Delta rows", interval=0.2)
    finally:
        eng.stop()
    for row in _delta_rows(uri).values():
        assert row["tz"].utcoffset() == timedelta(0) and row["ts"].tzinfo is None
        assert type(row["d"]) is date
