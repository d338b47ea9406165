"""Type modifiers (``pg_attribute.atttypmod``, a Relation message's ``atttypmod``): the declared
precision and scale they encode, and the part of them a table's signature compares.

Only the modifiers Laredo reports in :class:`~laredo.types.ColumnDefinition` take part in a
signature (numeric precision and scale, character length, fractional-seconds precision), so
``ALTER COLUMN ... TYPE numeric(14,2)`` on a ``numeric(12,2)`` column is a schema change, and a
modifier nothing reports (``bit(8)``, an array's element) never makes one.
"""

from __future__ import annotations

from laredo.types import ColumnDefinition

__all__ = ["Signature", "column_signature", "precision_scale", "signature_typmod"]

Signature = tuple[tuple[str, int, int], ...]
"""A table's columns as ``(name, type_oid, typmod)``, in order (what a Relation message
describes); ``typmod`` as :func:`signature_typmod` keeps it."""

NUMERIC = 1700
_CHARS = frozenset({1043, 1042})  # varchar, bpchar
_TIMES = frozenset({1114, 1184, 1083, 1266})  # timestamp, timestamptz, time, timetz
_TIME_TYPES = frozenset({"timestamp", "timestamptz", "time", "timetz"})


def precision_scale(typname: str, typmod: int) -> tuple[int | None, int | None]:
    """The declared precision and scale in a column's ``atttypmod``: ``numeric(12,2)`` ->
    (12, 2) (PostgreSQL 15+ allows a negative scale), ``timestamptz(3)`` -> (3, None);
    (None, None) when the type declares none."""
    if typname == "numeric" and typmod >= 4:
        mod = typmod - 4
        return (mod >> 16) & 0xFFFF, ((mod & 0x7FF) ^ 1024) - 1024
    if typname in _TIME_TYPES and typmod >= 0:
        return typmod, None
    return None, None


def signature_typmod(type_oid: int, typmod: int) -> int:
    """The part of a column's ``atttypmod`` a signature compares (-1: none)."""
    if type_oid == NUMERIC or type_oid in _CHARS or type_oid in _TIMES:
        return typmod if typmod >= 0 else -1
    return -1


def _typmod_of(c: ColumnDefinition) -> int:
    """The ``atttypmod`` a column definition describes (its inverse of the catalog's reading)."""
    if c.type_oid == NUMERIC and c.precision is not None:
        return ((c.precision << 16) | ((c.scale or 0) & 0x7FF)) + 4
    if c.type_oid in _CHARS and c.max_length:
        return c.max_length + 4
    if c.type_oid in _TIMES and c.precision is not None:
        return c.precision
    return -1


def column_signature(columns: list[ColumnDefinition] | tuple[ColumnDefinition, ...]) -> Signature:
    """The signature of columns the catalog described."""
    return tuple((c.name, c.type_oid, signature_typmod(c.type_oid, _typmod_of(c))) for c in columns)
