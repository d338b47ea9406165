"""Conformance suite for ``SnapshotStore`` implementations.

Subclass it in your plugin's tests and provide the ``make_store`` fixture: a zero-argument
callable returning a store over the *same* location every time it is called within one test
(the suite uses a second instance to check that snapshots persist)::

    class TestMyStore(SnapshotStoreConformance):
        @pytest.fixture
        def make_store(self, tmp_path):
            return lambda: MyStore(root=tmp_path)

Override the ``serializer`` fixture to run the suite with another format.
"""

from __future__ import annotations

import ipaddress
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, date, datetime, time, timedelta, timezone
from decimal import Decimal
from typing import Any

import pytest

from laredo.errors import SnapshotError
from laredo.snapshots.jsonl import JsonlSerializer
from laredo.testing.guard import ConformanceSuite
from laredo.types import (
    ColumnDefinition,
    Row,
    SnapshotMetadata,
    TableIdentifier,
    TableSnapshotInfo,
)

__all__ = ["SnapshotStoreConformance", "typed_rows"]

USERS = TableIdentifier("public", "users")
ORDERS = TableIdentifier("sales", "orders")
T0 = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)

COLUMNS = (
    ColumnDefinition("id", "integer", 1, False, True, 1, 23),
    ColumnDefinition("name", "text", 2, True, False, 0, 25),
)


def typed_rows(n: int = 3) -> list[Row]:
    """Rows holding every value type a snapshot must round-trip exactly."""
    out = []
    for i in range(n):
        out.append(
            {
                "id": i,
                "name": f"user-{i}",
                "score": i * 1.25,
                "active": i % 2 == 0,
                "nothing": None,
                "price": Decimal("10.50") + i,
                "created": datetime(2025, 5, 1, 10, 30, 0, 123456) + timedelta(days=i),
                "created_tz": datetime(2025, 5, 1, 10, 30, tzinfo=timezone(timedelta(hours=2))),
                "created_utc": T0 + timedelta(seconds=i),
                "day": date(2025, 5, 1),
                "at": time(8, 15, 30),
                "took": timedelta(hours=1, microseconds=7),
                "uid": uuid.UUID(int=i + 1),
                "blob": bytes([0, 255, i % 256]),
                "doc": {"tags": ["a", "b"], "n": {"deep": [1, 2.5, None, True]}, "$t": "x"},
                "arr": [1, 2, i],
                "big": 2**80 + i,
                "ip": ipaddress.ip_address("10.0.0.1"),
                "unicode": 'héllo ✓ \u2028 "quoted"\n',
            }
        )
    return out


def _meta(
    snapshot_id: str,
    tables: dict[TableIdentifier, list[Row]],
    created_at: datetime = T0,
    user_meta: dict[str, Any] | None = None,
) -> SnapshotMetadata:
    return SnapshotMetadata(
        snapshot_id=snapshot_id,
        created_at=created_at,
        source_positions={"pg": "0/16B3748"},
        tables=tuple(
            TableSnapshotInfo(
                table=t,
                row_count=len(rows),
                columns=COLUMNS,
                target_type="indexed-memory",
                position="0/16B3748",
                pipeline_id=f"pg:{t}:indexed-memory",
            )
            for t, rows in tables.items()
        ),
        user_meta=user_meta or {},
    )


def _assert_same_rows(got: list[Row], want: list[Row]) -> None:
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert g == w
        for k, v in w.items():
            assert type(g[k]) is type(v), f"column {k}: {type(g[k])} != {type(v)}"
            if isinstance(v, datetime | time):
                assert g[k].tzinfo == v.tzinfo, f"column {k}: tz {g[k].tzinfo} != {v.tzinfo}"
            if isinstance(v, Decimal):
                assert str(g[k]) == str(v)


