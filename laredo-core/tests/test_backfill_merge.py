"""The watermark merge of a chunked backfill (``laredo.engine.backfill``), in process: random
interleavings of transactions (inserts, updates, deletes, key changes; concurrent, committing
out of xid order, a commit record written before the transaction leaves the running set), stream
deliveries lagging behind, and keyset chunk reads under snapshots always end with the target
equal to the source (issue 32), also when the target started with rows the source lacks (the
sweep at the backfill's end, ``laredo.engine.backfill_sweep``) or with stale values."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from laredo.engine.backfill import ChunkMerger, ChunkRead, TxSnapshot
from laredo.engine.backfill_sweep import stale_keys
from laredo.types import ChangeAction, ChangeEvent, TableIdentifier

T = TableIdentifier("public", "t")
BASE_XID = (7 << 32) + 4_294_967_000  # 64-bit ids that wrap the 32-bit stream xid


@dataclass
class Tx:
    xid: int
    events: list[tuple[ChangeAction, dict[str, Any] | None, dict[str, Any] | None]]
    keys: set[int]
    state: str = "open"  # open -> logged (commit record written) -> ended


@dataclass
class Db:
    """An MVCC model: row locks per key, commit records in the log, snapshots from running
    xids; a snapshot's view applies the visible transactions in commit order."""

    initial: dict[int, int]
    next_xid: int = BASE_XID
    txs: list[Tx] = field(default_factory=list)
    log: list[Tx] = field(default_factory=list)
    locked: set[int] = field(default_factory=set)

    def latest(self) -> dict[int, int]:
        return self.view(None)

    def view(self, snap: TxSnapshot | None) -> dict[int, int]:
        rows = dict(self.initial)
        for tx in self.log:
            if snap is not None and not snap.sees(tx.xid & 0xFFFFFFFF):
                continue
            for action, new, old in tx.events:
                if old is not None:
                    rows.pop(old["k"], None)
                if action is not ChangeAction.DELETE:
                    assert new is not None
                    rows[new["k"]] = new["v"]
        return rows

    def snapshot(self) -> TxSnapshot:
        running = {t.xid for t in self.txs if t.state != "ended"}
        xmax = self.next_xid
        return TxSnapshot(min(running, default=xmax), xmax, frozenset(running))

    def begin(self, seed: int) -> None:
        """A transaction of 1-3 changes on keys no running transaction holds."""
        state = {k: v for k, v in self.latest().items()}
        for t in self.txs:
            if t.state == "open":
                for action, new, old in t.events:
                    if old is not None:
                        state.pop(old["k"], None)
                    if action is not ChangeAction.DELETE and new is not None:
                        state[new["k"]] = new["v"]
        tx = Tx(self.next_xid, [], set())
        self.next_xid += 1
        for i in range(1 + seed % 3):
            r = (seed >> (2 + 3 * i)) % 97
            kind = r % 4
            free = sorted(k for k in state if k not in self.locked)
            absent = [k for k in range(40) if k not in state and k not in self.locked]
            if kind == 0 or not free:
                if not absent:
                    continue
                k = absent[r % len(absent)]
                state[k] = r
                tx.events.append((ChangeAction.INSERT, {"k": k, "v": r}, None))
                tx.keys.add(k)
            elif kind == 1:
                k = free[r % len(free)]
                state[k] = r + 1000
                tx.events.append((ChangeAction.UPDATE, {"k": k, "v": r + 1000}, None))
                tx.keys.add(k)
            elif kind == 2:
                k = free[r % len(free)]
                del state[k]
                tx.events.append((ChangeAction.DELETE, None, {"k": k}))
                tx.keys.add(k)
            else:
                if not absent:
                    continue
                k, k2 = free[r % len(free)], absent[r % len(absent)]
                v = state.pop(k)
                state[k2] = v
                tx.events.append((ChangeAction.UPDATE, {"k": k2, "v": v}, {"k": k}))
                tx.keys |= {k, k2}
            self.locked |= tx.keys
        self.txs.append(tx)

    def commit(self, seed: int) -> None:
        open_ = [t for t in self.txs if t.state == "open"]
        if open_:
            tx = open_[seed % len(open_)]
            tx.state = "logged"
            self.log.append(tx)

    def end(self, seed: int) -> None:
        logged = [t for t in self.txs if t.state == "logged"]
        if logged:
            tx = logged[seed % len(logged)]
            tx.state = "ended"
            self.locked -= tx.keys

    def read_chunk(self, after: int | None, limit: int) -> ChunkRead:
        snap = self.snapshot()
        view = self.view(snap)
        keys = sorted(k for k in view if after is None or k > after)[:limit]
        rows = [{"k": k, "v": view[k]} for k in keys]
        # the high mark: pg_current_wal_insert_lsn() after the read
        return ChunkRead(rows, snap, len(self.log), (keys[-1],) if keys else None)


class Target:
    """An upserting target (every Laredo target's semantics for these cases)."""

    def __init__(self) -> None:
        self.rows: dict[int, int] = {}

    def apply(self, tx: Tx) -> None:
        for action, new, old in tx.events:
            if old is not None:
                self.rows.pop(old["k"], None)
            if action is not ChangeAction.DELETE and new is not None:
                self.rows[new["k"]] = new["v"]


def _events(tx: Tx, position: int) -> list[ChangeEvent]:
    return [
        ChangeEvent(T, action, position, new_values=new, old_values=old, xid=tx.xid & 0xFFFFFFFF)
        for action, new, old in tx.events
    ]


