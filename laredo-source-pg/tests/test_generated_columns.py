"""Stored generated columns: on PostgreSQL 18+ the publication Laredo creates publishes them
(``publish_generated_columns = stored``) and their values arrive on baseline and stream; before
18 pgoutput cannot send them, and neither side carries them."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from laredo.types import SourceConfig, SourceState, TableIdentifier
from laredo_source_pg.pytest_plugin import PgTestDb
from laredo_source_pg.source import PostgresSource
from laredo_source_pg.testing import RecordingHandler, StreamThread, wait_until

pytestmark = pytest.mark.integration

T = TableIdentifier("public", "orders")


def test_stored_generated_columns_arrive_on_18_and_are_left_out_before(
    pg_database: PgTestDb, make_source: Callable[..., PostgresSource]
) -> None:
    db = pg_database
    db.execute(
        "CREATE TABLE orders (id int PRIMARY KEY, qty int, "
        "total int GENERATED ALWAYS AS (qty * 10) STORED)"
    )
    db.execute("INSERT INTO orders (id, qty) VALUES (1, 2)")
    on18 = int(db.scalar("SHOW server_version_num")) >= 180000
    src = make_source(catalog_check_interval=0.05)  # the catalog check sees them too
    columns = [c.name for c in src.init(SourceConfig([T]))[T]]
    assert columns == (["id", "qty", "total"] if on18 else ["id", "qty"])
    rows: list[dict[str, object]] = []
    pos = src.baseline([T], lambda t, r: rows.append(dict(r)))
    assert rows == [{"id": 1, "qty": 2, "total": 20} if on18 else {"id": 1, "qty": 2}]
    h = RecordingHandler()
    th = StreamThread(src, pos, h)
    th.start()
    wait_until(lambda: src.state() is SourceState.STREAMING, what="streaming")
    db.execute("INSERT INTO orders (id, qty) VALUES (2, 3)")
    db.execute("UPDATE orders SET qty = 5 WHERE id = 1")
    events = h.wait_for_events(2)
    th.stop()
    got = [e.new_values for e in events]
    if on18:
        assert got == [{"id": 2, "qty": 3, "total": 30}, {"id": 1, "qty": 5, "total": 50}]
    else:
        assert got == [{"id": 2, "qty": 3}, {"id": 1, "qty": 5}]
    assert not h.schema_changes  # the stream describes the same columns as discovery
