"""pytest fixtures for real PostgreSQL (entry point ``pytest11`` ``laredo_pg``; auto-loaded).

Fixtures, usable from any package's tests once ``laredo-source-pg`` is installed:

``pg_cluster`` (session)
    An :class:`~laredo_source_pg.embedded.EmbeddedPostgres` started once per test session (with
    pytest-xdist, once per worker: each worker has its own cluster, port and directory).
    Tests are skipped when no PostgreSQL binaries are installed, unless ``LAREDO_REQUIRE_PG=1``
    (CI), in which case they fail naming the fix.

``pg_database`` (function)
    A :class:`PgTestDb`: a fresh, empty database with unique ``slot_name`` and ``publication``
    names. Afterwards every session connected to it is terminated, its replication slots are
    dropped, and the database is dropped.

``pg_database_factory`` (function)
    A callable ``make(prefix="t") -> PgTestDb`` for tests that need several databases.

Example::

    @pytest.mark.integration
    def test_users(pg_database):
        pg_database.execute("CREATE TABLE users (id int PRIMARY KEY, name text)")
        source = PostgresSource(connection=pg_database.dsn, slot_name=pg_database.slot_name, ...)
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from .embedded import EmbeddedPostgres, PostgresNotFoundError

__all__ = ["PgTestDb", "pg_cluster", "pg_database", "pg_database_factory"]


@dataclass
class PgTestDb:
    """One test's database on the session cluster.

    ``dsn`` connects as the superuser ``postgres`` over TCP; ``slot_name`` and ``publication``
    are unique per test (``publication`` is ``<slot_name>_pub``, the source's default).
    """

    cluster: EmbeddedPostgres
    dbname: str
    slot_name: str
    publication: str
    _conn: Any = field(default=None, repr=False)

    @property
    def dsn(self) -> str:
        return self.cluster.dsn(self.dbname)

    def dsn_for(self, **params: Any) -> str:
        """The DSN with extra libpq parameters (``user=...``, ``application_name=...``)."""
        return self.cluster.dsn(self.dbname, **params)

    def connect(self, **kwargs: Any) -> Any:
        """A new autocommit ``psycopg.Connection`` to this database (the caller closes it)."""
        import psycopg  # noqa: PLC0415 - lazy: this pytest plugin loads in every test session; psycopg only if used

        kwargs.setdefault("autocommit", True)
        return psycopg.connect(self.dsn, **kwargs)

    def execute(self, sql: str, params: Any = None) -> list[tuple[Any, ...]]:
        """Run one statement (autocommit) on a shared connection; returns rows, if any."""
        if self._conn is None or self._conn.closed:
            self._conn = self.connect()
        cur = self._conn.execute(sql, params) if params is not None else self._conn.execute(sql)
        return list(cur.fetchall()) if cur.description else []

    def scalar(self, sql: str, params: Any = None) -> Any:
        """The first column of the first row (or None)."""
        rows = self.execute(sql, params)
        return rows[0][0] if rows else None

    def rows_read(self, table: str) -> int:
        """Tuples PostgreSQL has read from ``table`` (sequential scans + index fetches), once
        its counters stopped moving: backends report them when they go idle or exit."""
        query = (
            "SELECT coalesce(sum(seq_tup_read), 0) + coalesce(sum(idx_tup_fetch), 0) "
            "FROM pg_stat_user_tables WHERE relname = %s"
        )
        last = -1
        for _ in range(40):
            n = int(self.scalar(query, (table,)))
            if n == last:
                break
            last = n
            time.sleep(0.5)
        return last

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


def _unique(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:12]}"


@pytest.fixture(scope="session")
def pg_cluster() -> Iterator[EmbeddedPostgres]:
    """A PostgreSQL cluster for the whole session (one per xdist worker)."""
    try:
        cluster = EmbeddedPostgres(auth="trust")  # test roles log in without a password
    except PostgresNotFoundError as exc:
        if os.environ.get("LAREDO_REQUIRE_PG"):
            raise
        pytest.skip(str(exc))
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.close()


@pytest.fixture
def pg_database_factory(pg_cluster: EmbeddedPostgres) -> Iterator[Callable[..., PgTestDb]]:
    """``make(prefix="t")`` creates another fresh database; all are dropped after the test."""
    made: list[PgTestDb] = []

    def make(prefix: str = "t") -> PgTestDb:
        name = _unique(prefix)
        pg_cluster.create_database(name)
        slot = _unique("slot")
        db = PgTestDb(pg_cluster, name, slot, f"{slot}_pub")
        made.append(db)
        return db

    yield make
    errors: list[BaseException] = []
    for db in reversed(made):
        db.close()
        try:
            if pg_cluster.running:
                pg_cluster.drop_database(db.dbname)
        except Exception as exc:
            errors.append(exc)
    if errors:
        raise errors[0]


@pytest.fixture
def pg_database(pg_database_factory: Callable[..., PgTestDb]) -> PgTestDb:
    """A fresh database with unique slot and publication names, dropped after the test."""
    return pg_database_factory()
