from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
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
