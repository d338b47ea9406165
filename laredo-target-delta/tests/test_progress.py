"""A chunked baseline into the ``delta`` target (``laredo.ProgressTarget``): the progress
record is committed in the Delta commit holding the chunk's rows, read back after a restart,
and voided when the baseline ends or a snapshot baseline replaces the table."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import laredo
from laredo.types import ChangeAction, ChangeEvent
from laredo_target_delta import DeltaTarget, DeltaTargetOptions, history, progress_of, rows_as_of

from .conftest import COLUMNS, ITEMS, Archive, item

START = '{"last_key":null}'


def _target(uri: str) -> DeltaTarget:
    t = DeltaTarget(DeltaTargetOptions(uri=uri, flush_interval=0))
    t.on_init(ITEMS, COLUMNS)
    return t


def _rows(uri: str) -> dict[int, dict[str, Any]]:
    return {r["id"]: r for r in rows_as_of(uri, "999999999")[0]}


def _chunk(t: DeltaTarget, position: str, *ids: int) -> None:
    events = [ChangeEvent(ITEMS, ChangeAction.INSERT, position, new_values=item(i)) for i in ids]
    t.apply(ITEMS, events, complete=True)


def test_chunk_rows_and_their_record_share_a_commit_and_a_restart_reads_it(
    tmp_path: Path,
) -> None:
    old = Archive(str(tmp_path / "items"))  # a table holding rows 0..2 from an earlier run
    old.close()
    uri = old.uri
    t = _target(uri)
    assert isinstance(t, laredo.ProgressTarget) and t.load_progress(ITEMS) is None
    t.set_change_position("20")
    t.save_progress(ITEMS, None)  # nothing recorded yet: no commit
    t.save_progress(ITEMS, START)  # the chunked baseline begins: an empty version
    begun = history(uri)[-1]
    assert (begun.kind, begun.position, begun.progress) == ("baseline", "20", START)
    assert _rows(uri) == {}
    _chunk(t, "30", 1, 2)
    t.save_progress(ITEMS, '{"last_key":[2]}')
    _chunk(t, "40", 3)  # the next chunk, its record not handed over yet
    t.flush()
    last = history(uri)[-1]
    assert (last.kind, last.inserted, last.progress) == ("changes", 3, '{"last_key":[2]}')
    t.on_close(ITEMS)  # kill -9 would lose nothing more: the record is in the log

    again = _target(uri)  # the restart
    assert again.load_progress(ITEMS) == '{"last_key":[2]}'
    versions = len(history(uri))
    _chunk(again, "50", 3, 4)
    again.save_progress(ITEMS, '{"last_key":[4]}')
    again.on_baseline_complete(ITEMS)  # a chunked baseline's end writes no baseline version
    again.flush()
    again.save_progress(ITEMS, None)  # the end, with nothing buffered: a commit of no rows
    again.flush()
    kinds = [(c.kind, c.progress) for c in history(uri)[versions:]]
    assert kinds == [("changes", '{"last_key":[4]}'), ("progress", "")]
    assert progress_of(history(uri)) is None and sorted(_rows(uri)) == [1, 2, 3, 4]
    again.on_close(ITEMS)
    assert _target(uri).load_progress(ITEMS) is None


def test_a_snapshot_baseline_voids_a_stale_record(tmp_path: Path) -> None:
    uri = str(tmp_path / "items")
    t = _target(uri)
    t.set_change_position("20")
    t.save_progress(ITEMS, START)
    _chunk(t, "30", 1)
    t.save_progress(ITEMS, '{"last_key":[1]}')
    t.on_close(ITEMS)
    stale = _target(uri)  # e.g. the slot was lost: a snapshot baseline, not a resume
    stale.on_baseline_rows(ITEMS, [item(7), item(8)])
    stale.set_change_position("90")
    stale.on_baseline_complete(ITEMS)
    last = history(uri)[-1]
    assert (last.kind, last.progress) == ("baseline", "")
    assert sorted(_rows(uri)) == [7, 8] and _target(uri).load_progress(ITEMS) is None
    stale.on_close(ITEMS)
