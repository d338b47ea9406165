"""RowCodec: packed rows come back equal, with the same types, as new dicts."""

from __future__ import annotations

import gc
import math
import threading
import tracemalloc
import uuid
from datetime import UTC, date, datetime, time, timedelta, timezone
from decimal import Decimal
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from laredo.batches import RAW_DAY_INFINITY, RAW_INFINITY, RowBatch
from laredo_target_memory import codec as codec_module
from laredo_target_memory.codec import RowCodec

PARIS = ZoneInfo("Europe/Paris")

ODD_VALUES: list[Any] = [
    0,
    -1,
    2**80,
    True,
    False,
    None,
    1.5,
    -0.0,
    float("inf"),
    "",
    "héllo \U0001f600",
    "\ud800",  # a lone surrogate survives
    b"",
    b"\x00\xff",
    Decimal("1.50"),
    Decimal("-0"),
    Decimal("1E+3"),
    Decimal("NaN"),
    Decimal("-Infinity"),
    datetime(2024, 1, 2, 3, 4, 5, 678901, tzinfo=UTC),
    datetime(2024, 10, 27, 2, 30, fold=1, tzinfo=PARIS),  # the second 02:30 of the day
    datetime(2024, 1, 2, 3, 4, 5),
    datetime(1, 1, 1),
    date(2024, 2, 29),
    time(1, 2, 3, 4, tzinfo=timezone(timedelta(hours=5, minutes=30))),
    time(23, 59, fold=1),
    timedelta(days=-3, seconds=5, microseconds=7),
    uuid.UUID("a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"),
    {"a": [1, 2.5, None], "b": {"c": "x"}},
    [1, None, 3],
    (1, "a"),
    {1, 2},
    bytearray(b"kept as bytearray"),
    memoryview(b"kept as memoryview"),
]


def _same(a: Any, b: Any) -> None:
    assert type(a) is type(b), (a, b)
    if isinstance(a, float) and math.isnan(a):
        return
    if isinstance(a, Decimal) and a.is_nan():
        assert b.is_nan()
        return
    if isinstance(a, memoryview):
        assert a is b  # kept by reference
        return
    assert a == b, (a, b)
    if isinstance(a, (datetime, time)):
        assert a.tzinfo is b.tzinfo and a.fold == b.fold
    if isinstance(a, Decimal):
        assert str(a) == str(b)  # exponent and sign kept
    if isinstance(a, float):
        assert str(a) == str(b)  # -0.0 stays -0.0


@pytest.mark.parametrize("value", ODD_VALUES, ids=lambda v: type(v).__name__)
def test_every_value_comes_back_equal_and_of_the_same_type(value: Any) -> None:
    c = RowCodec(["id", "v"])
    for row in ({"id": 1, "v": value}, {"id": 2, "v": None}, {"id": 3, "v": value}):
        out = c.unpack(c.pack(row))
        assert list(out) == ["id", "v"]
        _same(row["v"], out["v"])


def test_a_wide_row_with_every_type_at_once() -> None:
    names = [f"c{i}" for i in range(len(ODD_VALUES))]
    c = RowCodec(names)
    row = dict(zip(names, ODD_VALUES, strict=True))
    out = c.unpack(c.pack(row))
    for k in names:
        _same(row[k], out[k])


def test_unpack_returns_a_new_dict_and_containers_by_reference() -> None:
    c = RowCodec(["id", "doc", "tags"])
    doc = {"a": 1}
    row = {"id": 1, "doc": doc, "tags": ["x"]}
    packed = c.pack(row)
    row["id"] = 99  # the caller's row is not kept
    first = c.unpack(packed)
    first["id"] = 2
    second = c.unpack(packed)
    assert second["id"] == 1 and second is not first
    assert second["doc"] is doc  # nested values are shared, as with a dict row's copy


def test_rows_with_other_columns_keep_their_own_columns_and_order() -> None:
    c = RowCodec(["id", "name"])
    assert c.unpack(c.pack({"id": 1})) == {"id": 1}
    odd = {"extra": Decimal("1.1"), "id": 2, "name": "n"}
    out = c.unpack(c.pack(odd))
    assert out == odd and list(out) == ["extra", "id", "name"]
    assert c.irregular == 1  # a column outside the table's: merges must unpack
    reordered = c.unpack(c.pack({"name": "n", "id": 3}))
    assert list(reordered) == ["id", "name"]  # table order for the table's own columns


