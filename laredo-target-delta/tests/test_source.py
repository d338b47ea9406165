"""The ``delta`` archive source: the core source conformance suite, and an engine on the
archive with an IndexedTarget that equals the table and follows later versions."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import laredo
import pytest
from laredo.errors import SourceError
from laredo.testing import wait_until
from laredo.testing.source_conformance import SourceConformance
from laredo.types import SourceConfig, TableIdentifier
from laredo_target_delta import DeltaSource, DeltaSourceOptions, rows_as_of
from laredo_target_memory import IndexedTarget

from .conftest import ITEMS, Archive, item


class TestDeltaSourceConformance(SourceConformance):
    @pytest.fixture
    def archive(self, tmp_path: Path) -> Iterator[Archive]:
        a = Archive(str(tmp_path / "items"))
        yield a
        a.close()

    @pytest.fixture
    def source(self, archive: Archive) -> DeltaSource:
        self.writer = archive
        return DeltaSource(DeltaSourceOptions(uri=archive.uri, poll_interval=0.05))

    @pytest.fixture
    def table(self) -> TableIdentifier:
        return ITEMS

    def produce_changes(self, source: Any, table: TableIdentifier, n: int) -> None:
        for i in range(n):
            self.writer.commit(("insert", item(100 + i)))


def _wait(cond: Any, timeout: float = 20.0) -> None:
    wait_until(cond, timeout, cond, interval=0.05)


def _state(target: IndexedTarget) -> dict[int, Any]:
    return {r["id"]: r for r in target.export_snapshot()}


def _table(uri: str) -> dict[int, Any]:
    rows, _, _ = rows_as_of(uri, "999999999")
    return {r["id"]: r for r in rows}


def test_engine_on_the_archive_equals_the_table_and_follows(archive: Archive) -> None:
    archive.commit(("insert", item(5)), ("update", item(1, name="one")))
    source = DeltaSource(DeltaSourceOptions(uri=archive.uri, poll_interval=0.05))
    target = IndexedTarget()
    engine = laredo.Engine(
        sources={"lake": source}, pipelines=[laredo.Pipeline("lake", ITEMS, target)]
    )
    engine.start()
    try:
        assert engine.await_ready(30)
        assert _state(target) == _table(archive.uri)
        archive.commit(("delete", {"id": 0}), ("insert", item(9)))
        archive.commit(("update", item(9, doc={"later": True})))
        _wait(lambda: _state(target) == _table(archive.uri))
        assert _state(target)[9]["doc"] == {"later": True}
        assert 0 not in _state(target)
    finally:
        engine.stop()


def test_as_of_baselines_at_an_earlier_commit(archive: Archive) -> None:
    p1 = archive.commit(("insert", item(5)))
    archive.commit(("delete", {"id": 5}))
    source = DeltaSource(DeltaSourceOptions(uri=archive.uri, as_of=str(p1), follow=False))
    source.init(SourceConfig(tables=[ITEMS]))
    rows: list[Any] = []
    version = source.baseline([ITEMS], lambda t, r: rows.append(r))
    assert version == 1 and sorted(r["id"] for r in rows) == [0, 1, 2, 5]
    source.close()

    early = DeltaSource(DeltaSourceOptions(uri=archive.uri, as_of="3"))
    early.init(SourceConfig(tables=[ITEMS]))
    with pytest.raises(SourceError, match=r"as_of = '3': .*predates the archive"):
        early.baseline([ITEMS], lambda t, r: None)


def test_bad_uri_is_a_clear_error(tmp_path: Path) -> None:
    source = DeltaSource(
        DeltaSourceOptions(uri=str(tmp_path / "nothing"), storage_options={"token": "s3cr3t"})
    )
    with pytest.raises(SourceError, match=r"uri = .*nothing.*no readable Delta table") as ei:
        source.init(SourceConfig(tables=[ITEMS]))
    assert "s3cr3t" not in str(ei.value)
