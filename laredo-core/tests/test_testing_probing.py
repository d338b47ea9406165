"""``laredo.testing.probing``: writes until the block exits, then none; a failing write is
raised in the test, not lost in the probe's thread."""

from __future__ import annotations

import threading

import pytest
from laredo.testing import probing, wait_until


def test_probes_until_the_block_exits_then_stops() -> None:
    seen: list[int] = []
    with probing(seen.append, interval=0.001):
        wait_until(lambda: len(seen) >= 3, what="three probes")
    n = len(seen)
    assert seen == list(range(n))  # numbered 0, 1, 2, ... in order
    assert not [t for t in threading.enumerate() if t.name == "laredo-test-probe"]
    assert len(seen) == n  # the thread was joined: nothing is written after the block


def test_a_failing_write_is_raised_when_the_block_exits() -> None:
    calls: list[int] = []

    def write(i: int) -> None:
        calls.append(i)
        raise ConnectionError("database is gone")

    with pytest.raises(ConnectionError, match="database is gone"), probing(write):
        wait_until(lambda: calls, what="the first probe")
    assert calls == [0]  # the probing stopped at the first failure
