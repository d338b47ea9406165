"""laredo-target-memory's plugin registration: the ``indexed-memory`` and ``compiled-memory``
targets and the built-in compilers (``dict``, ``namedtuple``, ``object``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import laredo
from laredo.plugins import Registry
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from .compiled import CompiledTarget
from .compilers import (
    DictCompilerOptions,
    NamedTupleCompilerOptions,
    ObjectCompilerOptions,
    dict_compiler,
    namedtuple_compiler,
    object_compiler,
)
from .indexed import LOOKUP_INDEX, IndexedTarget, Storage


class IndexOptions(BaseModel):
    """One secondary index: ``{name = by_team, fields = [team_id], unique = false}``."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1)
    fields: list[str] = Field(min_length=1)
    unique: bool = False

    @field_validator("fields", mode="before")
    @classmethod
    def _one_field(cls, v: Any) -> Any:
        return [v] if isinstance(v, str) else v


class IndexedMemoryOptions(BaseModel):
    """Options of the ``indexed-memory`` target."""

    model_config = ConfigDict(extra="forbid")

    lookup_fields: list[str] = Field(
        default_factory=list,
        description="fields of the unique lookup index; also the key when the table has no PK",
    )
    indexes: list[IndexOptions] = Field(default_factory=list, description="secondary indexes")
    storage: Storage = Field(
        default="packed",
        description=(
            "packed (default: rows packed into bytes, ~1/3 of dict rows), compact (rows in "
            "pages with an array key index: least memory, slower writes), dict (row dicts: "
            "fastest writes, most memory)"
        ),
    )

    @field_validator("lookup_fields", mode="before")
    @classmethod
    def _one_lookup(cls, v: Any) -> Any:
        return [v] if isinstance(v, str) else v

    @model_validator(mode="after")
    def _distinct_names(self) -> IndexedMemoryOptions:
        names = [i.name for i in self.indexes]
        dup = sorted({n for n in names if names.count(n) > 1})
        problems = []
        if dup:
            problems.append(f"index name(s) used twice: {', '.join(dup)}")
        if LOOKUP_INDEX in names:
            problems.append(f"index name {LOOKUP_INDEX!r} is reserved for lookup_fields")
        if problems:
            raise ValueError("; ".join(problems))
        return self


class CompiledMemoryOptions(BaseModel):
    """Options of the ``compiled-memory`` target."""

    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True)

    compiler: str | Callable[..., Any] = Field(
        description="a registered compiler name (dict, namedtuple, object, ...) or a function"
    )
    compiler_options: dict[str, Any] = Field(
        default_factory=dict, description="options of the named compiler"
    )
    key_fields: list[str] = Field(
        default_factory=list, description="fields identifying a row (default: the primary key)"
    )
    filter: Any = Field(
        default=None,
        description='a function row -> bool, a PipelineFilter, or a spec {"type": ..., ...}',
    )

    @field_validator("key_fields", mode="before")
    @classmethod
    def _one_key(cls, v: Any) -> Any:
        return [v] if isinstance(v, str) else v

    @field_validator("compiler")
    @classmethod
    def _compiler_name(cls, v: Any) -> Any:
        if isinstance(v, str) and not v:
            raise ValueError("compiler name is empty")
        return v

    @field_validator("filter")
    @classmethod
    def _filter_kind(cls, v: Any) -> Any:
        if v is None or callable(v) or callable(getattr(v, "include", None)):
            return v
        if isinstance(v, dict):
            if not isinstance(v.get("type"), str):
                raise ValueError('a filter spec needs "type", e.g. {"type": "field-equals"}')
            return v
        raise ValueError("must be a function row -> bool, a PipelineFilter or a filter spec")


@laredo.hookimpl
def laredo_register_targets(registry: Registry) -> None:
    registry.add(
        "indexed-memory",
        IndexedTarget,
        options=IndexedMemoryOptions,
        description="rows in memory with a lookup index and secondary indexes",
    )
    registry.add(
        "compiled-memory",
        CompiledTarget,
        options=CompiledMemoryOptions,
        description="rows compiled to objects by a compiler function, in memory",
    )


@laredo.hookimpl
def laredo_register_compilers(registry: Registry) -> None:
    registry.add(
        "dict", dict_compiler, options=DictCompilerOptions, description="read-only mapping"
    )
    registry.add(
        "namedtuple",
        namedtuple_compiler,
        options=NamedTupleCompilerOptions,
        description="a namedtuple of the given fields",
    )
    registry.add(
        "object",
        object_compiler,
        options=ObjectCompilerOptions,
        description='a class or function by import path ("pkg.mod:Name")',
    )
