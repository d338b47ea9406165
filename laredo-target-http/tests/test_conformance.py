"""The core target conformance suite, observing the state through a real HTTP receiver.

Every target gets its own path prefix on the test server; ``rows_of`` replays the requests the
receiver accepted under that prefix through the reference ``Replica`` and returns its rows, so
each check proves that what was sent rebuilds the rows with identical values and Python types.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any, ClassVar
from urllib.parse import urlsplit

import pytest
from laredo.testing.target_conformance import MakeTarget, TargetConformance
from laredo_target_http import HttpSyncTarget, Replica

_ids = itertools.count(1)


class TestHttpSyncConformance(TargetConformance):
    supports_restore: ClassVar[bool] = False  # the receiver keeps the state; restore is a no-op

    @pytest.fixture
    def make_target(self, receiver: Any) -> Iterator[MakeTarget]:
        self.receiver = receiver
        made: list[HttpSyncTarget] = []

        def make(table: Any, columns: Any) -> HttpSyncTarget:
            t = HttpSyncTarget(f"{receiver.url}/r{next(_ids)}", batch_size=3, flush_interval=0)
            made.append(t)
            return t

        yield make
        for t in made:
            t.on_close(t._table or self.table)

    def rows_of(self, target: Any) -> list[dict[str, Any]]:
        prefix = urlsplit(target.base_url).path
        replica = Replica()
        for req in self.receiver.ok_requests():
            if req.path.startswith(prefix + "/"):
                replica.apply(req.path, req.body)
        return replica.rows()
