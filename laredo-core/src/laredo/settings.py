"""Settings declared once, tox's ``ConfigSet.add_config`` shape: each :class:`Setting` names its
section, key, deprecated (Go) spellings, type, default, bounds and description, and the section
models of a configuration are generated from them (:func:`section_model`).

Guarantees: a generated model accepts exactly the declared keys (``extra="forbid"``); a
deprecated spelling is moved to its key with one :func:`laredo.deprecation.deprecated_option`
note, and giving both spellings is a problem. mypy cannot see generated fields, so each module
that generates models keeps a ``TYPE_CHECKING`` stub of them; :func:`stub_problems` (run by the
tests) reports every stub that does not name exactly the declared keys with the declared types.
"""

from __future__ import annotations

import ast
import copy
import dataclasses
import inspect
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, create_model, model_validator

from .deprecation import deprecated_option

__all__ = [
    "DEFAULT",
    "Section",
    "Setting",
    "declared",
    "field_problems",
    "generated",
    "section_model",
    "settings_dataclass",
    "stub_problems",
]


DEFAULT: Any = ...
"""What a ``TYPE_CHECKING`` stub assigns to a field that has a default (``x: int = DEFAULT``),
so that mypy knows the keyword may be left out."""


class Section(BaseModel):
    """Base of every configuration section model: unknown keys are rejected."""

    model_config = ConfigDict(extra="forbid")


@dataclass(frozen=True, slots=True, kw_only=True)
class Setting:
    """One configuration key: ``<section> { <key> = <default> }``."""

    section: str
    """The dotted path of the section holding it (``grpc``, ``snapshot.retention``)."""
    key: str
    of_type: Any
    """Its type, as the model's field annotation."""
    default: Any = None
    """Its value when absent (a copy for mutable values)."""
    doc: str = ""
    aliases: tuple[str, ...] = ()
    """Deprecated spellings (Go Laredo's), accepted with a note naming ``key``."""
    required: bool = False
    """The section, when given, must give it (``default`` is the value without the section)."""
    minimum: float | None = None
    """Least allowed value (inclusive)."""
    maximum: float | None = None
    """Greatest allowed value (inclusive)."""
    positive: bool = False
    """Must be > 0."""
    min_length: int | None = None

    @property
    def config_key(self) -> str:
        """``section.key``, as written in a configuration file."""
        return f"{self.section}.{self.key}"

    def description(self) -> str:
        """The field's description (subclasses add their Python keyword)."""
        return self.doc

    def field(self) -> Any:
        """The pydantic field of the section model: default, bounds, description."""
        kw: dict[str, Any] = {
            "description": self.description(),
            "ge": self.minimum,
            "le": self.maximum,
            "gt": 0 if self.positive else None,
            "min_length": self.min_length,
        }
        if self.required:
            return Field(**kw)
        return Field(default=self.default, **kw)


_DECLARED: dict[type, tuple[tuple[str, Setting], ...]] = {}
"""Each generated class: its fields' names and declarations, in order."""


def declared(model: type) -> tuple[Setting, ...]:
    """The settings ``model`` was generated from (empty: not a generated class)."""
    return tuple(s for _, s in _DECLARED.get(model, ()))


def generated(module: str) -> list[type]:
    """The classes generated in ``module`` so far, in the order they were made."""
    return [m for m in _DECLARED if m.__module__ == module]


def _spellings(section: str, aliases: Mapping[str, str]) -> Any:
    """A ``mode="before"`` validator moving each deprecated spelling to its key."""

    def move(cls: type[BaseModel], data: Any) -> Any:
        if not isinstance(data, Mapping) or not aliases.keys() & data.keys():
            return data
        out = dict(data)
        for old, new in aliases.items():
            if old not in out:
                continue
            if new in out:
                raise ValueError(
                    f"{old} and {new} are the same setting ({old} is its deprecated "
                    f"spelling): keep {new}"
                )
            out[new] = out.pop(old)
            deprecated_option(f"{section}.{old} is a deprecated spelling; write {section}.{new}")
        return out

    return model_validator(mode="before")(move)


def section_model(
    name: str,
    settings: Sequence[Setting],
    *,
    module: str,
    doc: str | None = None,
    base: type[Section] = Section,
) -> type[Section]:
    """The section model holding ``settings``, in their order, named ``name`` in ``module``
    (``doc``: its docstring, by default ``<section> { <keys> }``; ``base``: a model whose own
    fields come first, e.g. a section that also holds sub-sections)."""
    sections = {s.section for s in settings}
    if len(sections) != 1:
        raise ValueError(f"{name}: settings of one section only (got {sorted(sections)})")
    section = sections.pop()
    aliases = {a: s.key for s in settings for a in s.aliases}
    validators = {"_spellings": _spellings(section, aliases)} if aliases else {}
    if doc is None:
        doc = f"``{section.rpartition('.')[2]} {{ {', '.join(s.key for s in settings)} }}``"
    fields: dict[str, Any] = {s.key: (s.of_type, s.field()) for s in settings}
    model = create_model(
        name,
        __base__=base,
        __doc__=doc,
        __module__=module,
        __validators__=validators,
        **fields,
    )
    _DECLARED[model] = tuple((s.key, s) for s in settings)
    return model


