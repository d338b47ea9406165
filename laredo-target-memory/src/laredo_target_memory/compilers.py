"""Built-in row compilers for ``CompiledTarget``, registered by name through
``laredo_register_compilers``: ``laredo.compiler("namedtuple", fields=[...])`` returns
``fn(row) -> object``.

* ``dict``: a read-only mapping (``types.MappingProxyType``) over a copy of the row, optionally
  only ``fields``.
* ``namedtuple``: a ``collections.namedtuple`` of ``fields`` (absent columns give ``None``).
* ``object``: ``factory`` is an import path ``"package.module:Name"``; a pydantic model is built
  with ``model_validate(row)``, anything else is called as ``Name(**row)``; ``fields`` limits the
  columns passed.
"""

from __future__ import annotations

import collections
import importlib
import keyword
from collections.abc import Callable
from types import MappingProxyType
from typing import Any

from laredo.errors import ConfigError
from laredo.types import Row
from pydantic import BaseModel, ConfigDict, Field, field_validator

Compiler = Callable[[Row], Any]


class DictCompilerOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")

    fields: list[str] | None = Field(
        default=None, description="columns to keep (default: every column)"
    )


class NamedTupleCompilerOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")

    fields: list[str] = Field(min_length=1, description="tuple fields, in order")
    typename: str = Field(default="Row", description="the namedtuple class name")

    @field_validator("fields")
    @classmethod
    def _identifiers(cls, v: list[str]) -> list[str]:
        bad = [f for f in v if not f.isidentifier() or keyword.iskeyword(f) or f.startswith("_")]
        if bad:
            raise ValueError(
                f"not usable as namedtuple field names: {', '.join(bad)} (use identifiers "
                f"that do not start with '_'; rename the columns with a rename-fields transform)"
            )
        if len(set(v)) != len(v):
            raise ValueError("a field is listed twice")
        return v

    @field_validator("typename")
    @classmethod
    def _typename(cls, v: str) -> str:
        if not v.isidentifier() or keyword.iskeyword(v):
            raise ValueError(f"{v!r} is not a valid class name")
        return v


class ObjectCompilerOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")

    factory: str = Field(
        pattern=r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$",
        description='import path of a class or function, "package.module:Name"',
    )
    fields: list[str] | None = Field(
        default=None, description="columns passed to the factory (default: every column)"
    )


def dict_compiler(fields: list[str] | None = None) -> Compiler:
    """Compile a row to a read-only mapping."""
    if fields is None:

        def compile_all(row: Row) -> Any:
            return MappingProxyType(dict(row))

        return compile_all
    keep = tuple(fields)

    def compile_some(row: Row) -> Any:
        return MappingProxyType({f: row[f] for f in keep if f in row})

    return compile_some


def namedtuple_compiler(fields: list[str], typename: str = "Row") -> Compiler:
    """Compile a row to a namedtuple of ``fields``; absent columns give ``None``."""
    try:
        cls = collections.namedtuple(typename, fields)  # type: ignore[misc]
    except ValueError as exc:
        raise ConfigError(f"namedtuple compiler: {exc}") from None
    make = cls._make
    names = tuple(fields)

    def compile_row(row: Row) -> Any:
        get = row.get
        return make([get(f) for f in names])

    compile_row.result_type = cls  # type: ignore[attr-defined]
    return compile_row


def object_compiler(factory: str, fields: list[str] | None = None) -> Compiler:
    """Compile a row with a class or function named by import path."""
    module_name, _, attr = factory.partition(":")
    try:
        obj: Any = importlib.import_module(module_name)
        for part in attr.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(
            f"object compiler: cannot import factory {factory!r}: {exc}; write "
            f'"package.module:Name" for an importable class or function'
        ) from None
    if not callable(obj):
        raise ConfigError(f"object compiler: factory {factory!r} is not callable")
    validate = getattr(obj, "model_validate", None)
    call: Callable[[Row], Any] = validate if callable(validate) else (lambda row: obj(**row))
    if fields is None:
        return call
    keep = tuple(fields)

    def compile_some(row: Row) -> Any:
        return call({f: row[f] for f in keep if f in row})

    return compile_some


__all__ = [
    "Compiler",
    "DictCompilerOptions",
    "NamedTupleCompilerOptions",
    "ObjectCompilerOptions",
    "dict_compiler",
    "namedtuple_compiler",
    "object_compiler",
]
