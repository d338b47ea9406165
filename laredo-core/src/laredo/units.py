"""One grammar for durations and sizes, used by every package, every options model and HOCON.

Durations are seconds (``float``). Accepted: a non-negative number of seconds, a ``timedelta``,
text such as ``"200ms"``, ``"30s"``, ``"10m"``, ``"1h30m"``, ``"1h 30m"``, ``"10 minutes"``,
``"7d"``, ``"2w"`` (units ``ns``, ``us``, ``ms``, ``s``/``sec``/``second``,
``m``/``min``/``minute``, ``h``/``hour``, ``d``/``day``, ``w``/``week``, plurals too), a numeric
string (seconds), and pyhocon's ``relativedelta`` (months and years are refused: they have no
fixed length).

Sizes are bytes (``int``): an integer or text such as ``"512KB"``, ``"10MB"``, ``"1GiB"``
(``k``/``m``/``g``/``t`` are powers of 1000, ``ki``/``mi``/``gi``/``ti`` powers of 1024; a
trailing ``b`` is optional).

Use :data:`Duration` and :data:`Size` in pydantic models; :func:`parse_duration` and
:func:`parse_size` elsewhere.

Free-form maps (Spark settings, HTTP headers, client options) are not durations: their values
reach the library as the text the user wrote. A configuration loader that reads ``768m`` as a
duration gives a :class:`WrittenDuration` (seconds, with the text kept), and
:data:`WrittenText` / :func:`as_written` give that text back (``"768m"``, not ``46080.0``).

Errors are ``ConfigError`` (a ``ValueError``) naming the expected
form, prefixed with ``what`` when given.
"""

from __future__ import annotations

import math
import re
from datetime import timedelta
from typing import Annotated, Any

from pydantic import BeforeValidator

from .errors import ConfigError

__all__ = [
    "Duration",
    "OptionalDuration",
    "Size",
    "WrittenDuration",
    "WrittenText",
    "as_written",
    "parse_duration",
    "parse_size",
    "parse_timedelta",
    "to_seconds",
]

_SECOND = 1.0
_MINUTE = 60.0
_HOUR = 3600.0
_DAY = 86400.0
_WEEK = 604800.0
_DURATION_UNITS: dict[str, float] = {
    "ns": 1e-9,
    "us": 1e-6,
    "ms": 0.001,
    "s": _SECOND,
    "sec": _SECOND,
    "secs": _SECOND,
    "second": _SECOND,
    "seconds": _SECOND,
    "m": _MINUTE,
    "min": _MINUTE,
    "mins": _MINUTE,
    "minute": _MINUTE,
    "minutes": _MINUTE,
    "h": _HOUR,
    "hr": _HOUR,
    "hrs": _HOUR,
    "hour": _HOUR,
    "hours": _HOUR,
    "d": _DAY,
    "day": _DAY,
    "days": _DAY,
    "w": _WEEK,
    "week": _WEEK,
    "weeks": _WEEK,
}
_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)\s*([a-z]+)")
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?i?)b?\s*$", re.IGNORECASE)
_SIZE_UNITS: dict[str, int] = {
    "": 1,
    "k": 1000,
    "m": 1000**2,
    "g": 1000**3,
    "t": 1000**4,
    "ki": 1024,
    "mi": 1024**2,
    "gi": 1024**3,
    "ti": 1024**4,
}
_DURATION_HINT = "write e.g. '200ms', '30s', '10m', '1h30m', '7d' or a number of seconds"
_SIZE_HINT = "write e.g. 1048576, '512KB', '10MB' or '1GiB'"


def _fail(what: str | None, message: str) -> ConfigError:
    return ConfigError(f"{what}: {message}" if what else message)


def _relativedelta_seconds(value: Any, what: str | None) -> float:
    if value.years or value.months:
        raise _fail(what, "months and years have no fixed length: write days instead (e.g. 30d)")
    total = (
        value.days * _DAY
        + value.hours * _HOUR
        + value.minutes * _MINUTE
        + value.seconds
        + value.microseconds / 1e6
    )
    return float(total)


