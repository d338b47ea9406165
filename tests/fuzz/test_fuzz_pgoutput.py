"""The pgoutput decoder (``laredo_source_pg.pgoutput``) raises only ``DecodeError`` on any
sequence of messages, well-formed or not; and psycopg's value loaders, as the stream uses them,
never raise out of it on any value text (issue 29)."""

from __future__ import annotations

import struct
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from laredo.types import ChangeEvent, TableIdentifier, Unrepresentable
from laredo_source_pg.pgoutput import DecodeError, PgOutputDecoder, SchemaItem
from psycopg import pq
from psycopg.adapt import Transformer

pytestmark = pytest.mark.fuzz

LOADERS = {23: int, 25: lambda b: bytes(b).decode(), 16: lambda b: bytes(b) == b"t"}


def _decoder() -> PgOutputDecoder:
    return PgOutputDecoder(
        lambda oid: LOADERS.get(oid, LOADERS[25]),
        lambda s, n: TableIdentifier(s, n) if n in ("t", "u") else None,
        {TableIdentifier("public", "t"): (("id", 23, -1), ("body", 25, -1))},
        chunk_size=3,
    )


def _s(text: str) -> bytes:
    return text.encode() + b"\0"


names = st.sampled_from(["t", "u", "other", ""]) | st.text(max_size=4).filter(
    lambda t: "\0" not in t
)
oids = st.sampled_from([23, 25, 16, 1700])


@st.composite
def relation(draw: Any) -> bytes:
    cols = draw(st.lists(st.tuples(st.booleans(), names, oids), max_size=4))
    out = b"R" + struct.pack(">I", draw(st.integers(0, 3)))
    out += _s(draw(st.sampled_from(["public", ""]))) + _s(draw(names))
    out += bytes([draw(st.sampled_from(b"dnfi"))]) + struct.pack(">h", draw(st.integers(-1, 5)))
    for key, name, oid in cols:
        out += bytes([int(key)]) + _s(name) + struct.pack(">Ii", oid, -1)
    return out


value = st.sampled_from([b"1", b"-7", b"x", b"", b"\xff", b"9" * 5000])


@st.composite
def tuple_data(draw: Any) -> bytes:
    kinds = draw(st.lists(st.sampled_from([b"t", b"n", b"u", b"b", b"?"]), max_size=5))
    out = struct.pack(">h", draw(st.integers(-1, 6)))
    for k in kinds:
        out += k
        if k == b"t":
            v = draw(value)
            out += struct.pack(">I", draw(st.sampled_from([len(v), len(v) + 3, 2**31]))) + v
    return out


@st.composite
def change(draw: Any) -> bytes:
    kind = draw(st.sampled_from([b"I", b"U", b"D"]))
    out = kind + struct.pack(">I", draw(st.integers(0, 3)))
    for _ in range(draw(st.integers(1, 2))):
        out += draw(st.sampled_from([b"N", b"K", b"O", b"X"])) + draw(tuple_data())
    return out


begin = st.builds(
    lambda a, b, c: b"B" + struct.pack(">QqI", a, b, c),
    st.integers(0, 2**64 - 1),
    st.integers(-(2**63), 2**63 - 1),
    st.integers(0, 2**32 - 1),
)
commit = st.builds(
    lambda a, b: b"C" + struct.pack(">bQQq", 0, a, b, 0),
    st.integers(0, 2**64 - 1),
    st.integers(0, 2**64 - 1),
)
truncate = st.builds(
    lambda n, o, ids: b"T" + struct.pack(">Ib", n, o) + b"".join(struct.pack(">I", i) for i in ids),
    st.integers(0, 5),
    st.integers(0, 3),
    st.lists(st.integers(0, 3), max_size=3),
)
raw = st.binary(min_size=1, max_size=40) | st.sampled_from(b"BCRIUDTOYMS").flatmap(
    lambda k: st.binary(max_size=30).map(lambda tail: bytes([k]) + tail)
)
message = begin | commit | relation() | change() | truncate | raw


@settings.get_profile("laredo-fuzz")
@given(st.lists(message, min_size=1, max_size=12))
@example([b"I"])
@example([b"B" + struct.pack(">QqI", 1, 0, 1), b"R\0\0\0\1public"])
@example([b"B" + struct.pack(">QqI", 1, 0, 1), b"I\0\0\0\1N"])
@example([b"R" + struct.pack(">I", 1) + b"public\0t\0d" + struct.pack(">h", 1) + b"\1id\0"])
@example([b"R\x00\x00\x00\x01public\x00t\x00\xff" + struct.pack(">h", 0)])
def test_feed_raises_only_decode_error(messages: list[bytes]) -> None:
    d = _decoder()
    for m in messages:
        try:
            d.feed(m)
        except DecodeError:
            d.reset_session()  # what the stream does: a new session re-sends relations


