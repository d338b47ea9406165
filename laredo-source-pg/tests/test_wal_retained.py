"""``PostgresSource.wal_retained_bytes``: the WAL the slot holds back on the server, read with
the lag (the status page and ``laredo_source_wal_retained_bytes``)."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
from laredo.types import SourceConfig, SourceState, TableIdentifier
from laredo_source_pg.pytest_plugin import PgTestDb
from laredo_source_pg.source import PostgresSource
from laredo_source_pg.testing import RecordingHandler, StreamThread, wait_until

pytestmark = pytest.mark.integration

USERS = TableIdentifier("public", "users")


def test_wal_retained_grows_with_unacknowledged_wal_and_matches_the_slot(
    pg_database: PgTestDb, make_source: Callable[..., PostgresSource]
) -> None:
    db = pg_database
    db.execute("CREATE TABLE users (id int PRIMARY KEY, pad text)")
    src = make_source(slot_mode="stateful")
    assert src.wal_retained_bytes() is None  # no slot yet
    src.init(SourceConfig([USERS]))
    pos = src.baseline([USERS], lambda t, r: None)
    h = RecordingHandler()
    th = StreamThread(src, pos, h)
    th.start()
    try:
        wait_until(lambda: src.state() is SourceState.STREAMING, what="streaming")
        time.sleep(1.1)  # past the 1 s cache of the lag query (it was read before the slot)
        before = src.wal_retained_bytes()
        assert before is not None and before >= 0
        db.execute("INSERT INTO users SELECT g, repeat('x', 200) FROM generate_series(1, 5000) g")
        h.wait_for_events(5000)
        time.sleep(1.1)  # past the 1 s cache of the lag query
        retained = src.wal_retained_bytes()
        slot = int(
            db.scalar(
                "SELECT pg_current_wal_lsn() - restart_lsn FROM pg_replication_slots "
                "WHERE slot_name = %s",
                (db.slot_name,),
            )
        )
        assert retained is not None and retained > before + 1_000_000  # nothing acknowledged
        assert abs(retained - slot) < 64 * 1024, (retained, slot)
        assert retained >= src.get_lag().lag_bytes
    finally:
        th.stop()
    assert th.error is None
