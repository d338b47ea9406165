"""Built-in pipeline filters: declarative, named and serialisable.

Each built-in filter is a frozen dataclass with ``include(table, row) -> bool`` and ``spec()``,
a plain-JSON dict such as ``{"type": "field-equals", "field": "status", "value": "active"}``.
``filter_from_spec(spec)`` builds a filter back from its spec, so another runner (Spark) can
compile the same filter to a column expression. Semantics, identical on every runner:

* A missing field, or a field whose value is ``None`` (SQL NULL), never matches.
* ``field-equals``: the value equals ``value``. ``value`` is a JSON scalar (string, number,
  boolean). Numbers compare numerically (``1 == 1.0``, also against ``Decimal``); a boolean
  matches only a boolean; a string matches only a string (no casting).
* ``field-prefix``: the value is a string starting with ``prefix``; non-strings never match.
* ``field-regex``: the value is a string in which ``pattern`` is found anywhere
  (``re.search``; anchor with ``^...$`` for a full match); non-strings never match. Use the
  common subset of Python and Java regex syntax if the pipeline may run on Spark.

Custom filters are any object with ``include(table, row)``, or a plain callable
``fn(row)`` / ``fn(table, row)`` (see :func:`as_filter`); they have no spec.
"""

from __future__ import annotations

import dataclasses
import inspect
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import pydantic
from pydantic import ConfigDict, StrictBool, StrictFloat, StrictInt, StrictStr

from .contracts import PipelineFilter
from .errors import ConfigError
from .plugins import format_validation_error, registry
from .types import Row, TableIdentifier

__all__ = [
    "CallableFilter",
    "FieldEquals",
    "FieldEqualsOptions",
    "FieldPrefix",
    "FieldPrefixOptions",
    "FieldRegex",
    "FieldRegexOptions",
    "arity",
    "as_filter",
    "filter_from_spec",
    "from_spec",
    "spec_of",
]

JsonScalar = StrictBool | StrictInt | StrictFloat | StrictStr


class FieldEqualsOptions(pydantic.BaseModel):
    model_config = ConfigDict(extra="forbid")
    field: StrictStr
    value: JsonScalar


class FieldPrefixOptions(pydantic.BaseModel):
    model_config = ConfigDict(extra="forbid")
    field: StrictStr
    prefix: StrictStr


class FieldRegexOptions(pydantic.BaseModel):
    model_config = ConfigDict(extra="forbid")
    field: StrictStr
    pattern: StrictStr


def _check_field(kind: str, name: Any) -> None:
    if not isinstance(name, str) or not name:
        raise ConfigError(f"{kind}: 'field' must be a non-empty column name, got {name!r}")


@dataclass(frozen=True, slots=True)
class FieldEquals:
    """Keep rows whose ``field`` equals ``value`` (see the module docstring for the rules)."""

    field: str
    value: bool | int | float | str

    def __post_init__(self) -> None:
        _check_field("field-equals", self.field)
        if type(self.value) not in (bool, int, float, str):
            raise ConfigError(
                f"field-equals on {self.field!r}: 'value' must be a string, number or boolean, "
                f"got {type(self.value).__name__} (NULL never matches)"
            )

    def include(self, table: TableIdentifier, row: Row) -> bool:
        v = row.get(self.field)
        if v is None:
            return False
        want = self.value
        tv = type(v)
        if tv is type(want):
            return bool(v == want)
        if isinstance(want, bool) or isinstance(v, bool):
            return False
        if isinstance(want, str) or isinstance(v, str):
            return False
        if isinstance(v, int | float | Decimal):
            return bool(v == want)
        return False

    def spec(self) -> dict[str, Any]:
        return {"type": "field-equals", "field": self.field, "value": self.value}

    def fields_read(self) -> tuple[tuple[str, str], ...]:
        """The field this filter reads (``laredo.preflight.ReadsFields``)."""
        return (("field", self.field),)


@dataclass(frozen=True, slots=True)
class FieldPrefix:
    """Keep rows whose ``field`` is a string starting with ``prefix``."""

    field: str
    prefix: str

    def __post_init__(self) -> None:
        _check_field("field-prefix", self.field)
        if not isinstance(self.prefix, str):
            raise ConfigError(
                f"field-prefix on {self.field!r}: 'prefix' must be a string, got {self.prefix!r}"
            )

    def include(self, table: TableIdentifier, row: Row) -> bool:
        v = row.get(self.field)
        return isinstance(v, str) and v.startswith(self.prefix)

    def spec(self) -> dict[str, Any]:
        return {"type": "field-prefix", "field": self.field, "prefix": self.prefix}

    def fields_read(self) -> tuple[tuple[str, str], ...]:
        """The field this filter reads (``laredo.preflight.ReadsFields``)."""
        return (("field", self.field),)


