from __future__ import annotations

from collections.abc import Iterator

import pytest
from laredo_target_memory import IndexedTarget
from laredo_target_memory.indexed import STORAGES


@pytest.fixture(params=STORAGES)
def each_storage(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """Runs the test once per ``IndexedTarget`` storage: ``IndexedTarget()`` (and subclasses)
    built inside the test default to it."""
    defaults = IndexedTarget.__init__.__defaults__
    assert defaults is not None and defaults[-1] == "packed"
    monkeypatch.setattr(IndexedTarget.__init__, "__defaults__", (*defaults[:-1], request.param))
    yield request.param
