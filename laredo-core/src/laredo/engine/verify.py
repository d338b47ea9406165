"""Verifying a pipeline: its target compared with its source, key by key, exact at one position.

:func:`verify_pipeline` runs on the pipeline's worker thread, between two of its batches, while
the source keeps streaming into the pipeline's buffer (held back, never dropped, while the
worker reads):

1. the source reads the table at a position ``P`` (the same read as a reload's baseline: for
   PostgreSQL a temporary slot's exported snapshot, so ``P`` splits the stream exactly); each
   chunk of rows goes through the pipeline's filters and transforms and is reduced to
   ``key -> hash of the row`` (the key: the table's primary key, else every column);
2. the worker goes on applying its buffered changes up to ``P`` and, just before the first item
   after ``P`` (a change, or a heartbeat at or after ``P``), compares the target's rows with
   those hashes: the target then holds exactly the changes up to ``P``.

The result lists the keys missing from the target, the keys the target holds that the source
does not, and the keys whose rows differ (the first ``max_keys`` of each, with the counts). A
source must give the changes of one transaction one position (PostgreSQL does). The target must
enumerate its rows (:class:`~laredo.contracts.KeyedTarget`, else ``export_snapshot``).
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from ..contracts import BatchBaselineSource
from ..errors import EngineStateError
from ..types import PipelineState, Position, Row, TableIdentifier, row_key_columns
from .pipeline_worker import PipelineWorker

__all__ = ["VERIFY_MAX_KEYS", "VerifyResult", "row_digest", "verify_pipeline"]

VERIFY_MAX_KEYS = 100
"""Keys listed per kind of difference by default (the counts are always exact)."""


@dataclass(frozen=True)
class VerifyResult:
    """A target compared with its source at ``position`` (see the module docstring)."""

    pipeline_id: str
    table: TableIdentifier
    position: str
    source_rows: int
    target_rows: int
    missing: tuple[str, ...] = ()
    """Keys in the source that the target lacks (the first ``max_keys``)."""
    extra: tuple[str, ...] = ()
    """Keys the target holds that the source does not."""
    different: tuple[str, ...] = ()
    """Keys whose rows differ."""
    missing_count: int = 0
    extra_count: int = 0
    different_count: int = 0

    @property
    def match(self) -> bool:
        return not (self.missing_count or self.extra_count or self.different_count)

    def summary(self) -> str:
        head = (
            f"pipeline {self.pipeline_id} ({self.table}) at {self.position}: source "
            f"{self.source_rows} rows, target {self.target_rows}"
        )
        if self.match:
            return f"{head}: match"
        parts = [
            f"{n} {what} ({', '.join(keys)}{', ...' if n > len(keys) else ''})"
            for n, what, keys in (
                (self.missing_count, "missing from the target", self.missing),
                (self.extra_count, "only in the target", self.extra),
                (self.different_count, "different", self.different),
            )
            if n
        ]
        return f"{head}: MISMATCH: " + "; ".join(parts)


def _canon(value: Any) -> str:
    if isinstance(value, datetime) and value.tzinfo is not None:
        return repr(value.astimezone(UTC))  # one spelling of an instant, whatever its zone
    return repr(value)


def row_digest(row: Row) -> bytes:
    """A 16-byte hash of a row's fields and values (field order does not matter)."""
    text = "\x1f".join(f"{k}\x1e{_canon(row[k])}" for k in sorted(row))
    return hashlib.blake2b(text.encode(), digest_size=16).digest()


