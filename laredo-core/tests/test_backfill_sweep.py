"""When the end of an on-demand backfill may remove the rows the source lacks
(``laredo.engine.backfill_sweep``): only for a whole table, a target that lists its keys, and
transforms that keep the key; the target's key is matched with the chunk key by field."""

from __future__ import annotations

from collections.abc import Sequence
from types import SimpleNamespace
from typing import Any, cast

import pytest
from laredo import AddTimestamp, DropFields, ListsKeys, RenameFields, TableIdentifier
from laredo.engine.backfill import ChunkMerger, ChunkRead, TxSnapshot
from laredo.engine.backfill_sweep import SweepPlan, plan_sweep, plan_table, stale_keys, sweep
from laredo.engine.pipeline_worker import PipelineWorker
from laredo.pipeline_ops import Chain
from laredo.testing import RecordingTarget
from laredo.transforms import as_transform
from laredo.types import ChangeAction, ChangeEvent

T = TableIdentifier("public", "t")


class KeyLister:
    """Lists ``keys`` made of ``fields`` (the ``ListsKeys`` capability alone)."""

    def __init__(self, fields: Sequence[str], keys: Sequence[tuple[Any, ...]] = ()) -> None:
        self.fields = tuple(fields)
        self.keys = list(keys)

    def stored_key_fields(self, table: TableIdentifier) -> tuple[str, ...]:
        return self.fields

    def stored_keys(self, table: TableIdentifier) -> list[tuple[Any, ...]]:
        return self.keys


def _pipe(target: object, *transforms: Any) -> PipelineWorker:
    """What the sweep asks of a pipeline worker (its id, table, target type, chain and
    ``key_lister``), for ``target``."""
    chain = Chain(T, (), tuple(as_transform(t) for t in transforms))
    lister = target if isinstance(target, ListsKeys) else None
    pipe = SimpleNamespace(
        id="p", table=T, target_type=type(target).__name__, chain=chain, key_lister=lambda: lister
    )
    return cast("PipelineWorker", pipe)


def test_no_transforms_and_the_same_key_is_swept_in_the_chunk_key_order() -> None:
    assert plan_sweep(_pipe(KeyLister(["id"])), ["id"]) == SweepPlan((0,))
    assert plan_sweep(_pipe(KeyLister(["a", "b"])), ["b", "a"]) == SweepPlan((1, 0))


def test_built_in_field_transforms_are_traced_back_to_the_source_key() -> None:
    pipe = _pipe(
        KeyLister(["uid", "org"]),
        DropFields(["secret"]),
        RenameFields({"id": "uid"}),
        AddTimestamp(),
    )
    assert plan_sweep(pipe, ["org", "id"]) == SweepPlan((1, 0))


@pytest.mark.parametrize(
    ("pipe", "reason"),
    [
        (_pipe(RecordingTarget()), "(RecordingTarget) cannot list its keys (ListsKeys)"),
        (
            _pipe(KeyLister(["id"]), lambda row: {**row, "id": -row["id"]}),
            "transform CallableTransform does not declare that it keeps the key",
        ),
        (_pipe(KeyLister(["id"]), AddTimestamp("id")), "its key field 'id' is written by"),
        (_pipe(KeyLister(["id"]), DropFields(["id"])), "its key field 'id' is written by"),
        (_pipe(KeyLister(["email"])), "keys rows by (email), from source columns (email); the"),
        (_pipe(KeyLister(["id", "org"])), "the chunks are keyed by (id)"),
    ],
)
def test_a_pipeline_whose_keys_cannot_be_matched_is_not_swept(
    pipe: PipelineWorker, reason: str
) -> None:
    plan = plan_sweep(pipe, ["id"])
    assert isinstance(plan, str) and reason in plan, plan


def test_where_and_initial_baselines_are_not_swept_and_the_reasons_are_shown() -> None:
    ok, bad = _pipe(KeyLister(["id"])), _pipe(RecordingTarget())
    assert plan_table([ok], ["id"], None, initial=True) == ({}, "no")
    plans, state = plan_table([ok], ["id"], "id < 3", initial=False)
    assert plans == {} and state.startswith("skipped: a --where backfill re-syncs a subset")
    plans, state = plan_table([ok, bad], ["id"], None, initial=False)
    assert plans == {"p": SweepPlan((0,))}
    assert state.startswith("pending (skipped: the target of pipeline p (RecordingTarget)")
    plans, state = plan_table([bad], ["id"], None, initial=False)
    assert plans == {} and state.startswith("skipped: the target of pipeline p")


def test_stale_keys_are_the_stored_keys_not_kept_never_a_nan() -> None:
    nan = float("nan")
    stored = [("x", 1), ("y", 2), ("z", nan)]
    assert stale_keys(stored, {(1, "x")}, (1, 0)) == [(2, "y")]
    with pytest.raises(ValueError, match=r"listed key \(1,\); its key fields are 2"):
        stale_keys([(1,)], set(), (1, 0))


def test_the_sweep_deletes_the_stale_keys_by_the_chunk_key_at_the_end_position() -> None:
    lister = KeyLister(["b", "a"], [("x", 1), ("y", 2), ("z", 3)])
    pipe = _pipe(lister)
    applied: list[tuple[list[ChangeEvent], bool]] = []
    pipe.apply_batch = lambda events, complete: applied.append((list(events), complete))  # type: ignore[method-assign]
    pipe.failed = False  # type: ignore[misc]
    assert sweep(pipe, {(2, "y")}, ["a", "b"], 42) == 2
    [(events, complete)] = applied
    assert complete and [(e.action, e.position, e.old_values) for e in events] == [
        (ChangeAction.DELETE, 42, {"a": 1, "b": "x"}),
        (ChangeAction.DELETE, 42, {"a": 3, "b": "z"}),
    ]


def test_a_sweep_that_cannot_run_at_the_end_says_why() -> None:
    class Failing(KeyLister):
        def stored_keys(self, table: TableIdentifier) -> list[tuple[Any, ...]]:
            raise OSError("disk gone")

    assert sweep(_pipe(Failing(["id"])), set(), ["id"], 1) == (
        "pipeline p: listing its target's keys failed: disk gone"
    )
    changed = KeyLister(["email"])  # the key changed since the start (a schema change)
    assert "keys rows by (email)" in str(sweep(_pipe(changed), set(), ["id"], 1))


def test_the_merger_keeps_chunk_and_stream_keys_of_a_composite_key_until_taken() -> None:
    merger = ChunkMerger(T, ["a", "b"], lambda x, y: (x > y) - (x < y), sweep=True)
    snap = TxSnapshot(10, 10)
    rows = [{"a": 1, "b": "x", "v": 0}, {"a": 2, "b": "y", "v": 0}]
    assert merger.offer(ChunkRead(rows, snap, 5, (2, "y")))
    merger.observe([ChangeEvent(T, ChangeAction.DELETE, 6, old_values={"a": 9, "b": "z"})])
    assert [len(r) for _, r in merger.due(6)] == [2]
    kept = merger.take_kept()
    assert kept is not None and not kept.single
    assert sorted(kept) == [(1, "x"), (2, "y"), (9, "z")] and (1, "y") not in kept
    assert stale_keys([("x", 1), ("q", 3)], kept, (1, 0)) == [(3, "q")]
    merger.observe([ChangeEvent(T, ChangeAction.DELETE, 7, old_values={"a": 3, "b": "q"})])
    assert merger.take_kept() is None  # keeping stopped when taken
