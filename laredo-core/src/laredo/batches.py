"""Batches on the data path: rows and changes carried as value tuples, dicts built lazily.

A source that can hand over a whole transaction (or a chunk of one) or a chunk of baseline rows
as tuples of values in column order uses these types; the engine passes them through unchanged,
and a target that opts in (:class:`~laredo.contracts.ChangeBatchTarget`, or
:class:`~laredo.contracts.BaselineBatchTarget` checking for a :class:`RowBatch`) stores the
tuples directly. Everyone else sees what they always saw:

* :class:`RowBatch` is a ``Sequence[Row]``: indexing or iterating it builds the row dicts (a new
  dict per access, built from the tuple: the caller may keep or change it).
* :class:`ChangeBatch` is a ``Sequence[ChangeEvent]``: the events are built on first access (once,
  then cached) with exactly the values, actions, identities and unchanged-TOAST sets the source
  decoded. A filter, transform, listener, observer or a target without the capability is thus
  served by the reference (per-change) path, with the same results. A chunked backfill's rows
  come as :meth:`ChangeBatch.of_rows`: INSERTs (upserts) held as a :class:`RowBatch`
  (:attr:`ChangeBatch.rows`, raw columns allowed), the ops built from it only when asked.

Guarantees: a batch is immutable once handed over (its tuples and lists are never changed); every
change of a :class:`ChangeBatch` is of one table and carries the batch's one position (a whole
transaction, or one chunk of a transaction too big to hold; the engine acknowledges only at the
end of a transaction); changes are in source order.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, date, datetime, timedelta, tzinfo
from decimal import Decimal
from typing import Any, overload

from .types import ChangeAction, ChangeEvent, Position, Row, TableIdentifier

__all__ = [
    "RAW_DAY_INFINITY",
    "RAW_INFINITY",
    "STAMP_EPOCH",
    "STAMP_EPOCH_US",
    "UNCHANGED",
    "ChangeBatch",
    "ChangeOp",
    "RowBatch",
    "Stamps",
    "day_value",
    "row_maker",
    "stamp_value",
    "tuple_maker",
]


class _Unchanged:
    """The value of an unchanged TOAST column the source did not send (keep the stored one)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "UNCHANGED"

    def __reduce__(self) -> str:
        return "UNCHANGED"


UNCHANGED: Any = _Unchanged()
"""Placeholder in a value tuple for a column whose value was not sent (unchanged TOAST)."""

ChangeOp = tuple[Any, ...]
"""One change of a :class:`ChangeBatch`: ``(action, new, old, unchanged, ...)`` (a source may
keep fields of its own after these four; nobody else reads them). ``action``: a
:class:`~laredo.types.ChangeAction`; ``new``: the new
values in the batch's column order (INSERT, UPDATE), :data:`UNCHANGED` where a TOAST value was not
sent (then ``unchanged`` names those columns); ``old``: the identity dict (DELETE; UPDATE when the
source sent one, e.g. a key change) or None."""


STAMP_EPOCH = datetime(2000, 1, 1)
"""What a raw timestamp or date counts from (PostgreSQL's own epoch, so a source can hand over
the server's binary value as it is): microseconds (timestamps, UTC for zoned ones) or days."""

STAMP_EPOCH_US = (STAMP_EPOCH - datetime(1970, 1, 1)) // timedelta(microseconds=1)
"""Microseconds from the Unix epoch to :data:`STAMP_EPOCH` (add it to a raw timestamp to get
Unix microseconds)."""

_EPOCH_UTC = STAMP_EPOCH.replace(tzinfo=UTC)
_EPOCH_DAY = STAMP_EPOCH.date()
_UTC = UTC

Stamps = tuple[tuple[int, tzinfo | None], ...]
"""Positions of raw timestamps in a :class:`RowBatch`'s tuples, each with the zone its
``datetime`` takes (None: a naive timestamp)."""


RAW_INFINITY = 2**63 - 1
"""A raw timestamp at positive infinity (PostgreSQL's binary ``'infinity'``); its negation
minus one, ``-2**63``, is negative infinity. Dates use the 32-bit bounds,
:data:`RAW_DAY_INFINITY`."""
RAW_DAY_INFINITY = 2**31 - 1


