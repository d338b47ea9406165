from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from decimal import Decimal
from typing import Any

import laredo
import pytest
from laredo.deadletter import DeadLetterError, DeadLetterReplayError
from laredo.testing.deadletter_conformance import DeadLetterStoreConformance
from laredo.types import ChangeAction, ChangeEvent, ErrorInfo, Row, TableIdentifier
from laredo_snapshot_s3 import S3DeadLetterStore

pytestmark = pytest.mark.integration

USERS = TableIdentifier("public", "users")
T0 = dt.datetime(2026, 1, 1, 12, 0, tzinfo=dt.UTC)


class ApplyLog:
    """The per-change target methods replay uses, recorded in order."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    def on_insert(self, table: TableIdentifier, row: Row) -> None:
        self.calls.append(("insert", table, row))

    def on_update(self, table: TableIdentifier, row: Row, identity: Row | None) -> None:
        self.calls.append(("update", table, row, identity))

    def on_delete(self, table: TableIdentifier, identity: Row) -> None:
        self.calls.append(("delete", table, identity))

    def on_truncate(self, table: TableIdentifier) -> None:
        self.calls.append(("truncate", table))


@pytest.fixture
def dlq(moto_server: Any, s3_bucket: str) -> S3DeadLetterStore:
    store = laredo.dead_letter_store("s3", bucket=s3_bucket, endpoint_url=moto_server.endpoint_url)
    assert isinstance(store, S3DeadLetterStore)
    return store


def change(i: int, action: ChangeAction = ChangeAction.INSERT) -> ChangeEvent:
    row = {"id": i, "amount": Decimal(f"{i}.10"), "at": T0 + dt.timedelta(minutes=i)}
    return ChangeEvent(
        table=USERS,
        action=action,
        position=f"0/{i:X}",
        timestamp=T0,
        new_values=row if action in (ChangeAction.INSERT, ChangeAction.UPDATE) else None,
        old_values={"id": i} if action in (ChangeAction.UPDATE, ChangeAction.DELETE) else None,
    )


def test_write_read_limit_order_and_types(dlq: S3DeadLetterStore) -> None:
    assert dlq.read("p1") == []
    assert dlq.pipelines() == []
    for i in range(5):
        dlq.write("p1", change(i), ErrorInfo(f"boom {i}", "TargetError"))
    dlq.write("pg:public.other/x", change(9), ErrorInfo("other"))
    letters = dlq.read("p1")
    assert [d.change.new_values["id"] for d in letters] == [0, 1, 2, 3, 4]
    first = letters[0]
    assert first.pipeline_id == "p1"
    assert first.error == ErrorInfo("boom 0", "TargetError")
    assert first.position == "0/0"
    assert first.change.new_values == {"id": 0, "amount": Decimal("0.10"), "at": T0}
    assert first.change.timestamp == T0
    assert first.written_at.tzinfo is not None
    assert [d.change.new_values["id"] for d in dlq.read("p1", limit=2)] == [0, 1]
    assert dlq.pipelines() == ["p1", "pg:public.other/x"]
    assert len(dlq.read("pg:public.other/x")) == 1


def test_replay_applies_in_order_and_removes_applied(dlq: S3DeadLetterStore) -> None:
    dlq.write("p", change(1), ErrorInfo("e"))
    dlq.write("p", change(1, ChangeAction.UPDATE), ErrorInfo("e"))
    dlq.write("p", change(1, ChangeAction.DELETE), ErrorInfo("e"))
    dlq.write("p", ChangeEvent(USERS, ChangeAction.TRUNCATE, "0/9"), ErrorInfo("e"))
    log = ApplyLog()
    assert dlq.replay("p", log) == 4  # type: ignore[arg-type]
    assert [c[0] for c in log.calls] == ["insert", "update", "delete", "truncate"]
    assert log.calls[1][3] == {"id": 1}
    assert dlq.read("p") == []
    assert dlq.pipelines() == []


def test_replay_stops_at_a_rejected_entry_and_keeps_the_rest(dlq: S3DeadLetterStore) -> None:
    for i in range(4):
        dlq.write("p", change(i), ErrorInfo("e"), position=f"pos-{i}")

    class Picky(ApplyLog):
        def on_insert(self, table: TableIdentifier, row: Row) -> None:
            if row["id"] == 2:
                raise RuntimeError("still broken")
            super().on_insert(table, row)

    target = Picky()
    with pytest.raises(DeadLetterReplayError) as err:
        dlq.replay("p", target)  # type: ignore[arg-type]
    assert err.value.replayed == 2
    assert "2 of 4 entries replayed" in str(err.value) and "still broken" in str(err.value)
    left = dlq.read("p")
    assert [d.change.new_values["id"] for d in left] == [2, 3]
    assert [d.position for d in left] == ["pos-2", "pos-3"]
    assert dlq.purge("p") == 2
    assert dlq.read("p") == []
    assert dlq.purge("p") == 0


def test_unencodable_value_is_a_clear_error(dlq: S3DeadLetterStore) -> None:
    bad = ChangeEvent(USERS, ChangeAction.INSERT, "0/1", new_values={"id": 1, "x": object()})
    with pytest.raises(DeadLetterError, match="cannot write dead letter of pipeline 'p'"):
        dlq.write("p", bad, ErrorInfo("e"))
    assert dlq.read("p") == []


class TestS3DeadLetterConformance(DeadLetterStoreConformance):
    persistent = True

    @pytest.fixture
    def store(self, moto_server: Any, s3_bucket: str) -> Any:
        return laredo.dead_letter_store(
            "s3", bucket=s3_bucket, endpoint_url=moto_server.endpoint_url
        )

    @pytest.fixture
    def reopen(self, moto_server: Any, s3_bucket: str) -> Callable[[], Any]:
        return lambda: laredo.dead_letter_store(
            "s3", bucket=s3_bucket, endpoint_url=moto_server.endpoint_url
        )
