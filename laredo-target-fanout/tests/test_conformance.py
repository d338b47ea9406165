"""The conformance suites: the target suite on the fan-out target and on a client replica of
it, the source suite on the cascade source (``FanOutSource`` reading a served target)."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import pytest
from laredo.testing.source import columns
from laredo.testing.source_conformance import SourceConformance
from laredo.testing.target_conformance import MakeTarget, TargetConformance
from laredo.types import ChangeAction, ChangeEvent, Row, TableIdentifier
from laredo_target_fanout import FanOutClient, FanOutSource, FanOutTarget, ReplicationServer
from laredo_target_fanout.options import GrpcOptions
from laredo_target_fanout.testing import USERS, user, wait_until

GRPC = GrpcOptions(port=0, drain_timeout=0)


def _factory(serve: bool) -> Iterator[MakeTarget]:
    made: list[FanOutTarget] = []

    def make(table: Any, columns: Any) -> FanOutTarget:
        if serve:
            t = FanOutTarget(grpc=GRPC, server=ReplicationServer.serving(GRPC))
        else:
            t = FanOutTarget(grpc=GRPC, serve=False)
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


UPSTREAMS: dict[str, FanOutTarget] = {}
"""The served target behind each cascade source under test, by address."""


@pytest.mark.integration
class TestFanOutSourceConformance(SourceConformance):
    """The cascade source, reading a served fan-out target fed directly."""

    @pytest.fixture
    def table(self) -> TableIdentifier:
        return USERS

    @pytest.fixture
    def source(self, table: TableIdentifier) -> Iterator[FanOutSource]:
        upstream = FanOutTarget(grpc=GRPC, server=ReplicationServer.serving(GRPC))
        upstream.on_init(table, columns("id", "name", "team"))
        upstream.on_baseline_rows(table, [user(i) for i in range(10)])
        upstream.set_change_position(0)
        upstream.on_baseline_complete(table)
        UPSTREAMS[upstream.address] = upstream
        src = FanOutSource(upstream.address, reconnect_initial=0.05)
        try:
            yield src
        finally:
            src.close()
            del UPSTREAMS[upstream.address]
            upstream.on_close(table)

    _ids = itertools.count(1000)

    def produce_changes(self, source: Any, table: TableIdentifier, n: int) -> None:
        upstream = UPSTREAMS[source.address]
        for _ in range(n):
            i = next(self._ids)
            upstream.apply_changes(
                table, [ChangeEvent(table, ChangeAction.INSERT, i, new_values=user(i))]
            )