def test_names_come_from_the_first_row_when_not_given() -> None:
    c = RowCodec()
    assert c.unpack(c.pack({"b": 1, "a": "x"})) == {"b": 1, "a": "x"}
    assert c.names == ("b", "a")
    c.set_names(["b", "a", "new"])  # a column added: old rows keep decoding
    assert c.unpack(c.pack({"b": 2, "a": "y", "new": None})) == {"b": 2, "a": "y", "new": None}


def test_null_patterns_and_time_zones_make_layouts_and_all_decode() -> None:
    c = RowCodec(["id", "price", "at"])
    rows = [
        {"id": i, "price": None if i % 2 else Decimal(i), "at": datetime(2024, 1, 1, tzinfo=tz)}
        for i, tz in enumerate([UTC, PARIS, None, UTC, PARIS])
    ]
    packed = [c.pack(r) for r in rows]
    assert [c.unpack(p) for p in packed] == rows
    assert c.layouts >= 4


def test_past_the_layout_limit_rows_stay_dicts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(codec_module, "MAX_LAYOUTS", 2)
    c = RowCodec(["v"])
    packed = [c.pack({"v": v}) for v in (1, "a", 1.5, b"x")]
    assert [type(p) for p in packed] == [bytes, bytes, dict, dict]
    assert [c.unpack(p) for p in packed] == [{"v": 1}, {"v": "a"}, {"v": 1.5}, {"v": b"x"}]


