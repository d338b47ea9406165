"""Publication management: create, sync, row filters and column lists (PostgreSQL 15+)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import pytest
from laredo.errors import ConfigError, SourceError
from laredo.types import SourceConfig, TableIdentifier
from laredo_source_pg.publication import MANAGED_COMMENT, PublicationManager
from laredo_source_pg.pytest_plugin import PgTestDb
from laredo_source_pg.source import PostgresSource
from laredo_source_pg.testing import RecordingHandler, StreamThread, wait_until

pytestmark = pytest.mark.integration

USERS = TableIdentifier("public", "users")
ORDERS = TableIdentifier("public", "orders")
REL_OID = (
    "SELECT pr.oid::text FROM pg_publication_rel pr JOIN pg_class c ON c.oid = pr.prrelid "
    "WHERE c.relname = 'users'"
)


def _pub(db: PgTestDb, name: str | None = None) -> dict[str, tuple[Any, Any]]:
    rows = db.execute(
        "SELECT tablename, attnames, rowfilter FROM pg_publication_tables WHERE pubname = %s",
        (name or db.publication,),
    )
    return {r[0]: (r[1], r[2]) for r in rows}


def _ops(db: PgTestDb) -> tuple[bool, ...]:
    row = db.execute(
        "SELECT pubinsert, pubupdate, pubdelete, pubtruncate FROM pg_publication "
        "WHERE pubname = %s",
        (db.publication,),
    )[0]
    return tuple(row)


def test_create_with_row_filter_and_column_list_applies_to_baseline_and_stream(
    pg_database: PgTestDb, make_source: Callable[..., PostgresSource]
) -> None:
    db = pg_database
    db.execute("CREATE TABLE users (id int PRIMARY KEY, name text, secret text, active bool)")
    db.execute("INSERT INTO users VALUES (1, 'a', 's1', true), (2, 'b', 's2', false)")
    src = make_source(
        publication={
            "create": True,
            "tables": {
                "public.users": {"row_filter": "active", "columns": ["id", "name", "active"]}
            },
        }
    )
    schemas = src.init(SourceConfig([USERS]))
    assert [c.name for c in schemas[USERS]] == ["id", "name", "active"]
    cols, rowfilter = _pub(db)["users"]
    assert cols == ["id", "name", "active"] and rowfilter == "active"
    rows: list[dict[str, Any]] = []
    pos = src.baseline([USERS], lambda t, r: rows.append(r))
    assert rows == [{"id": 1, "name": "a", "active": True}]
    h = RecordingHandler()
    th = StreamThread(src, pos, h)
    th.start()
    db.execute("INSERT INTO users VALUES (3, 'c', 's3', true), (4, 'd', 's4', false)")
    (e,) = h.wait_for_events(1)
    assert e.new_values == {"id": 3, "name": "c", "active": True}
    th.stop()


def test_count_at_a_position_applies_the_row_filter_and_splits_the_stream_exactly(
    pg_database: PgTestDb, make_source: Callable[..., PostgresSource]
) -> None:
    """``count_rows_at`` (row-count validation) counts what the publication delivers, at a
    position that splits the stream: a change after it is streamed past it."""
    db = pg_database
    db.execute("CREATE TABLE users (id int PRIMARY KEY, name text, secret text, active bool)")
    db.execute("INSERT INTO users SELECT g, 'n', 's', g % 3 = 0 FROM generate_series(1, 30) g")
    src = make_source(
        publication={"create": True, "tables": {"public.users": {"row_filter": "active"}}}
    )
    src.init(SourceConfig([USERS]))
    pos = src.baseline([USERS], lambda t, r: None)
    h = RecordingHandler()
    th = StreamThread(src, pos, h)
    th.start()
    try:
        assert src.describe_tables([USERS, TableIdentifier("public", "nope")]).keys() == {USERS}
        count, at = src.count_rows_at(USERS)
        assert count == 10  # 30 rows, every third active
        db.execute("INSERT INTO users VALUES (99, 'c', 's', true), (98, 'd', 's', false)")
        (e,) = h.wait_for_events(1)
        assert e.new_values is not None and e.new_values["id"] == 99
        assert src.compare_positions(e.position, at) > 0  # after the counted position
        assert src.count_rows_at(USERS)[0] == 11
    finally:
        th.stop()


def test_sync_adds_updates_and_drops_tables_and_publish_ops(
    pg_database: PgTestDb, make_source: Callable[..., PostgresSource]
) -> None:
    db = pg_database
    db.execute("CREATE TABLE users (id int PRIMARY KEY, active bool)")
    db.execute("CREATE TABLE orders (id int PRIMARY KEY)")
    make_source().init(SourceConfig([USERS]))
    assert set(_pub(db)) == {"users"}
    assert _ops(db) == (True, True, True, True)

    make_source(
        publication={
            "create": True,
            "publish": "insert,update,delete",
            "tables": {"public.users": {"row_filter": "active = true"}},
        }
    ).init(SourceConfig([USERS, ORDERS]))
    pub = _pub(db)
    assert set(pub) == {"users", "orders"}
    assert pub["users"][1] == "(active = true)"
    assert _ops(db) == (True, True, True, False)

    # Unchanged configuration: nothing is rewritten (same filter as PostgreSQL prints it).
    before = db.scalar(REL_OID)
    make_source(
        publication={
            "create": True,
            "publish": "insert,update,delete",
            "tables": {"public.users": {"row_filter": "active = true"}},
        }
    ).init(SourceConfig([USERS, ORDERS]))
    after = db.scalar(REL_OID)
    assert before == after

    # We created it, so tables no longer configured are dropped from it.
    make_source().init(SourceConfig([USERS]))
    pub = _pub(db)
    assert set(pub) == {"users"} and pub["users"][1] is None


def test_existing_publication_is_not_trimmed_unless_asked(
    pg_database: PgTestDb, make_source: Callable[..., PostgresSource]
) -> None:
    db = pg_database
    db.execute("CREATE TABLE users (id int PRIMARY KEY)")
    db.execute('CREATE TABLE "Odd Name" (id int PRIMARY KEY)')
    db.execute(f'CREATE PUBLICATION {db.publication} FOR TABLE "Odd Name"')
    make_source().init(SourceConfig([USERS]))
    assert set(_pub(db)) == {"users", "Odd Name"}  # someone else's table is left alone
    make_source(publication={"create": True, "drop_unconfigured": True}).init(
        SourceConfig([USERS, TableIdentifier("public", "Odd Name")])
    )
    assert set(_pub(db)) == {"users", "Odd Name"}
    make_source(publication={"create": True, "drop_unconfigured": True}).init(SourceConfig([USERS]))
    assert set(_pub(db)) == {"users"}


def test_publication_errors_are_clear(
    pg_database: PgTestDb, make_source: Callable[..., PostgresSource]
) -> None:
    db = pg_database
    db.execute("CREATE TABLE users (id int PRIMARY KEY)")
    src = make_source(
        publication={"create": True, "tables": {"public.orders": {"row_filter": "true"}}}
    )
    with pytest.raises(ConfigError, match=r"public\.orders.*not one of the configured tables"):
        src.init(SourceConfig([USERS]))
    src = make_source(
        publication={"create": True, "tables": {"public.users": {"row_filter": "nosuchcol > 1"}}}
    )
    with pytest.raises(Exception, match="could not create or update publication"):
        src.init(SourceConfig([USERS]))
    wait_until(lambda: True)


# -- PublicationManager on its own -------------------------------------------------------------


def test_manager_creates_with_row_filter_and_column_list_and_reads_them_back(
    pg_database: PgTestDb, make_connections: Callable[..., Any]
) -> None:
    db = pg_database
    db.execute("CREATE TABLE users (id int PRIMARY KEY, name text, secret text)")
    conns, opts = make_connections(
        publication={
            "create": True,
            "tables": {"public.users": {"row_filter": "id>10", "columns": ["id", "name"]}},
        }
    )
    pm = PublicationManager(conns, opts)
    assert pm.name == db.publication
    assert not pm.exists()
    pm.sync([USERS], [USERS])
    assert pm.exists()
    assert (
        db.scalar(
            "SELECT obj_description(oid, 'pg_publication') FROM pg_publication WHERE pubname = %s",
            (db.publication,),
        )
        == MANAGED_COMMENT
    )
    # PostgreSQL keeps its own spelling of the filter; the detail reports it as stored.
    assert pm.detail() == {USERS: (("id", "name"), "(id > 10)")}
    assert pm.published_info() == ({USERS: {"id", "name"}}, {USERS: "(id > 10)"})
    assert pm.deparse_filter(USERS, "id>10") == "(id > 10)"
    assert pm.deparse_filter(USERS, "nosuchcol > 1") is None
    want = opts.publication.tables["public.users"]
    assert pm.same_spec(USERS, want, pm.detail()[USERS])
    assert not pm.same_spec(USERS, want, (("id",), "(id > 10)"))
    assert not pm.same_spec(USERS, want, (("id", "name"), "(id > 11)"))
    assert not pm.same_spec(USERS, want, (("id", "name"), None))
    pm.drop()
    assert not pm.exists()
    assert pm.published_info() == ({}, {})


def test_manager_adds_a_table_and_rewrites_a_changed_filter(
    pg_database: PgTestDb, make_connections: Callable[..., Any]
) -> None:
    db = pg_database
    db.execute("CREATE TABLE users (id int PRIMARY KEY, active bool)")
    db.execute("CREATE TABLE orders (id int PRIMARY KEY)")
    conns, opts = make_connections(publication={"create": True})
    PublicationManager(conns, opts).sync([USERS], [USERS])
    assert set(_pub(db)) == {"users"}

    conns, opts = make_connections(
        publication={"create": True, "tables": {"public.users": {"row_filter": "active"}}}
    )
    pm = PublicationManager(conns, opts)
    pm.sync([USERS, ORDERS], [USERS, ORDERS])
    assert pm.detail() == {USERS: (None, "active"), ORDERS: (None, None)}
    rel = db.scalar(REL_OID)
    pm.sync([USERS, ORDERS], [USERS, ORDERS])  # unchanged: nothing rewritten
    assert db.scalar(REL_OID) == rel
    # A table missing from the database is configured but not passed: it is not added.
    pm.sync([USERS], [USERS, ORDERS])
    assert set(pm.detail()) == {USERS, ORDERS}


def test_unset_create_makes_a_missing_publication_and_only_extends_its_own(
    pg_database: PgTestDb,
    make_source: Callable[..., PostgresSource],
    caplog: pytest.LogCaptureFixture,
) -> None:
    db = pg_database
    db.execute("CREATE TABLE users (id int PRIMARY KEY, name text)")
    db.execute("CREATE TABLE orders (id int PRIMARY KEY)")
    caplog.set_level(logging.INFO, logger="laredo_source_pg.publication")
    src = make_source(publication={})  # create unset: the default
    src.init(SourceConfig([USERS]))
    assert set(_pub(db)) == {"users"}
    comment = db.scalar(
        "SELECT obj_description(oid, 'pg_publication') FROM pg_publication WHERE pubname = %s",
        (db.publication,),
    )
    assert comment == MANAGED_COMMENT
    assert any(
        f"created publication {db.publication} for public.users" in m
        and "publication.create = false forbids" in m
        for m in caplog.messages
    ), caplog.messages
    assert src.validate_tables([USERS]) == []
    src.close()
    # the next run configures one more table: added to the publication Laredo made
    src = make_source(publication={})
    src.init(SourceConfig([USERS, ORDERS]))
    assert set(_pub(db)) == {"users", "orders"}
    src.close()
    # a publication someone else made is left as it is; the fix names both ways
    theirs = f"{db.slot_name}_theirs"
    db.execute(f"CREATE PUBLICATION {theirs} FOR TABLE users")
    src = make_source(publication={"name": theirs})
    src.init(SourceConfig([USERS, ORDERS]))
    assert set(_pub(db, theirs)) == {"users"}
    (err,) = src.validate_tables([USERS, ORDERS])
    assert err.code == "TABLE_NOT_IN_PUBLICATION"
    assert "ALTER PUBLICATION" in err.message and "publication.create = true" in err.message
    src.close()
    # create = false: never created; the hint does not suggest what is already set
    none = f"{db.slot_name}_none"
    src = make_source(publication={"create": False, "name": none})
    src.init(SourceConfig([USERS]))
    (err,) = src.validate_tables([USERS])
    assert err.code == "PUBLICATION_NOT_FOUND"
    assert "remove publication.create = false" in err.message
    assert "create = true" not in err.message
    assert db.scalar("SELECT count(*) FROM pg_publication WHERE pubname = %s", (none,)) == 0


def test_unset_create_without_the_privilege_names_the_fix(
    pg_database: PgTestDb, make_source: Callable[..., PostgresSource]
) -> None:
    db = pg_database
    db.execute("CREATE TABLE users (id int PRIMARY KEY)")
    role = f"r_{db.slot_name}"
    db.execute(f"CREATE ROLE {role} LOGIN REPLICATION")
    db.execute(f"GRANT SELECT ON users TO {role}")
    try:
        src = make_source(connection=db.dsn_for(user=role), publication={})
        with pytest.raises(SourceError) as ei:
            src.init(SourceConfig([USERS]))
        text = str(ei.value)
        assert "publication.create is unset" in text and "permission denied" in text
        assert f'CREATE PUBLICATION "{db.publication}" FOR TABLE "public"."users"' in text
        src.close()
    finally:
        db.execute(f"DROP OWNED BY {role}")
        db.execute(f"DROP ROLE {role}")
