"""Memory targets list the keys of the rows they hold (``laredo.ListsKeys``): an on-demand
backfill removes the keys its source lacks by them, so they must be every stored key, once,
as tuples of the key fields' values, whatever the storage."""

from __future__ import annotations

from decimal import Decimal

import pytest
from laredo import ListsKeys, TableIdentifier
from laredo.types import ColumnDefinition
from laredo_target_memory import CompiledTarget, IndexedTarget, dict_compiler

T = TableIdentifier("public", "t")
ONE = [ColumnDefinition("id", "int8", 1, False, True, 1), ColumnDefinition("v", "text", 2)]
TWO = [  # a composite key whose primary-key order differs from the column order
    ColumnDefinition("b", "text", 1, False, True, 2),
    ColumnDefinition("a", "numeric", 2, False, True, 1),
    ColumnDefinition("v", "text", 3),
]


@pytest.mark.parametrize("storage", ["packed", "compact", "dict"])
def test_an_indexed_target_lists_every_stored_key_once(storage: str) -> None:
    target = IndexedTarget(storage=storage)  # type: ignore[arg-type]
    assert isinstance(target, ListsKeys)
    target.on_init(T, ONE)
    for k in range(5):
        target.on_insert(T, {"id": k, "v": "x"})
    target.on_update(T, {"id": 3, "v": "y"}, None)
    target.on_delete(T, {"id": 1})
    assert target.stored_key_fields(T) == ("id",)
    assert sorted(target.stored_keys(T)) == [(0,), (2,), (3,), (4,)]


def test_a_composite_key_is_listed_in_the_key_fields_order() -> None:
    target = IndexedTarget()
    target.on_init(T, TWO)
    target.on_insert(T, {"b": "x", "a": Decimal("1.50"), "v": "1"})
    target.on_insert(T, {"b": "y", "a": Decimal("2"), "v": "2"})
    assert target.stored_key_fields(T) == ("a", "b")
    keys = sorted(target.stored_keys(T))
    assert keys == [(Decimal("1.5"), "x"), (Decimal("2"), "y")]  # compared by value


def test_a_compiled_target_lists_the_keys_it_stores() -> None:
    target = CompiledTarget(dict_compiler(), key_fields=["v"], filter=lambda r: r["id"] != 2)
    assert isinstance(target, ListsKeys)
    target.on_init(T, ONE)
    for k in range(4):
        target.on_insert(T, {"id": k, "v": f"k{k}"})
    assert target.stored_key_fields(T) == ("v",)
    assert sorted(target.stored_keys(T)) == [("k0",), ("k1",), ("k3",)]
