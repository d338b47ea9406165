"""Built-in pipeline transforms: declarative, named and serialisable.

Each built-in transform is a frozen dataclass with ``transform(table, row) -> row`` and
``spec()``, a plain-JSON dict (``{"type": "drop-fields", "fields": ["password"]}``) that
``transform_from_spec`` turns back into the transform, so another runner (Spark) can compile it
to column expressions. Transforms never modify the row they are given; they return a new dict.

* ``drop-fields``: removes ``fields``; fields the row does not have are ignored.
* ``rename-fields``: renames ``old -> new`` for every pair of ``mapping`` at once (so swapping
  two names works); a field the row does not have is ignored; a renamed field replaces any
  existing field of the new name.
* ``add-timestamp``: sets ``field`` to the processing time, i.e. when the transform runs on
  this row (not the source commit time): ``format="datetime"`` (default) gives an aware
  ``datetime`` in UTC, ``"iso"`` its ISO 8601 text, ``"epoch_millis"`` milliseconds since the
  Unix epoch as an ``int``. It overwrites an existing field of that name.

The built-ins declare ``copies_values = True``: an output field that ``input_field`` traces
to an input field (``laredo.preflight.MapsFields``) holds that field's value unchanged, so an
on-demand backfill can match a target's keys with the source's and remove the rows the source
lacks (``laredo.engine.backfill_sweep``). A custom transform may declare the same.

Custom transforms are any object with ``transform(table, row)``, or a plain callable
``fn(row)`` / ``fn(table, row)`` returning the new row or ``None`` to drop it
(see :func:`as_transform`); they have no spec.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, ClassVar, Literal

import pydantic
from pydantic import ConfigDict, StrictStr

from .contracts import PipelineTransform
from .errors import ConfigError
from .filters import arity, from_spec
from .types import Row, TableIdentifier

__all__ = [
    "AddTimestamp",
    "AddTimestampOptions",
    "CallableTransform",
    "DropFields",
    "DropFieldsOptions",
    "RenameFields",
    "RenameFieldsOptions",
    "as_transform",
    "transform_from_spec",
]

TimestampFormat = Literal["datetime", "iso", "epoch_millis"]


class DropFieldsOptions(pydantic.BaseModel):
    model_config = ConfigDict(extra="forbid")
    fields: list[StrictStr]


class RenameFieldsOptions(pydantic.BaseModel):
    model_config = ConfigDict(extra="forbid")
    mapping: dict[StrictStr, StrictStr]


class AddTimestampOptions(pydantic.BaseModel):
    model_config = ConfigDict(extra="forbid")
    field: StrictStr = "processed_at"
    format: TimestampFormat = "datetime"


def _names(kind: str, value: Any, what: str) -> tuple[str, ...]:
    if isinstance(value, str):
        value = (value,)
    out = tuple(value)
    bad = [v for v in out if not isinstance(v, str) or not v]
    if bad:
        raise ConfigError(f"{kind}: {what} must be non-empty column names, got {bad!r}")
    return out


@dataclass(frozen=True, slots=True)
class DropFields:
    """Remove ``fields`` from every row."""

    copies_values: ClassVar[bool] = True

    fields: tuple[str, ...]
    _set: frozenset[str] = dataclasses.field(init=False, repr=False, compare=False)

    def __init__(self, fields: Any) -> None:
        names = _names("drop-fields", fields, "'fields'")
        object.__setattr__(self, "fields", names)
        object.__setattr__(self, "_set", frozenset(names))

    def transform(self, table: TableIdentifier, row: Row) -> Row:
        drop = self._set
        return {k: v for k, v in row.items() if k not in drop}

    def spec(self) -> dict[str, Any]:
        return {"type": "drop-fields", "fields": list(self.fields)}

    def fields_read(self) -> tuple[tuple[str, str], ...]:
        """The fields it drops (``laredo.preflight.ReadsFields``)."""
        return tuple((f"fields.{i}", f) for i, f in enumerate(self.fields))

    def input_field(self, name: str) -> str | None:
        """``None`` for a dropped field, else ``name`` (``laredo.preflight.MapsFields``)."""
        return None if name in self._set else name


@dataclass(frozen=True, slots=True)
class RenameFields:
    """Rename fields ``old -> new`` (all pairs at once)."""

    copies_values: ClassVar[bool] = True

    mapping: tuple[tuple[str, str], ...]
    _map: dict[str, str] = dataclasses.field(init=False, repr=False, compare=False)

    def __init__(self, mapping: Mapping[str, str] | Any) -> None:
        pairs = tuple(mapping.items()) if isinstance(mapping, Mapping) else tuple(mapping)
        olds = _names("rename-fields", [p[0] for p in pairs], "mapping keys")
        news = _names("rename-fields", [p[1] for p in pairs], "mapping values")
        if len(set(olds)) != len(olds):
            raise ConfigError(f"rename-fields: a field is renamed twice in {dict(pairs)!r}")
        if len(set(news)) != len(news):
            raise ConfigError(f"rename-fields: two fields get the same new name in {pairs!r}")
        object.__setattr__(self, "mapping", tuple(zip(olds, news, strict=True)))
        object.__setattr__(self, "_map", dict(zip(olds, news, strict=True)))

    def transform(self, table: TableIdentifier, row: Row) -> Row:
        m = self._map
        out: Row = {}
        renamed: Row = {}
        for k, v in row.items():
            new = m.get(k)
            if new is None:
                out[k] = v
            else:
                renamed[new] = v
        if renamed:
            out.update(renamed)
        return out

    def spec(self) -> dict[str, Any]:
        return {"type": "rename-fields", "mapping": dict(self.mapping)}

    def fields_read(self) -> tuple[tuple[str, str], ...]:
        """The fields it renames (``laredo.preflight.ReadsFields``)."""
        return tuple((f"mapping.{old}", old) for old, _new in self.mapping)

    def input_field(self, name: str) -> str | None:
        """The old name of a renamed field; ``None`` for a name renamed away (and not the new
        name of another); else ``name`` (``laredo.preflight.MapsFields``)."""
        for old, new in self.mapping:
            if new == name:
                return old
        return None if name in self._map else name


def _utc_now() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True, slots=True)
class AddTimestamp:
    """Set ``field`` to the processing time (aware UTC ``datetime`` by default).

    ``clock`` (a ``() -> datetime`` in UTC) is for tests and is not part of the spec.
    """

    copies_values: ClassVar[bool] = True

    field: str = "processed_at"
    format: TimestampFormat = "datetime"
    clock: Callable[[], datetime] = dataclasses.field(default=_utc_now, repr=False, compare=False)

    def __post_init__(self) -> None:
        _names("add-timestamp", [self.field], "'field'")
        if self.format not in ("datetime", "iso", "epoch_millis"):
            raise ConfigError(
                f"add-timestamp: format must be 'datetime', 'iso' or 'epoch_millis', "
                f"got {self.format!r}"
            )

    def transform(self, table: TableIdentifier, row: Row) -> Row:
        now = self.clock()
        out = dict(row)
        if self.format == "datetime":
            out[self.field] = now
        elif self.format == "iso":
            out[self.field] = now.isoformat()
        else:
            out[self.field] = int(now.timestamp() * 1000)
        return out

    def spec(self) -> dict[str, Any]:
        return {"type": "add-timestamp", "field": self.field, "format": self.format}

    def fields_read(self) -> tuple[tuple[str, str], ...]:
        """None: it only writes ``field`` (``laredo.preflight.ReadsFields``)."""
        return ()

    def input_field(self, name: str) -> str | None:
        """``None`` for the field it writes, else ``name`` (``laredo.preflight.MapsFields``)."""
        return None if name == self.field else name


_BUILTINS: dict[str, tuple[type[pydantic.BaseModel], Callable[..., Any]]] = {
    "drop-fields": (DropFieldsOptions, DropFields),
    "rename-fields": (RenameFieldsOptions, RenameFields),
    "add-timestamp": (AddTimestampOptions, AddTimestamp),
}


def transform_from_spec(spec: Mapping[str, Any]) -> PipelineTransform:
    """Build a transform from ``{"type": name, **options}``; names other than the built-ins
    are looked up in the plugin registry (``laredo_register_transforms``)."""
    built = from_spec("transform", spec, _BUILTINS)
    if not isinstance(built, PipelineTransform):
        raise ConfigError(
            f"transform {spec.get('type')!r} built a {type(built).__name__}, which has no "
            "transform(table, row); fix the plugin's factory"
        )
    return built


@dataclass(frozen=True, slots=True)
class CallableTransform:
    """Adapts ``fn(row)`` or ``fn(table, row)`` to ``transform``. Not declarative: no spec."""

    fn: Callable[..., Any]
    takes_table: bool

    def transform(self, table: TableIdentifier, row: Row) -> Row | None:
        out = self.fn(table, row) if self.takes_table else self.fn(row)
        return None if out is None else dict(out) if not isinstance(out, dict) else out


def as_transform(obj: Any) -> PipelineTransform:
    """A transform object (has ``transform``) as is; a spec dict built by
    :func:`transform_from_spec`; a plain callable ``fn(row)`` or ``fn(table, row)`` wrapped in
    :class:`CallableTransform`."""
    if isinstance(obj, PipelineTransform):
        return obj
    if isinstance(obj, Mapping):
        return transform_from_spec(obj)
    if callable(obj):
        return CallableTransform(obj, arity(obj, "transform") == 2)
    raise TypeError(
        f"not a transform: {obj!r}; pass an object with transform(table, row), a callable "
        "fn(row) / fn(table, row), or a spec dict {'type': 'drop-fields', ...}"
    )
