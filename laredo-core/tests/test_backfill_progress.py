"""The chunked baseline's progress record (issue 32): what a ProgressTarget keeps."""

from __future__ import annotations

import datetime as dt
import uuid

import pytest
from laredo.engine.backfiller import decode_progress, encode_progress
from laredo.errors import ConfigError


def test_progress_record_round_trips_json_keys_and_keeps_other_values_as_text() -> None:
    assert decode_progress(encode_progress((42, "b"))) == (42, "b")
    u = uuid.UUID(int=7)
    day = dt.date(2026, 1, 2)
    assert decode_progress(encode_progress([u, day])) == (str(u), "2026-01-02")


@pytest.mark.parametrize("record", ["", "{}", "[1]", '{"last_key": 5}', "not json"])
def test_an_unreadable_progress_record_is_a_clear_error(record: str) -> None:
    with pytest.raises(ConfigError, match="unreadable chunked-baseline progress record"):
        decode_progress(record)
