"""The target conformance suite, on the fan-out target and on a client replica of it."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from fanout_testlib import wait_until
from laredo.testing.target_conformance import MakeTarget, TargetConformance
from laredo.types import Row
from laredo_target_fanout import FanOutClient, FanOutTarget


def _factory(serve: bool) -> Iterator[MakeTarget]:
    made: list[FanOutTarget] = []

    def make(table: Any, columns: Any) -> FanOutTarget:
        t = FanOutTarget(serve=serve, grpc={"port": 0, "drain_timeout": 0})
        made.append(t)
        return t

    yield make
    for t in made:
        if t.table is not None:
            t.on_close(t.table)


class TestFanOutTargetConformance(TargetConformance):
    @pytest.fixture
    def make_target(self) -> Iterator[MakeTarget]:
        yield from _factory(serve=False)


@pytest.mark.integration
class TestFanOutReplicaConformance(TargetConformance):
    """Every scenario's state, read back through a FanOutClient replica over gRPC."""

    @pytest.fixture
    def make_target(self) -> Iterator[MakeTarget]:
        yield from _factory(serve=True)

    def rows_of(self, target: Any) -> list[Row]:
        if not target.ready:  # not served before its baseline completes
            return list(target.export_snapshot())
        client = FanOutClient(target.address, target.table).start()
        try:
            assert client.await_ready(10)
            wait_until(lambda: client.last_sequence == target.current_sequence, 10)
            return client.all()
        finally:
            client.stop(save=False)
