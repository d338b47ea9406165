"""Wire helpers: typed-JSON values, columns, and hand-built (batched) stream messages.

Journal entries are serialised once (their ``JournalBatch.entries`` field bytes are cached on the
entry) and a batch message is the concatenation of those chunks, so sending one change to N
clients costs one encoding, not N.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

from laredo.serialization import RowEncoder, encode_value, loads_row, object_hook
from laredo.types import ChangeAction, ColumnDefinition, Row

from ._proto import replication_pb2 as pb

__all__ = [
    "ACTION_FROM_PB",
    "ACTION_TO_PB",
    "columns_from_pb",
    "columns_to_pb",
    "decode_row",
    "decode_value",
    "encode_row",
    "encode_value_bytes",
    "field_bytes",
    "field_varint",
    "varint",
]

_ENCODER = RowEncoder()
_VALUE_DECODER = json.JSONDecoder(object_hook=object_hook)

ACTION_TO_PB: dict[ChangeAction, Any] = {
    ChangeAction.INSERT: pb.ACTION_INSERT,
    ChangeAction.UPDATE: pb.ACTION_UPDATE,
    ChangeAction.DELETE: pb.ACTION_DELETE,
    ChangeAction.TRUNCATE: pb.ACTION_TRUNCATE,
    ChangeAction.SCHEMA_CHANGE: pb.ACTION_SCHEMA_CHANGE,
}
ACTION_FROM_PB: dict[Any, ChangeAction] = {v: k for k, v in ACTION_TO_PB.items()}


def encode_row(row: Row) -> bytes:
    """A row as typed JSON (UTF-8)."""
    return _ENCODER.dumps(row).encode("utf-8")


def decode_row(data: bytes) -> Row:
    return loads_row(data)


def encode_value_bytes(value: Any) -> bytes:
    return json.dumps(encode_value(value), ensure_ascii=False, separators=(",", ":")).encode()


def decode_value(data: bytes) -> Any:
    return _VALUE_DECODER.decode(data.decode("utf-8"))


def columns_to_pb(columns: Iterable[ColumnDefinition]) -> list[Any]:
    return [
        pb.Column(
            name=c.name,
            type=c.type,
            nullable=c.nullable,
            primary_key=c.primary_key,
            primary_key_ordinal=c.primary_key_ordinal,
            ordinal_position=c.ordinal_position,
            type_oid=c.type_oid,
        )
        for c in columns
    ]


def columns_from_pb(columns: Sequence[Any]) -> tuple[ColumnDefinition, ...]:
    return tuple(
        ColumnDefinition(
            name=c.name,
            type=c.type or "text",
            ordinal_position=c.ordinal_position,
            nullable=c.nullable,
            primary_key=c.primary_key,
            primary_key_ordinal=c.primary_key_ordinal,
            type_oid=c.type_oid,
        )
        for c in columns
    )


# -- protobuf wire format by hand (hot path) ---------------------------------------------------


_SMALL_VARINTS = [bytes((i,)) for i in range(128)] + [
    bytes(((i & 0x7F) | 0x80, i >> 7)) for i in range(128, 16384)
]


def varint(n: int) -> bytes:
    """Unsigned LEB128 (negative int64 values as 10-byte two's complement, as protobuf does)."""
    if 0 <= n < 16384:
        return _SMALL_VARINTS[n]
    if n < 0:
        n += 1 << 64
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def field_bytes(number: int, payload: bytes) -> bytes:
    """A length-delimited field (bytes, string or sub-message)."""
    return varint((number << 3) | 2) + varint(len(payload)) + payload


def field_varint(number: int, value: int) -> bytes:
    if not value:
        return b""
    return varint(number << 3) + varint(value)


# SyncResponse field numbers
RESP_SNAPSHOT_ROWS = 3
RESP_JOURNAL = 5
# JournalBatch field numbers
BATCH_AFTER = 1
BATCH_THROUGH = 2
BATCH_ENTRIES = 3


def entry_bytes(  # noqa: PLR0917 - hot path: positional on purpose
    sequence: int,
    position: str,
    timestamp_us: int,
    action: Any,
    old: bytes | None,
    new: bytes | None,
) -> bytes:
    """A serialised ``JournalEntry`` (upb builds it faster than Python code could)."""
    e = pb.JournalEntry(
        sequence=sequence, source_position=position, timestamp_unix_us=timestamp_us, action=action
    )
    if old:
        e.old_values = old
    if new:
        e.new_values = new
    out: bytes = e.SerializeToString()
    return out


_ENTRY_TAG = varint((3 << 3) | 2)


def entry_chunk(body: bytes) -> bytes:
    """``body`` as a ``JournalBatch.entries`` field."""
    return _ENTRY_TAG + varint(len(body)) + body


def journal_message(after: int, through: int, chunks: Sequence[bytes]) -> bytes:
    """A serialised ``SyncResponse{journal: JournalBatch}`` from cached entry chunks."""
    body = field_varint(BATCH_AFTER, after) + field_varint(BATCH_THROUGH, through)
    body += b"".join(chunks)
    return field_bytes(RESP_JOURNAL, body)


def snapshot_rows_message(rows: Sequence[bytes]) -> bytes:
    """A serialised ``SyncResponse{snapshot_rows: SnapshotRows}`` from encoded rows."""
    body = b"".join([field_bytes(1, r) for r in rows])
    return field_bytes(RESP_SNAPSHOT_ROWS, body)
