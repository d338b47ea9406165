"""The core target conformance suite, reading the state back from the Delta table."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from laredo.testing.target_conformance import MakeTarget, TargetConformance
from laredo_target_delta import DeltaTarget, DeltaTargetOptions
from laredo_target_delta.archive import table_reader
from laredo_target_delta.columns import codecs_for, rows_of

_ids = itertools.count(1)


class TestDeltaConformance(TargetConformance):
    @pytest.fixture
    def make_target(self, tmp_path: Path) -> Iterator[MakeTarget]:
        made: list[DeltaTarget] = []

        def make(table: Any, columns: Any) -> DeltaTarget:
            uri = str(tmp_path / f"t{next(_ids)}")
            t = DeltaTarget(DeltaTargetOptions(uri=uri, flush_interval=0))
            made.append(t)
            return t

        yield make
        for t in made:
            t.on_close(self.table)

    def rows_of(self, target: Any) -> list[dict[str, Any]]:
        from deltalake import DeltaTable

        target.flush()  # what the suite reads must be committed
        writer = target._writer
        if writer.dt is None:
            return []
        dt = DeltaTable(writer.uri)  # the current state: the change rows folded (layout.py)
        return rows_of(table_reader(dt).read_all(), codecs_for(writer.columns))
