"""The stream decoder's value contract (issue 29, item 7): only ``DecodeError`` escapes
``PgOutputDecoder.feed``; a value its loader refuses (every ``psycopg.Error`` type, and any other
error) loads as an infinity or an :class:`~laredo.types.Unrepresentable` marker, counted on the
transaction. Also psycopg's real text loaders on the values PostgreSQL accepts and Python cannot
hold."""

from __future__ import annotations

import inspect
import struct
from collections.abc import Callable
from datetime import UTC, date, datetime
from typing import Any

import psycopg
import psycopg.errors
import pytest
from laredo.types import ChangeEvent, TableIdentifier, Unrepresentable
from laredo_source_pg.binary import _pg_date
from laredo_source_pg.pgoutput import (
    DecodeError,
    PgOutputDecoder,
    SchemaItem,
    Transaction,
    pg_timestamp,
)
from psycopg import pq
from psycopg.adapt import Transformer

T = TableIdentifier("public", "t")


def _psycopg_errors() -> list[type[BaseException]]:
    found = {psycopg.Error, psycopg.DataError}
    for module in (psycopg, psycopg.errors):
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if issubclass(cls, psycopg.Error):
                found.add(cls)
    return sorted(found, key=lambda c: c.__qualname__)


PSYCOPG_ERRORS = _psycopg_errors()


def _s(text: str) -> bytes:
    return text.encode() + b"\0"


def _relation(cols: list[tuple[str, int, bool]]) -> bytes:
    out = b"R" + struct.pack(">I", 1) + _s("public") + _s("t") + b"d"
    out += struct.pack(">h", len(cols))
    for name, oid, key in cols:
        out += bytes([1 if key else 0]) + _s(name) + struct.pack(">Ii", oid, -1)
    return out


def _tuple(values: list[bytes | None]) -> bytes:
    out = struct.pack(">h", len(values))
    for v in values:
        out += b"n" if v is None else b"t" + struct.pack(">I", len(v)) + v
    return out


def _run(
    loader_for: Callable[[int], Callable[[Any], Any]],
    cols: list[tuple[str, int, bool]],
    rows: list[list[bytes | None]],
    *,
    batches: bool = False,
    update: bool = False,
) -> Transaction:
    d = PgOutputDecoder(loader_for, TableIdentifier, batches=batches)
    d.feed(b"B" + struct.pack(">QqI", 100, 0, 7))
    d.feed(_relation(cols))
    for row in rows:
        if update:  # an old key tuple ('K') before the new one: the key decoder runs too
            msg = b"U" + struct.pack(">I", 1) + b"K" + _tuple(row) + b"N" + _tuple(row)
        else:
            msg = b"I" + struct.pack(">I", 1) + b"N" + _tuple(row)
        assert d.feed(msg) is None
    tx = d.feed(b"C" + struct.pack(">bQQq", 0, 90, 120, 0))
    assert tx is not None
    return tx


def _values(tx: Transaction, names: tuple[str, ...]) -> list[tuple[Any, ...]]:
    out = []
    for it in tx.items:
        if isinstance(it, SchemaItem):
            continue
        if isinstance(it, ChangeEvent):
            row = it.new_values or {}
            out.append(tuple(row.get(n) for n in names))
        else:  # batch mode op: (action, values, old, unchanged, relation)
            out.append(tuple(it[1]))
    return out


@pytest.mark.parametrize("error", PSYCOPG_ERRORS, ids=lambda c: c.__qualname__)
def test_every_psycopg_error_of_a_value_loader_becomes_a_marker(
    error: type[BaseException],
) -> None:
    for batches in (False, True):
        for update in (False, True):
            _check_error(error, batches=batches, update=update)


def _check_error(error: type[BaseException], *, batches: bool, update: bool) -> None:
    def failing(data: Any) -> Any:
        if bytes(data) in (b"bad", b"infinity"):
            raise error("refused")
        return bytes(data).decode()

    cols = [("id", 23, True), ("at", 1114, False), ("body", 25, False)]
    loaders: dict[int, Callable[[Any], Any]] = {23: int, 1114: failing, 25: failing}
    tx = _run(
        loaders.__getitem__,
        cols,
        [[b"1", b"ok", b"x"], [b"2", b"bad", None], [b"3", b"infinity", b"bad"]],
        batches=batches,
        update=update,
    )
    got = _values(tx, ("id", "at", "body"))
    assert got[0] == (1, "ok", "x")  # the fast path, untouched
    assert got[1] == (2, Unrepresentable("timestamp", "bad"), None)
    # a timestamp's infinity is its extreme value even when the loader refused it
    assert got[2] == (3, datetime.max, Unrepresentable("type 25", "bad"))
    assert tx.unrepresentable == 2