class SnapshotStoreConformance(ConformanceSuite):
    """Behaviour every ``SnapshotStore`` must have. Provide ``make_store``."""

    @pytest.fixture
    def make_store(self) -> Callable[[], Any]:
        raise NotImplementedError("provide a make_store fixture returning () -> SnapshotStore")

    @pytest.fixture
    def serializer(self) -> Any:
        return JsonlSerializer()

    def save(
        self,
        store: Any,
        serializer: Any,
        snapshot_id: str,
        tables: dict[TableIdentifier, list[Row]],
        *,
        created_at: datetime = T0,
        user_meta: dict[str, Any] | None = None,
    ) -> Any:
        return store.save(
            snapshot_id, _meta(snapshot_id, tables, created_at, user_meta), tables, serializer
        )

    # -- save / load ----------------------------------------------------------------------
    def test_save_then_load_round_trips_rows_and_metadata(
        self, make_store: Callable[[], Any], serializer: Any
    ) -> None:
        store = make_store()
        rows = typed_rows(5)
        orders = [{"id": 1, "total": Decimal("3.10")}]
        desc = self.save(
            store, serializer, "snap-a", {USERS: rows, ORDERS: orders}, user_meta={"k": "v"}
        )
        assert desc.snapshot_id == "snap-a"
        assert {t.table: t.row_count for t in desc.tables} == {USERS: 5, ORDERS: 1}
        meta, loaded = make_store().load("snap-a", serializer)
        assert meta.snapshot_id == "snap-a"
        assert meta.created_at == T0
        assert meta.source_positions == {"pg": "0/16B3748"}
        assert meta.user_meta == {"k": "v"}
        assert meta.format == serializer.format_id()
        info = {t.table: t for t in meta.tables}[USERS]
        assert info.columns == COLUMNS
        assert info.position == "0/16B3748"
        assert info.pipeline_id == "pg:public.users:indexed-memory"
        assert set(loaded) == {USERS, ORDERS}
        _assert_same_rows(list(loaded[USERS]), rows)
        _assert_same_rows(list(loaded[ORDERS]), orders)

    def test_type_round_trip_is_exact(self, make_store: Callable[[], Any], serializer: Any) -> None:
        store = make_store()
        rows = typed_rows(20)
        self.save(store, serializer, "snap-types", {USERS: rows})
        _, loaded = store.load("snap-types", serializer)
        _assert_same_rows(list(loaded[USERS]), rows)

    def test_rows_may_be_a_generator_and_tables_may_be_empty(
        self, make_store: Callable[[], Any], serializer: Any
    ) -> None:
        store = make_store()

        def gen() -> Iterator[Row]:
            for i in range(100):
                yield {"id": i}

        tables: dict[TableIdentifier, Any] = {USERS: gen(), ORDERS: []}
        meta = _meta("snap-gen", {USERS: [], ORDERS: []})
        desc = store.save("snap-gen", meta, tables, serializer)
        assert {t.table: t.row_count for t in desc.tables} == {USERS: 100, ORDERS: 0}
        _, loaded = store.load("snap-gen", serializer)
        assert [r["id"] for r in loaded[USERS]] == list(range(100))
        assert list(loaded[ORDERS]) == []

    def test_load_unknown_snapshot_raises(
        self, make_store: Callable[[], Any], serializer: Any
    ) -> None:
        with pytest.raises((SnapshotError, LookupError)):
            make_store().load("no-such-snapshot", serializer)

    def test_saving_an_existing_id_is_rejected(
        self, make_store: Callable[[], Any], serializer: Any
    ) -> None:
        store = make_store()
        self.save(store, serializer, "snap-dup", {USERS: [{"id": 1}]})
        with pytest.raises(SnapshotError):
            self.save(store, serializer, "snap-dup", {USERS: [{"id": 2}]})
        _, loaded = store.load("snap-dup", serializer)
        assert list(loaded[USERS]) == [{"id": 1}]

    # -- describe / list ------------------------------------------------------------------
    def test_describe_reports_size_and_tables(
        self, make_store: Callable[[], Any], serializer: Any
    ) -> None:
        store = make_store()
        self.save(store, serializer, "snap-d", {USERS: typed_rows(10)}, user_meta={"a": 1})
        desc = make_store().describe("snap-d")
        assert desc.snapshot_id == "snap-d"
        assert desc.created_at == T0
        assert desc.format == serializer.format_id()
        assert desc.size_bytes > 0
        assert [(t.table, t.row_count) for t in desc.tables] == [(USERS, 10)]
        assert desc.user_meta == {"a": 1}
        assert desc.source_positions == {"pg": "0/16B3748"}
        with pytest.raises((SnapshotError, LookupError)):
            store.describe("missing")

    def test_list_is_newest_first_and_filters_by_table(
        self, make_store: Callable[[], Any], serializer: Any
    ) -> None:
        store = make_store()
        assert store.list() == []
        # saved out of order: list order must come from created_at, not save order
        self.save(
            store, serializer, "s2", {USERS: [{"id": 1}]}, created_at=T0 + timedelta(minutes=2)
        )
        self.save(
            store, serializer, "s1", {USERS: [{"id": 1}]}, created_at=T0 + timedelta(minutes=1)
        )
        self.save(
            store, serializer, "s3", {ORDERS: [{"id": 1}]}, created_at=T0 + timedelta(minutes=3)
        )
        assert [d.snapshot_id for d in make_store().list()] == ["s3", "s2", "s1"]
        assert [d.snapshot_id for d in store.list(USERS)] == ["s2", "s1"]
        assert [d.snapshot_id for d in store.list(ORDERS)] == ["s3"]
        assert store.list(TableIdentifier("x", "y")) == []

    # -- delete / prune -------------------------------------------------------------------
    def test_delete_removes_the_snapshot(
        self, make_store: Callable[[], Any], serializer: Any
    ) -> None:
        store = make_store()
        self.save(store, serializer, "keep", {USERS: [{"id": 1}]}, created_at=T0)
        self.save(
            store, serializer, "gone", {USERS: [{"id": 2}]}, created_at=T0 + timedelta(seconds=1)
        )
        store.delete("gone")
        assert [d.snapshot_id for d in store.list()] == ["keep"]
        with pytest.raises((SnapshotError, LookupError)):
            store.load("gone", serializer)
        with pytest.raises((SnapshotError, LookupError)):
            store.delete("gone")
        _, loaded = store.load("keep", serializer)
        assert list(loaded[USERS]) == [{"id": 1}]

    def test_prune_keeps_the_newest(self, make_store: Callable[[], Any], serializer: Any) -> None:
        store = make_store()
        for i in range(5):
            self.save(
                store, serializer, f"p{i}", {USERS: [{"id": i}]}, created_at=T0 + timedelta(hours=i)
            )
        self.save(
            store, serializer, "other", {ORDERS: [{"id": 0}]}, created_at=T0 - timedelta(days=1)
        )
        deleted = store.prune(2, USERS)
        assert sorted(deleted) == ["p0", "p1", "p2"]
        assert [d.snapshot_id for d in store.list()] == ["p4", "p3", "other"]
        assert store.prune(2, USERS) == []
        assert sorted(store.prune(1)) == ["other", "p3"]
        assert [d.snapshot_id for d in store.list()] == ["p4"]

    # -- atomicity ------------------------------------------------------------------------
    def test_a_crashed_write_is_not_listed(
        self, make_store: Callable[[], Any], serializer: Any
    ) -> None:
        store = make_store()

        class Crash(Exception):
            pass

        def exploding() -> Iterator[Row]:
            yield {"id": 1}
            yield {"id": 2}
            raise Crash("disk on fire")

        tables: dict[TableIdentifier, Any] = {ORDERS: [{"id": 9}], USERS: exploding()}
        with pytest.raises((Crash, SnapshotError)):
            store.save("crashed", _meta("crashed", {ORDERS: [], USERS: []}), tables, serializer)
        assert store.list() == []
        assert make_store().list() == []
        with pytest.raises((SnapshotError, LookupError)):
            store.load("crashed", serializer)
        # the id is usable again afterwards
        self.save(store, serializer, "crashed", {USERS: [{"id": 3}]})
        _, loaded = store.load("crashed", serializer)
        assert list(loaded[USERS]) == [{"id": 3}]

    def test_unserialisable_value_fails_the_save_cleanly(
        self, make_store: Callable[[], Any], serializer: Any
    ) -> None:
        store = make_store()
        with pytest.raises(SnapshotError) as err:
            self.save(store, serializer, "bad", {USERS: [{"id": 1, "obj": object()}]})
        assert "object" in str(err.value)
        assert store.list() == []