def stamp_value(micros: int, zone: tzinfo | None) -> datetime:
    """The ``datetime`` of a raw timestamp: ``micros`` after :data:`STAMP_EPOCH`, in UTC then
    converted to ``zone`` (exactly what psycopg's loaders return for ``timestamptz`` in a
    session of that time zone), or naive wall time when ``zone`` is None. The infinities
    (:data:`RAW_INFINITY`) give ``datetime.max``/``min`` (in UTC for a zoned timestamp: see
    :mod:`laredo.types`). Raises ``OverflowError`` for any other value outside ``datetime``'s
    years 1 to 9999."""
    try:
        if zone is None:
            return STAMP_EPOCH + timedelta(microseconds=micros)
        at = _EPOCH_UTC + timedelta(microseconds=micros)
        return at if zone is _UTC else at.astimezone(zone)
    except OverflowError:
        if micros == RAW_INFINITY or micros == -RAW_INFINITY - 1:
            edge = datetime.max if micros > 0 else datetime.min
            return edge if zone is None else edge.replace(tzinfo=_UTC)
        raise


def day_value(days: int) -> date:
    """The ``date`` of a raw date: ``days`` after :data:`STAMP_EPOCH`; the infinities
    (:data:`RAW_DAY_INFINITY`) give ``date.max``/``min``. ``OverflowError`` for any other
    value outside years 1 to 9999."""
    try:
        return _EPOCH_DAY + timedelta(days=days)
    except OverflowError:
        if days == RAW_DAY_INFINITY or days == -RAW_DAY_INFINITY - 1:
            return date.max if days > 0 else date.min
        raise


def _conversions(
    env: dict[str, Any], decimals: frozenset[int], stamps: Stamps, days: frozenset[int]
) -> dict[int, str]:
    """The expression (a ``{}`` for the raw value) converting each raw position, for code
    compiled in ``env`` (which gets the converters and zones it names)."""
    env.update(D=Decimal, S=stamp_value, DY=day_value)
    conv: dict[int, str] = {i: "D({})" for i in decimals}
    for i, zone in stamps:
        env[f"Z{i}"] = zone
        conv[i] = f"S({{}}, Z{i})"
    for i in days:
        conv[i] = "DY({})"
    return conv


@functools.lru_cache(maxsize=256)
def row_maker(
    names: tuple[str, ...],
    decimals: frozenset[int] = frozenset(),
    stamps: Stamps = (),
    days: frozenset[int] = frozenset(),
) -> Callable[[Sequence[Any]], Row]:
    """``values -> {name: value}`` for these column names, compiled to one dict display (about
    a third faster than ``dict(zip(names, values))``). Values past the names are ignored, and
    fewer values than names give a shorter dict. Positions in ``decimals`` hold a decimal's
    text, in ``stamps`` a raw timestamp, in ``days`` a raw date (or None): the dict gets the
    ``Decimal``, ``datetime`` or ``date`` (see :class:`RowBatch`)."""
    env: dict[str, Any] = {"zip": zip, "dict": dict, "names": names}
    conv = _conversions(env, decimals, stamps, days)
    body = ", ".join(
        f"{name!r}: (None if v[{i}] is None else {conv[i].format(f'v[{i}]')})"
        if i in conv
        else f"{name!r}: v[{i}]"
        for i, name in enumerate(names)
    )
    if conv:  # a short tuple: convert what is there
        zones = dict(stamps)
        env["conv"] = {
            i: Decimal if i in decimals else day_value if i in days else _stamper(zones[i])
            for i in conv
        }
        short = (
            "dict(zip(names, [x if x is None or i not in conv else conv[i](x) "
            "for i, x in enumerate(v)]))"
        )
    else:
        short = "dict(zip(names, v))"
    exec(
        f"def make(v):\n"
        f"    if len(v) == {len(names)}:\n"
        f"        return {{{body}}}\n"
        f"    return {short}",
        env,
    )
    make: Callable[[Sequence[Any]], Row] = env["make"]
    return make


@functools.lru_cache(maxsize=256)
def tuple_maker(
    width: int,
    decimals: frozenset[int] = frozenset(),
    stamps: Stamps = (),
    days: frozenset[int] = frozenset(),
) -> Callable[[Sequence[Any]], tuple[Any, ...]]:
    """``raw values -> values`` for tuples of ``width`` values whose positions in ``decimals``,
    ``stamps`` and ``days`` are raw (see :class:`RowBatch`): one compiled tuple display."""
    env: dict[str, Any] = {}
    conv = _conversions(env, decimals, stamps, days)
    items = [
        f"(None if v[{i}] is None else {conv[i].format(f'v[{i}]')})" if i in conv else f"v[{i}]"
        for i in range(width)
    ]
    exec(f"def make(v):\n    return ({''.join(x + ', ' for x in items)})", env)
    make: Callable[[Sequence[Any]], tuple[Any, ...]] = env["make"]
    return make


