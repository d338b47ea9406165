"""Every protobuf encoding of the fan-out: typed-JSON values and rows, columns, modes, filters,
handshakes, snapshots and hand-built (batched) journal messages.

Journal entries are serialised once (their ``JournalBatch.entries`` field bytes are cached on the
entry) and a batch message is the concatenation of those chunks, so sending one change to N
clients costs one encoding, not N.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from laredo.serialization import RowEncoder, encode_value, loads_row, object_hook
from laredo.types import ChangeAction, ColumnDefinition, Row, SyncMode

from ._filters import Predicate, RowMatcher
from ._proto import replication_pb2 as pb
from .journal import JournalEntry
from .positions import PositionCodec
from .sessions import Handshake
from .snapshots import FanOutSnapshot

__all__ = [
    "ACTION_FROM_PB",
    "ACTION_TO_PB",
    "MODE_FROM_PB",
    "MODE_TO_PB",
    "columns_from_pb",
    "columns_to_pb",
    "decode_row",
    "decode_value",
    "encode_row",
    "encode_value_bytes",
    "entry_chunk",
    "entry_delete_chunk",
    "entry_to_pb",
    "field_bytes",
    "field_varint",
    "handshake_message",
    "journal_message",
    "journal_messages",
    "predicates_from_pb",
    "predicates_to_pb",
    "snapshot_info",
    "snapshot_messages",
    "snapshot_rows_message",
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
MODE_TO_PB: dict[SyncMode, Any] = {
    SyncMode.FULL_SNAPSHOT: pb.SYNC_MODE_FULL_SNAPSHOT,
    SyncMode.DELTA: pb.SYNC_MODE_DELTA,
    SyncMode.DELTA_FROM_SNAPSHOT: pb.SYNC_MODE_DELTA_FROM_SNAPSHOT,
}
MODE_FROM_PB: dict[Any, SyncMode] = {v: k for k, v in MODE_TO_PB.items()}


def encode_row(row: Row) -> bytes:
    """A row as typed JSON (UTF-8)."""
    return _ENCODER.dumps(row).encode("utf-8")


def decode_row(data: bytes) -> Row:
    return loads_row(data)


def encode_value_bytes(value: Any) -> bytes:
    return json.dumps(encode_value(value), ensure_ascii=False, separators=(",", ":")).encode()


def decode_value(data: bytes) -> Any:
    """One typed-JSON value; raises only ``ValueError`` for bytes that are not one."""
    try:
        return _VALUE_DECODER.decode(data.decode("utf-8"))
    except RecursionError:
        raise ValueError("not a laredo-json/1 value: nested too deeply") from None


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


_ENTRY_TAG = varint((BATCH_ENTRIES << 3) | 2)


def _entries_field(body: bytes) -> bytes:
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


# -- journal entries ---------------------------------------------------------------------------

_DELETE = ChangeAction.DELETE
_SCHEMA = ChangeAction.SCHEMA_CHANGE


def entry_to_pb(
    entry: JournalEntry, codec: PositionCodec, action: ChangeAction | None = None
) -> Any:
    """``entry`` as a ``JournalEntry`` message (``action`` overrides the entry's: an UPDATE
    leaving a subscription is sent as a DELETE of the old row)."""
    act = action or entry.action
    e = pb.JournalEntry(
        sequence=entry.sequence,
        source_position=codec.to_string(entry.position),
        timestamp_unix_us=int(entry.timestamp * 1_000_000),
        action=ACTION_TO_PB[act],
    )
    if entry.old_values is not None:
        e.old_values = encode_row(entry.old_values)
    if act is not _DELETE and entry.new_values is not None:
        e.new_values = encode_row(entry.new_values)
    if act is _SCHEMA:
        e.old_columns.extend(columns_to_pb(entry.old_columns))
        e.new_columns.extend(columns_to_pb(entry.new_columns))
    return e


def entry_chunk(entry: JournalEntry, codec: PositionCodec) -> bytes:
    """``entry`` as a ``JournalBatch.entries`` field, computed once and cached on the entry
    (``entry.wire``): sending one change to N clients costs one encoding."""
    c = entry.wire
    if c is None:
        action = entry.action
        if action is _SCHEMA:
            body = entry_to_pb(entry, codec).SerializeToString()
        else:  # the same bytes protobuf would write, without building the rows twice
            body = entry_bytes(
                entry.sequence,
                codec.to_string(entry.position),
                int(entry.timestamp * 1_000_000),
                ACTION_TO_PB[action],
                None if entry.old_values is None else encode_row(entry.old_values),
                None
                if entry.new_values is None or action is _DELETE
                else encode_row(entry.new_values),
            )
        c = _entries_field(body)
        entry.wire = c
    return c


def entry_delete_chunk(entry: JournalEntry, codec: PositionCodec) -> bytes:
    """``entry`` (an UPDATE) as a DELETE of its old row, as a ``JournalBatch.entries`` field."""
    return _entries_field(entry_to_pb(entry, codec, _DELETE).SerializeToString())


MAX_MESSAGE_BYTES = 4 * 1024 * 1024
"""A journal batch is split into several messages above this size."""

_INSERT = ChangeAction.INSERT
_UPDATE = ChangeAction.UPDATE


def journal_messages(
    after: int,
    through: int,
    entries: Sequence[JournalEntry],
    matcher: RowMatcher | None,
    codec: PositionCodec,
) -> Iterator[tuple[bytes, int]]:
    """Serialised journal batches covering ``(after, through]``, each with the sequence it
    covers through: the entries that pass ``matcher`` (an UPDATE leaving the subscription
    becomes a DELETE of the old row), split so that no message grows far beyond
    ``MAX_MESSAGE_BYTES``. Nothing when every entry was filtered out (a heartbeat later
    carries the sequence)."""
    chunks: list[bytes] = []
    size = 0
    start = after
    for e in entries:
        if matcher is None:
            c: bytes | None = entry_chunk(e, codec)
        else:
            a = e.action
            c = None
            if a is _INSERT:
                if matcher(e.new_values):
                    c = entry_chunk(e, codec)
            elif a is _UPDATE:
                if matcher(e.new_values):
                    c = entry_chunk(e, codec)
                elif matcher(e.old_values):
                    c = entry_delete_chunk(e, codec)
            elif a is _DELETE:
                if matcher(e.old_values):
                    c = entry_chunk(e, codec)
            else:
                c = entry_chunk(e, codec)
        if c is None:
            continue
        chunks.append(c)
        size += len(c)
        if size >= MAX_MESSAGE_BYTES:
            yield journal_message(start, e.sequence, chunks), e.sequence
            start = e.sequence
            chunks = []
            size = 0
    if chunks:
        yield journal_message(start, through, chunks), through


# -- handshake and snapshots -------------------------------------------------------------------


def handshake_message(h: Handshake) -> Any:
    """``SyncResponse{handshake}``."""
    return pb.SyncResponse(
        handshake=pb.Handshake(
            mode=MODE_TO_PB[h.mode],
            server_current_sequence=h.server_current_sequence,
            journal_oldest_sequence=h.journal_oldest_sequence,
            resume_from_sequence=h.resume_from_sequence,
            columns=columns_to_pb(h.columns),
            snapshot_id=h.snapshot_id,
            journal_id=h.journal_id,
            heartbeat_interval_ms=int(h.heartbeat_interval * 1000),
            client_id=h.client_id,
        )
    )


def snapshot_info(s: FanOutSnapshot) -> Any:
    """``ReplicationSnapshotInfo`` of a snapshot."""
    return pb.ReplicationSnapshotInfo(
        snapshot_id=s.snapshot_id,
        sequence=s.sequence,
        source_position=s.position,
        row_count=len(s.rows),
        size_bytes=s.size_bytes,
        created_at_unix_ms=int(s.created_at.timestamp() * 1000),
        persisted=s.persisted,
    )


def snapshot_messages(
    snap: FanOutSnapshot, matcher: RowMatcher | None, max_batch: int
) -> Iterator[Any]:
    """``snapshot_begin``, the rows passing ``matcher`` in batches of ``max_batch``, then
    ``snapshot_end``."""
    encoded = snap.encoded_rows(encode_row)
    if matcher is None:
        rows = encoded
    else:
        rows = [b for r, b in zip(snap.rows, encoded, strict=True) if matcher(r)]
    yield pb.SyncResponse(
        snapshot_begin=pb.SnapshotBegin(
            snapshot_id=snap.snapshot_id,
            sequence=snap.sequence,
            row_count=len(rows),
            source_position=snap.position,
            applied_at_position=snap.applied_at_position,
        )
    )
    for i in range(0, len(rows), max_batch):
        yield snapshot_rows_message(rows[i : i + max_batch])
    yield pb.SyncResponse(snapshot_end=pb.SnapshotEnd(sequence=snap.sequence, rows_sent=len(rows)))


# -- subscription filters ----------------------------------------------------------------------


def predicates_to_pb(preds: Sequence[Predicate]) -> list[Any]:
    """``FieldPredicate`` messages of a client's filters."""
    out = []
    for p in preds:
        fp = pb.FieldPredicate(field=p.field)
        if p.op == "equals":
            fp.equals.json = encode_value_bytes(p.value)
        elif p.op == "prefix":
            fp.prefix = p.value
        else:
            fp.SetInParent()
            getattr(fp, "in").values.extend(
                pb.TypedValue(json=encode_value_bytes(v)) for v in p.value
            )
        out.append(fp)
    return out


def predicates_from_pb(filters: Iterable[Any]) -> list[Predicate]:
    """A request's ``FieldPredicate`` messages as predicates (an unknown op stays empty, for
    ``normalize_filters`` to report)."""
    out = []
    for f in filters:
        kind = f.WhichOneof("op")
        if kind == "equals":
            out.append(Predicate(f.field, "equals", decode_value(f.equals.json)))
        elif kind == "prefix":
            out.append(Predicate(f.field, "prefix", f.prefix))
        elif kind == "in":
            values = getattr(f, "in").values
            out.append(Predicate(f.field, "in", [decode_value(v.json) for v in values]))
        else:
            out.append(Predicate(f.field, "", None))
    return out
