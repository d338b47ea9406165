"""The embedded PostgreSQL launcher and the pytest fixtures."""

from __future__ import annotations

import os

import psycopg
import pytest
from laredo_source_pg import embedded
from laredo_source_pg.embedded import EmbeddedPostgres, PostgresNotFoundError, find_bindir
from laredo_source_pg.pytest_plugin import PgTestDb


def test_missing_binaries_error_names_the_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PG_BINDIR", "/nonexistent/bin")
    monkeypatch.setattr(embedded, "_is_bindir", lambda path: False)
    monkeypatch.setattr(embedded.shutil, "which", lambda name: None)
    with pytest.raises(PostgresNotFoundError) as info:
        find_bindir()
    text = str(info.value)
    assert "apt-get install postgresql" in text and "PG_BINDIR" in text
    assert "/nonexistent/bin" in text


@pytest.mark.integration
def test_cluster_settings_restart_and_teardown(pg_cluster: EmbeddedPostgres) -> None:
    settings = dict(
        pg_cluster.execute(
            "SELECT name, setting FROM pg_settings WHERE name IN "
            "('wal_level', 'fsync', 'synchronous_commit', "
            "'max_replication_slots', 'listen_addresses')"
        )
    )
    assert settings == {
        "wal_level": "logical",
        "fsync": "off",
        "synchronous_commit": "on",  # decoding only sees flushed WAL
        "max_replication_slots": "20",
        "listen_addresses": "127.0.0.1",
    }
    # A second, private cluster: its own port and socket; restart keeps data and port.
    with EmbeddedPostgres() as pg:
        assert pg.port != pg_cluster.port
        pg.execute("CREATE TABLE t (v int)")
        pg.execute("INSERT INTO t VALUES (7)")
        port = pg.port
        pg.restart()
        assert pg.port == port
        assert pg.execute("SELECT v FROM t") == [(7,)]
        with psycopg.connect(pg.socket_dsn()) as conn:  # the private unix socket works too
            assert conn.execute("SELECT 1").fetchone() == (1,)
        root = pg.root
        assert root is not None and root.exists()
        if os.geteuid() == 0:  # the server runs as the postgres user, not root
            assert os.stat(pg.data_dir).st_uid != 0  # type: ignore[arg-type]
    assert not root.exists()
    assert not pg.running


@pytest.mark.integration
def test_pg_database_fixture_is_fresh_and_cleaned_up(
    pg_database: PgTestDb, pg_database_factory: object, pg_cluster: EmbeddedPostgres
) -> None:
    assert pg_database.publication == f"{pg_database.slot_name}_pub"
    assert pg_database.scalar("SELECT current_database()") == pg_database.dbname
    assert pg_database.execute("SELECT count(*) FROM pg_tables WHERE schemaname = 'public'") == [
        (0,)
    ]
    other = pg_database_factory()  # type: ignore[operator]
    assert other.dbname != pg_database.dbname and other.slot_name != pg_database.slot_name
    # Leave a slot and an open session behind: the fixture must still drop the database.
    with psycopg.connect(other.dsn, autocommit=True) as conn:
        conn.execute(
            "SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (other.slot_name,)
        )
    other.execute("SELECT 1")
    names = [r[0] for r in pg_cluster.execute("SELECT datname FROM pg_database")]
    assert other.dbname in names
    pg_cluster.drop_database(other.dbname)
    names = [r[0] for r in pg_cluster.execute("SELECT datname FROM pg_database")]
    assert other.dbname not in names
    slots = pg_cluster.execute(
        f"SELECT count(*) FROM pg_replication_slots WHERE database = '{other.dbname}'"
    )
    assert slots == [(0,)]


@pytest.mark.integration
def test_default_cluster_asks_every_connection_for_the_password() -> None:
    """L10 (issue 21): ``laredo quickstart``'s cluster does not trust other local users, over
    TCP or the unix socket; only the random password of this process gets in."""
    with EmbeddedPostgres() as pg:
        assert pg.auth == "password" and pg.password and len(pg.password) >= 24
        assert f"password={pg.password}" in pg.dsn() and f":{pg.password}@" in pg.uri()
        for host in ("127.0.0.1", str(pg.socket_dir)):
            for extra in ("", " password=wrong"):
                with pytest.raises(psycopg.OperationalError, match="password"):
                    psycopg.connect(
                        f"host={host} port={pg.port} user=postgres dbname=postgres{extra}",
                        connect_timeout=5,
                    ).close()
        with psycopg.connect(pg.socket_dsn()) as conn:
            assert conn.execute("SELECT current_user").fetchone() == ("postgres",)
        assert pg.execute("SELECT 1") == [(1,)]
    with EmbeddedPostgres(auth="trust") as trusting:  # opt-in, for fixtures
        assert trusting.password is None and "password" not in trusting.dsn()
        with psycopg.connect(
            f"host=127.0.0.1 port={trusting.port} user=postgres dbname=postgres"
        ) as conn:
            assert conn.execute("SELECT 1").fetchone() == (1,)
