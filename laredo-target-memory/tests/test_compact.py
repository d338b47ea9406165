"""CompactStore and IntKeyIndex against a dict doing the same operations."""

from __future__ import annotations

import random
import threading
import time
from typing import Any

import pytest
from laredo.types import ColumnDefinition, TableIdentifier
from laredo_target_memory import IndexedTarget
from laredo_target_memory.compact import PAGE_SIZE, CompactStore, IntKeyIndex

T = TableIdentifier("public", "t")


def test_int_key_index_matches_a_dict_through_adds_removes_and_resizes() -> None:
    rnd = random.Random(3)
    idx = IntKeyIndex()
    ref: dict[int, int] = {}
    # strided and negative keys, and the int64 edges: probing must not degrade or loop
    pool = [i * 1024 for i in range(3000)] + [-(2**63), 2**63 - 1, -1, 0]
    pool += [rnd.randrange(-(2**63), 2**63) for _ in range(3000)]
    for step in range(20_000):
        key = rnd.choice(pool)
        if key in ref and step % 3:
            assert idx.remove(key) == ref.pop(key)
        elif key not in ref:
            if step % 2:
                idx.add(key, step)
            else:
                assert idx.setdefault(key, step) == step
            ref[key] = step
        else:
            assert idx.setdefault(key, -5) == ref[key]  # present: its slot, nothing inserted
        assert idx.get(key) == ref.get(key, -1)
    assert len(idx) == len(ref)
    assert sorted(idx.entries()) == sorted(ref.items())
    assert all(idx.get(k) == s for k, s in ref.items())
    assert idx.remove(12345678901) == -1


def test_compact_store_matches_a_dict() -> None:
    rnd = random.Random(5)
    store = CompactStore()
    ref: dict[Any, Any] = {}
    keys: list[Any] = [*range(2000), "a", "b", ("t", 1), 2**64, -(2**70)]
    for step in range(30_000):
        key = rnd.choice(keys)
        op = rnd.random()
        if op < 0.6:
            value: Any = bytes(rnd.randrange(256) for _ in range(rnd.randrange(1, 60)))
            if step % 97 == 0:
                value = (b"x", [step])  # a packed row with references: kept as an object
            store[key] = value
            ref[key] = value
        elif op < 0.9:
            assert store.pop(key, None) == ref.pop(key, None)
        else:
            assert store.get(key) == ref.get(key)
            assert (key in store) == (key in ref)
    assert len(store) == len(ref)
    assert dict(store.items()) == ref
    assert sorted(map(repr, store.keys())) == sorted(map(repr, ref))

    def norm(v: Any) -> str:
        return repr(bytes(v) if isinstance(v, bytearray) else v)  # page rows are bytearray copies

    assert sorted(map(norm, store.values())) == sorted(map(norm, ref.values()))
    with pytest.raises(KeyError):
        store.pop("missing")
    with pytest.raises(KeyError):
        del store["missing"]


def test_compact_store_reclaims_garbage_and_keeps_rows() -> None:
    store = CompactStore()
    row = bytes(200)
    for i in range(1000):
        store[i] = row + i.to_bytes(4, "big")
    for rnd in range(60):  # rewrite every row many times: garbage must be compacted away
        for i in range(1000):
            store[i] = row + (i + rnd).to_bytes(4, "big")
    assert store.garbage <= max(store.live_bytes, 8 * PAGE_SIZE)
    assert store.nbytes() < 12 * PAGE_SIZE
    assert all(bytes(store[i]) == row + (i + 59).to_bytes(4, "big") for i in range(1000))
    big = bytes(PAGE_SIZE)  # larger than a page slot: kept as its own object
    store[5] = big
    assert store[5] is big
    store.clear()
    assert len(store) == 0 and store.get(5) is None


