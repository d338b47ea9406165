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
            indexes=[
                {"name": "by_note", "fields": ["note"]},
                {"name": "u", "fields": ["uid"], "unique": True},
            ],
        )


class TestIndexedTargetCompactConformance(TargetConformance):
    @pytest.fixture
    def make_target(self) -> MakeTarget:
        return lambda table, columns: IndexedTarget(
            lookup_fields=["name"],
            indexes=[{"name": "by_note", "fields": ["note"]}],
            storage="compact",
        )


class TestIndexedTargetDictConformance(TargetConformance):
    @pytest.fixture
    def make_target(self) -> MakeTarget:
        return lambda table, columns: IndexedTarget(lookup_fields=["uid"], storage="dict")


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


# -------------------------------------------------------------------------------- the suite bites
class _DropsUnsentColumns(IndexedTarget):
    """Broken on purpose: an update replaces the whole row (loses unchanged TOAST values)."""

    def on_update(self, table, row, identity):  # type: ignore[no-untyped-def]
        self.on_delete(table, identity or row)
        self.on_insert(table, row)


class _LosesTypes(IndexedTarget):
    """Broken on purpose: exports values as strings (what a careless JSON round trip does)."""

    def export_snapshot(self):  # type: ignore[no-untyped-def]
        return [
            {k: (v if k == "id" or v is None else str(v)) for k, v in r.items()}
            for r in super().export_snapshot()
        ]


class _BatchDiffers(IndexedTarget):
    """Broken on purpose: the batch path ignores deletes."""

    def apply_changes(self, table, events):  # type: ignore[no-untyped-def]
        from laredo import ChangeAction

        super().apply_changes(table, [e for e in events if e.action is not ChangeAction.DELETE])


@pytest.mark.parametrize(
    ("broken", "test_name"),
    [
        (_DropsUnsentColumns, "test_update_with_missing_columns_keeps_stored_values"),
        (_LosesTypes, "test_baseline_rows_then_complete"),
        (_BatchDiffers, "test_apply_changes_equals_per_call_methods"),
    ],
)
def test_the_suite_fails_broken_targets(broken: type[IndexedTarget], test_name: str) -> None:
    suite = TargetConformance()
    with pytest.raises(AssertionError):
        getattr(suite, test_name)(lambda table, columns: broken())
