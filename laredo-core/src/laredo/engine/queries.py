"""The engine's read side: looking up pipelines, sources and targets, introspection, and
read-your-writes (:meth:`EngineView.wait_for`). :class:`~laredo.engine.Engine` holds one
:class:`EngineView` over its own collections and delegates to it; nothing here changes what
runs."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any, TypeVar

from ..contracts import SyncSource, SyncTarget
from ..errors import EngineStateError
from ..pipeline import Pipeline, PipelineInfo, SourceRunInfo
from ..types import ColumnDefinition, Position, TableIdentifier
from .pipeline_worker import PipelineWorker
from .source_reader import SourceReader

__all__ = ["EngineView"]

T = TypeVar("T")


class EngineView:
    """Read-only queries over a running (or configured) engine; thread-safe. It holds the
    engine's collections themselves (the engine changes them in place, never rebinds them)."""

    def __init__(
        self,
        *,
        sources: dict[str, SyncSource],
        configs: list[Pipeline],
        readers: dict[str, SourceReader],
        workers: list[PipelineWorker],
        lifecycle: Callable[[], str],
    ) -> None:
        self.sources = sources
        self.configs = configs
        self.readers = readers
        self.workers = workers
        self._lifecycle = lifecycle

    def require_running(self) -> None:
        state = self._lifecycle()
        if state != "running":
            raise EngineStateError(f"engine is {state}; call start() first")

    def reader(self, source_id: str) -> SourceReader:
        """The running source's reader; ``KeyError`` listing the sources."""
        self.require_running()
        try:
            return self.readers[source_id]
        except KeyError:
            known = ", ".join(sorted(self.readers))
            raise KeyError(f"unknown source {source_id!r} (sources: {known})") from None

    def worker(self, pipeline_id: str) -> PipelineWorker:
        """The pipeline's worker; ``KeyError`` listing the pipelines."""
        for p in self.workers:
            if p.id == pipeline_id:
                return p
        known = ", ".join(p.id for p in self.workers) or "none"
        raise KeyError(f"unknown pipeline {pipeline_id!r} (pipelines: {known})")

    def match(
        self, source_id: str | None, table: TableIdentifier | str | None
    ) -> list[PipelineWorker]:
        if isinstance(table, str):
            table = TableIdentifier.parse(table)
        return [
            p
            for p in self.workers
            if (not source_id or p.link.source_id == source_id)
            and (table is None or p.table == table)
        ]

    # -- read-your-writes -------------------------------------------------------------------
    def wait_for(
        self, source_id: str, position: Position | str, timeout: float | None, durable: bool
    ) -> bool:
        """:meth:`Engine.wait_for <laredo.engine.Engine.wait_for>`."""
        reader = self.reader(source_id)
        if isinstance(position, str):
            position = self._parse_position(reader, position)
        return reader.wait_applied(position, timeout, durable)

    def applied_position(self, source_id: str) -> str | None:
        """The text of the lowest position every active pipeline of the source has applied
        (``None`` while a pipeline is not ready). Raises ``KeyError`` for an unknown source."""
        reader = self.reader(source_id)
        low = reader.applied_through()
        return reader.pos_str(low) if low is not None else None

    def durable_position(self, source_id: str) -> str | None:
        """The text of the lowest position every active pipeline of the source holds durably
        (``None`` while one holds nothing durably). Raises ``KeyError`` for an unknown source."""
        reader = self.reader(source_id)
        low = reader.durable_through()
        return reader.pos_str(low) if low is not None else None

    def _parse_position(self, reader: SourceReader, text: str) -> Position:
        try:
            return reader.source.position_from_string(text)
        except Exception as exc:
            example = reader.pos_str(reader.current) if reader.current is not None else None
            hint = f" such as {example!r} (its current position)" if example else ""
            raise ValueError(
                f"cannot read {text!r} as a position of source {reader.id!r} "
                f"({type(reader.source).__name__}): {exc}; give the source's position "
                f"text{hint}"
            ) from None

    # -- introspection ---------------------------------------------------------------------
    def targets(
        self, source_id: str | None = None, table: TableIdentifier | str | None = None
    ) -> list[SyncTarget]:
        if self.workers:
            return [p.target for p in self.match(source_id, table)]
        if isinstance(table, str):
            table = TableIdentifier.parse(table)
        return [
            c.target
            for c in self.configs
            if (not source_id or c.source_id == source_id) and (table is None or c.table == table)
        ]

    def get_target(
        self, source_id: str | None, table: TableIdentifier | str, cls: type[Any] | None = None
    ) -> Any:
        """The first target for ``(source_id, table)`` (of type ``cls`` if given), or None."""
        for t in self.targets(source_id, table):
            if cls is None or isinstance(t, cls):
                return t
        return None

    def pipelines(self) -> list[PipelineInfo]:
        out = []
        for p in self.workers:
            depth, capacity = p.buffer_fill()
            durable = None
            with contextlib.suppress(Exception):
                c = p.confirmed()
                durable = p.link.pos_str(c) if c is not None else None
            out.append(
                PipelineInfo(
                    id=p.id,
                    source_id=p.link.source_id,
                    table=p.table,
                    target_type=p.target_type,
                    state=p.state,
                    row_count=p.count_rows(),
                    buffer_depth=depth,
                    buffer_capacity=capacity,
                    error=p.error,
                    applied_position=p.link.pos_str(p.applied) if p.applied is not None else None,
                    durable_position=durable,
                )
            )
        return out

    def source_ids(self) -> list[str]:
        return list(self.sources)

    def source(self, source_id: str) -> SyncSource:
        return self.sources[source_id]

    def source_info(self, source_id: str) -> SourceRunInfo | None:
        src = self.sources.get(source_id)
        if src is None:
            return None
        reader = self.readers.get(source_id)
        lag = _safe(src.get_lag)
        state = _safe(src.state)
        og = _safe(src.ordering_guarantee)
        return SourceRunInfo(
            id=source_id,
            source_type=type(src).__name__,
            supports_resume=bool(_safe(src.supports_resume)),
            ordering_guarantee=str(og) if og is not None else "",
            state=str(state) if state is not None else "",
            lag_bytes=lag.lag_bytes if lag is not None else 0,
            lag_time=lag.lag_time if lag is not None else None,
            acked_position=(
                reader.pos_str(reader.last_ack) if reader and reader.last_ack is not None else None
            ),
            current_position=(
                reader.pos_str(reader.current) if reader and reader.current is not None else None
            ),
            pipelines=tuple(p.id for p in reader.pipelines) if reader else (),
            error=reader.error if reader else None,
        )

    def table_schema(
        self, table: TableIdentifier | str, source_id: str | None = None
    ) -> list[ColumnDefinition]:
        if isinstance(table, str):
            table = TableIdentifier.parse(table)
        for reader in self.readers.values():
            if source_id and reader.id != source_id:
                continue
            cols = reader.schemas.get(table)
            if cols is not None:
                return list(cols)
        return []


def _safe(fn: Callable[[], T]) -> T | None:
    try:
        return fn()
    except Exception:
        return None