def _stamper(zone: tzinfo | None) -> Callable[[int], datetime]:
    return lambda micros: stamp_value(micros, zone)


class RowBatch(Sequence[Row]):
    """Baseline rows of one table as value tuples in ``names`` order (see the module
    docstring). ``values`` is the list of tuples; ``rows[i]`` builds a new dict.

    Raw columns, as a source may load them to skip building objects a packing target would
    take apart again (the row dicts hold the real values; a target reading ``values`` must
    honour these):

    * ``decimals``: positions holding a ``Decimal``'s text (or None);
    * ``stamps``: positions holding a timestamp as int microseconds after
      :data:`STAMP_EPOCH` (or None), each with its zone (see :func:`stamp_value`);
    * ``days``: positions holding a date as int days after :data:`STAMP_EPOCH` (or None);
    * ``scalar``: every other value is None or exactly an ``int``, ``float``, ``str``,
      ``bool`` or ``bytes`` (so the tuple can be stored as it is).

    ``rejected``: rows of the chunk left out of ``values`` because a column holds an
    :class:`~laredo.types.Unrepresentable` value (as row dicts; the engine dead-letters them)."""

    __slots__ = ("_make", "days", "decimals", "names", "rejected", "scalar", "stamps", "values")

    def __init__(
        self,
        names: Sequence[str],
        values: list[tuple[Any, ...]],
        decimals: frozenset[int] = frozenset(),
        *,
        stamps: Stamps = (),
        days: frozenset[int] = frozenset(),
        scalar: bool = False,
        rejected: tuple[Row, ...] = (),
    ) -> None:
        self.names: tuple[str, ...] = tuple(names)
        self.rejected = rejected
        self.values = values
        self.decimals = decimals
        self.stamps = stamps
        self.days = days
        self.scalar = scalar
        self._make = row_maker(self.names, decimals, stamps, days)

    @property
    def raw(self) -> frozenset[int]:
        """Every position whose tuple value is not the row's value (decimals, stamps, days)."""
        return self.decimals | self.days | {i for i, _zone in self.stamps}

    def __len__(self) -> int:
        return len(self.values)

    @overload
    def __getitem__(self, index: int) -> Row: ...

    @overload
    def __getitem__(self, index: slice) -> RowBatch: ...

    def __getitem__(self, index: int | slice) -> Row | RowBatch:
        if isinstance(index, slice):
            return self._with(self.values[index])
        return self._make(self.values[index])

    def __iter__(self) -> Iterator[Row]:
        return map(self._make, self.values)

    def __repr__(self) -> str:
        return f"RowBatch({self.names!r}, <{len(self.values)} rows>)"

    def __reduce__(self) -> tuple[Any, ...]:
        return (
            _row_batch,
            (self.names, self.values, self.decimals, (self.stamps, self.days, self.scalar)),
        )

    def _with(self, values: list[tuple[Any, ...]]) -> RowBatch:
        return _row_batch(self.names, values, self.decimals, (self.stamps, self.days, self.scalar))

    def with_values(self, values: list[tuple[Any, ...]]) -> RowBatch:
        """A batch of other tuples of this one's layout (names, raw columns, scalar)."""
        return self._with(values)

    def tuples(self) -> list[tuple[Any, ...]]:
        """The value tuples with every raw column converted (``Decimal``, ``datetime``,
        ``date``): what ``tuple(row.values())`` of each row dict gives (``values`` itself when
        no column is raw)."""
        if not (self.decimals or self.stamps or self.days):
            return self.values
        make = tuple_maker(len(self.names), self.decimals, self.stamps, self.days)
        return list(map(make, self.values))


def _row_batch(
    names: tuple[str, ...],
    values: list[tuple[Any, ...]],
    decimals: frozenset[int],
    raw: tuple[Stamps, frozenset[int], bool],
) -> RowBatch:
    return RowBatch(names, values, decimals, stamps=raw[0], days=raw[1], scalar=raw[2])


