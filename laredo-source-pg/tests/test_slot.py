"""SlotManager and Lease on their own, against a real PostgreSQL."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest
from laredo.errors import SourceError
from laredo.preflight import CheckRequest, Severity
from laredo_source_pg.catalog import Connections
from laredo_source_pg.checks import check_source
from laredo_source_pg.embedded import EmbeddedPostgres
from laredo_source_pg.options import PostgresSourceOptions
from laredo_source_pg.pytest_plugin import PgTestDb
from laredo_source_pg.slot import Lease, SlotManager
from laredo_source_pg.testing import wait_until

pytestmark = pytest.mark.integration


def test_ephemeral_slot_is_temporary_exports_a_snapshot_and_goes_with_its_connection(
    pg_database: PgTestDb, make_connections: Callable[..., Any]
) -> None:
    conns, opts = make_connections()
    slots = SlotManager(conns, opts)
    lsn, snapshot = slots.create(export=True)
    assert isinstance(snapshot, str) and snapshot
    assert (slots.exists, slots.fresh, slots.confirmed, slots.consistent_point) == (
        True,
        True,
        lsn,
        lsn,
    )
    row = slots.row()
    assert row is not None
    assert (row.slot_type, row.temporary, row.plugin, row.database) == (
        "logical",
        True,
        "pgoutput",
        pg_database.dbname,
    )
    assert not slots.invalidated()
    slots.abandon_connection()
    assert not slots.exists and slots.need_new
    wait_until(lambda: slots.row() is None, what="temporary slot gone")


def test_stateful_slot_is_found_again_and_dropped(
    pg_database: PgTestDb, make_connections: Callable[..., Any]
) -> None:
    conns, opts = make_connections(slot_mode="stateful")
    lsn, snapshot = SlotManager(conns, opts).create(export=False)
    assert snapshot is None
    conns.close()  # a stateful slot outlives its connection

    conns2, _ = make_connections(slot_mode="stateful")
    slots = SlotManager(conns2, opts)
    slots.lookup()
    assert slots.exists and not slots.fresh and slots.confirmed == lsn
    row = slots.row()
    assert row is not None and not row.temporary
    slots.drop()
    assert not slots.exists and slots.confirmed is None and slots.row() is None
    slots.lookup()
    assert not slots.exists


def test_ephemeral_lookup_ignores_a_slot_with_the_same_name(
    pg_database: PgTestDb, make_connections: Callable[..., Any]
) -> None:
    pg_database.execute(
        "SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (pg_database.slot_name,)
    )
    conns, opts = make_connections()
    slots = SlotManager(conns, opts)
    slots.lookup()
    assert not slots.exists  # ephemeral: never resumes from a slot
    pg_database.execute("SELECT pg_drop_replication_slot(%s)", (pg_database.slot_name,))


@pytest.mark.parametrize("policy", ["rebaseline", "fail"])
def test_invalidated_slot_is_detected_and_handled_per_policy(
    private_cluster: EmbeddedPostgres, policy: str
) -> None:
    pg = private_cluster
    pg.execute("CREATE TABLE noise (pad text)", "app")
    opts = PostgresSourceOptions(
        connection=pg.dsn("app"), slot_mode="stateful", slot_name="s", on_slot_invalidated=policy
    )
    conns = Connections(opts)
    try:
        slots = SlotManager(conns, opts)
        slots.create(export=False)
        conns.close_repl()
        assert not slots.invalidated()

        def lost() -> bool:
            pg.execute(
                "INSERT INTO noise SELECT repeat('x', 1000) FROM generate_series(1, 3000)", "app"
            )
            pg.execute("SELECT pg_switch_wal()")
            pg.execute("CHECKPOINT")
            return slots.invalidated()

        wait_until(lost, timeout=60, interval=0.05, what="slot invalidated")
        row = slots.row()
        assert row is not None and row.wal_status == "lost"
        # laredo check reports it per policy, never suggesting the policy already set
        (found,) = [
            f
            for f in check_source(CheckRequest("source", "postgresql", "sources.pg", opts))
            if f.code == "SLOT_INVALIDATED"
        ]
        if policy == "rebaseline":
            assert found.severity is Severity.WARNING and "re-baseline" in found.message
            assert "on_slot_invalidated" not in found.fix
        else:
            assert found.severity is Severity.ERROR and "reset-source" in found.fix
            assert "on_slot_invalidated = rebaseline" in found.fix
        fresh = SlotManager(conns, opts)
        fresh.lookup()
        if policy == "rebaseline":
            assert not fresh.exists and fresh.row() is None  # dropped: a new slot follows
        else:
            assert fresh.exists and fresh.confirmed is None and fresh.row() is not None
    finally:
        conns.close()


def test_lease_admits_one_holder_and_passes_on_release(
    make_connections: Callable[..., Any],
) -> None:
    conns1, opts = make_connections(slot_mode="stateful", lease_timeout="300ms")
    conns2, _ = make_connections(slot_mode="stateful", lease_timeout="300ms")
    closed = threading.Event()
    first, second = Lease(conns1, opts, closed), Lease(conns2, opts, closed)
    assert first.key == second.key
    first.acquire()
    assert first.held
    first.acquire()  # re-entrant: already held
    with pytest.raises(SourceError, match="held by another Laredo process"):
        second.acquire()
    assert not second.held
    first.release()
    assert not first.held
    second.acquire()
    assert second.held
    second.release()
    other = PostgresSourceOptions(connection=opts.connection, slot_name="another_slot")
    assert Lease(conns1, other, closed).key != first.key
