"""Both targets and the compilers are reachable by plugin name, with validated options."""

from __future__ import annotations

import importlib.metadata

import laredo
import pytest
from laredo import ColumnDefinition, ConfigError, Table
from laredo_target_memory import CompiledTarget, IndexedTarget

T = Table("public", "users")
COLS = [
    ColumnDefinition("id", "int8", 1, False, True, 1),
    ColumnDefinition("email", "text", 2),
    ColumnDefinition("team", "int4", 3),
]


def test_entry_point_is_installed() -> None:
    eps = importlib.metadata.entry_points(group="laredo")
    assert "laredo_target_memory._plugin" in {ep.value for ep in eps}


def test_indexed_memory_by_name() -> None:
    t = laredo.target(
        "indexed-memory", lookup_fields=["email"], indexes=[{"name": "by_team", "fields": ["team"]}]
    )
    assert isinstance(t, IndexedTarget)
    assert t.lookup_fields == ("email",)
    assert [(i.name, i.fields, i.unique) for i in t.indexes] == [("by_team", ("team",), False)]
    t.on_init(T, COLS)
    t.on_insert(T, {"id": 1, "email": "a@x", "team": 7})
    assert t.lookup("a@x")["id"] == 1  # type: ignore[index]
    assert t.lookup_all("by_team", 7)[0]["email"] == "a@x"


def test_indexed_memory_accepts_single_strings() -> None:
    t = laredo.target(
        "indexed-memory",
        lookup_fields="email",
        indexes=[{"name": "u", "fields": "team", "unique": True}],
    )
    assert t.lookup_fields == ("email",) and t.indexes[0].unique


def test_indexed_memory_storage_option() -> None:
    assert laredo.target("indexed-memory").storage == "packed"
    t = laredo.target("indexed-memory", storage="compact")
    assert t.storage == "compact"
    t.on_init(T, COLS)
    t.on_insert(T, {"id": 1, "email": "a@x", "team": 7})
    assert t.get(1) == {"id": 1, "email": "a@x", "team": 7}
    with pytest.raises(ConfigError, match="storage") as info:
        laredo.target("indexed-memory", storage="columnar")
    assert "compact" in str(info.value)
    with pytest.raises(ConfigError, match="storage: use one of packed, compact, dict"):
        IndexedTarget(storage="columnar")  # type: ignore[arg-type]


def test_bad_indexed_options_list_every_problem() -> None:
    with pytest.raises(ConfigError) as info:
        laredo.target(
            "indexed-memory",
            lookup_fields=[1, 2.5],
            indexes=[{"name": "", "fields": []}, {"fields": ["a"], "uniq": True}],
            lookup="x",
        )
    problems = info.value.problems
    joined = "\n".join(problems)
    assert len(problems) >= 6, joined
    for fragment in (
        "lookup_fields.0",
        "lookup_fields.1",
        "indexes.0.name",
        "indexes.0.fields",
        "indexes.1.name",
        "indexes.1.uniq",
        "lookup: unknown option",
    ):
        assert fragment in joined, (fragment, joined)
    assert all(p.startswith("target 'indexed-memory'") for p in problems)


def test_duplicate_index_names_rejected_by_options() -> None:
    with pytest.raises(ConfigError, match=r"indexes: .*indexes\[1\]: index name 'a' is used twice"):
        laredo.target(
            "indexed-memory",
            indexes=[{"name": "a", "fields": ["x"]}, {"name": "a", "fields": ["y"]}],
        )


def test_indexed_memory_takes_its_options_model_checked_by_the_same_rules() -> None:
    from laredo.plugins import registry
    from laredo_target_memory.options import IndexedMemoryOptions

    assert registry("target").get("indexed-memory").takes_options
    opts = IndexedMemoryOptions(lookup_fields="email", indexes=[{"name": "t", "fields": "team"}])
    t = IndexedTarget(options=opts)
    assert t.lookup_fields == ("email",) and [i.name for i in t.indexes] == ["t"]
    assert IndexedTarget.from_options(opts).indexes == t.indexes
    with pytest.raises(TypeError):
        IndexedTarget(["email"], options=opts)
    # the rules of the keyword constructor hold for configuration files too
    with pytest.raises(ConfigError) as info:
        laredo.target(
            "indexed-memory",
            lookup_fields=["a", "a"],
            indexes=[{"name": "lookup", "fields": ["x"]}],
        )
    text = str(info.value)
    assert "lookup_fields: Value error, lookup_fields: a field is listed twice (a, a)" in text
    assert "indexes[0]: index name 'lookup' is reserved for lookup_fields" in text


def test_compiled_memory_by_name_with_named_compiler() -> None:
    t = laredo.target(
        "compiled-memory",
        compiler="namedtuple",
        compiler_options={"fields": ["id", "email"]},
        key_fields=["id"],
        filter=None,
    )
    assert isinstance(t, CompiledTarget)
    t.on_init(T, COLS)
    t.on_insert(T, {"id": 1, "email": "a@x", "team": 2})
    assert t.get(1) == (1, "a@x")


def test_compiled_memory_requires_a_compiler() -> None:
    with pytest.raises(ConfigError, match="compiler: Field required"):
        laredo.target("compiled-memory")


def test_compiled_memory_bad_filter_and_options() -> None:
    with pytest.raises(ConfigError) as info:
        laredo.target("compiled-memory", compiler="", filter=3, key_fields=[None], extra=True)
    joined = "\n".join(info.value.problems)
    for fragment in ("compiler", "filter", "key_fields.0", "extra: unknown option"):
        assert fragment in joined, (fragment, joined)


def test_compiler_builder_by_name() -> None:
    fn = laredo.compiler("dict")
    assert dict(fn({"a": 1})) == {"a": 1}
    with pytest.raises(ConfigError, match="fields"):
        laredo.compiler("namedtuple")


def test_both_targets_offer_the_optional_capabilities_the_engine_looks_for() -> None:
    from laredo.contracts import (
        BaselineBatchTarget,
        BatchTarget,
        CountableTarget,
        DurablePositionTarget,
        KeyedTarget,
        PositionedTarget,
    )

    for t in (IndexedTarget(), CompiledTarget(compiler="dict")):
        for cap in (
            BatchTarget,
            BaselineBatchTarget,
            CountableTarget,
            KeyedTarget,
            PositionedTarget,
        ):
            assert isinstance(t, cap), (type(t).__name__, cap.__name__)
        # Memory state is durable only through snapshots: the engine must not think otherwise.
        assert not isinstance(t, DurablePositionTarget)
        assert t.is_durable() is False