class ChangeBatch(Sequence[ChangeEvent]):
    """Changes of one table at one position, as :data:`ChangeOp` s (see the module docstring).
    Indexing or iterating builds :class:`~laredo.types.ChangeEvent` s (once, then cached)."""

    __slots__ = (
        "_events",
        "_ops",
        "commit_time",
        "names",
        "position",
        "rows",
        "table",
        "unrepresentable",
        "xid",
    )

    def __init__(
        self,
        table: TableIdentifier,
        names: tuple[str, ...],
        ops: list[ChangeOp] | None,
        position: Position,
        *,
        commit_time: datetime | None = None,
        xid: int = 0,
        unrepresentable: bool = False,
        rows: RowBatch | None = None,
    ) -> None:
        self.table = table
        self.names = names
        self._ops = ops
        self.rows = rows
        """A chunked backfill's rows (see :meth:`of_rows`), else None."""
        if ops is None and rows is None:
            raise ValueError("ChangeBatch: give ops or rows")
        self.position = position
        self.commit_time = commit_time
        self.xid = xid
        self.unrepresentable = unrepresentable
        """Some op may hold an :class:`~laredo.types.Unrepresentable` value (the source says
        so; the engine then dead-letters those changes instead of applying them)."""
        self._events: list[ChangeEvent] | None = None

    @classmethod
    def of_rows(cls, table: TableIdentifier, rows: RowBatch, position: Position) -> ChangeBatch:
        """A chunked backfill's rows as one batch: one INSERT per row of ``rows`` (raw columns
        allowed), each an upsert (a key the target holds is replaced), all at ``position``.
        :attr:`rows` keeps the batch, so a target may store it as it stores a baseline chunk
        (``RowBatch`` fast paths); :attr:`ops` and the events are built only when asked."""
        return cls(table, rows.names, None, position, rows=rows)

    @property
    def ops(self) -> list[ChangeOp]:
        """The changes as :data:`ChangeOp` s (built from :attr:`rows` on first use)."""
        ops = self._ops
        if ops is None:
            assert self.rows is not None
            insert = ChangeAction.INSERT
            ops = self._ops = [(insert, t, None, None) for t in self.rows.tuples()]
        return ops

    def __len__(self) -> int:
        ops = self._ops
        if ops is None:
            assert self.rows is not None
            return len(self.rows)
        return len(ops)

    @overload
    def __getitem__(self, index: int) -> ChangeEvent: ...

    @overload
    def __getitem__(self, index: slice) -> ChangeBatch: ...

    def __getitem__(self, index: int | slice) -> ChangeEvent | ChangeBatch:
        if isinstance(index, slice):
            if self._ops is None and self.rows is not None:
                return ChangeBatch.of_rows(self.table, self.rows[index], self.position)
            return ChangeBatch(
                self.table,
                self.names,
                self.ops[index],
                self.position,
                commit_time=self.commit_time,
                xid=self.xid,
                unrepresentable=self.unrepresentable,
            )
        return self.events()[index]

    def __iter__(self) -> Iterator[ChangeEvent]:
        return iter(self.events())

    def __repr__(self) -> str:
        return f"ChangeBatch({self.table}, <{len(self)} changes> at {self.position!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickles as the list of its events (ops may hold a source's own objects)."""
        return (list, (self.events(),))

    def events(self) -> list[ChangeEvent]:
        """The changes as events (built on the first call, then the same list)."""
        events = self._events
        if events is None:
            events = self._events = [self.event(op) for op in self.ops]
        return events

    def row(self, values: tuple[Any, ...], unchanged: frozenset[str] | None = None) -> Row:
        """The row dict of a value tuple; with ``unchanged`` (the op's set) the
        :data:`UNCHANGED` values are left out."""
        if unchanged:
            return {n: v for n, v in zip(self.names, values, strict=False) if v is not UNCHANGED}
        return row_maker(self.names)(values)

    def event(self, op: ChangeOp) -> ChangeEvent:
        """One change as a :class:`~laredo.types.ChangeEvent`."""
        action, new, old, unchanged = op[0], op[1], op[2], op[3]
        new_row = None if new is None else self.row(new, unchanged)
        ts = self.commit_time
        return ChangeEvent(
            self.table,
            action,
            self.position,
            ts,
            new_row,
            old,
            self.xid,
            ts,
            unchanged or _NO_TOAST,
        )


_NO_TOAST: frozenset[str] = frozenset()
