"""Chunked-baseline records read back from a store raise only their documented error on any
input, within the time bound, and never quote a whole record: the Spark run record
(``laredo_spark.pg.progress.decode_run``: ``SnapshotError``) and the engine's progress record
(``laredo.engine.backfiller.decode_progress``: ``ConfigError``)."""

from __future__ import annotations

import json
import time
from typing import Any

import fuzz_strategies
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from laredo.engine.backfiller import decode_progress, encode_progress
from laredo.errors import ConfigError, SnapshotError
from laredo_spark.pg.chunks import TableChunks
from laredo_spark.pg.progress import ChunkRun, decode_run, encode_run

pytestmark = pytest.mark.fuzz

_PLAN = TableChunks(("id", "k"), ("bigint", "text"), (("10", "a"), ("20", "b")))
_RUN = ChunkRun("spark-x", "s", "0/16B3748", 1, "UTC", "f1", {"public.t": _PLAN}).finished(
    "pipeline-0000", 1, {"parts": ["public.t/part-00001.parquet"], "rows": 7}
)
GOOD = json.loads(encode_run(_RUN, "fuzz"))

json_values = fuzz_strategies.json_values(["../../x", "9" * 40, "-1", "1e999", "pipeline-0000"])


def mutated_run() -> Any:
    """A real run record with a few of its values replaced or removed."""
    return fuzz_strategies.mutated(GOOD, json_values).map(lambda d: json.dumps(d).encode())


def _quoted_whole(message: str, record: bytes | str) -> bool:
    text = record.decode(errors="replace") if isinstance(record, bytes) else record
    return len(text) > 200 and text in message


@settings.get_profile("laredo-fuzz")
@given(mutated_run() | st.binary(max_size=100))
@example(b"[" * 100_000)
@example(json.dumps({**GOOD, "done": {"pipeline-0000": {"99999999999": {}}}}).encode())
@example(json.dumps({**GOOD, "tables": {"public.t": {**GOOD["tables"]["public.t"], "bounds": 7}}}))
def test_run_record_reader_raises_only_snapshot_error(data: bytes | str) -> None:
    t0 = time.monotonic()
    try:
        run = decode_run(data, "fuzz")
    except SnapshotError as exc:
        assert not _quoted_whole(str(exc), data)
    else:
        assert isinstance(run, ChunkRun)
        assert all(isinstance(c, int) and c >= 0 for d in run.done.values() for c in d)
        assert all(isinstance(b, tuple) for t in run.tables.values() for b in t.bounds)
    assert time.monotonic() - t0 < 2


progress_records = (
    st.builds(encode_progress, st.none() | st.lists(json_values, max_size=3))
    | st.builds(lambda v: json.dumps({"last_key": v}), json_values)
    | st.builds(json.dumps, json_values)
    | st.text(max_size=60)
)


@settings.get_profile("laredo-fuzz")
@given(progress_records)
@example("[" * 100_000)
@example('{"last_key": "abc"}')
@example('{"last_key": ' + "[" * 5000 + "]" * 5000 + "}")
def test_progress_record_reader_raises_only_config_error(record: str) -> None:
    t0 = time.monotonic()
    try:
        key = decode_progress(record)
    except ConfigError as exc:
        assert not _quoted_whole(str(exc), record)
    else:
        assert key is None or isinstance(key, tuple)
        if key is not None:  # a key is the list encode_progress wrote, never a string's letters
            assert list(key) == json.loads(record)["last_key"]
    assert time.monotonic() - t0 < 2