@dataclass(frozen=True, slots=True)
class FieldRegex:
    """Keep rows whose ``field`` is a string in which ``pattern`` is found (``re.search``)."""

    field: str
    pattern: str
    _compiled: re.Pattern[str] = dataclasses.field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        _check_field("field-regex", self.field)
        if not isinstance(self.pattern, str):
            raise ConfigError(
                f"field-regex on {self.field!r}: 'pattern' must be a string, got {self.pattern!r}"
            )
        try:
            compiled = re.compile(self.pattern)
        except re.error as exc:
            raise ConfigError(
                f"field-regex on {self.field!r}: invalid pattern {self.pattern!r}: {exc}"
            ) from None
        object.__setattr__(self, "_compiled", compiled)

    def include(self, table: TableIdentifier, row: Row) -> bool:
        v = row.get(self.field)
        return isinstance(v, str) and self._compiled.search(v) is not None

    def spec(self) -> dict[str, Any]:
        return {"type": "field-regex", "field": self.field, "pattern": self.pattern}

    def fields_read(self) -> tuple[tuple[str, str], ...]:
        """The field this filter reads (``laredo.preflight.ReadsFields``)."""
        return (("field", self.field),)


_BUILTINS: dict[str, tuple[type[pydantic.BaseModel], Callable[..., Any]]] = {
    "field-equals": (FieldEqualsOptions, FieldEquals),
    "field-prefix": (FieldPrefixOptions, FieldPrefix),
    "field-regex": (FieldRegexOptions, FieldRegex),
}


def from_spec(kind: str, spec: Mapping[str, Any], builtins: dict[str, Any]) -> Any:
    if not isinstance(spec, Mapping) or not isinstance(spec.get("type"), str):
        raise ConfigError(f"a {kind} spec must be an object with a 'type' key, got {spec!r}")
    type_name = spec["type"]
    options = {k: v for k, v in spec.items() if k != "type"}
    if type_name in builtins:
        model, factory = builtins[type_name]
        try:
            validated = model.model_validate(options)
        except pydantic.ValidationError as exc:
            raise ConfigError(
                [f"{kind} {type_name!r}: {p}" for p in format_validation_error(exc)]
            ) from None
        return factory(**{k: getattr(validated, k) for k in type(validated).model_fields})
    return registry(kind).build(type_name, **options)


def filter_from_spec(spec: Mapping[str, Any]) -> PipelineFilter:
    """Build a filter from ``{"type": name, **options}``; names other than the built-ins are
    looked up in the plugin registry (``laredo_register_filters``)."""
    built = from_spec("filter", spec, _BUILTINS)
    if not isinstance(built, PipelineFilter):
        raise ConfigError(
            f"filter {spec.get('type')!r} built a {type(built).__name__}, which has no "
            "include(table, row); fix the plugin's factory"
        )
    return built


def arity(fn: Callable[..., Any], what: str) -> int:
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return 1
    positional = [
        p
        for p in sig.parameters.values()
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is p.empty
    ]
    if any(p.kind is p.VAR_POSITIONAL for p in sig.parameters.values()):
        return 2
    if len(positional) in (1, 2):
        return len(positional)
    raise TypeError(f"a {what} callable takes (row) or (table, row), got {fn!r}{sig}")


@dataclass(frozen=True, slots=True)
class CallableFilter:
    """Adapts ``fn(row)`` or ``fn(table, row)`` to ``include``. Not declarative: no spec."""

    fn: Callable[..., Any]
    takes_table: bool

    def include(self, table: TableIdentifier, row: Row) -> bool:
        if self.takes_table:
            return bool(self.fn(table, row))
        return bool(self.fn(row))


def as_filter(obj: Any) -> PipelineFilter:
    """A filter object (has ``include``) as is; a spec dict built by :func:`filter_from_spec`;
    a plain callable ``fn(row)`` or ``fn(table, row)`` wrapped in :class:`CallableFilter`."""
    if isinstance(obj, PipelineFilter):
        return obj
    if isinstance(obj, Mapping):
        return filter_from_spec(obj)
    if callable(obj):
        return CallableFilter(obj, arity(obj, "filter") == 2)
    raise TypeError(
        f"not a filter: {obj!r}; pass an object with include(table, row), a callable "
        "fn(row) / fn(table, row), or a spec dict {'type': 'field-equals', ...}"
    )


def spec_of(obj: Any) -> dict[str, Any] | None:
    """The declarative spec of a filter or transform, or ``None`` for custom ones."""
    spec = getattr(obj, "spec", None)
    if callable(spec):
        out = spec()
        return dict(out) if isinstance(out, Mapping) else None
    return None
