"""IntKeyIndex's dense form, its turn to the hash form, and batch inserts, against a dict."""

from __future__ import annotations

import random

from laredo_target_memory.keyindex import DENSE_SLACK, DENSE_SPREAD, IntKeyIndex


def _same(idx: IntKeyIndex, ref: dict[int, int]) -> None:
    assert len(idx) == len(ref)
    assert sorted(idx.entries()) == sorted(ref.items())
    assert all(idx.get(k) == s for k, s in ref.items())


def test_serial_chunks_stay_dense_and_cost_four_bytes_a_key() -> None:
    idx, ref = IntKeyIndex(), {}
    for start in range(1, 100_001, 2000):
        keys = list(range(start, start + 2000))
        assert idx.put_new(keys, len(ref))
        ref.update(zip(keys, range(len(ref), len(ref) + 2000), strict=True))
    assert idx.dense is not None
    _same(idx, ref)
    assert idx.get(0) == idx.get(100_001) == idx.get(-5) == idx.get(2**70) == -1
    assert idx.nbytes() <= 4 * 1.5 * len(ref) + 4 * DENSE_SLACK
    assert not idx.put_new([5, 100_001], 0)  # 5 is present: nothing changes
    assert not idx.put_new([100_002, 100_002], 0)  # repeated
    _same(idx, ref)


def test_dense_growth_both_ways_removes_and_reinserts_match_a_dict() -> None:
    rnd = random.Random(11)
    idx, ref = IntKeyIndex(), {}
    lo = hi = 10_000
    for step in range(30_000):
        op = rnd.random()
        if op < 0.15:  # grow downwards, one by one (a new array each time it runs out)
            lo -= rnd.randrange(1, 4)
            key = lo
        elif op < 0.3:
            hi += rnd.randrange(1, 4)
            key = hi
        else:
            key = rnd.randrange(lo, hi + 1)
        if key in ref and op > 0.8:
            assert idx.remove(key) == ref.pop(key)
        else:
            assert idx.setdefault(key, step) == ref.setdefault(key, step)
        assert idx.get(key) == ref.get(key, -1)
    assert idx.dense is not None  # keys never spread out
    _same(idx, ref)
    assert idx.remove(lo - 100) == -1 and idx.remove(hi + 100) == -1


def test_a_far_key_turns_the_index_to_hash_with_nothing_lost() -> None:
    rnd = random.Random(12)
    idx, ref = IntKeyIndex(), {}
    assert idx.put_new(list(range(3000)), 0)
    ref.update((k, k) for k in range(3000))
    far = DENSE_SPREAD * 3000 + DENSE_SLACK + 10**6
    assert idx.setdefault(far, 7) == 7
    ref[far] = 7
    assert idx.dense is None
    _same(idx, ref)
    for step in range(20_000):  # the hash form from here on, random keys
        key = rnd.choice([rnd.randrange(-(2**63), 2**63), rnd.randrange(0, 3000)])
        if key in ref and step % 2:
            assert idx.remove(key) == ref.pop(key)
        else:
            assert idx.setdefault(key, step) == ref.setdefault(key, step)
    _same(idx, ref)
    keys = [far + 1 + 2 * i for i in range(500)]  # new and distinct
    before = sorted(idx.entries())
    if not idx.put_new(keys, 10**6):  # a first probe was taken: nothing changed
        assert sorted(idx.entries()) == before
        for j, k in enumerate(keys):
            idx.setdefault(k, 10**6 + j)
    ref.update(zip(keys, range(10**6, 10**6 + 500), strict=True))
    assert not idx.put_new([far + 1], 0)
    _same(idx, ref)


def test_random_keys_in_one_batch_take_the_hash_form() -> None:
    rnd = random.Random(13)
    idx = IntKeyIndex()
    keys = rnd.sample(range(-(2**40), 2**40), 5000)
    assert idx.put_new(keys, 0) or all(idx.setdefault(k, j) == j for j, k in enumerate(keys))
    assert idx.dense is None
    _same(idx, {k: j for j, k in enumerate(keys)})
