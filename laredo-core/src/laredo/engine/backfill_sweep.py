"""The end of a whole-table on-demand backfill: removing the rows the source no longer has.

A backfill's chunks upsert the rows the source has; rows the target holds that the source
lacks (drift: a delete missed while the table was out of the stream, a target restored from an
old snapshot, rows written into the target by hand) would stay. So a whole-table on-demand
backfill keeps, in its :class:`~laredo.engine.backfill.ChunkMerger`, the key of every chunk row
read and every key the stream touched (old and new key of each change) since it was registered
with the source reader, and at its end — in stream order, on each pipeline's own thread, behind
every chunk row and every change delivered up to the end position ``P`` — deletes every key
the target holds that is in neither set (:func:`sweep`).

Why that is safe (the DBLog merge's argument, :mod:`laredo.engine.backfill`): the chunks
partition the key space in the source's own order (``(after, last_key]``, the last one open),
so a key ``k`` the target holds lies in the range of one chunk, read under snapshot ``s``.
``k`` not among its rows means ``k`` was absent in ``s``. For ``k`` to exist in the source at
``P`` some transaction ``T`` writing ``k`` must be invisible to ``s``; ``T`` committed after
the merger was registered (``s`` was taken after that, and sees every commit before it), so
the stream delivers ``T`` after the merger began observing: before ``P`` — then ``k`` is a
touched key and kept — or after ``P`` — then ``T`` is applied after the delete, and the target
ends right. A transaction visible to ``s`` that deletes ``k`` but reaches the stream after
``P`` (a chunk merged on an idle stream before its high mark) only makes the delete early; the
stream's own delete follows. Either way the target ends equal to the source, with every key
the source lacks gone.

The deletes go through the pipeline's normal path (:meth:`PipelineWorker.apply_batch` at
``P``): filters, transforms (the identity), retries, dead letters, and the ACK rules (a
durable target's ACK covers them like any change). Only when it is provably safe, else the
sweep is skipped with the reason logged (INFO) and shown in the progress (``sweep``):

* not with ``where`` (a subset: the target cannot evaluate SQL), nor for an initial chunked
  baseline (its target starts empty);
* only for targets that list their keys (:class:`~laredo.contracts.ListsKeys`), whose key
  fields trace back to the chunk key columns through transforms that copy values
  (``copies_values`` and ``input_field``: the built-ins; any other transform skips it).

Memory: the kept keys are O(rows of the table), as many as the target holds anyway. A chunk
row a pipeline's filter drops keeps its key; the row it stored before a filter change is
removed by the chunk row itself (an on-demand backfill hands a pipeline with filters its chunk
rows as UPDATEs, and an UPDATE leaving the filter is a DELETE), not counted as swept.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from ..preflight import MapsFields
from ..types import ChangeAction, ChangeEvent, Position
from .backfill import KeptKeys
from .pipeline_worker import PipelineWorker

logger = logging.getLogger(__name__)

__all__ = ["SweepPlan", "plan_sweep", "plan_table", "stale_keys", "sweep"]


@dataclass(frozen=True, slots=True)
class SweepPlan:
    """How one pipeline's stored keys map to the chunk key: the source's key column ``i`` is
    value ``order[i]`` of the target's key tuple."""

    order: tuple[int, ...]


def plan_sweep(p: PipelineWorker, key: Sequence[str]) -> SweepPlan | str:
    """``p``'s sweep plan for chunk key ``key``, or why it cannot be swept."""
    target = p.key_lister()
    if target is None:
        return f"the target of pipeline {p.id} ({p.target_type}) cannot list its keys (ListsKeys)"
    fields = tuple(target.stored_key_fields(p.table))
    traced: list[str] = []
    for f in fields:
        name: str | None = f
        for t in reversed(p.chain.transforms):
            if not (isinstance(t, MapsFields) and getattr(t, "copies_values", False) is True):
                return (
                    f"pipeline {p.id}: transform {type(t).__name__} does not declare that it "
                    "keeps the key (copies_values and input_field)"
                )
            name = t.input_field(name) if name is not None else None
        if name is None:
            return f"pipeline {p.id}: its key field {f!r} is written by a transform"
        traced.append(name)
    if not traced or len(set(traced)) != len(traced) or set(traced) != set(key):
        return (
            f"pipeline {p.id}: its target keys rows by ({', '.join(fields)}), from source "
            f"columns ({', '.join(traced)}); the chunks are keyed by ({', '.join(key)})"
        )
    return SweepPlan(tuple(traced.index(k) for k in key))


