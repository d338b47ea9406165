"""``wait_until``: the one polling helper of Laredo's tests."""

from __future__ import annotations

import time
from collections.abc import Callable

__all__ = ["wait_until"]


def wait_until(
    predicate: Callable[[], object], timeout: float = 10.0, interval: float = 0.005
) -> bool:
    """Poll ``predicate`` until it is truthy or ``timeout`` seconds pass; returns its final
    truth (so ``assert wait_until(...)`` reports a timeout as a failed assertion)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(interval)
    return bool(predicate())
