"""Both memory targets pass the target conformance suite."""

from __future__ import annotations

import pytest
from laredo.testing.target_conformance import MakeTarget, TargetConformance

from laredo_target_memory import CompiledTarget, IndexedTarget


class TestIndexedTargetConformance(TargetConformance):
    @pytest.fixture
    def make_target(self) -> MakeTarget:
        return lambda table, columns: IndexedTarget(lookup_fields=["uid"])


class TestIndexedTargetWithIndexesConformance(TargetConformance):
    @pytest.fixture
    def make_target(self) -> MakeTarget:
        return lambda table, columns: IndexedTarget(
            lookup_fields=["name"],
            indexes=[{"name": "by_note", "fields": ["note"]}, {"name": "u", "fields": ["uid"], "unique": True}],
        )


class TestCompiledTargetConformance(TargetConformance):
    @pytest.fixture
    def make_target(self) -> MakeTarget:
        return lambda table, columns: CompiledTarget(compiler="dict")


class TestCompiledTargetFunctionConformance(TargetConformance):
    @pytest.fixture
    def make_target(self) -> MakeTarget:
        return lambda table, columns: CompiledTarget(
            compiler=lambda row: (row["id"], row["name"]), key_fields=["id"]
        )
