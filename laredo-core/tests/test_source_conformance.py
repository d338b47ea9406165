from __future__ import annotations

from typing import Any

import laredo
import pytest
from laredo.testing import TestSource, columns
from laredo.testing.source_conformance import SourceConformance

T = laredo.Table("public", "items")


class TestTestSourceConformance(SourceConformance):
    @pytest.fixture(params=[False, True], ids=["ephemeral", "resumable"])
    def source(self, request: pytest.FixtureRequest) -> TestSource:
        src = TestSource(supports_resume=request.param)
        src.add_table(T, columns("id", "v"), [{"id": 1, "v": "a"}])
        return src

    @pytest.fixture
    def table(self) -> laredo.TableIdentifier:
        return T

    def produce_changes(self, source: Any, table: laredo.TableIdentifier, n: int) -> None:
        for i in range(n):
            source.insert(table, {"id": 100 + i, "v": "x"})
