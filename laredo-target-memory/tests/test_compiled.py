"""CompiledTarget: compilers by function and by name, filter, errors, snapshots."""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple

import pytest
from laredo import ColumnDefinition, ConfigError, SchemaChangeAction, Table, TargetError
from laredo.types import TableSnapshotInfo
from laredo_target_memory import CompiledTarget

T = Table("public", "products")
COLS = [
    ColumnDefinition("sku", "text", 1, False, True, 1),
    ColumnDefinition("name", "text", 2),
    ColumnDefinition("price", "int4", 3),
    ColumnDefinition("active", "bool", 4),
]


class Product(NamedTuple):
    sku: str
    name: str
    price: int


@dataclasses.dataclass(frozen=True)
class ProductDC:
    sku: str
    name: str
    price: int
    active: bool = True


def compile_product(row: dict[str, Any]) -> Product:
    if row["price"] < 0:
        raise ValueError("negative price")
    return Product(row["sku"], row["name"], row["price"])


def prod(sku: str, price: int = 10, active: bool = True, **kw: Any) -> dict[str, Any]:
    return {"sku": sku, "name": f"Product {sku}", "price": price, "active": active, **kw}


def make(**kw: Any) -> CompiledTarget:
    kw.setdefault("compiler", compile_product)
    t = CompiledTarget(**kw)
    t.on_init(T, COLS)
    return t


def test_get_all_count_by_primary_key() -> None:
    t = make()
    t.on_baseline_rows(T, [prod("a"), prod("b", 20)])
    t.on_baseline_complete(T)
    assert t.get("a") == Product("a", "Product a", 10)
    assert t.get("zz") is None
    assert sorted(t.all()) == [Product("a", "Product a", 10), Product("b", "Product b", 20)]
    assert t.count() == 2
    assert t.get_row("b") == prod("b", 20)


def test_explicit_key_fields_win_over_the_primary_key() -> None:
    t = make(key_fields=["name"])
    t.on_insert(T, prod("a"))
    assert t.key_fields == ("name",)
    assert t.get("Product a") == Product("a", "Product a", 10)


def test_key_fields_are_validated_at_init() -> None:
    t = CompiledTarget(compiler=compile_product, key_fields=["nope"])
    with pytest.raises(ConfigError, match=r"public\.products: key field 'nope' is not a column"):
        t.on_init(T, COLS)
    no_pk = [ColumnDefinition("x", "text", 1)]
    with pytest.raises(ConfigError, match="no primary key; set key_fields"):
        CompiledTarget(compiler=compile_product).on_init(T, no_pk)


def test_filter_skips_rows_and_an_update_failing_it_deletes() -> None:
    t = make(filter=lambda r: r["active"])
    t.on_insert(T, prod("a"))
    t.on_insert(T, prod("b", active=False))
    assert t.count() == 1 and t.get("b") is None
    t.on_update(T, prod("a", active=False), {"sku": "a"})
    assert t.get("a") is None and t.count() == 0
    t.on_update(T, prod("a", price=5), None)  # passes again: back
    assert t.get("a") == Product("a", "Product a", 5)


def test_update_and_delete_and_missing_delete_and_truncate() -> None:
    t = make()
    t.on_insert(T, prod("a"))
    t.on_update(T, {"sku": "a", "price": 99}, {"sku": "a"})  # absent columns keep stored values
    assert t.get("a") == Product("a", "Product a", 99)
    t.on_update(T, prod("c"), {"sku": "a"})  # key change moves the object
    assert t.get("a") is None and t.get("c") == Product("c", "Product c", 10)
    t.on_delete(T, {"sku": "c"})
    t.on_delete(T, {"sku": "missing"})
    assert t.count() == 0
    t.on_insert(T, prod("d"))
    t.on_truncate(T)
    assert t.all() == [] and t.count() == 0


def test_compiler_error_skips_the_row_and_counts(caplog: pytest.LogCaptureFixture) -> None:
    t = make()
    t.on_baseline_rows(T, [prod("a"), prod("bad", price=-1), prod("c")])
    assert t.count() == 2 and t.get("bad") is None
    assert t.compile_errors == 1
    assert "negative price" in caplog.text and "public.products" in caplog.text
    # An update that no longer compiles removes the stale object.
    t.on_update(T, prod("a", price=-5), None)
    assert t.get("a") is None and t.compile_errors == 2


def test_filter_error_is_counted_like_a_compiler_error() -> None:
    t = make(filter=lambda r: r["missing_column"])
    t.on_insert(T, prod("a"))
    assert t.count() == 0 and t.compile_errors == 1


