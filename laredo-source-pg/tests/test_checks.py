"""The ``postgresql`` preflight check against a real PostgreSQL: every problem with its code and
fix, the fields pipelines read, the publication and slot states, and nothing created."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from laredo.config import load_engine_config, run_checks
from laredo.preflight import CheckRequest, Finding, Severity, TableUse
from laredo.types import TableIdentifier
from laredo_source_pg.checks import check_source
from laredo_source_pg.options import PostgresSourceOptions
from laredo_source_pg.pytest_plugin import PgTestDb

pytestmark = pytest.mark.integration

USERS = TableIdentifier("public", "users")


def run(db: PgTestDb, tables: list[dict[str, Any]], **source: Any) -> list[Finding]:
    """The findings of ``laredo check`` for a config of ``tables`` on ``db``."""
    model = load_engine_config(
        {
            "sources": {
                "pg": {
                    "type": "postgresql",
                    "connection": db.dsn,
                    "slot_name": db.slot_name,
                    **source,
                }
            },
            "tables": [
                {"source": "pg", "targets": [{"type": "indexed-memory"}], **t} for t in tables
            ],
        }
    )
    report = run_checks(model)
    assert report.checked == ("sources.pg (postgresql)",)
    return list(report.findings)


def codes(found: list[Finding], *severities: Severity) -> set[tuple[str, str]]:
    wanted = severities or (Severity.ERROR,)
    return {(f.code, f.where) for f in found if f.severity in wanted}


@pytest.fixture
def role(pg_database: PgTestDb) -> Iterator[str]:
    """A LOGIN role without REPLICATION, CREATE on the database or any table; dropped after."""
    name = f"r_{pg_database.slot_name}"
    pg_database.execute(f"CREATE ROLE {name} LOGIN")
    yield name
    pg_database.execute(f"DROP OWNED BY {name}")
    pg_database.execute(f"DROP ROLE {name}")


def test_a_healthy_setup_passes_with_what_serve_will_do_and_creates_nothing(
    pg_database: PgTestDb,
) -> None:
    db = pg_database
    db.execute("CREATE TABLE users (id int PRIMARY KEY, email text, active bool)")
    found = run(
        db,
        [
            {
                "table": "users",
                "targets": [
                    {
                        "type": "indexed-memory",
                        "lookup_fields": ["mail"],
                        "filters": [{"type": "field-equals", "field": "active", "value": True}],
                        "transforms": [
                            {"type": "rename-fields", "mapping": {"email": "mail"}},
                            {"type": "add-timestamp", "field": "seen"},
                        ],
                        "ttl": {"field": "seen"},
                    }
                ],
            }
        ],
        slot_mode="stateful",
    )
    assert not [f for f in found if f.severity is Severity.ERROR], found
    assert {f.code for f in found if f.severity is Severity.INFO} == {
        "SERVER",
        "PUBLICATION_WILL_BE_CREATED",
        "SLOT_WILL_BE_CREATED",
    }
    # the embedded cluster keeps WAL without limit: a stateful slot could fill the disk
    (wal,) = [f for f in found if f.code == "WAL_RETENTION_UNLIMITED"]
    assert wal.severity is Severity.WARNING and "max_slot_wal_keep_size" in wal.fix
    # read-only: no slot, no publication
    assert (
        db.scalar("SELECT count(*) FROM pg_replication_slots WHERE slot_name = %s", (db.slot_name,))
        == 0
    )
    assert db.scalar("SELECT count(*) FROM pg_publication") == 0


def test_every_problem_at_once_with_its_fix(pg_database: PgTestDb, role: str) -> None:
    db = pg_database
    db.execute("CREATE TABLE users (id int PRIMARY KEY, email text)")
    db.execute("CREATE TABLE nokey (v int)")
    db.execute("CREATE TABLE secret (id int PRIMARY KEY)")
    db.execute("CREATE VIEW v_users AS SELECT * FROM users")
    db.execute(f"GRANT SELECT ON users, nokey, v_users TO {role}")
    db.execute(f"SELECT pg_create_logical_replication_slot('{db.slot_name}', 'pgoutput')")
    try:
        found = run(
            db,
            [
                {
                    "table": "users",
                    "targets": [
                        {
                            "type": "indexed-memory",
                            "lookup_fields": ["emial"],
                            "indexes": [{"name": "by_x", "fields": ["x"]}],
                            "filters": [{"type": "field-prefix", "field": "nme", "prefix": "a"}],
                            "transforms": [{"type": "drop-fields", "fields": ["passwd"]}],
                        }
                    ],
                },
                {"table": "nokey"},
                {"table": "secret"},
                {"table": "userz"},
                {"table": "v_users"},
            ],
            connection=db.dsn_for(user=role),
        )
    finally:
        db.execute(f"SELECT pg_drop_replication_slot('{db.slot_name}')")
    t0 = "tables.0.targets.0"
    assert codes(found) == {
        ("MISSING_REPLICATION_PRIVILEGE", "sources.pg"),
        ("COLUMN_NOT_FOUND", f"{t0}.lookup_fields.0"),
        ("COLUMN_NOT_FOUND", f"{t0}.indexes.0.fields.0"),
        ("COLUMN_NOT_FOUND", f"{t0}.filters.0.field"),
        ("COLUMN_NOT_FOUND", f"{t0}.transforms.0.fields.0"),
        ("REPLICA_IDENTITY", "tables.1"),
        ("MISSING_SELECT_PRIVILEGE", "tables.2"),
        ("TABLE_NOT_FOUND", "tables.3"),
        ("NOT_A_TABLE", "tables.4"),
        ("PUBLICATION_CREATE_PRIVILEGE", "sources.pg.publication"),
        ("SLOT_NAME_IN_USE", "sources.pg.slot_name"),
    }
    by = {(f.code, f.where): f for f in found}
    assert all(f.fix for f in found if f.severity is Severity.ERROR)
    assert "did you mean 'email'" in by["COLUMN_NOT_FOUND", f"{t0}.lookup_fields.0"].fix
    assert (
        f'ALTER ROLE "{role}" REPLICATION' in by["MISSING_REPLICATION_PRIVILEGE", "sources.pg"].fix
    )
    assert "REPLICA IDENTITY FULL" in by["REPLICA_IDENTITY", "tables.1"].fix
    assert (
        f'GRANT SELECT ON "public"."secret" TO "{role}"'
        in by["MISSING_SELECT_PRIVILEGE", "tables.2"].fix
    )
    assert "public.users" in by["TABLE_NOT_FOUND", "tables.3"].message  # did you mean
    create = by["PUBLICATION_CREATE_PRIVILEGE", "sources.pg.publication"]
    assert "GRANT CREATE ON DATABASE" in create.fix and "OWNER TO" in create.fix


def test_publication_states_per_create_mode(pg_database: PgTestDb) -> None:
    db = pg_database
    db.execute("CREATE TABLE users (id int PRIMARY KEY)")
    db.execute("CREATE TABLE orders (id int PRIMARY KEY)")
    tables = [{"table": "users"}, {"table": "orders"}]
    # create = false and no publication: the fix is to create it, or to let Laredo
    (nf,) = [
        f for f in run(db, tables, publication={"create": False}) if f.severity is Severity.ERROR
    ]
    assert nf.code == "PUBLICATION_NOT_FOUND"
    assert "CREATE PUBLICATION" in nf.fix and "remove publication.create = false" in nf.fix
    # a publication the user made, without orders
    db.execute(f"CREATE PUBLICATION {db.publication} FOR TABLE users")
    for mode, suggests_create in ((False, True), (None, True)):
        errs = [
            f for f in run(db, tables, publication={"create": mode}) if f.severity is Severity.ERROR
        ]
        assert [(f.code, f.table) for f in errs] == [
            ("TABLE_NOT_IN_PUBLICATION", TableIdentifier("public", "orders"))
        ]
        assert "ALTER PUBLICATION" in errs[0].fix
        assert ("publication.create = true" in errs[0].fix) is suggests_create
    # create = true: serve adds it (the superuser may)
    found = run(db, tables, publication={"create": True})
    assert codes(found) == set()
    assert ("PUBLICATION_WILL_BE_UPDATED", "sources.pg.publication") in codes(found, Severity.INFO)


def test_an_active_slot_of_another_process(pg_database: PgTestDb) -> None:
    db = pg_database
    db.execute("CREATE TABLE users (id int PRIMARY KEY)")
    db.execute(f"CREATE PUBLICATION {db.publication} FOR TABLE users")
    repl = psycopg.connect(
        db.dsn_for(application_name="someone-else"), autocommit=True, replication="database"
    )
    try:
        repl.execute(f"CREATE_REPLICATION_SLOT {db.slot_name} LOGICAL pgoutput")
        repl.execute(
            f"START_REPLICATION SLOT {db.slot_name} LOGICAL 0/0 "
            f"(proto_version '1', publication_names '{db.publication}')"
        )
        found = run(db, [{"table": "users"}], slot_mode="stateful")
    finally:
        repl.close()
    (active,) = [f for f in found if f.code == "SLOT_ACTIVE"]
    assert active.severity is Severity.ERROR and "someone-else" in active.message
    assert "pg_terminate_backend(" in active.fix  # the slot goes with the database


def test_the_running_servers_own_slot_is_no_conflict(pg_database: PgTestDb) -> None:
    """``laredo check`` while ``laredo serve`` streams from the slot: the consumer connects as
    ``laredo:<slot_name>`` (what a Laredo source of that slot is), so it is an info."""
    db = pg_database
    db.execute("CREATE TABLE users (id int PRIMARY KEY)")
    db.execute(f"CREATE PUBLICATION {db.publication} FOR TABLE users")
    repl = psycopg.connect(
        db.dsn_for(application_name=f"laredo:{db.slot_name}"),
        autocommit=True,
        replication="database",
    )
    try:
        repl.execute(f"CREATE_REPLICATION_SLOT {db.slot_name} LOGICAL pgoutput")
        repl.execute(
            f"START_REPLICATION SLOT {db.slot_name} LOGICAL 0/0 "
            f"(proto_version '1', publication_names '{db.publication}')"
        )
        found = run(db, [{"table": "users"}], slot_mode="stateful", lease=False)
        # ephemeral mode: the server's own slot is its temporary slot of that name
        ephemeral = run(db, [{"table": "users"}], slot_mode="ephemeral")
    finally:
        repl.close()
    assert not [f for f in ephemeral if f.severity is Severity.ERROR], ephemeral
    (active,) = [f for f in found if f.code == "SLOT_ACTIVE"]
    assert active.severity is Severity.INFO, active
    assert "running Laredo server" in active.message and "nothing to fix" in active.message
    assert not [f for f in found if f.severity is Severity.ERROR], found


def test_connection_failure_is_one_finding_with_the_password_masked() -> None:
    opts = PostgresSourceOptions(
        connection="postgresql://u:s3cret@127.0.0.1:1/x", connect_timeout=1
    )
    found = check_source(
        CheckRequest("source", "postgresql", "sources.pg", opts, (TableUse(USERS, "tables.0"),))
    )
    assert [(f.code, f.where) for f in found] == [("CONNECTION_FAILED", "sources.pg.connection")]
    assert "s3cret" not in found[0].message and "pg_hba.conf" in found[0].fix
