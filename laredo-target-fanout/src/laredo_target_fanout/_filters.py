"""Subscription filters: AND of ``equals`` / ``prefix`` / ``in`` predicates on columns.

INSERT and UPDATE are matched on the new values, DELETE on the old values; TRUNCATE and
SCHEMA_CHANGE always pass. A missing or NULL column never matches. Numbers compare by value
across int, float and Decimal (``42 == 42.0 == Decimal("42")``); ``prefix`` applies to strings
only. An UPDATE whose old row matched but whose new row does not is delivered to the client as a
DELETE of the old row, so a filtered replica never keeps a row that left its subscription.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from laredo.errors import ConfigError
from laredo.serialization import DECIMAL_LIMIT

__all__ = ["Predicate", "RowMatcher", "compile_filters", "normalize_filters"]


def _norm(v: Any) -> Any:
    """Comparison form: bools stay apart from numbers; numbers compare by value (an integral
    Decimal as itself, which equals and hashes like the int of the same value; any other
    Decimal as a float64, as the protocol specifies). Never builds an integer from a Decimal,
    so its cost does not grow with the exponent."""
    if isinstance(v, bool):
        return ("bool", v)
    if isinstance(v, Decimal):
        if v.is_nan():
            return float("nan")
        if v.is_infinite() or v == v.to_integral_value():
            return v
        return float(v)
    return v


def _check_value(v: Any) -> str | None:
    """Why a filter value cannot be used (None: it can)."""
    if isinstance(v, Decimal) and v.is_finite():
        exp = v.adjusted()
        if abs(exp) > DECIMAL_LIMIT:  # the same bound as typed-JSON decoding
            return (
                f"decimal value has exponent {exp}, beyond the limit of "
                f"{DECIMAL_LIMIT} (PostgreSQL's numeric reaches 131072)"
            )
    return None


@dataclass(frozen=True, slots=True)
class Predicate:
    """One predicate: ``op`` is ``equals``, ``prefix`` or ``in``."""

    field: str
    op: str
    value: Any


RowMatcher = Callable[[Mapping[str, Any] | None], bool]


def normalize_filters(filters: Any) -> list[Predicate]:
    """Accept ``Predicate`` objects, ``(field, op, value)`` tuples, or mappings
    ``{"field": f, "equals"|"prefix"|"in": v}``; ConfigError lists every bad entry."""
    if not filters:
        return []
    if isinstance(filters, Mapping):
        filters = [filters]
    out: list[Predicate] = []
    problems: list[str] = []
    for i, f in enumerate(filters):
        where = f"filters[{i}]"
        if isinstance(f, Predicate):
            p = f
        elif isinstance(f, tuple) and len(f) == 3:
            p = Predicate(f[0], f[1], f[2])
        elif isinstance(f, Mapping):
            ops = [k for k in ("equals", "prefix", "in") if k in f]
            unknown = set(f) - {"field", "equals", "prefix", "in"}
            if unknown:
                problems.append(f"{where}: unknown key(s) {', '.join(sorted(unknown))}")
                continue
            if len(ops) != 1:
                problems.append(f"{where}: give exactly one of equals, prefix, in")
                continue
            p = Predicate(f.get("field", ""), ops[0], f[ops[0]])
        else:
            problems.append(
                f"{where}: expected {{'field': ..., 'equals'|'prefix'|'in': ...}}, got {f!r}"
            )
            continue
        if not isinstance(p.field, str) or not p.field:
            problems.append(f"{where}: field must be a non-empty column name")
        elif p.op not in ("equals", "prefix", "in"):
            problems.append(
                f"{where} ({p.field}): unknown operator {p.op!r}; use equals, prefix, in"
            )
        elif p.op == "prefix" and not isinstance(p.value, str):
            problems.append(f"{where} ({p.field}): prefix needs a string, got {p.value!r}")
        elif p.op == "in" and not isinstance(p.value, list | tuple | set | frozenset):
            problems.append(f"{where} ({p.field}): in needs a list of values, got {p.value!r}")
        elif bad := next(
            filter(None, map(_check_value, p.value if p.op == "in" else [p.value])), None
        ):
            problems.append(f"{where} ({p.field}): {bad}")
        else:
            out.append(p)
    if problems:
        raise ConfigError(problems)
    return out


def compile_filters(predicates: Sequence[Predicate]) -> RowMatcher | None:
    """A function ``row -> bool`` (None when there is no predicate: everything matches)."""
    if not predicates:
        return None
    checks: list[Callable[[Mapping[str, Any]], bool]] = []
    for p in predicates:
        checks.append(_compile_one(p))

    def match(row: Mapping[str, Any] | None) -> bool:
        if row is None:
            return False
        return all(c(row) for c in checks)

    return match


def _compile_one(p: Predicate) -> Callable[[Mapping[str, Any]], bool]:
    field = p.field
    if p.op == "prefix":
        prefix: str = p.value

        def pre(row: Mapping[str, Any]) -> bool:
            v = row.get(field)
            return isinstance(v, str) and v.startswith(prefix)

        return pre
    values: Iterable[Any] = [p.value] if p.op == "equals" else list(p.value)
    wanted = [_norm(v) for v in values if v is not None]
    hashable: set[Any] = set()
    others: list[Any] = []
    for w in wanted:
        try:
            hashable.add(w)
        except TypeError:
            others.append(w)

    def eq(row: Mapping[str, Any]) -> bool:
        v = row.get(field)
        if v is None:
            return False
        n = _norm(v)
        try:
            if n in hashable:
                return True
        except TypeError:
            pass
        return any(n == o for o in others)

    return eq
