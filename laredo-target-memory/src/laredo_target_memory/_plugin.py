"""laredo-target-memory's plugin registration: the ``indexed-memory`` and ``compiled-memory``
targets and the built-in compilers (``dict``, ``namedtuple``, ``object``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import laredo
from laredo.plugins import Registry
from pydantic import BaseModel, ConfigDict, Field, field_validator

from .compiled import CompiledTarget
from .compilers import (
    DictCompilerOptions,
    NamedTupleCompilerOptions,
    ObjectCompilerOptions,
    dict_compiler,
    namedtuple_compiler,
    object_compiler,
)
from .indexed import IndexedTarget
from .options import IndexedMemoryOptions, IndexOptions

__all__ = ["CompiledMemoryOptions", "IndexOptions", "IndexedMemoryOptions"]


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
        IndexedTarget.from_options,
        options=IndexedMemoryOptions,
        takes_options=True,
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
