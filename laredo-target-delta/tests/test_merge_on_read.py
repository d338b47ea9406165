"""Merge-on-read (``layout.py``): a flush writes bytes in proportion to its changes, the mirror
and point-in-time reads stay exact, compaction folds the change rows, and any Delta reader can
see the current state through the documented view."""

from __future__ import annotations

import json
import random
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
from deltalake import DeltaTable, QueryBuilder
from laredo.types import ChangeAction, ChangeEvent, Row
from laredo_target_delta import (
    DeltaSource,
    DeltaSourceOptions,
    DeltaTarget,
    DeltaTargetOptions,
    history,
    rows_as_of,
)
from laredo_target_delta.columns import codecs_for, rows_of
from laredo_target_delta.feed import feed
from laredo_target_delta.layout import SEQ, reader_view_sql

from .conftest import COLUMNS, ITEMS, item


def _added_bytes(uri: str, versions: range) -> int:
    total = 0
    for v in versions:
        for line in Path(uri, "_delta_log", f"{v:020d}.json").read_text().splitlines():
            action = json.loads(line)
            if "add" in action:
                total += int(action["add"]["size"])
    return total


def _state(uri: str) -> dict[int, Row]:
    rows, _, _ = rows_as_of(uri, "999999999")
    by_id = {r["id"]: r for r in rows}
    assert len(by_id) == len(rows), "a key is in the state twice"
    return by_id


def _random_changes(
    rnd: random.Random, model: dict[int, Row], n: int, position: int, next_id: int
) -> list[ChangeEvent]:
    """``n`` changes to random keys (updates, inserts, deletes), applied to ``model`` too."""
    events = []
    for k in range(n):
        r = rnd.random()
        if r < 0.6 and model:
            key = rnd.choice(list(model)) if len(model) < 1000 else rnd.randrange(next_id)
            if key not in model:
                continue
            row = item(key, name=f"u{position}-{k}", price=Decimal(f"{k}.25"))
            events.append(ChangeEvent(ITEMS, ChangeAction.UPDATE, position, new_values=row))
            model[key] = row
        elif r < 0.85:
            row = item(next_id + k)
            events.append(ChangeEvent(ITEMS, ChangeAction.INSERT, position, new_values=row))
            model[next_id + k] = row
        else:
            key = rnd.randrange(next_id)
            events.append(ChangeEvent(ITEMS, ChangeAction.DELETE, position, old_values={"id": key}))
            model.pop(key, None)
    return events


def _target(uri: str, **maintenance: Any) -> DeltaTarget:
    return DeltaTarget(DeltaTargetOptions(uri=uri, flush_interval=0, maintenance=maintenance))


def _baseline(t: DeltaTarget, rows: list[Row], position: int) -> None:
    t.on_init(ITEMS, COLUMNS)
    for lo in range(0, len(rows), 50_000):
        t.on_baseline_rows(ITEMS, rows[lo : lo + 50_000])
    t.set_change_position(position)
    t.on_baseline_complete(ITEMS)


def _flush(t: DeltaTarget, events: list[ChangeEvent], position: int) -> None:
    for lo in range(0, len(events), 100):  # transactions of 100 changes at one position
        t.apply_changes(ITEMS, events[lo : lo + 100])
    t.set_change_position(position + 1)  # a heartbeat: the transaction is whole
    t.flush()


def test_random_key_changes_add_bytes_in_proportion_and_reads_stay_exact(tmp_path: Path) -> None:
    n = 100_000
    uri = str(tmp_path / "big")
    t = _target(uri)
    model: dict[int, Row] = {i: item(i) for i in range(n)}
    _baseline(t, list(model.values()), 10)
    table_bytes = _added_bytes(uri, range(0, 1))
    rnd = random.Random(31)
    states = {10: dict(model)}
    for position in (20, 30):
        before = DeltaTable(uri).version()
        _flush(t, _random_changes(rnd, model, 2_000, position, n + position * 1_000), position)
        after = DeltaTable(uri).version()
        written = _added_bytes(uri, range(before + 1, after + 1))
        assert 0 < written <= 0.10 * table_bytes, (written, table_bytes)
        states[position] = dict(model)
    t.on_close(ITEMS)

    assert _state(uri) == model  # the mirror equals the source rows
    for position, expected in states.items():  # point-in-time reads stay exact
        rows, at, _ = rows_as_of(uri, position + 5)
        assert at == str(position)
        assert {r["id"]: r for r in rows} == expected
    commits = history(uri)
    assert all(c.position is not None for c in commits)  # positions in every commit
    assert [c.kind for c in commits] == ["baseline", "changes", "changes"]


