"""The public slot API (``laredo_source_pg.ExportedSnapshot``, ``create_slot``,
``import_snapshot``, ``drop_if_inactive``) against a real PostgreSQL."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import psycopg
import pytest
from laredo.errors import SourceError
from laredo_source_pg import (
    ExportedSnapshot,
    connect,
    create_slot,
    drop_if_inactive,
    export_snapshot,
    import_snapshot,
    parse_lsn,
)
from laredo_source_pg.catalog import slot_row
from laredo_source_pg.pytest_plugin import PgTestDb
from laredo_source_pg.testing import wait_until

pytestmark = pytest.mark.integration


def _slot(db: PgTestDb, name: str) -> tuple[bool, bool, int] | None:
    """(temporary, active, confirmed position) of slot ``name``, or None."""
    with db.connect(autocommit=True) as conn:
        row = slot_row(conn, name)
    if row is None:
        return None
    return row.temporary, row.active, parse_lsn(row.confirmed or "0/0")


def test_an_exported_snapshot_is_what_importers_read_and_its_slot_outlives_the_block(
    pg_database: PgTestDb, make_connections: Callable[..., Any]
) -> None:
    _, opts = make_connections(slot_mode="stateful")
    pg_database.execute("CREATE TABLE t (id int PRIMARY KEY)")
    pg_database.execute("INSERT INTO t VALUES (1), (2)")
    with ExportedSnapshot(opts, pg_database.slot_name) as snap:
        pg_database.execute("INSERT INTO t VALUES (3)")  # after the snapshot: not seen
        with connect(opts) as conn:
            import_snapshot(conn, snap.snapshot_name)
            row = conn.execute("SELECT count(*) FROM t").fetchone()
            conn.execute("COMMIT")
        assert row == (2,)
        assert snap.created and snap.consistent_point > 0
    assert _slot(pg_database, pg_database.slot_name) == (False, False, snap.consistent_point)
    assert drop_if_inactive_on(pg_database, pg_database.slot_name) is True
    assert _slot(pg_database, pg_database.slot_name) is None
    assert drop_if_inactive_on(pg_database, pg_database.slot_name) is None


def drop_if_inactive_on(db: PgTestDb, name: str) -> bool | None:
    with db.connect(autocommit=True) as conn:
        return drop_if_inactive(conn, name)


def test_a_held_slot_is_left_alone_and_a_baseline_refuses_to_replace_it(
    pg_database: PgTestDb, make_connections: Callable[..., Any]
) -> None:
    _, opts = make_connections()
    name = pg_database.slot_name
    snap = export_snapshot(opts, name, temporary=True)
    try:
        assert _slot(pg_database, name) == (True, True, snap.consistent_point)
        assert drop_if_inactive_on(pg_database, name) is False
        with pytest.raises(SourceError, match=rf"{name}.*in use by another consumer"):
            ExportedSnapshot(opts, name).__enter__()
        assert _slot(pg_database, name) is not None
    finally:
        snap.close()
    wait_until(lambda: _slot(pg_database, name) is None, what="temporary slot gone")


def test_an_inactive_slot_is_replaced_and_a_failed_run_drops_the_slot_it_made(
    pg_database: PgTestDb, make_connections: Callable[..., Any]
) -> None:
    _, opts = make_connections(slot_mode="stateful")
    name = pg_database.slot_name
    with ExportedSnapshot(opts, name) as first:
        pass
    with ExportedSnapshot(opts, name) as second:  # replaces the inactive first slot
        assert second.snapshot_name != first.snapshot_name
    assert _slot(pg_database, name) == (False, False, second.consistent_point)
    second.drop()
    assert _slot(pg_database, name) is None
    never = ExportedSnapshot(opts, name)
    never.drop()  # created nothing: drops nothing (and does not fail)
    assert not never.created


def test_a_temporary_slot_waits_for_the_old_one_of_its_name_a_stateful_one_does_not(
    pg_database: PgTestDb, make_connections: Callable[..., Any]
) -> None:
    _, opts = make_connections()
    name = pg_database.slot_name
    old = connect(opts, replication=True)
    create_slot(lambda: old, name, temporary=True, export=False)
    with connect(opts, replication=True) as new:
        with pytest.raises(psycopg.errors.DuplicateObject):
            create_slot(lambda: new, name, temporary=False, export=False)
        result: list[Any] = []
        attempts: list[int] = []

        def opener() -> Any:
            attempts.append(1)
            return new

        thread = threading.Thread(
            target=lambda: result.append(create_slot(opener, name, temporary=True, export=True))
        )
        thread.start()
        wait_until(lambda: len(attempts) >= 2, what="the new slot retrying")
        old.close()  # the old temporary slot goes with its session
        thread.join(30)
        assert not thread.is_alive()
        assert len(result) == 1 and result[0][1]  # created, with an exported snapshot
        assert _slot(pg_database, name) is not None