@pytest.mark.parametrize("error", [ValueError, OverflowError, RuntimeError, KeyError, TypeError])
def test_any_other_loader_error_is_a_marker_too(error: type[BaseException]) -> None:
    def failing(data: Any) -> Any:
        raise error("no")

    loaders: dict[int, Callable[[Any], Any]] = {23: int, 1082: failing}
    tx = _run(loaders.__getitem__, [("id", 23, True), ("d", 1082, False)], [])
    assert tx.unrepresentable == 0
    tx = _run(
        loaders.__getitem__,
        [("id", 23, True), ("d", 1082, False)],
        [[b"1", b"-infinity"], [b"2", b"0044-03-15 BC"]],
    )
    assert _values(tx, ("id", "d")) == [
        (1, date.min),
        (2, Unrepresentable("date", "0044-03-15 BC")),
    ]
    assert tx.unrepresentable == 1


def test_a_cut_message_is_still_a_decode_error_not_a_marker() -> None:
    def failing(data: Any) -> Any:
        raise psycopg.DataError("no")

    loaders: dict[int, Callable[[Any], Any]] = {23: int, 1114: failing}
    d = PgOutputDecoder(loaders.__getitem__, lambda s, n: T)
    d.feed(b"B" + struct.pack(">QqI", 100, 0, 7))
    d.feed(_relation([("id", 23, True), ("at", 1114, False)]))
    whole = b"I" + struct.pack(">I", 1) + b"N" + _tuple([b"1", b"10000-01-01"])
    for cut in range(6, len(whole)):
        with pytest.raises(DecodeError):
            d.feed(whole[:cut])


def _real_loaders() -> Callable[[int], Callable[[Any], Any]]:
    """psycopg's own text loaders, as the stream uses them (no connection: a UTC session)."""
    tx = Transformer()

    def loader_for(oid: int) -> Callable[[Any], Any]:
        return tx.get_loader(oid, pq.Format.TEXT).load

    return loader_for


@pytest.mark.parametrize(
    ("oid", "text", "expected"),
    [
        (1082, b"infinity", date.max),
        (1082, b"-infinity", date.min),
        (1114, b"infinity", datetime.max),
        (1114, b"-infinity", datetime.min),
        (1184, b"infinity", datetime.max.replace(tzinfo=UTC)),
        (1184, b"-infinity", datetime.min.replace(tzinfo=UTC)),
        (1082, b"10000-01-01", Unrepresentable("date", "10000-01-01")),
        (1082, b"0044-03-15 BC", Unrepresentable("date", "0044-03-15 BC")),
        (1114, b"10000-01-01 00:00:00", Unrepresentable("timestamp", "10000-01-01 00:00:00")),
        (1083, b"24:00:00", Unrepresentable("time", "24:00:00")),
        (1186, b"1000000000 days", Unrepresentable("interval", "1000000000 days")),
        (1082, b"2024-02-29", date(2024, 2, 29)),
    ],
)
def test_psycopgs_loaders_on_values_python_cannot_hold(
    oid: int, text: bytes, expected: Any
) -> None:
    tx = _run(_real_loaders(), [("id", 23, True), ("v", oid, False)], [[b"1", text]])
    assert _values(tx, ("id", "v")) == [(1, expected)]
    assert tx.unrepresentable == (1 if type(expected) is Unrepresentable else 0)


def test_the_binary_baselines_text_of_a_raw_date_is_postgresqls() -> None:
    """What a dead letter of a binary baseline shows for a date or timestamp Python cannot
    hold is PostgreSQL's own text of it, as the text path and the stream show."""
    epoch = date(2000, 1, 1)
    for d in (date(1, 1, 1), date(1582, 10, 15), date(2000, 2, 29), date(9999, 12, 31)):
        assert _pg_date((d - epoch).days) == d.isoformat()
    assert _pg_date((date(1, 1, 1) - epoch).days - 1) == "0001-12-31 BC"
    assert _pg_date((date(9999, 12, 31) - epoch).days + 1) == "10000-01-01"


def test_commit_timestamps_count_from_the_stamp_epoch() -> None:
    """pgoutput's commit times use core's one epoch, clamped to ``datetime``'s range."""
    assert pg_timestamp(0) == datetime(2000, 1, 1, tzinfo=UTC)
    assert pg_timestamp(86_400_000_001) == datetime(2000, 1, 2, 0, 0, 0, 1, tzinfo=UTC)
    assert pg_timestamp(2**63 - 1) == datetime.max.replace(tzinfo=UTC)
    assert pg_timestamp(-(2**63)) == datetime.min.replace(tzinfo=UTC)