def test_compaction_folds_the_change_rows_at_the_same_position(tmp_path: Path) -> None:
    uri = str(tmp_path / "small")
    t = _target(uri, compact_fraction=0.5, compact_min_rows=1)
    model: dict[int, Row] = {i: item(i) for i in range(20)}
    _baseline(t, list(model.values()), 10)
    source = DeltaSource(DeltaSourceOptions(uri=uri, follow=False))
    source.init({})  # type: ignore[arg-type]
    rnd = random.Random(5)
    expected = {}
    for position in (20, 30, 40, 50):
        _flush(t, _random_changes(rnd, model, 6, position, 100 + position), position)
        expected[position] = dict(model)
    t.on_close(ITEMS)

    commits = history(uri)
    kinds = [c.kind for c in commits]
    assert "compaction" in kinds, kinds
    for i, c in enumerate(commits):
        if c.kind == "compaction":  # the same position as the commit it folds
            assert c.position == commits[i - 1].position
    assert _state(uri) == model
    for position, state in expected.items():
        rows, _, _ = rows_as_of(uri, position)
        assert {r["id"]: r for r in rows} == state
    if kinds[-1] == "compaction":  # a compacted table holds plain rows only
        assert pa.table(DeltaTable(uri).to_pyarrow_table()).column(SEQ).null_count == len(model)

    # the delta source delivers the changes once: compactions are heartbeats
    got: dict[int, Row] = {i: item(i) for i in range(20)}

    class Handler:
        def on_changes(self, events: list[ChangeEvent], complete: bool) -> None:
            for e in events:
                if e.action is ChangeAction.DELETE:
                    assert e.old_values is not None
                    got.pop(e.old_values["id"], None)  # a delete of an absent key is inert
                else:
                    assert e.new_values is not None
                    assert (e.action is ChangeAction.INSERT) == (e.new_values["id"] not in got)
                    got[e.new_values["id"]] = e.new_values

        def on_heartbeat(self, position: Any) -> None:
            if int(position) >= commits[-1].version:  # caught up: stop (follow = false)
                source.stop_stream()

        def on_schema_change(self, *args: Any) -> None:
            pass

    source.stream(0, Handler())  # type: ignore[arg-type]
    assert got == model

    # the fan-out cold archive's reading: the whole range at once, compactions skipped
    replay: dict[int, Row] = {i: item(i) for i in range(20)}
    dt = DeltaTable(uri)
    skip = {c.version for c in commits if c.kind == "compaction"}
    changes = feed(dt, 1, dt.version(), codecs_for(COLUMNS), ["id"], skip=skip)
    written = [c.inserted + c.updated + c.deleted for c in commits if c.kind == "changes"]
    assert len(changes) == sum(written)  # one event per change row, none from a compaction
    for f in changes:
        if f.action is ChangeAction.DELETE:
            replay.pop(f.row["id"], None)
        else:
            replay[f.row["id"]] = f.row
    assert replay == model


def test_the_documented_view_gives_plain_readers_the_current_state(tmp_path: Path) -> None:
    uri = str(tmp_path / "view")
    t = _target(uri)
    model: dict[int, Row] = {i: item(i) for i in range(50)}
    _baseline(t, list(model.values()), 10)
    rnd = random.Random(9)
    for position in (20, 30):
        _flush(t, _random_changes(rnd, model, 40, position, 1000 + position), position)
    t.on_close(ITEMS)
    dt = DeltaTable(uri)
    raw = pa.table(dt.to_pyarrow_table())
    assert raw.num_rows > len(model)  # change rows beside the compacted ones
    names = [c.name for c in COLUMNS]
    sql = reader_view_sql("t", names, ["id"])
    view = pa.table(QueryBuilder().register("t", dt).execute(sql).read_all())
    got = {r["id"]: r for r in rows_of(view, codecs_for(COLUMNS))}
    assert got == model
