"""pytest plugin shipped with laredo-core (entry point ``pytest11``): shared fixtures.

``served_laredo`` (function)
    A callable ``start(config, *, env=None, log=None, args=(), timeout=60.0)`` returning a
    running :class:`~laredo.testing.serving.ServedLaredo`. Servers still running at the end of
    the test are stopped (SIGTERM, then SIGKILL), and when the test fails, the tail of every
    server's log is attached to its report as a "laredo serve log" section.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterator
from typing import Any

import pytest

from .serving import ServedLaredo

__all__ = ["served_laredo"]

_SERVED = pytest.StashKey[list[ServedLaredo]]()


@pytest.fixture
def served_laredo(request: pytest.FixtureRequest) -> Iterator[Callable[..., ServedLaredo]]:
    started = request.node.stash.setdefault(_SERVED, [])

    def start(config: Any, **kw: Any) -> ServedLaredo:
        served = ServedLaredo(config, **kw)
        started.append(served)
        return served

    yield start
    for served in started:
        if served.running():
            try:
                served.stop()
            except Exception:
                served.kill()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if report.failed:
        served_here: list[ServedLaredo] = item.stash.get(_SERVED, [])
        for i, served in enumerate(served_here):
            report.sections.append((f"laredo serve log #{i} ({served.log})", served.tail()))
    return report