def test_compact_target_reads_stay_whole_while_a_writer_rewrites_and_compacts() -> None:
    cols = [
        ColumnDefinition("id", "int8", 1, False, True, 1),
        ColumnDefinition("v", "int8", 2),
        ColumnDefinition("pad", "text", 3),
    ]
    t = IndexedTarget(storage="compact")
    t.on_init(T, cols)
    n = 500
    t.on_baseline_rows(T, [{"id": i, "v": 0, "pad": "x" * 300} for i in range(n)])
    stop = threading.Event()
    bad: list[Any] = []

    def reader() -> None:
        rnd = random.Random()
        while not stop.is_set():
            k = rnd.randrange(n)
            row = t.get(k)
            if row is None or row["id"] != k or row["pad"] != "x" * 300:
                bad.append(row)

    readers = [threading.Thread(target=reader) for _ in range(2)]
    for r in readers:
        r.start()
    # each round rewrites every row: pages compact often
    deadline = time.monotonic() + 2  # a run length, not a wait
    version = 0
    while time.monotonic() < deadline:  # a run length, not a wait
        version += 1
        for i in range(n):
            t.on_update(T, {"id": i, "v": version, "pad": "x" * 300}, None)
    stop.set()
    for r in readers:
        r.join()
    assert not bad
    assert t.get(7) == {"id": 7, "v": version, "pad": "x" * 300}


def test_put_many_equals_setitem_loop() -> None:
    """The bulk insert a baseline chunk takes gives the state of ``store[k] = v`` per pair
    (int keys incl. -1, whose hash is -2; other keys; replaced and deleted keys; tombstones)."""
    for trial in range(30):
        rnd = random.Random(trial)
        bulk, loop, ref = CompactStore(), CompactStore(), {}
        for _ in range(5):
            items = [
                (
                    rnd.choice([rnd.randrange(-50, 50), -1, -2, 2**62, "s", (1, 2)]),
                    bytes([rnd.randrange(256)]) * rnd.randrange(1, 40),
                )
                for _ in range(200)
            ]
            bulk.put_many(items)
            for k, v in items:
                loop[k] = v
                ref[k] = v
            for k in rnd.sample(list(ref), min(20, len(ref))):
                bulk.pop(k)
                loop.pop(k)
                ref.pop(k)
        assert {k: bytes(bulk[k]) for k in bulk} == {k: bytes(loop[k]) for k in loop} == ref
        assert len(bulk) == len(ref)


def test_put_batch_fast_path_equals_setitem_loop() -> None:
    """Integer keys only (the batch path): keys repeated in a chunk, keys already stored,
    tombstones left by deletes, chunks crossing pages, int64 bounds, and an int beyond int64
    (row by row); same rows, same slot order as the loop, reads of out-of-range ints."""
    edge = [-1, -2, 0, 2**63 - 1, -(2**63)]
    for trial in range(12):
        rnd = random.Random(100 + trial)
        bulk, loop, ref = CompactStore(), CompactStore(), {}
        for chunk in range(8):
            n = rnd.randrange(1, 400)
            keys = [
                rnd.choice(edge) if rnd.random() < 0.02 else rnd.randrange(-500, 3000)
                for _ in range(n)
            ]
            if chunk == 5:
                keys.append(2**64)
            big = chunk % 3 == 0
            values = [
                bytes([rnd.randrange(256)])
                * (rnd.randrange(1000, 9000) if big else rnd.randrange(1, 60))
                for _ in keys
            ]
            bulk.put_batch(keys, values)
            for k, v in zip(keys, values, strict=True):
                loop[k] = v
                ref[k] = v
            for k in rnd.sample(list(ref), min(30, len(ref))):
                assert bytes(bulk.pop(k)) == bytes(loop.pop(k)) == ref.pop(k)
            for k in list(ref)[:30]:  # reuse the freed slots: leaves tombstones, empties _free
                bulk[k] = loop[k] = ref[k] = b"again"
        assert list(bulk) == list(loop)
        assert {k: bytes(bulk[k]) for k in bulk} == ref
        assert len(bulk) == len(ref)
        assert bulk.get(2**65) is None and bulk.get(2**64) == ref.get(2**64)
    with pytest.raises(ValueError):
        CompactStore().put_batch([1, 2], [b"x"])
