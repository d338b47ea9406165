"""Connections and Catalog on their own, against a real PostgreSQL."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from laredo.errors import ConfigError, TransientError
from laredo.types import TableIdentifier
from laredo_source_pg.catalog import STREAM_OPTIONS, Catalog, check_conninfo
from laredo_source_pg.pytest_plugin import PgTestDb

USERS = TableIdentifier("public", "users")
MISSING = TableIdentifier("public", "missing")


def test_check_conninfo_masks_the_password() -> None:
    check_conninfo("postgresql://bob:hunter2@db/app")
    with pytest.raises(ConfigError, match="invalid connection string") as info:
        check_conninfo("host=x password=hunter2 = = =")
    assert "hunter2" not in str(info.value)


@pytest.mark.integration
def test_connections_name_themselves_and_reconnect(
    pg_database: PgTestDb, make_connections: Callable[..., Any]
) -> None:
    conns, _ = make_connections()
    q = conns.query()
    assert conns.query() is q
    assert q.execute("SHOW application_name").fetchone() == (f"laredo:{pg_database.slot_name}",)
    assert conns.server_version >= 150000
    assert conns.side(lambda c: c.execute("SELECT 1").fetchone()) == (1,)
    repl = conns.repl()
    assert conns.repl_open and conns.repl() is repl
    assert "extra_float_digits=3" in STREAM_OPTIONS
    conns.close_repl()
    assert not conns.repl_open
    q.close()
    assert conns.query() is not q  # a closed query connection is re-opened on next use


@pytest.mark.integration
def test_connection_failure_is_transient_and_masked(make_connections: Callable[..., Any]) -> None:
    conns, _ = make_connections(
        connection="postgresql://bob:hunter2@127.0.0.1:1/db", connect_timeout="1s"
    )
    with pytest.raises(TransientError, match="query connection") as info:
        conns.query()
    assert "hunter2" not in str(info.value)


@pytest.mark.integration
def test_discover_reads_numeric_precision_and_scale_and_time_precision(
    pg_database: PgTestDb, make_connections: Callable[..., Any]
) -> None:
    db = pg_database
    db.execute(
        "CREATE TABLE users (id int PRIMARY KEY, amount numeric(12,2), free numeric, "
        "whole numeric(7), neg numeric(5,-2), at timestamptz(3), t timestamp, n int)"
    )
    conns, opts = make_connections()
    cols = {c.name: c for c in Catalog(conns, opts).discover([USERS])[USERS]}
    got = {name: (c.type, c.precision, c.scale) for name, c in cols.items()}
    assert got == {
        "id": ("int4", None, None),
        "amount": ("numeric", 12, 2),
        "free": ("numeric", None, None),
        "whole": ("numeric", 7, 0),
        "neg": ("numeric", 5, -2),
        "at": ("timestamptz", 3, None),
        "t": ("timestamp", None, None),
        "n": ("int4", None, None),
    }


@pytest.mark.integration
def test_discover_honours_column_lists_and_domains_load_as_their_base_type(
    pg_database: PgTestDb, make_connections: Callable[..., Any]
) -> None:
    db = pg_database
    db.execute("CREATE DOMAIN posint AS int CHECK (VALUE > 0)")
    db.execute(
        "CREATE TABLE users (id int PRIMARY KEY, name varchar(20) NOT NULL DEFAULT 'x', n posint)"
    )
    conns, opts = make_connections()
    catalog = Catalog(conns, opts)
    found = catalog.discover([USERS, MISSING])
    assert set(found) == {USERS}
    by_name = {c.name: c for c in found[USERS]}
    assert list(by_name) == ["id", "name", "n"]
    assert by_name["id"].primary_key and by_name["id"].primary_key_ordinal == 1
    assert by_name["name"].max_length == 20 and not by_name["name"].nullable
    assert by_name["name"].default_value == "'x'::character varying"
    assert catalog.existing([USERS, MISSING]) == [USERS]
    catalog.published_columns = {USERS: {"id", "n"}}
    assert [c.name for c in catalog.discover([USERS])[USERS]] == ["id", "n"]
    domain = by_name["n"].type_oid
    assert catalog.result_oid(domain) == 23  # int4
    assert catalog.result_oid(23) == 23


@pytest.mark.integration
def test_validate_tables_reports_each_problem_with_its_code(
    pg_database: PgTestDb, make_connections: Callable[..., Any]
) -> None:
    db = pg_database
    db.execute("CREATE TABLE users (id int PRIMARY KEY)")
    db.execute("CREATE TABLE nokey (v int)")
    nokey = TableIdentifier("public", "nokey")
    conns, opts = make_connections()
    catalog = Catalog(conns, opts)
    codes = [(e.table, e.code) for e in catalog.validate_tables([USERS, MISSING])]
    assert codes == [(None, "PUBLICATION_NOT_FOUND"), (MISSING, "TABLE_NOT_FOUND")]
    db.execute(f"CREATE PUBLICATION {db.publication} FOR TABLE users")
    codes = [(e.table, e.code) for e in catalog.validate_tables([USERS, nokey])]
    assert codes == [(nokey, "TABLE_NOT_IN_PUBLICATION"), (nokey, "REPLICA_IDENTITY")]
    db.execute("ALTER TABLE nokey REPLICA IDENTITY FULL")
    db.execute(f"ALTER PUBLICATION {db.publication} ADD TABLE nokey")
    assert catalog.validate_tables([USERS, nokey]) == []