def _default(setting: Setting) -> Any:
    if setting.required:
        return dataclasses.field()
    value = setting.default
    if value.__hash__ is None:  # mutable: each instance gets its own copy
        return dataclasses.field(default_factory=lambda: copy.deepcopy(value))
    return dataclasses.field(default=value)


def settings_dataclass(
    name: str, fields: Sequence[tuple[str, Setting]], *, module: str, doc: str
) -> type:
    """A frozen, keyword-only dataclass named ``name`` in ``module`` with one field per
    ``(field name, setting)`` pair: the setting's type and default (for values a runner hands
    on as keywords, e.g. :class:`laredo.config.EngineSettings`' base)."""
    cls = dataclasses.make_dataclass(
        name,
        [(n, s.of_type, _default(s)) for n, s in fields],
        namespace={"__doc__": doc, "__module__": module},
        frozen=True,
        slots=True,
        kw_only=True,
    )
    cls.__module__ = module
    _DECLARED[cls] = tuple(fields)
    return cls


def field_problems(model: type[BaseModel]) -> list[str]:
    """Every field of a generated ``model`` that is not what its declaration says (keys and
    their order, required or not, default, description); empty when all are."""
    settings = declared(model)
    keys = [s.key for s in settings]
    parent = model.__mro__[1]
    inherited = parent.model_fields if issubclass(parent, BaseModel) else {}
    own = [k for k in model.model_fields if k not in inherited]
    if own != keys:
        return [f"{model.__name__}: fields {own} are not {keys}"]
    out = []
    for s in settings:
        field = model.model_fields[s.key]
        where = f"{model.__name__}.{s.key}"
        if field.is_required() != s.required:
            out.append(f"{where}: required is {field.is_required()}, declared {s.required}")
        elif not s.required and field.get_default(call_default_factory=True) != s.default:
            out.append(f"{where}: default {field.default!r}, declared {s.default!r}")
        if not s.doc or s.doc not in (field.description or ""):
            out.append(f"{where}: the description does not carry the declared doc")
    return out


_TYPE_CHECKING = ("TYPE_CHECKING", "typing.TYPE_CHECKING")


def _stubs(module: ModuleType) -> dict[str, list[tuple[str, str, bool]]]:
    """``{class: [(field, annotation text, has a default)]}`` of the ``if TYPE_CHECKING:``
    classes (a default is written ``= DEFAULT``)."""
    out: dict[str, list[tuple[str, str, bool]]] = {}
    for node in ast.parse(inspect.getsource(module)).body:
        if not (isinstance(node, ast.If) and ast.unparse(node.test) in _TYPE_CHECKING):
            continue
        for cls in node.body:
            if isinstance(cls, ast.ClassDef):
                out[cls.name] = [
                    (a.target.id, ast.unparse(a.annotation), a.value is not None)
                    for a in cls.body
                    if isinstance(a, ast.AnnAssign) and isinstance(a.target, ast.Name)
                ]
    return out


def stub_problems(module: ModuleType) -> list[str]:
    """Every difference between ``module``'s generated models and its ``TYPE_CHECKING`` stubs
    of them (keys, order and types); empty when they agree."""
    stubs = _stubs(module)
    names = vars(module)
    out: list[str] = []
    for model in generated(module.__name__):
        fields = _DECLARED[model]
        where = f"{module.__name__}.{model.__name__}"
        stub = stubs.pop(model.__name__, None)
        if stub is None:
            out.append(f"{where}: no stub under `if TYPE_CHECKING:`")
            continue
        keys = [n for n, _ in fields]
        if [k for k, _, _ in stub] != keys:
            out.append(f"{where}: the stub's fields {[k for k, _, _ in stub]} are not {keys}")
            continue
        for (key, text, has_default), (_, s) in zip(stub, fields, strict=True):
            hint = typing.cast(Any, eval(text, names))  # our own module's annotation
            if hint != s.of_type:
                out.append(f"{where}.{key}: the stub says {text}, the declaration {s.of_type!r}")
            if has_default == s.required:
                out.append(
                    f"{where}.{key}: write `{key}: {text}"
                    + ("`: it is required" if s.required else " = DEFAULT`: it has a default")
                )
    out += [f"{module.__name__}.{name}: a stub of no generated model" for name in stubs]
    return out