def parse_duration(value: Any, what: str | None = None) -> float:
    """Seconds from any accepted duration form (see the module docstring)."""
    if isinstance(value, bool):
        raise _fail(what, f"expected a duration, got {value!r}; {_DURATION_HINT}")
    if isinstance(value, int | float):
        if not math.isfinite(value) or value < 0:
            raise _fail(what, f"a duration must be a non-negative number of seconds, got {value}")
        return float(value)
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
        if seconds < 0:
            raise _fail(what, f"a duration must not be negative, got {value}")
        return seconds
    if type(value).__name__ == "relativedelta" and hasattr(value, "months"):
        return _relativedelta_seconds(value, what)
    if isinstance(value, str):
        text = value.strip().lower()
        try:
            number = float(text)
        except ValueError:
            pass
        else:
            return parse_duration(number, what)
        pos = 0
        total = 0.0
        for m in _DURATION_PART.finditer(text):
            unit = _DURATION_UNITS.get(m.group(2))
            if text[pos : m.start()].strip() or unit is None:
                break
            total += float(m.group(1)) * unit
            pos = m.end()
        if text and pos == len(text):
            return total
    raise _fail(what, f"invalid duration {value!r}: {_DURATION_HINT}")


class WrittenDuration(float):
    """Seconds of a value a configuration file wrote as a duration (HOCON reads ``30s`` and
    ``768m`` as durations), with the text as written in :attr:`text`. It is a ``float`` for
    every duration option; free-form maps take :attr:`text` (:func:`as_written`)."""

    __slots__ = ("text",)
    text: str

    def __new__(cls, seconds: float, text: str) -> WrittenDuration:
        obj = super().__new__(cls, seconds)
        obj.text = text
        return obj

    def __reduce__(self) -> tuple[Any, ...]:
        return (WrittenDuration, (float(self), self.text))


def as_written(value: Any) -> Any:
    """A scalar of a free-form map as the text written in the configuration: a
    :class:`WrittenDuration` as its text (``"768m"``), booleans as ``"true"``/``"false"``,
    numbers as their text; strings and anything else unchanged."""
    if isinstance(value, WrittenDuration):
        return value.text
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    return value


def parse_timedelta(value: Any, what: str | None = None) -> timedelta:
    """:func:`parse_duration` as a ``timedelta``."""
    if isinstance(value, timedelta):
        parse_duration(value, what)
        return value
    return timedelta(seconds=parse_duration(value, what))


def to_seconds(value: Any, what: str | None = None) -> float | None:
    """``None`` stays ``None``; anything else is :func:`parse_duration`."""
    return None if value is None else parse_duration(value, what)


def parse_size(value: Any, what: str | None = None) -> int:
    """Bytes from an integer or size text (see the module docstring)."""
    if isinstance(value, bool):
        raise _fail(what, f"expected a size, got {value!r}; {_SIZE_HINT}")
    if isinstance(value, int):
        if value < 0:
            raise _fail(what, f"a size must not be negative, got {value}")
        return value
    if isinstance(value, float) and value.is_integer() and value >= 0:
        return int(value)
    if isinstance(value, str):
        m = _SIZE.match(value)
        if m:
            unit = _SIZE_UNITS.get(m.group(2).lower())
            if unit is not None:
                return int(float(m.group(1)) * unit)
    raise _fail(what, f"invalid size {value!r}: {_SIZE_HINT}")


def _duration_or_none(value: Any) -> float | None:
    return None if value is None else parse_duration(value)


Duration = Annotated[float, BeforeValidator(parse_duration)]
"""A pydantic field type: any accepted duration form, stored as seconds."""

OptionalDuration = Annotated[float | None, BeforeValidator(_duration_or_none)]
"""Like :data:`Duration`, ``None`` allowed (usually meaning "off")."""

Size = Annotated[int, BeforeValidator(parse_size)]
"""A pydantic field type: any accepted size form, stored as bytes."""

WrittenText = Annotated[str, BeforeValidator(as_written)]
"""A pydantic field type for values of free-form maps: the text as written (:func:`as_written`),
e.g. ``headers: dict[str, WrittenText]``."""