STEPS = st.lists(
    st.tuples(
        st.sampled_from(["begin", "commit", "end", "stream", "chunk"]), st.integers(0, 2**30)
    ),
    max_size=120,
)


@settings(max_examples=400, deadline=None)
@given(
    initial=st.dictionaries(st.integers(0, 39), st.integers(0, 9), max_size=30),
    drift=st.sets(st.integers(-3, 45), max_size=12),
    steps=STEPS,
    limit=st.integers(1, 6),
)
def test_random_interleavings_end_equal_to_the_source(
    initial: dict[int, int], drift: set[int], steps: list[tuple[str, int]], limit: int
) -> None:
    """The target starts as the source plus drift: keys the source lacks (some the writers
    insert later, some before, between and after the source's keys) and stale values. The
    sweep runs where the backfiller runs it: at the stream position where the last chunk is
    applied, with the keys the merger kept until then."""
    db = Db(dict(initial))
    target = Target()
    target.rows = dict(initial)
    for k in drift:
        target.rows[k] = -1 - target.rows.get(k, 0)  # a row the source lacks, or a stale value
    merger = ChunkMerger(T, ["k"], lambda a, b: (a > b) - (a < b), sweep=True)
    delivered = 0
    after: int | None = None
    done = False
    swept = False

    def merge(position: int) -> None:
        nonlocal swept
        for _chunk, rows in merger.due(position):
            for row in rows:
                target.rows[row["k"]] = row["v"]
        if done and not swept and merger.pending() == 0:  # the backfill's end: the sweep
            swept = True
            kept = merger.take_kept()
            assert kept is not None
            for (k,) in stale_keys([(k,) for k in target.rows], kept, (0,)):
                del target.rows[k]

    def stream_one() -> None:
        nonlocal delivered
        tx = db.log[delivered]
        delivered += 1
        merger.observe(_events(tx, delivered))
        target.apply(tx)
        merge(delivered)

    def chunk() -> None:
        nonlocal after, done
        if done:
            return
        read = db.read_chunk(after, limit)
        assert merger.offer(read, max_pending=1_000)
        if read.last_key is None or len(read.rows) < limit:
            done = True
        else:
            after = read.last_key[0]

    for op, seed in steps:
        if op == "begin":
            db.begin(seed)
        elif op == "commit":
            db.commit(seed)
        elif op == "end":
            db.end(seed)
        elif op == "stream" and delivered < len(db.log):
            stream_one()
        elif op == "chunk":
            chunk()
    # quiesce: every transaction commits and ends, the stream catches up, the backfill ends
    for tx in db.txs:
        if tx.state == "open":
            tx.state = "logged"
            db.log.append(tx)
        tx.state = "ended"
    db.locked.clear()
    while not done:
        chunk()
    while delivered < len(db.log):
        stream_one()
    merge(len(db.log))  # a heartbeat at the end of the log
    assert merger.pending() == 0 and swept
    assert merger.take_kept() is None  # keeping stopped at the sweep
    assert target.rows == db.latest()


def test_snapshot_visibility_and_xid_wraparound() -> None:
    snap = TxSnapshot.parse(f"{(3 << 32) + 10}:{(3 << 32) + 20}:{(3 << 32) + 12}")
    assert snap.sees(5) and snap.sees(11) and not snap.sees(12)
    assert not snap.sees(20) and not snap.sees(0)
    near = TxSnapshot((4 << 32) + 2, (4 << 32) + 5)
    assert near.sees(0xFFFFFFF0)  # the previous epoch's xid, before the wrap
    assert not near.sees(7)


def test_a_chunk_row_a_newer_change_touched_is_dropped() -> None:
    merger = ChunkMerger(T, ["k"], lambda a, b: (a > b) - (a < b))
    snap = TxSnapshot(100, 105, frozenset({103}))
    merger.observe(
        [ChangeEvent(T, ChangeAction.UPDATE, 4, new_values={"k": 2, "v": "new"}, xid=103)]
    )
    merger.observe([ChangeEvent(T, ChangeAction.UPDATE, 5, new_values={"k": 3, "v": 9}, xid=101)])
    merger.offer(ChunkRead([{"k": 1}, {"k": 2}, {"k": 3}], snap, 6, (3,)))
    assert merger.due(5) == []  # the stream has not passed the high mark yet
    assert [rows for _c, rows in merger.due(6)] == [[{"k": 1}, {"k": 3}]]
    assert merger.progress.rows_dropped == 1


def test_raw_chunk_keys_are_compared_as_values() -> None:
    """A chunk read raw (a timestamp key as int microseconds) is matched against the stream's
    keys by value: the row a newer change touched is dropped, and the rest go as one batch."""
    from datetime import UTC, datetime, timedelta

    from laredo.batches import STAMP_EPOCH, RowBatch

    def at(us: int) -> datetime:
        return STAMP_EPOCH.replace(tzinfo=UTC) + timedelta(microseconds=us)

    raw = RowBatch(("k", "v"), [(1, "a"), (2, "b")], stamps=((0, UTC),), scalar=True)
    chunk = ChunkRead(raw.values, TxSnapshot(100, 105), 6, (at(2),), raw.names, raw=raw)
    merger = ChunkMerger(T, ["k"], lambda a, b: (a > b) - (a < b))
    merger.observe([ChangeEvent(T, ChangeAction.UPDATE, 4, new_values={"k": at(2)}, xid=106)])
    merger.offer(chunk)
    [(got, rows)] = merger.due(6)
    assert rows == [(1, "a")]
    kept = got.batch(rows)
    assert kept is not None and list(kept) == [{"k": at(1), "v": "a"}]
