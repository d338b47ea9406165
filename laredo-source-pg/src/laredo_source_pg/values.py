"""PostgreSQL values Python's ``datetime`` cannot hold, on every read path (stream, text and
binary baseline): one rule, the vocabulary of :mod:`laredo.types`.

* ``'infinity'``/``'-infinity'`` of ``date``, ``timestamp`` and ``timestamptz`` load as the
  extreme values of their types (``date.max``, ``datetime.max``, in UTC for ``timestamptz``).
* Any other value a loader refuses (a year after 9999, a BC date, ``time '24:00'``, an interval
  past ``timedelta``) loads as an :class:`~laredo.types.Unrepresentable` marker naming its type
  and text; the engine dead-letters the change or baseline row holding it.

The fast paths keep psycopg's loaders as they are and call :func:`load_or_mark` only once a
loader raised (``try`` costs nothing in CPython 3.11 until it raises), so ordinary values pay
nothing for this.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from laredo.types import (
    DATE_INFINITY,
    DATE_MINUS_INFINITY,
    TIMESTAMP_INFINITY,
    TIMESTAMP_MINUS_INFINITY,
    TIMESTAMPTZ_INFINITY,
    TIMESTAMPTZ_MINUS_INFINITY,
    Unrepresentable,
)

__all__ = ["INFINITIES", "TYPE_NAMES", "load_or_mark", "marker", "type_name"]

DATE, TIMESTAMP, TIMESTAMPTZ = 1082, 1114, 1184

INFINITIES: dict[int, dict[bytes, Any]] = {
    DATE: {b"infinity": DATE_INFINITY, b"-infinity": DATE_MINUS_INFINITY},
    TIMESTAMP: {b"infinity": TIMESTAMP_INFINITY, b"-infinity": TIMESTAMP_MINUS_INFINITY},
    TIMESTAMPTZ: {b"infinity": TIMESTAMPTZ_INFINITY, b"-infinity": TIMESTAMPTZ_MINUS_INFINITY},
}
"""Per type OID, the text of each infinity and its Python value."""

TYPE_NAMES = {
    DATE: "date",
    TIMESTAMP: "timestamp",
    TIMESTAMPTZ: "timestamptz",
    1083: "time",
    1266: "timetz",
    1186: "interval",
}

_TEXT_LIMIT = 200


def type_name(oid: int) -> str:
    """The name of a built-in type (``type <oid>`` for others)."""
    return TYPE_NAMES.get(oid) or f"type {oid}"


def marker(oid: int, data: Any) -> Any:
    """What a value whose loader refused ``data`` (its text) is: an infinity's Python value,
    or an :class:`~laredo.types.Unrepresentable` marker (the text cut at 200 characters)."""
    raw = bytes(data)
    inf = INFINITIES.get(oid)
    if inf is not None:
        value = inf.get(raw)
        if value is not None:
            return value
    text = raw.decode("utf-8", "replace")
    if len(text) > _TEXT_LIMIT:
        text = text[:_TEXT_LIMIT] + "..."
    return Unrepresentable(type_name(oid), text)


def load_or_mark(load: Callable[[Any], Any], oid: int, data: Any) -> Any:
    """``load(data)``, or :func:`marker` when the loader raises (psycopg's ``DataError`` and
    every other error of one value: none escapes)."""
    try:
        return load(data)
    except Exception:
        return marker(oid, data)
