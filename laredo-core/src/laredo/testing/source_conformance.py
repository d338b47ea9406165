"""Conformance suite for ``SyncSource`` implementations.

Subclass ``SourceConformance`` in your package's tests and provide three fixtures/methods::

    class TestMySource(SourceConformance):
        @pytest.fixture
        def source(self): ...              # a fresh, un-initialised source
        @pytest.fixture
        def table(self): ...               # a TableIdentifier that has >= 1 baseline row
        def produce_changes(self, source, table, n): ...   # commit n INSERTs into table

The suite checks what the engine relies on: schemas with primary keys, validation codes,
baseline positions, ordered streaming strictly after the baseline, position round trips,
and (for resumable sources) ack/last_acked_position.
"""

from __future__ import annotations

import itertools
import threading
import time
from typing import Any

import pytest

from laredo.testing.guard import ConformanceSuite
from laredo.testing.handler import RecordingHandler
from laredo.types import SourceConfig, TableIdentifier


class SourceConformance(ConformanceSuite):
    """Base class (not collected itself); see the module docstring."""

    def produce_changes(self, source: Any, table: TableIdentifier, n: int) -> None:
        raise NotImplementedError

    def _stream(
        self, source: Any, position: Any
    ) -> tuple[RecordingHandler, threading.Thread, list[BaseException]]:
        h = RecordingHandler()
        errors: list[BaseException] = []

        def run() -> None:
            try:
                source.stream(position, h)
            except BaseException as exc:
                errors.append(exc)

        th = threading.Thread(target=run, daemon=True)
        th.start()
        return h, th, errors

    def _stop(self, source: Any, th: threading.Thread) -> None:
        stop = getattr(source, "stop_stream", None)
        if callable(stop):
            stop()
        else:
            source.close()
        th.join(10)

    def test_init_returns_columns_with_primary_key(
        self, source: Any, table: TableIdentifier
    ) -> None:
        schemas = source.init(SourceConfig(tables=[table]))
        cols = schemas[table]
        assert cols, "no columns"
        assert any(c.primary_key for c in cols), "no primary key column reported"
        source.close()

    def test_validate_reports_missing_table(self, source: Any, table: TableIdentifier) -> None:
        source.init(SourceConfig(tables=[table]))
        missing = TableIdentifier(table.schema, table.table + "_does_not_exist")
        errs = source.validate_tables([missing])
        assert errs and all(e.code for e in errs)
        assert not source.validate_tables([table])
        source.close()

    def test_baseline_delivers_rows_and_a_position(
        self, source: Any, table: TableIdentifier
    ) -> None:
        source.init(SourceConfig(tables=[table]))
        rows: list[dict[str, Any]] = []
        pos = source.baseline([table], lambda t, r: rows.append(r))
        assert rows and all(isinstance(r, dict) for r in rows)
        assert pos is not None
        text = source.position_to_string(pos)
        assert source.compare_positions(source.position_from_string(text), pos) == 0
        with pytest.raises(Exception):  # noqa: B017 - any clear error is fine
            source.position_from_string("not a position %%")
        source.close()

    def test_stream_starts_strictly_after_baseline_in_order(
        self, source: Any, table: TableIdentifier
    ) -> None:
        source.init(SourceConfig(tables=[table]))
        pos = source.baseline([table], lambda t, r: None)
        h, th, errors = self._stream(source, pos)
        time.sleep(0.2)
        self.produce_changes(source, table, 5)
        try:
            h.wait_for_events(5, 20.0)
        except AssertionError as exc:
            raise AssertionError(f"{exc}; got {len(h.events)}; errors={errors}") from None
        self._stop(source, th)
        evs = [e for e in h.events if e.table == table]
        assert len(evs) == 5
        for e in evs:
            assert e.position is not None
            assert source.compare_positions(e.position, pos) > 0
        for a, b in itertools.pairwise(evs):
            assert source.compare_positions(a.position, b.position) <= 0
        source.close()

    def test_ack_and_resume_position(self, source: Any, table: TableIdentifier) -> None:
        source.init(SourceConfig(tables=[table]))
        pos = source.baseline([table], lambda t, r: None)
        source.ack(pos)
        if source.supports_resume():
            last = source.last_acked_position()
            assert last is not None and source.compare_positions(last, pos) == 0
        source.close()
