"""The core source conformance suite, run against PostgresSource (ephemeral and stateful)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from laredo.testing.source_conformance import SourceConformance
from laredo.types import TableIdentifier
from laredo_source_pg.pytest_plugin import PgTestDb
from laredo_source_pg.source import PostgresSource

pytestmark = pytest.mark.integration

USERS = TableIdentifier("public", "users")


class TestPostgresSourceConformance(SourceConformance):
    @pytest.fixture(params=["ephemeral", "stateful"])
    def source(self, request: Any, pg_database: PgTestDb) -> Iterator[PostgresSource]:
        pg_database.execute("CREATE TABLE users (id int PRIMARY KEY, name text)")
        pg_database.execute("INSERT INTO users VALUES (1, 'a')")
        src = PostgresSource(
            pg_database.dsn,
            slot_mode=request.param,
            slot_name=pg_database.slot_name,
            publication={"create": True},
            status_interval="200ms",
        )
        yield src
        src.close()

    @pytest.fixture
    def table(self) -> TableIdentifier:
        return USERS

    def produce_changes(self, source: Any, table: TableIdentifier, n: int) -> None:
        # The source knows its database: no fixture state kept on the test instance.
        with psycopg.connect(source.options.connection, autocommit=True) as conn:
            for _ in range(n):
                conn.execute(
                    "INSERT INTO users (id, name) SELECT coalesce(max(id), 0) + 1, 'x' FROM users"
                )
