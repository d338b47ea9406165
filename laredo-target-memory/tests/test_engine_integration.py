"""The memory targets behind the real engine, fed by the programmable test source."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path
from typing import Any

import laredo
import pytest
from laredo import Table
from laredo.testing import TestSource, columns
from laredo.testing import wait_until as wait
from laredo_target_memory import CompiledTarget, IndexedTarget

pytestmark = pytest.mark.usefixtures("each_storage")  # every storage of IndexedTarget

USERS = Table("public", "users")


def make_source(**kw: Any) -> TestSource:
    src = TestSource(**kw)
    src.add_table(
        USERS,
        columns("id", "email", "team", "balance", types={"id": "int8", "balance": "numeric"}),
        [
            {"id": 1, "email": "a@x", "team": "red", "balance": Decimal("1.50")},
            {"id": 2, "email": "b@x", "team": "blue", "balance": Decimal("2.00")},
        ],
    )
    return src


def test_engine_feeds_indexed_and_compiled_targets() -> None:
    src = make_source()
    indexed = laredo.target(
        "indexed-memory", lookup_fields=["email"], indexes=[{"name": "by_team", "fields": ["team"]}]
    )
    compiled = CompiledTarget(compiler="namedtuple", compiler_options={"fields": ["id", "email"]})
    eng = laredo.Engine(
        sources={"s": src},
        pipelines=[laredo.Pipeline("s", USERS, indexed), laredo.Pipeline("s", USERS, compiled)],
    )
    eng.start()
    try:
        assert eng.await_ready(10)
        assert eng.get_target("s", USERS, cls=IndexedTarget) is indexed
        assert indexed.lookup("b@x")["balance"] == Decimal("2.00")  # type: ignore[index]
        seen: list[tuple[Any, Any]] = []
        indexed.listen(lambda old, new: seen.append((old, new)))
        src.insert(USERS, {"id": 3, "email": "c@x", "team": "red", "balance": Decimal("0")})
        src.update(USERS, {"id": 1, "email": "a2@x", "team": "blue", "balance": Decimal("9")})
        src.delete(USERS, {"id": 2})
        assert wait(lambda: indexed.get(2) is None and compiled.get(2) is None)
        assert indexed.lookup("a@x") is None and indexed.lookup("a2@x")["id"] == 1  # type: ignore[index]
        assert [r["id"] for r in indexed.lookup_all("by_team", "red")] == [3]
        assert compiled.get(1) == (1, "a2@x")
        assert [(o is None, n is None) for o, n in seen] == [
            (True, False),
            (False, False),
            (False, True),
        ]
    finally:
        eng.stop()


def test_snapshot_restore_brings_back_rows_types_and_indexes(tmp_path: Path) -> None:
    store = laredo.snapshot_store("local", path=str(tmp_path))
    src = make_source(supports_resume=True)

    def target() -> IndexedTarget:
        return IndexedTarget(lookup_fields=["email"], indexes=[laredo.Index("by_team", ["team"])])

    first = target()
    eng = laredo.Engine(
        sources={"s": src}, pipelines=[laredo.Pipeline("s", USERS, first)], snapshot_store=store
    )
    eng.start()
    assert eng.await_ready(10)
    src.insert(USERS, {"id": 3, "email": "c@x", "team": "red", "balance": Decimal("3.25")})
    assert wait(lambda: first.get(3) is not None)
    eng.create_snapshot()
    src.insert(USERS, {"id": 4, "email": "d@x", "team": "red", "balance": Decimal("4")})
    assert wait(lambda: first.get(4) is not None)
    eng.stop()

    second = target()
    eng2 = laredo.Engine(
        sources={"s": src}, pipelines=[laredo.Pipeline("s", USERS, second)], snapshot_store=store
    )
    eng2.start()
    try:
        assert eng2.await_ready(10)
        assert wait(lambda: second.count() == 4)
        assert second.all() == first.all()
        got = second.lookup("c@x")
        assert got is not None and type(got["balance"]) is Decimal
        assert got["balance"] == Decimal("3.25")
        assert [r["id"] for r in second.lookup_all("by_team", "red")] == [1, 3, 4]
    finally:
        eng2.stop()


def test_row_missing_its_key_is_dead_lettered_at_once_with_a_clear_error() -> None:

    import laredo
    from laredo.testing import TestSource, columns
    from laredo_target_memory import IndexedTarget

    table = laredo.Table("public", "keyed")
    src = TestSource()
    src.add_table(table, columns("id", "name"), [{"id": 1, "name": "a"}])
    dl = laredo.MemoryDeadLetterStore()
    target = IndexedTarget()
    obs = laredo.RecordingObserver()
    eng = laredo.Engine(
        sources={"s": src},
        pipelines=[laredo.Pipeline("s", table, target)],
        dead_letter_store=dl,
        observers=[obs],
    )
    eng.start()
    try:
        assert eng.await_ready(5)
        eng._readers["s"].on_changes(
            [laredo.ChangeEvent(table, laredo.ChangeAction.INSERT, 99, new_values={"name": "x"})]
        )
        wait(lambda: eng.pipelines()[0].state is laredo.PipelineState.ERROR, 5, "ERROR")
        assert obs.count("change_error") == 1  # the failure itself: terminal, no retry
        error = eng.pipelines()[0].error or ""
        assert "s:public.keyed" in error and "missing key field 'id'" in error
        assert "not retried" in error
        assert target.count() == 1  # what was accepted before is kept
        assert len(dl.read(eng.pipelines()[0].id)) == 1
    finally:
        eng.stop()
