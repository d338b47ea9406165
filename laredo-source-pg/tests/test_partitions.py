"""Partitioned tables at the source, against real PostgreSQL: the publication's partition-root
setting and what validation and ``laredo check`` say about it, a leaf named directly, a row moved
between partitions arriving as one UPDATE, generated columns left out on every path, and schema
changes reported by the catalog check without a row change."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from laredo.preflight import Severity
from laredo.types import ChangeAction, ChangeEvent, SourceConfig, TableIdentifier
from laredo_source_pg.partitions import merge_moves
from laredo_source_pg.pytest_plugin import PgTestDb
from laredo_source_pg.source import PostgresSource
from laredo_source_pg.testing import wait_until

from .test_checks import run as run_check

EV = TableIdentifier("public", "ev")
EV_EU = TableIdentifier("public", "ev_eu")


def _create(db: PgTestDb) -> None:
    db.execute(
        "CREATE TABLE ev (id int, region text, v int, doubled int GENERATED ALWAYS AS (v * 2) "
        "STORED, PRIMARY KEY (id, region)) PARTITION BY LIST (region)"
    )
    db.execute("CREATE TABLE ev_eu PARTITION OF ev FOR VALUES IN ('eu')")
    db.execute("CREATE TABLE ev_us PARTITION OF ev FOR VALUES IN ('us')")
    db.execute("INSERT INTO ev (id, region, v) VALUES (1, 'eu', 1), (2, 'us', 2), (3, 'eu', 3)")


class Handler:
    def __init__(self) -> None:
        self.events: list[ChangeEvent] = []
        self.schemas: list[tuple[TableIdentifier, list[str], list[str]]] = []
        self.resyncs: list[tuple[TableIdentifier, str]] = []

    def on_changes(self, events: list[ChangeEvent], complete: bool = True) -> None:
        self.events.extend(events)

    def on_heartbeat(self, position: Any) -> None:
        pass

    def on_schema_change(self, table: Any, old: Any, new: Any, position: Any = None) -> None:
        self.schemas.append((table, [c.name for c in old], [c.name for c in new]))

    def on_resync_required(self, table: TableIdentifier, reason: str) -> None:
        self.resyncs.append((table, reason))


@pytest.fixture
def streaming(
    make_source: Callable[..., PostgresSource],
) -> Iterator[Callable[..., tuple[PostgresSource, Handler, list[dict[str, Any]]]]]:
    """``start(table, **options)``: a source baselined and streaming into a ``Handler``."""
    threads: list[tuple[PostgresSource, threading.Thread]] = []

    def start(
        table: TableIdentifier = EV, **kwargs: Any
    ) -> tuple[PostgresSource, Handler, list[dict[str, Any]]]:
        kwargs.setdefault("catalog_check_interval", 0.1)
        src = make_source(**kwargs)
        src.init(SourceConfig([table]))
        assert src.validate_tables([table]) == []
        rows: list[dict[str, Any]] = []
        position = src.baseline_batches([table], lambda _t, batch: rows.extend(batch))
        handler = Handler()
        thread = threading.Thread(target=src.stream, args=(position, handler), daemon=True)
        thread.start()
        threads.append((src, thread))
        return src, handler, rows

    yield start
    for src, thread in threads:
        src.stop_stream()
        thread.join(10)


def test_a_parent_streams_under_its_name_and_a_moved_row_is_one_update(
    pg_database: PgTestDb, streaming: Callable[..., Any]
) -> None:
    db = pg_database
    _create(db)
    src, handler, rows = streaming()
    assert db.scalar(
        "SELECT pubviaroot FROM pg_publication WHERE pubname = %s", (src.publication_name,)
    )
    # the baseline reads every partition; the generated column is left out, as pgoutput does
    assert sorted((r["id"], r["region"]) for r in rows) == [(1, "eu"), (2, "us"), (3, "eu")]
    assert all(set(r) == {"id", "region", "v"} for r in rows)
    db.execute("UPDATE ev SET region = 'us', v = 10 WHERE id = 1")
    # a delete and an insert of unrelated keys in one transaction stay what they are
    with db.connect() as conn, conn.transaction():
        conn.execute("DELETE FROM ev WHERE id = 3")
        conn.execute("INSERT INTO ev (id, region, v) VALUES (4, 'us', 4)")
    wait_until(lambda: len(handler.events) >= 3, what="three changes")
    first, *rest = handler.events
    assert first.table == EV and first.action is ChangeAction.UPDATE
    assert first.old_values == {"id": 1, "region": "eu"}
    assert first.new_values == {"id": 1, "region": "us", "v": 10}
    assert [(e.action, e.table) for e in rest] == [
        (ChangeAction.DELETE, EV),
        (ChangeAction.INSERT, EV),
    ]
    assert handler.schemas == []  # the generated column is not a schema difference


def test_a_truncated_attached_or_detached_partition_asks_for_a_rebaseline(
    pg_database: PgTestDb, streaming: Callable[..., Any]
) -> None:
    db = pg_database
    _create(db)
    _src, handler, _rows = streaming()
    db.execute("TRUNCATE ev_eu")  # pgoutput sends nothing for it under the partition root
    wait_until(lambda: handler.resyncs, what="a re-baseline request after TRUNCATE ev_eu")
    assert handler.resyncs[0][0] == EV and "truncated" in handler.resyncs[0][1]
    assert handler.events == []
    db.execute("CREATE TABLE ev_asia (LIKE ev INCLUDING GENERATED)")
    db.execute("ALTER TABLE ev ATTACH PARTITION ev_asia FOR VALUES IN ('asia')")
    wait_until(lambda: len(handler.resyncs) >= 2, what="a re-baseline request after ATTACH")
    assert "1 attached" in handler.resyncs[1][1]
    db.execute("ALTER TABLE ev DETACH PARTITION ev_us")
    wait_until(lambda: len(handler.resyncs) >= 3, what="a re-baseline request after DETACH")
    assert "1 detached" in handler.resyncs[2][1]
    # nothing changed since: no more requests
    before = len(handler.resyncs)
    db.execute("SELECT pg_sleep(0.5)")
    assert len(handler.resyncs) == before


def test_schema_changes_are_reported_without_a_row_change(
    pg_database: PgTestDb, streaming: Callable[..., Any]
) -> None:
    db = pg_database
    db.execute("CREATE TABLE ev (id int PRIMARY KEY, a text, b int)")
    db.execute("INSERT INTO ev VALUES (1, 'x', 1)")
    _src, handler, _rows = streaming()
    db.execute("ALTER TABLE ev RENAME COLUMN a TO a2")
    wait_until(lambda: handler.schemas, what="the rename reported")
    assert handler.schemas == [(EV, ["id", "a", "b"], ["id", "a2", "b"])]
    db.execute("ALTER TABLE ev ADD COLUMN c text, DROP COLUMN b")
    wait_until(lambda: len(handler.schemas) >= 2, what="add + drop reported")
    assert handler.schemas[1] == (EV, ["id", "a2", "b"], ["id", "a2", "c"])
    # the next row change carries the same description: not reported twice
    db.execute("INSERT INTO ev VALUES (2, 'y', 'z')")
    wait_until(lambda: handler.events, what="the insert")
    assert handler.events[0].new_values == {"id": 2, "a2": "y", "c": "z"}
    assert len(handler.schemas) == 2
    # a change of type, then rows under the new type, in order
    db.execute("ALTER TABLE ev ALTER COLUMN id TYPE bigint")
    db.execute("INSERT INTO ev VALUES (3, 'y', 'z')")
    wait_until(lambda: len(handler.events) >= 2, what="the second insert")
    assert len(handler.schemas) == 3 and handler.schemas[2][1] == handler.schemas[2][2]


@pytest.mark.parametrize("create", [False, None])
def test_a_user_publication_without_partition_root_is_a_validation_error(
    pg_database: PgTestDb, make_source: Callable[..., PostgresSource], create: bool | None
) -> None:
    db = pg_database
    _create(db)
    db.execute(f"CREATE PUBLICATION {db.publication} FOR TABLE ev")
    src = make_source(publication={"create": create})
    src.init(SourceConfig([EV]))
    (problem,) = src.validate_tables([EV])
    assert problem.code == "PARTITIONS_PUBLISHED_SEPARATELY"
    assert "publish_via_partition_root = false" in problem.message
    assert "SET (publish_via_partition_root = true)" in problem.message
    # laredo check says the same, with the same fix
    (finding,) = [
        f
        for f in run_check(db, [{"table": "ev"}], publication={"create": create})
        if f.severity is Severity.ERROR
    ]
    assert finding.code == "PARTITIONS_PUBLISHED_SEPARATELY"
    assert "SET (publish_via_partition_root = true)" in finding.fix
    # create = true fixes it (and then no message suggests what is done)
    fixed = make_source(publication={"create": True})
    fixed.init(SourceConfig([EV]))
    assert fixed.validate_tables([EV]) == []
    assert db.scalar("SELECT pubviaroot FROM pg_publication WHERE pubname = %s", (db.publication,))


def test_a_leaf_partition_named_directly_streams_under_its_own_name(
    pg_database: PgTestDb, streaming: Callable[..., Any]
) -> None:
    db = pg_database
    _create(db)
    _src, handler, rows = streaming(EV_EU)
    assert sorted(r["id"] for r in rows) == [1, 3]
    db.execute("INSERT INTO ev (id, region, v) VALUES (5, 'eu', 5), (6, 'us', 6)")
    wait_until(lambda: handler.events, what="the leaf's insert")
    assert [(e.table, e.new_values) for e in handler.events] == [
        (EV_EU, {"id": 5, "region": "eu", "v": 5})
    ]


def test_a_leaf_whose_parent_is_published_via_the_root_says_so(
    pg_database: PgTestDb, make_source: Callable[..., PostgresSource]
) -> None:
    db = pg_database
    _create(db)
    db.execute(
        f"CREATE PUBLICATION {db.publication} FOR TABLE ev, ev_eu "
        "WITH (publish_via_partition_root = true)"
    )
    src = make_source(publication={"create": False})
    src.init(SourceConfig([EV_EU]))
    (problem,) = src.validate_tables([EV_EU])
    assert problem.code == "PARTITION_PUBLISHED_VIA_ROOT"
    assert "arrive under its parent public.ev" in problem.message
    assert "ADD TABLE" not in problem.message  # it is in the publication already


def test_merge_moves_only_merges_adjacent_pairs_of_the_same_row() -> None:
    def ev(action: ChangeAction, old: Any = None, new: Any = None) -> ChangeEvent:
        return ChangeEvent(EV, action, 1, new_values=new, old_values=old)

    keys = {EV: ("id",)}
    d1 = ev(ChangeAction.DELETE, old={"id": 1, "region": "eu"})
    i1 = ev(ChangeAction.INSERT, new={"id": 1, "region": "us", "v": 2})
    i2 = ev(ChangeAction.INSERT, new={"id": 2, "region": "us", "v": 2})
    (merged,) = merge_moves([d1, i1], keys)
    assert merged.action is ChangeAction.UPDATE
    assert merged.old_values == d1.old_values and merged.new_values == i1.new_values
    assert merge_moves([d1, i2], keys) == [d1, i2]  # another row
    assert merge_moves([i1, d1], keys) == [i1, d1]  # not a move's order
    assert merge_moves([d1, i1], {}) == [d1, i1]  # not a partitioned parent
    other = ChangeEvent(EV_EU, ChangeAction.INSERT, 1, new_values={"id": 1, "region": "us"})
    assert merge_moves([d1, other], keys) == [d1, other]  # another table
    items = [i2, d1, i1, d1, i1]
    out = merge_moves(items, keys)
    assert [e.action for e in out] == [
        ChangeAction.INSERT,
        ChangeAction.UPDATE,
        ChangeAction.UPDATE,
    ]