def plan_table(
    pipes: Sequence[PipelineWorker], key: Sequence[str], where: str | None, initial: bool
) -> tuple[dict[str, SweepPlan], str]:
    """The pipelines of a backfill to sweep at its end and the progress's ``sweep`` text
    (``pending``, ``skipped: <reason>``, or ``no`` for an initial baseline)."""
    if initial:
        return {}, "no"
    if where is not None:
        return {}, "skipped: a --where backfill re-syncs a subset (the target cannot tell " + (
            "which of its rows the condition covers); `laredo reload` removes such rows"
        )
    plans: dict[str, SweepPlan] = {}
    reasons: list[str] = []
    for p in pipes:
        plan = plan_sweep(p, key)
        if isinstance(plan, str):
            reasons.append(plan)
        else:
            plans[p.id] = plan
    if not plans:
        return {}, "skipped: " + "; ".join(reasons)
    return plans, "pending" + (f" (skipped: {'; '.join(reasons)})" if reasons else "")


def stale_keys(
    stored: Iterable[tuple[Any, ...]], kept: Collection[tuple[Any, ...]], order: tuple[int, ...]
) -> list[tuple[Any, ...]]:
    """The ``stored`` keys (a target's, reordered by ``order`` into the chunk key's order) not
    in ``kept``. A key with a value unequal to itself (a NaN) is never stale: it cannot be
    matched."""
    width = len(order)
    same = order == tuple(range(width))
    values = kept.values if isinstance(kept, KeptKeys) and kept.single else None
    stale: list[tuple[Any, ...]] = []
    for key in stored:
        if values is not None and len(key) == 1 and key[0] in values:
            continue  # the fast path of a one-column key
        if len(key) != width:
            raise ValueError(f"the target listed key {key!r}; its key fields are {width}")
        k = key if same else tuple(key[i] for i in order)
        if k in kept:
            continue
        if all(v == v for v in k):  # noqa: PLR0124 (NaN test)
            stale.append(k)
    return stale


def sweep(
    p: PipelineWorker, kept: Collection[tuple[Any, ...]], key: Sequence[str], position: Position
) -> int | str:
    """On ``p``'s thread, at ``position``: delete every key ``p``'s target holds that is not in
    ``kept`` (see the module docstring, :func:`stale_keys`), through the pipeline's normal
    path. Returns how many, or why it did not (the target's key changed since the start, the
    listing failed, the pipeline failed applying the deletes)."""
    plan = plan_sweep(p, key)  # again: a schema change may have changed the target's key
    lister = p.key_lister()
    if isinstance(plan, str) or lister is None:
        return plan if isinstance(plan, str) else f"pipeline {p.id}: its target lists no keys"
    try:
        stale = stale_keys(lister.stored_keys(p.table), kept, plan.order)
    except Exception as exc:
        logger.debug("pipeline %s: listing its target's keys failed", p.id, exc_info=True)
        return f"pipeline {p.id}: listing its target's keys failed: {exc}"
    if stale:
        table = p.table
        delete = ChangeAction.DELETE
        names = tuple(key)
        events = [
            ChangeEvent(table, delete, position, old_values=dict(zip(names, k, strict=True)))
            for k in stale
        ]
        p.apply_batch(events, True)
        if p.failed:
            return f"pipeline {p.id} failed removing {len(stale)} row(s): {p.error}"
    return len(stale)