def _outcome(d: Any, buf: bytes, start: int) -> Any:
    """What feeding one message did, comparable between two decoders."""
    try:
        tx = d.feed(buf, start)
    except DecodeError as exc:
        d.reset_session()
        return ("DecodeError", str(exc).split(":", 1)[0])  # the cause's offsets differ
    if tx is None:
        return None
    items = [
        repr(it.relation.columns) if isinstance(it, SchemaItem) else repr(it) for it in tx.items
    ]
    return (tx.xid, tx.final_lsn, tx.end_lsn, tx.committed, tx.unrepresentable, items)


_REL_T = (
    b"R"
    + struct.pack(">I", 1)
    + _s("public")
    + _s("t")
    + b"d"
    + struct.pack(">h", 2)
    + b"\1"
    + _s("id")
    + struct.pack(">Ii", 23, -1)
    + b"\0"
    + _s("body")
    + struct.pack(">Ii", 25, -1)
)
_ROW = struct.pack(">h", 2) + b"t" + struct.pack(">I", 2) + b"42" + b"n"
_KEY = struct.pack(">h", 2) + b"t" + struct.pack(">I", 2) + b"42" + b"n"
_WELL_FORMED = [
    b"B" + struct.pack(">QqI", 10, 0, 7),
    _REL_T,
    b"I" + struct.pack(">I", 1) + b"N" + _ROW,
    b"U" + struct.pack(">I", 1) + b"K" + _KEY + b"N" + _ROW,
    b"D" + struct.pack(">I", 1) + b"K" + _KEY,
    b"T" + struct.pack(">IbI", 1, 0, 1),
    b"C" + struct.pack(">bQQq", 0, 10, 20, 0),
]


@settings.get_profile("laredo-fuzz")
@given(st.lists(message, min_size=1, max_size=12), st.binary(min_size=25, max_size=25))
@example(_WELL_FORMED, b"w" + bytes(range(1, 25)))
def test_a_framed_message_decodes_as_its_copy(messages: list[bytes], header: bytes) -> None:
    """The reader passes the whole XLogData frame and the offset of its message (no copy of the
    tail): the same events, transactions and errors as the message alone."""
    alone, framed = _decoder(), _decoder()
    for m in messages:
        assert _outcome(framed, header + m, 25) == _outcome(alone, m, 0)


# -- the stream's value loaders: psycopg's own text loaders on any text (issue 29) ---------------

_TX = Transformer()
VALUE_OIDS = [1082, 1114, 1184, 1083, 1266, 1186, 1700, 23, 20, 700, 701, 16, 114, 3802, 2950]
"""date, timestamp, timestamptz, time, timetz, interval, numeric, int4, int8, float4, float8,
bool, json, jsonb, uuid: every loader the stream uses for a scalar built-in type."""


def _real_loader(oid: int) -> Any:
    return _TX.get_loader(oid, pq.Format.TEXT).load


value_text = st.sampled_from(
    [
        b"infinity",
        b"-infinity",
        b"10000-01-01",
        b"0044-03-15 BC",
        b"24:00:00",
        b"24:00:00+02",
        b"1000000000 days",
        b"9999-12-31 23:59:59.999999-05",
        b"NaN",
        b"2024-02-29 12:00:00+00",
    ]
) | st.binary(max_size=24)


@settings.get_profile("laredo-fuzz")
@given(st.lists(st.tuples(st.sampled_from(VALUE_OIDS), value_text), min_size=1, max_size=6))
@example([(1184, b"infinity"), (1083, b"24:00:00"), (1082, b"0044-03-15 BC")])
def test_value_loaders_never_stop_the_stream(columns: list[tuple[int, bytes]]) -> None:
    """Any text in a column of any of these types: ``feed`` returns the change (no exception
    at all), each value loaded or an ``Unrepresentable`` marker, counted on the transaction."""
    d = PgOutputDecoder(_real_loader, lambda s, n: TableIdentifier(s, n) if n == "t" else None)
    rel = b"R" + struct.pack(">I", 1) + _s("public") + _s("t") + b"d"
    rel += struct.pack(">h", len(columns))
    for i, (oid, _text) in enumerate(columns):
        rel += b"\0" + _s(f"c{i}") + struct.pack(">Ii", oid, -1)
    row = struct.pack(">h", len(columns))
    for _oid, text in columns:
        row += b"t" + struct.pack(">I", len(text)) + text
    d.feed(b"B" + struct.pack(">QqI", 1, 0, 1))
    d.feed(rel)
    d.feed(b"I" + struct.pack(">I", 1) + b"N" + row)
    tx = d.feed(b"C" + struct.pack(">bQQq", 0, 1, 2, 0))
    assert tx is not None
    (event,) = [it for it in tx.items if isinstance(it, ChangeEvent)]
    values = list((event.new_values or {}).values())
    assert len(values) == len(columns)
    assert tx.unrepresentable == sum(type(v) is Unrepresentable for v in values)