def test_row_missing_key_is_a_target_error() -> None:
    t = make()
    with pytest.raises(TargetError, match="missing key field 'sku'"):
        t.on_insert(T, {"name": "x", "price": 1})


def test_export_restore_recompiles() -> None:
    t = make()
    t.on_baseline_rows(T, [prod("a"), prod("b")])
    rows = t.export_snapshot()
    assert sorted(r["sku"] for r in rows) == ["a", "b"]
    t2 = make(compiler=lambda r: ProductDC(**r))
    t2.on_insert(T, prod("stale"))
    t2.restore_snapshot(TableSnapshotInfo(T, 2, tuple(COLS)), rows)
    assert sorted(o.sku for o in t2.all()) == ["a", "b"]
    assert isinstance(t2.get("a"), ProductDC)


def test_schema_change_reasons() -> None:
    t = make()
    assert t.on_schema_change(T, COLS, list(COLS)).action is SchemaChangeAction.CONTINUE
    added = [*COLS, ColumnDefinition("x", "text", 5)]
    assert t.on_schema_change(T, COLS, added).action is SchemaChangeAction.RE_BASELINE


# -------------------------------------------------------------------------------- by name
def test_compiler_by_registered_name_namedtuple() -> None:
    t = make(compiler="namedtuple", compiler_options={"fields": ["sku", "price"], "typename": "P"})
    t.on_insert(T, prod("a", 3))
    got = t.get("a")
    assert type(got).__name__ == "P" and got == ("a", 3) and got.price == 3


def test_compiler_by_name_dict_is_read_only() -> None:
    t = make(compiler="dict", compiler_options={"fields": ["sku", "name"]})
    t.on_insert(T, prod("a"))
    got = t.get("a")
    assert dict(got) == {"sku": "a", "name": "Product a"}
    with pytest.raises(TypeError):
        got["sku"] = "b"


def test_compiler_by_name_object_import_path() -> None:
    t = make(
        compiler="object",
        compiler_options={"factory": "types:SimpleNamespace", "fields": ["sku", "price"]},
    )
    t.on_insert(T, prod("a"))
    assert vars(t.get("a")) == {"sku": "a", "price": 10}


def test_compiler_by_name_object_pydantic_model_is_validated() -> None:
    cols = [
        ColumnDefinition("name", "text", 1, False, True, 1),
        ColumnDefinition("fields", "jsonb", 2),
    ]
    t = CompiledTarget(
        compiler="object", compiler_options={"factory": "laredo_target_memory._plugin:IndexOptions"}
    )
    t.on_init(T, cols)
    t.on_insert(T, {"name": "i", "fields": "one"})  # the model's validator turns it into a list
    t.on_insert(T, {"name": "bad", "fields": []})  # fails validation: skipped, counted
    assert t.get("i").fields == ["one"]
    assert t.get("bad") is None and t.compile_errors == 1


def test_compiler_by_name_object_bad_import_is_config_error() -> None:
    with pytest.raises(ConfigError, match="cannot import factory 'no_such_mod:X'"):
        CompiledTarget(compiler="object", compiler_options={"factory": "no_such_mod:X"})


def test_unknown_compiler_name_lists_installed() -> None:
    with pytest.raises(ConfigError) as info:
        CompiledTarget(compiler="protobuf")
    assert "unknown compiler type 'protobuf'" in str(info.value)
    assert "dict, namedtuple, object" in str(info.value)


def test_bad_compiler_options_list_every_problem() -> None:
    with pytest.raises(ConfigError) as info:
        CompiledTarget(
            compiler="namedtuple",
            compiler_options={"fields": ["ok", "_bad", "class"], "typename": "1x", "extra": 1},
        )
    text = str(info.value)
    assert "fields" in text and "typename" in text and "extra" in text
    assert len(info.value.problems) == 3


def test_constructor_problems_listed_together() -> None:
    with pytest.raises(ConfigError) as info:
        CompiledTarget(
            compiler=compile_product, compiler_options={"x": 1}, key_fields=[""], filter=42
        )
    assert len(info.value.problems) == 3, info.value.problems


def test_filter_spec_by_name_unknown_is_reported() -> None:
    with pytest.raises(ConfigError) as info:
        CompiledTarget(compiler=compile_product, filter={"type": "no-such-filter"})
    assert "no-such-filter" in str(info.value)


def test_filter_can_be_a_pipeline_filter_object() -> None:
    class OnlyCheap:
        def include(self, table: Any, row: dict[str, Any]) -> bool:
            assert table == T
            return bool(row["price"] < 50)

    t = make(filter=OnlyCheap())
    t.on_insert(T, prod("a", 10))
    t.on_insert(T, prod("b", 100))
    assert [p.sku for p in t.all()] == ["a"]
