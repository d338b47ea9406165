"""A table's baseline read in PostgreSQL's binary format, as scalar tuples.

When every column of a table is of a type whose binary value psycopg loads exactly as it loads
its text (or is ``numeric``, ``date``, ``timestamp``, ``timestamptz``, sent as text or integers
and converted when read), the baseline is read in binary: the server formats nothing, the client
parses nothing, and a packing target stores each tuple as it came (see
:class:`~laredo.batches.RowBatch`). Guarantee: the row dicts built from these batches equal what
the text path gives, value, type and time zone (DST fold included); a value Python cannot hold
is left out of its chunk before it is handed on (the row goes to the dead letters, see
:mod:`laredo.engine.unrepresentable`); the infinities read as ``date.max``/``datetime.max`` and
their minimums, as on the text path (:mod:`.values`).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Sequence
from decimal import Decimal
from operator import itemgetter
from typing import Any

import psycopg
from laredo.batches import (
    RAW_DAY_INFINITY,
    RAW_INFINITY,
    STAMP_EPOCH_US,
    RowBatch,
    Stamps,
    day_value,
    stamp_value,
)
from laredo.types import ColumnDefinition, Unrepresentable
from psycopg import sql
from psycopg.types.numeric import Int4BinaryLoader, Int8BinaryLoader

from .typmods import NUMERIC

__all__ = [
    "BinaryPlan",
    "binary_plan",
    "check_raw_range",
    "register_raw_loaders",
    "rejected_row",
]

_PLAIN_BINARY = frozenset({16, 17, 19, 20, 21, 23, 25, 26, 701, 1042, 1043})
"""Types whose binary values psycopg loads to exactly what it loads from their text, as ``int``,
``float``, ``str``, ``bool`` or ``bytes`` (bool, bytea, name, int8/2/4, text, oid, float8,
bpchar, varchar; not float4, whose binary value is not the text's shortest repr)."""
_TIMESTAMPTZ, _TIMESTAMP, _DATE, _FLOAT8 = 1184, 1114, 1082, 701


@dataclasses.dataclass(frozen=True)
class BinaryPlan:
    """How a table's baseline is read in PostgreSQL's binary format, as scalar tuples (see
    :func:`binary_plan`): the select list, and the raw positions of its ``RowBatch`` es."""

    select: sql.Composable
    decimals: frozenset[int]
    stamps: Stamps
    days: frozenset[int]

    def batch(self, names: tuple[str, ...], rows: list[Any]) -> RowBatch:
        return RowBatch(names, rows, self.decimals, stamps=self.stamps, days=self.days, scalar=True)


def binary_plan(cur: psycopg.Cursor[Any], columns: Sequence[ColumnDefinition]) -> BinaryPlan | None:
    """Read the table in binary, every value a scalar, when each column is of a type that
    allows it: the plain types of :data:`_PLAIN_BINARY`, ``numeric`` (selected as its text:
    the ``Decimal`` is built when read), ``timestamp``/``timestamptz`` (int microseconds) and
    ``date`` (int days), whose objects are likewise built when read: the server skips
    formatting them, the client parsing them, and a packing target stores them as they came.
    Registers the loaders on ``cur``. None (read as text) for any other type, for ``float8``
    when the session rounds its text (``extra_float_digits`` < 1: the stream's text would then
    differ from the exact binary value), or when psycopg's time zone helper is missing."""
    if _session_zone is None:
        return None
    if any(c.type_oid == _FLOAT8 for c in columns):
        row = cur.execute("SHOW extra_float_digits").fetchone()
        if row is None or int(row[0]) < 1:
            return None
    zone = _session_zone(cur.connection.pgconn)
    items: list[sql.Composable] = []
    decimals: set[int] = set()
    stamps: list[tuple[int, Any]] = []
    days: set[int] = set()
    for i, col in enumerate(columns):
        ident: sql.Composable = sql.Identifier(col.name)
        oid = col.type_oid
        if oid == NUMERIC:
            ident = sql.SQL("{}::text").format(ident)
            decimals.add(i)
        elif oid in {_TIMESTAMPTZ, _TIMESTAMP}:
            stamps.append((i, zone if oid == _TIMESTAMPTZ else None))
        elif oid == _DATE:
            days.add(i)
        elif oid not in _PLAIN_BINARY:
            return None
        items.append(ident)
    register_raw_loaders(cur)
    return BinaryPlan(
        sql.SQL(", ").join(items), frozenset(decimals), tuple(stamps), frozenset(days)
    )


def register_raw_loaders(cur: psycopg.Cursor[Any]) -> None:
    """Load binary timestamps and dates on ``cur`` as their raw integers (a plan's reads)."""
    cur.adapters.register_loader(_TIMESTAMPTZ, Int8BinaryLoader)
    cur.adapters.register_loader(_TIMESTAMP, Int8BinaryLoader)
    cur.adapters.register_loader(_DATE, Int4BinaryLoader)


def check_raw_range(rows: list[Any], plan: BinaryPlan) -> list[int]:
    """The positions in ``rows`` of those holding a raw timestamp or date with no Python value
    (outside years 1 to 9999; the infinities have one): checked before the chunk is handed on,
    so nothing is stored that cannot be read back. Costs one min/max per column when every
    value is fine."""
    bad: set[int] = set()
    for i, convert in _converters(plan):
        col = list(map(itemgetter(i), rows))
        if None in col:
            col = [v for v in col if v is not None]
        if not col:
            continue
        lo, hi = min(col), max(col)
        edges = _DAY_EDGES if i in plan.days else _STAMP_EDGES
        if lo in edges or hi in edges:  # the infinities: check the values between them
            col = [v for v in col if v not in edges]
            if not col:
                continue
            lo, hi = min(col), max(col)
        try:
            convert(lo)
            convert(hi)
        except OverflowError:
            for n, row in enumerate(rows):
                if row[i] is not None and _fails(convert, row[i]):
                    bad.add(n)
    return sorted(bad)


def rejected_row(names: Sequence[str], raw: Sequence[Any], plan: BinaryPlan) -> dict[str, Any]:
    """The row dict of a raw tuple :func:`check_raw_range` refused: each value Python cannot
    hold as an :class:`~laredo.types.Unrepresentable` marker (with PostgreSQL's text of it, in
    UTC for a zoned timestamp), the others as the row dict has them."""
    values = list(raw)
    for i, convert in _converters(plan):
        v = values[i]
        if v is None:
            continue
        try:
            values[i] = convert(v)
        except OverflowError:
            values[i] = _marker(v, i, plan)
    for i in plan.decimals:
        if values[i] is not None:
            values[i] = Decimal(values[i])
    return dict(zip(names, values, strict=False))


_US_PER_DAY = 86_400_000_000
_PG_EPOCH_DAYS = STAMP_EPOCH_US // _US_PER_DAY  # 2000-01-01 in days after 1970-01-01


def _marker(raw: int, i: int, plan: BinaryPlan) -> Unrepresentable:
    if i in plan.days:
        return Unrepresentable("date", _pg_date(raw))
    zoned = dict(plan.stamps)[i] is not None
    days, micros = divmod(raw, _US_PER_DAY)
    secs, frac = divmod(micros, 1_000_000)
    clock = f"{secs // 3600:02d}:{secs // 60 % 60:02d}:{secs % 60:02d}"
    if frac:
        clock += f".{frac:06d}".rstrip("0")
    day = _pg_date(days)
    era = " BC" if day.endswith(" BC") else ""
    text = f"{day.removesuffix(' BC')} {clock}{'+00' if zoned else ''}{era}"
    return Unrepresentable("timestamptz" if zoned else "timestamp", text)


def _pg_date(days: int) -> str:
    """PostgreSQL's text of the date ``days`` after 2000-01-01, any year (proleptic Gregorian;
    H. Hinnant's ``civil_from_days``), ``BC`` for years before 1."""
    z = days + _PG_EPOCH_DAYS + 719_468
    era, doe = divmod(z, 146_097)
    yoe = (doe - doe // 1460 + doe // 36_524 - doe // 146_096) // 365
    doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    mp = (5 * doy + 2) // 153
    day = doy - (153 * mp + 2) // 5 + 1
    month = mp + 3 if mp < 10 else mp - 9
    year = yoe + era * 400 + (month <= 2)
    if year <= 0:
        return f"{1 - year:04d}-{month:02d}-{day:02d} BC"
    return f"{year:04d}-{month:02d}-{day:02d}"


_STAMP_EDGES = frozenset({RAW_INFINITY, -RAW_INFINITY - 1})
_DAY_EDGES = frozenset({RAW_DAY_INFINITY, -RAW_DAY_INFINITY - 1})


def _converters(plan: BinaryPlan) -> list[tuple[int, Callable[[int], Any]]]:
    checks: list[tuple[int, Callable[[int], Any]]] = [
        (i, functools.partial(stamp_value, zone=zone)) for i, zone in plan.stamps
    ]
    return checks + [(i, day_value) for i in plan.days]


def _fails(convert: Callable[[int], Any], value: int) -> bool:
    try:
        convert(value)
    except OverflowError:
        return True
    return False


def _zone_getter() -> Callable[[Any], Any] | None:
    """psycopg's ``pgconn -> tzinfo`` of a session (what its loaders convert to)."""
    try:
        from psycopg._tz import get_tzinfo  # noqa: PLC0415 - private: absent means text baselines
    except ImportError:  # pragma: no cover - psycopg is pinned
        return None
    return get_tzinfo


_session_zone = _zone_getter()
