from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from laredo_source_pg.catalog import Connections
from laredo_source_pg.embedded import EmbeddedPostgres
from laredo_source_pg.options import PostgresSourceOptions
from laredo_source_pg.pytest_plugin import PgTestDb
from laredo_source_pg.source import PostgresSource


@pytest.fixture
def make_source(pg_database: PgTestDb) -> Iterator[Callable[..., PostgresSource]]:
    """Build PostgresSource objects on the test database; all are closed afterwards."""
    made: list[PostgresSource] = []

    def make(db: PgTestDb | None = None, **kwargs: Any) -> PostgresSource:
        db = db or pg_database
        kwargs.setdefault("slot_name", db.slot_name)
        kwargs.setdefault("publication", {"create": True})
        kwargs.setdefault("status_interval", 0.2)
        kwargs.setdefault("reconnect", {"initial_backoff": 0.05, "max_backoff": 0.2})
        src = PostgresSource(kwargs.pop("connection", db.dsn), **kwargs)
        made.append(src)
        return src

    yield make
    for src in made:
        src.close()


@pytest.fixture
def private_cluster() -> Iterator[EmbeddedPostgres]:
    """A cluster of its own (restarted / reconfigured by the test), with a database ``app``;
    ``max_slot_wal_keep_size = 1MB`` so a test can get a slot invalidated."""
    with EmbeddedPostgres(settings={"max_slot_wal_keep_size": "1MB", "wal_keep_size": 0}) as pg:
        pg.execute("CREATE DATABASE app")
        yield pg


@pytest.fixture
def make_connections(
    pg_database: PgTestDb,
) -> Iterator[Callable[..., tuple[Connections, PostgresSourceOptions]]]:
    """``make(**options)``: options (on the test database, its slot and publication names) and
    the ``Connections`` of one source's parts; all connections are closed afterwards."""
    made: list[Connections] = []

    def make(**kwargs: Any) -> tuple[Connections, PostgresSourceOptions]:
        kwargs.setdefault("connection", pg_database.dsn)
        kwargs.setdefault("slot_name", pg_database.slot_name)
        opts = PostgresSourceOptions.model_validate(kwargs)
        conns = Connections(opts)
        made.append(conns)
        return conns, opts

    yield make
    for conns in made:
        conns.close()
