"""The chunked baseline's progress record (issue 32): what a ProgressTarget keeps."""

from __future__ import annotations

import datetime as dt
import uuid

import pytest
from laredo.engine.backfill import BackfillProgress
from laredo.engine.backfiller import decode_progress, encode_progress
from laredo.errors import ConfigError
from laredo.types import TableIdentifier


def test_progress_record_round_trips_json_keys_and_keeps_other_values_as_text() -> None:
    assert decode_progress(encode_progress((42, "b"))) == (42, "b")
    u = uuid.UUID(int=7)
    day = dt.date(2026, 1, 2)
    assert decode_progress(encode_progress([u, day])) == (str(u), "2026-01-02")


@pytest.mark.parametrize("record", ["", "{}", "[1]", '{"last_key": 5}', "not json"])
def test_an_unreadable_progress_record_is_a_clear_error(record: str) -> None:
    with pytest.raises(ConfigError, match="unreadable chunked-baseline progress record"):
        decode_progress(record)


def test_a_progress_record_from_a_damaged_store_is_bounded() -> None:
    """The record comes back from a target's store: a huge one is refused without being
    parsed or printed whole, and nesting deep enough to exhaust the parser is a clear error."""
    huge = '{"last_key": ["' + "x" * (2 << 20) + '"]}'
    with pytest.raises(ConfigError, match="over the") as ei:
        decode_progress(huge)
    assert len(str(ei.value)) < 1000
    deep = '{"last_key": ' + "[" * 200_000 + "]" * 200_000 + "}"
    with pytest.raises(ConfigError, match="unreadable chunked-baseline progress record") as ei:
        decode_progress(deep)
    assert len(str(ei.value)) < 1000


def test_progress_state_and_eta_from_the_rate_so_far() -> None:
    p = BackfillProgress(TableIdentifier("public", "t"))
    assert (p.state, p.eta_seconds()) == ("running", None)  # nothing read, no estimate
    p.rows_read = 250
    assert p.eta_seconds() is None  # no estimate
    p.rows_estimated = 1000
    p._started -= 10.0  # 250 rows in 10 s: 750 left at 25 rows/s
    eta = p.eta_seconds()
    assert eta is not None and 30.0 <= eta < 45.0, eta  # (loose: a loaded box may stall)
    p.rows_read = 1200  # a stale estimate: nothing is left, not a negative ETA
    assert p.eta_seconds() == 0.0
    p.done = True
    p.end()
    assert (p.state, p.eta_seconds(), p.as_dict()["eta_seconds"]) == ("done", 0.0, 0.0)
    assert p.ended_at is not None and p.ended_at >= p.started_at


@pytest.mark.parametrize(("error", "state"), [("stopped", "stopped"), ("boom", "failed")])
def test_an_ended_backfill_that_did_not_finish_has_no_eta(error: str, state: str) -> None:
    p = BackfillProgress(TableIdentifier("public", "t"), rows_read=5, rows_estimated=10)
    p.error = error
    p.end()
    assert (p.state, p.eta_seconds()) == (state, None)
    assert p.as_dict()["state"] == state
