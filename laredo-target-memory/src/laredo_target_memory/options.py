"""Options of the ``indexed-memory`` target and the rules for its definitions, in one place:
the pydantic model (configuration files, ``laredo.target(...)``) and ``IndexedTarget``'s
keyword constructor both check lookup fields and indexes with the functions here."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Literal, get_args

from laredo.types import IndexDefinition
from pydantic import BaseModel, ConfigDict, Field, field_validator

__all__ = [
    "LOOKUP_INDEX",
    "IndexOptions",
    "IndexedMemoryOptions",
    "index_problems",
    "lookup_field_problems",
    "normalize_indexes",
]

LOOKUP_INDEX = "lookup"
"""Name under which the ``lookup_fields`` index is reachable through ``lookup_all``."""


def lookup_field_problems(fields: Sequence[Any]) -> list[str]:
    """Problems of ``lookup_fields``: each a non-empty column name, none listed twice."""
    out = [
        f"lookup_fields[{i}]: must be a non-empty column name (got {f!r})"
        for i, f in enumerate(fields)
        if not isinstance(f, str) or not f
    ]
    if len({repr(f) for f in fields}) != len(fields):
        out.append(f"lookup_fields: a field is listed twice ({', '.join(map(str, fields))})")
    return out


def index_problems(definitions: Iterable[tuple[int, IndexDefinition]]) -> list[str]:
    """Problems of ``(position, definition)`` pairs: non-empty column names, distinct index
    names, none named :data:`LOOKUP_INDEX`."""
    out: list[str] = []
    seen: set[str] = set()
    for i, d in definitions:
        where = f"indexes[{i}]"
        if not d.fields or not all(isinstance(f, str) and f for f in d.fields):
            out.append(f"{where} ({d.name}).fields: must be a non-empty list of column names")
            continue
        if d.name in seen or d.name == LOOKUP_INDEX:
            why = "reserved for lookup_fields" if d.name == LOOKUP_INDEX else "used twice"
            out.append(f"{where}: index name {d.name!r} is {why}; pick another name")
            continue
        seen.add(d.name)
    return out


def normalize_indexes(
    indexes: Iterable[Any], problems: list[str]
) -> list[tuple[int, IndexDefinition]]:
    """``(position, IndexDefinition)`` of each well-formed entry of ``indexes``: a
    ``laredo.Index``, a mapping ``{name, fields, unique}`` or any object with those attributes;
    malformed entries are reported into ``problems``. :func:`index_problems` checks the rest."""
    out: list[tuple[int, IndexDefinition]] = []
    for i, raw in enumerate(indexes):
        where = f"indexes[{i}]"
        if isinstance(raw, IndexDefinition):
            out.append((i, raw))
            continue
        get: Callable[[str, Any], Any]
        if isinstance(raw, Mapping):
            unknown = set(raw) - {"name", "fields", "unique"}
            if unknown:
                problems.append(
                    f"{where}: unknown key(s) {', '.join(sorted(unknown))}; "
                    f"an index has name, fields and unique"
                )
            get = raw.get
        else:

            def get(attr: str, default: Any, _o: Any = raw) -> Any:
                return getattr(_o, attr, default)

        name, fields = get("name", None), get("fields", None)
        if not isinstance(name, str) or not name:
            problems.append(f"{where}.name: an index needs a non-empty name")
            continue
        if isinstance(fields, str):
            fields = [fields]
        if not isinstance(fields, list | tuple):
            problems.append(f"{where} ({name}).fields: must be a list of column names")
            continue
        out.append((i, IndexDefinition(name, fields, bool(get("unique", False)))))
    return out


Storage = Literal["packed", "compact", "dict"]
"""How ``IndexedTarget`` keeps rows: ``packed`` (default: one bytes object per row),
``compact`` (pages with an array key index: least memory), ``dict`` (row dicts)."""

STORAGES: tuple[str, ...] = get_args(Storage)


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

    def definition(self) -> IndexDefinition:
        return IndexDefinition(self.name, list(self.fields), self.unique)


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

    @field_validator("lookup_fields")
    @classmethod
    def _lookup_rules(cls, v: list[str]) -> list[str]:
        problems = lookup_field_problems(v)
        if problems:
            raise ValueError("; ".join(problems))
        return v

    @field_validator("indexes")
    @classmethod
    def _index_rules(cls, v: list[IndexOptions]) -> list[IndexOptions]:
        problems = index_problems(enumerate(i.definition() for i in v))
        if problems:
            raise ValueError("; ".join(problems))
        return v

    def index_definitions(self) -> list[IndexDefinition]:
        return [i.definition() for i in self.indexes]
