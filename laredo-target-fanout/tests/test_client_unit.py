"""The replica's sequence bookkeeping, fed messages directly (no server)."""

from __future__ import annotations

import laredo
import pytest
from laredo.testing.source import columns
from laredo_target_fanout import FanOutClient, _wire
from laredo_target_fanout._proto import replication_pb2 as pb
from laredo_target_fanout.client import GapError

T = laredo.Table("public", "users")


def batch(after: int, through: int, *entries: tuple[int, str, int]) -> object:
    msg = pb.JournalBatch(after_sequence=after, through_sequence=through)
    for seq, pos, i in entries:
        msg.entries.append(
            pb.JournalEntry(
                sequence=seq,
                source_position=pos,
                action=pb.ACTION_INSERT,
                new_values=_wire.encode_row({"id": i, "name": "n"}),
            )
        )
    return msg


def client() -> FanOutClient:
    c = FanOutClient("127.0.0.1:1", T)
    c._init_columns(tuple(columns("id", "name")))
    c.handshakes = 1
    return c


def test_entries_at_or_below_the_last_sequence_apply_once() -> None:
    c = client()
    c._apply_batch(batch(0, 2, (1, "10", 1), (2, "10", 2)))
    c._apply_batch(batch(0, 3, (1, "10", 1), (2, "10", 2), (3, "11", 3)))  # overlap
    assert c.entries_applied == 3 and c.count() == 3 and c.last_sequence == 3
    assert (c.source_position, c.applied_at_position) == ("11", 1)


def test_a_batch_after_a_gap_is_refused() -> None:
    c = client()
    c._apply_batch(batch(0, 2, (1, "10", 1), (2, "10", 2)))
    with pytest.raises(GapError):
        c._apply_batch(batch(5, 6, (6, "12", 6)))
    assert c.count() == 2 and c.last_sequence == 2


def test_filtered_batches_advance_the_sequence_without_entries() -> None:
    c = client()
    c._apply_batch(batch(0, 7))
    assert c.last_sequence == 7
    c._on_heartbeat(pb.Heartbeat(current_sequence=9))
    assert c.last_sequence == 9
    c._on_heartbeat(pb.Heartbeat(current_sequence=4))  # stale heartbeat: ignored
    assert c.last_sequence == 9