def test_layouts_registered_from_many_threads_decode_consistently() -> None:
    c = RowCodec(["id", "v"])
    kinds: list[Any] = [1, "s", 1.5, Decimal(1), datetime(2024, 1, 1), date(2024, 1, 1), None]
    results: list[tuple[dict[str, Any], Any]] = []
    lock = threading.Lock()

    def work(seed: int) -> None:
        for i in range(300):
            row = {"id": i, "v": kinds[(i + seed) % len(kinds)]}
            p = c.pack(row)
            with lock:
                results.append((row, p))

    threads = [threading.Thread(target=work, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for row, p in results:
        assert c.unpack(p) == row
    assert c.layouts == len(kinds)


def test_packed_rows_take_a_fraction_of_dict_rows() -> None:
    names = ["id", "customer", "qty", "price", "created", "address"]
    base = datetime(2024, 1, 1, tzinfo=UTC)

    def rows() -> list[dict[str, Any]]:
        return [
            dict(
                zip(
                    names,
                    (
                        i,
                        f"Customer {i}",
                        i % 1000,
                        Decimal(i) / 100,
                        base + timedelta(seconds=i),
                        f"{i} Market Street, Springfield",
                    ),
                    strict=True,
                )
            )
            for i in range(1_000_000, 1_020_000)
        ]

    def held(make: Any) -> int:
        data = rows()
        gc.collect()
        tracemalloc.start()
        try:
            kept = [make(r) for r in data]
            del data
            gc.collect()
            size = tracemalloc.get_traced_memory()[0]
        finally:
            tracemalloc.stop()
        assert kept
        return size

    c = RowCodec(names)
    packed = held(c.pack)
    as_dicts = held(dict)  # the dict copy alone, values shared with the source rows
    assert packed < 0.7 * as_dicts


def _raw_batch() -> tuple[RowBatch, list[dict[str, Any]]]:
    """A scalar RowBatch (as the PostgreSQL source reads a baseline in binary) and the row
    dicts psycopg's text loaders would have given: NULLs in every raw column, a DST fold."""
    ny = ZoneInfo("America/New_York")
    names = ("id", "price", "at", "local", "day", "flag", "blob", "ratio")
    fold = datetime(2024, 11, 3, 1, 30, tzinfo=timezone(timedelta(hours=-5))).astimezone(ny)
    assert fold.fold == 1
    stamps = [
        datetime(2024, 1, 2, 3, 4, 5, 678901, tzinfo=UTC).astimezone(ny),
        fold,
        datetime(9999, 12, 31, 18, tzinfo=ny),  # near the end of datetime's range
    ]
    epoch = datetime(2000, 1, 1, tzinfo=UTC)
    values: list[tuple[Any, ...]] = []
    rows: list[dict[str, Any]] = []
    for i, at in enumerate(stamps):
        local = datetime(1999, 12, 31, 23, 59, 59, i)
        day = date(2000, 1, 1) + timedelta(days=i * 4000 - 700_000)
        values.append(
            (
                i,
                f"{i}.50",
                (at - epoch) // timedelta(microseconds=1),
                (local - datetime(2000, 1, 1)) // timedelta(microseconds=1),
                (day - date(2000, 1, 1)).days,
                i % 2 == 0,
                bytes([i]),
                i / 3,
            )
        )
        rows.append(
            {
                "id": i,
                "price": Decimal(f"{i}.50"),
                "at": at,
                "local": local,
                "day": day,
                "flag": i % 2 == 0,
                "blob": bytes([i]),
                "ratio": i / 3,
            }
        )
    values.append((9, None, None, None, None, None, None, None))
    rows.append(dict.fromkeys(names, None) | {"id": 9})
    batch = RowBatch(
        names,
        values,
        frozenset({1}),
        stamps=((2, ny), (3, None)),
        days=frozenset({4}),
        scalar=True,
    )
    return batch, rows


def test_a_scalar_batch_is_stored_raw_and_reads_as_its_row_dicts() -> None:
    batch, rows = _raw_batch()
    assert list(batch) == rows  # the batch's own dicts: the converted values
    for detach in (True, False):
        codec = RowCodec(batch.names, detach=detach)
        packed = codec.pack_batch(batch)
        assert all(type(p) is bytes for p in packed) and codec.layouts == 1
        for p, row in zip(packed, rows, strict=True):
            got = codec.unpack(p)
            assert got == row and list(got) == list(row)
            for name, value in row.items():
                assert type(got[name]) is type(value), name
                assert codec.view(p)[name] == value
                if isinstance(value, datetime):
                    assert got[name].tzinfo is value.tzinfo and got[name].fold == value.fold
        # the same rows packed from their dicts decode to the same dicts
        assert [codec.unpack(codec.pack(r)) for r in rows] == [codec.unpack(p) for p in packed]


def test_a_batch_that_is_not_scalar_after_all_is_packed_from_its_dicts() -> None:
    batch, rows = _raw_batch()
    odd = RowBatch(
        batch.names,
        [(*batch.values[0][:6], uuid.UUID(int=5), 1.0)],  # a UUID: marshal cannot hold it
        batch.decimals,
        stamps=batch.stamps,
        days=batch.days,
        scalar=True,
    )
    codec = RowCodec(batch.names)
    (packed,) = codec.pack_batch(odd)
    assert codec.unpack(packed) == odd[0] and codec.unpack(packed)["blob"] == uuid.UUID(int=5)
    other = RowCodec(("id", "x"))  # other columns than the codec's: packed from the dicts
    assert [other.unpack(p) for p in other.pack_batch(batch)] == rows


def test_date_and_timestamp_infinities_are_stored_and_read_back_identically() -> None:
    """PostgreSQL's infinities (``date.max``/``datetime.max``, UTC for a zoned timestamp: see
    laredo.types) from the stream's row dicts and from a binary baseline's raw sentinels unpack
    to the same values, types and zones."""
    names = ("d", "ts", "tz", "tz0")
    row = {
        "d": date.max,
        "ts": datetime.max,
        "tz": datetime.max.replace(tzinfo=UTC),
        "tz0": datetime.min.replace(tzinfo=UTC),
    }
    raw = RowBatch(
        names,
        [(RAW_DAY_INFINITY, RAW_INFINITY, RAW_INFINITY, -RAW_INFINITY - 1)],
        stamps=((1, None), (2, PARIS), (3, PARIS)),
        days=frozenset({0}),
        scalar=True,
    )
    codec = RowCodec(names)
    (stored_raw,) = codec.pack_batch(raw)
    for got in (codec.unpack(codec.pack(row)), codec.unpack(stored_raw)):
        assert got == row
        for name, value in row.items():
            _same(value, got[name])