class _Check:
    """The source side (key -> row hash at ``position``), then the comparison."""

    def __init__(self, worker: PipelineWorker, max_keys: int) -> None:
        self.worker = worker
        self.max_keys = max_keys
        self.fields = row_key_columns(worker.columns)
        self.hashes: dict[Any, bytes] = {}
        self.position: Position = None
        self.done: Future[VerifyResult] = Future()

    def key(self, row: Row) -> Any:
        fields = self.fields or tuple(sorted(row))
        return tuple(row.get(f) for f in fields)

    def key_text(self, key: Any) -> str:
        fields = self.fields or ("row",)
        if len(fields) == 1:
            return str(key[0])
        return "(" + ", ".join(f"{f}={v!r}" for f, v in zip(fields, key, strict=False)) + ")"

    def add(self, rows: Sequence[Row]) -> None:
        chain = self.worker.chain
        if not chain.plain:
            rows = chain.baseline_rows(rows)
        hashes, key = self.hashes, self.key
        for row in rows:
            hashes[key(row)] = row_digest(row)

    def read_source(self) -> None:
        table = self.worker.table
        source = self.worker.link.source
        if isinstance(source, BatchBaselineSource):
            self.position = source.baseline_batches(
                [table], lambda t, rows: self.add(rows) if t == table else None
            )
        else:
            self.position = source.baseline(
                [table], lambda t, row: self.add([row]) if t == table else None
            )

    def missed(self) -> None:
        self.done.set_exception(
            EngineStateError(
                f"pipeline {self.worker.id}: the source delivered changes on both sides of the "
                "verified position in one batch; run the verification again"
            )
        )

    def finish(self) -> None:
        try:
            self.done.set_result(self.compare())
        except Exception as exc:
            self.done.set_exception(exc)

    def target_rows(self) -> Iterable[Row]:
        rows = self.worker.stored_rows()
        if rows is None:
            raise EngineStateError(f"the target of pipeline {self.worker.id} cannot list its rows")
        return rows

    def compare(self) -> VerifyResult:
        source = self.hashes
        source_rows = len(source)
        extra: list[Any] = []
        different: list[Any] = []
        seen = 0
        for row in self.target_rows():
            seen += 1
            key = self.key(row)
            digest = source.pop(key, None)
            if digest is None:
                extra.append(key)
            elif digest != row_digest(row):
                different.append(key)
        missing = list(source)
        n = self.max_keys

        def listed(keys: list[Any]) -> tuple[str, ...]:
            return tuple(self.key_text(k) for k in sorted(keys, key=repr)[:n])

        return VerifyResult(
            pipeline_id=self.worker.id,
            table=self.worker.table,
            position=self.worker.link.pos_str(self.position),
            source_rows=source_rows,
            target_rows=seen,
            missing=listed(missing),
            extra=listed(extra),
            different=listed(different),
            missing_count=len(missing),
            extra_count=len(extra),
            different_count=len(different),
        )


def _paused(worker: PipelineWorker) -> bool:
    return worker.state is PipelineState.PAUSED


def _start(worker: PipelineWorker, max_keys: int) -> Future[VerifyResult]:
    """On the worker thread: read the source, then arm the comparison (or run it now)."""
    if worker.state is not PipelineState.STREAMING:
        raise EngineStateError(
            f"pipeline {worker.id} is {worker.state.value}: verify a STREAMING pipeline "
            "(resume a paused source first)"
        )
    check = _Check(worker, max_keys)
    worker.hold(True)  # hold the source back while reading: nothing is dropped
    try:
        check.read_source()
    finally:
        worker.hold(_paused(worker))  # a pause meanwhile stays
    if not worker.at_position(check.position, check.finish, check.missed):
        raise EngineStateError(f"pipeline {worker.id}: a validation or verification is running")
    return check.done


def verify_pipeline(
    call: Callable[[Callable[[], Future[VerifyResult]], float | None], Future[VerifyResult]],
    worker: PipelineWorker,
    timeout: float | None = None,
    max_keys: int = VERIFY_MAX_KEYS,
) -> VerifyResult:
    """Compare ``worker``'s target with its source (see the module docstring). ``call(work,
    timeout)`` runs ``work`` on the worker thread (``Engine.call_in_pipeline``). Raises
    ``EngineStateError`` when the pipeline is not streaming or its target cannot list its
    rows, ``TimeoutError`` when the comparison did not happen within ``timeout``."""
    started = time.monotonic()
    done = call(lambda: _start(worker, max_keys), timeout)
    left = None if timeout is None else max(0.0, timeout - (time.monotonic() - started))
    try:
        return done.result(left)
    except FutureTimeout:
        worker.cancel_at_position()  # from this thread: at worst the comparison runs unread
        raise TimeoutError(
            f"pipeline {worker.id}: no change or heartbeat reached the verified position "
            f"within {timeout}s"
        ) from None
