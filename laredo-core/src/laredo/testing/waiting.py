"""``wait_until``: the one polling helper of Laredo's tests (every package's test kit
re-exports it)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

__all__ = ["wait_until"]

T = TypeVar("T")


def wait_until(
    predicate: Callable[[], T], timeout: float = 10.0, what: object = "", *, interval: float = 0.005
) -> T:
    """Poll ``predicate`` until it returns something truthy, and return that value.

    Raises ``AssertionError`` naming ``what`` (or the predicate) after ``timeout`` seconds, so
    neither ``wait_until(...)`` nor ``assert wait_until(...)`` can pass on a timeout."""
    end = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= end:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what or predicate}")
        time.sleep(interval)
