"""``wait_until``: the one polling helper of Laredo's tests (every package's test kit
re-exports it); ``probing``: write until a listener shows it is in place."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

__all__ = ["probing", "wait_until"]

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


@contextmanager
def probing(
    write: Callable[[int], object], *, interval: float = 0.05, timeout: float = 30.0
) -> Iterator[None]:
    """Call ``write(0)``, ``write(1)``, ... from a thread, one per ``interval``, until the
    ``with`` block exits (or ``timeout`` seconds pass), then join the thread.

    For a listener whose registration cannot be observed (a subscription, a change stream):
    inside the block, wait for the first probe to arrive; every change written after the block
    exits reaches the listener. A ``write`` that raises stops the probing and the error is
    re-raised when the block exits. Probe writes may still arrive after the block: tell them
    apart by key."""
    done = threading.Event()
    errors: list[BaseException] = []

    def run() -> None:
        end = time.monotonic() + timeout
        i = 0
        while time.monotonic() < end:
            try:
                write(i)
            except BaseException as e:  # re-raised in the test's thread
                errors.append(e)
                return
            i += 1
            if done.wait(interval):
                return

    prober = threading.Thread(target=run, name="laredo-test-probe", daemon=True)
    prober.start()
    try:
        yield
    finally:
        done.set()
        prober.join()
    if errors:
        raise errors[0]
