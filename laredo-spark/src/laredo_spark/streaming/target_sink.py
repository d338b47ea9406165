"""``foreachBatch`` sink applying each micro-batch to Laredo targets, in stream order.

Targets live in the driver, so the batch's changes are collected there (changes, not the
tables' rows). Replays after a restart are recognised by the micro-batch id and skipped.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping, Sequence
from typing import Any

from laredo.contracts import FlushableTarget, PositionedTarget
from laredo.filters import as_filter
from laredo.pipeline_ops import Chain, apply_change
from laredo.transforms import as_transform
from laredo.types import ColumnDefinition, TableIdentifier

from ..errors import short_error
from .changes import decode_change_rows

logger = logging.getLogger(__name__)

__all__ = ["BatchLog", "TargetSink"]


class BatchLog:
    """The last micro-batch id a sink finished, optionally persisted in a small JSON file."""

    def __init__(self, path: str | os.PathLike[str] | None) -> None:
        self.path = os.fspath(path) if path is not None else None
        self.batch_id = -1
        if self.path and os.path.exists(self.path):
            with open(self.path, encoding="utf-8") as f:
                self.batch_id = int(json.load(f)["batch_id"])

    def done(self, batch_id: int) -> None:
        self.batch_id = batch_id
        if self.path:
            tmp = f"{self.path}.tmp"
            with open(tmp, "w", encoding="utf-8") as f:
                json.dump({"batch_id": batch_id}, f)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)


class TargetSink:
    """``foreachBatch`` sink applying each micro-batch to Laredo targets, in stream order.

    ``pipelines`` are :class:`laredo.Pipeline` objects (their filters and transforms apply
    with the engine's rules: an update that leaves the filter becomes a delete); ``columns``
    maps each table to its columns for ``on_init``. A micro-batch id at or below the last one
    finished is skipped (a replay after a restart); ``state_path`` persists that id next to
    the checkpoint so durable targets stay exactly-once across processes. Targets that buffer
    are flushed at the end of each batch.
    """

    def __init__(
        self,
        pipelines: Sequence[Any],
        columns: Mapping[TableIdentifier, Sequence[ColumnDefinition]],
        state_path: str | os.PathLike[str] | None = None,
    ) -> None:
        self.pipelines: list[tuple[Chain, Any]] = []
        for p in pipelines:
            t = p.table if isinstance(p.table, TableIdentifier) else TableIdentifier.parse(p.table)
            chain = Chain(
                t,
                tuple(as_filter(f) for f in p.filters),
                tuple(as_transform(x) for x in p.transforms),
            )
            self.pipelines.append((chain, p.target))
        self.columns = {k: list(v) for k, v in columns.items()}
        self.log = BatchLog(state_path)
        self._inited = False
        self.batches_applied = 0
        self.batches_skipped = 0

    def _init(self) -> None:
        for chain, target in self.pipelines:
            target.on_init(chain.table, self.columns.get(chain.table, []))
            target.on_baseline_complete(chain.table)
        self._inited = True

    def __call__(self, df: Any, batch_id: int) -> None:
        try:
            self.apply(df.collect(), batch_id)
        except Exception as exc:
            raise short_error(f"laredo target sink, batch {batch_id}", exc) from None

    def apply(self, rows: Sequence[Any], batch_id: int) -> None:
        if batch_id <= self.log.batch_id:
            self.batches_skipped += 1
            logger.info("target sink: batch %d already applied, skipping the replay", batch_id)
            return
        if not self._inited:
            self._init()
        changes = decode_change_rows(rows)
        for chain, target in self.pipelines:
            table = chain.table
            positioned = isinstance(target, PositionedTarget)
            mine = [ch for ch in changes if ch.table == table]
            for ev in chain.prepare(mine).events:
                apply_change(target, table, ev, positioned=positioned)
            if isinstance(target, FlushableTarget):
                target.flush()
        self.log.done(batch_id)
        self.batches_applied += 1
