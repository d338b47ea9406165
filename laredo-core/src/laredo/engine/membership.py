"""Pipelines joining and leaving a running source (hot reload).

Joining (:func:`attach`): the new pipeline's worker is routed its table's changes at once, with
its buffer paused; the source is asked to deliver the table (:class:`~laredo.TableSetSource`,
e.g. a managed publication gains it); then the worker baselines the table on its own thread
(for PostgreSQL through a temporary slot's exported snapshot, so the split from the running
stream is exact), skips buffered changes at or before the baseline's position and applies the
rest. No change of any table is lost or applied twice, and no other pipeline is re-baselined.
ACKs of the source wait while the new pipeline is not ready.

Leaving (:func:`detach`): the pipeline is no longer routed changes, its worker drains what its
buffer holds into the target, the target is flushed and closed (:func:`retire`, the engine's
stop too), and the source stops delivering the table when no other pipeline of the source needs
it. ACKs stop waiting for it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence

from ..contracts import TableDescriber, TableSetSource
from ..errors import ConfigError, EngineStateError
from ..types import ColumnDefinition, TableIdentifier
from .backfiller import attach_chunked, joins_chunked
from .pipeline_worker import PipelineWorker
from .source_reader import SourceReader

logger = logging.getLogger(__name__)

__all__ = ["attach", "detach", "preflight", "retire"]


def _table_columns(reader: SourceReader, table: TableIdentifier) -> Sequence[ColumnDefinition]:
    source = reader.source
    if not isinstance(source, TableSetSource):
        raise EngineStateError(
            f"source {reader.id!r} ({type(source).__name__}) cannot add tables while it runs; "
            "add the pipeline to the configuration and restart the engine"
        )
    schemas = source.add_tables([table]) or {}
    columns = schemas.get(table)
    if columns is None:
        raise ConfigError(f"table {table} not found in source {reader.id!r}")
    problems = [p for p in (source.validate_tables([table]) or []) if p.table in (None, table)]
    if problems:
        if not reader.needs_table(table):
            source.remove_tables([table])
        raise ConfigError([f"pipeline on {table}: {p}" for p in problems])
    return list(columns)


def preflight(
    reader: SourceReader, table: TableIdentifier
) -> tuple[list[ColumnDefinition] | None, list[str]]:
    """Before a reload changes anything: the columns ``table`` would have if it joined the
    running source (None when the source cannot tell without delivering it) and every
    problem that would stop it joining. Nothing is changed (no publication edit)."""
    source = reader.source
    if not isinstance(source, TableSetSource):
        return None, [
            f"source {reader.id!r} ({type(source).__name__}) cannot add tables while it runs; "
            "add the pipeline to the configuration and restart the engine"
        ]
    joining = not reader.needs_table(table)
    problems = [
        str(p)
        for p in (source.validate_tables([table]) or [])
        if p.table in (None, table)
        # a table that is not delivered yet is not in the publication yet: add_tables adds it
        and not (joining and p.code == "TABLE_NOT_IN_PUBLICATION")
    ]
    if not isinstance(source, TableDescriber):
        return None, problems
    columns = (source.describe_tables([table]) or {}).get(table)
    if columns is None and not any("TABLE_NOT_FOUND" in p for p in problems):
        problems.append(f"table {table} not found in source {reader.id!r}")
    return (list(columns) if columns is not None else None), problems


def attach(reader: SourceReader, worker: PipelineWorker, timeout: float | None) -> None:
    """Add ``worker`` to a streaming source and baseline its table (see the module docstring).
    Blocks until the pipeline streams; on failure the source is left as it was."""
    table = worker.table
    columns = _table_columns(reader, table)
    reader.schemas[table] = list(columns)
    try:
        worker.init_target(columns, reader.pipeline_context(worker))
    except Exception as exc:
        _undo_table(reader, table)
        raise EngineStateError(f"target init failed for {table}: {exc}") from exc
    chunked = joins_chunked(reader, worker)  # else: a reload, the stream held back meanwhile
    if not chunked:
        worker.hold(True)  # hold the stream's changes until the baseline is in
    reader.add(worker)
    worker.start_worker()
    try:
        if chunked:
            attach_chunked(reader, worker, timeout)
        else:
            worker.submit("reload").result(timeout)
    except BaseException:
        reader.remove(worker)
        worker.end_input()
        _undo_table(reader, table)
        raise
    worker.hold(False)
    worker.mark_streaming()
    reader.try_ack()


def _undo_table(reader: SourceReader, table: TableIdentifier) -> None:
    if reader.needs_table(table) or not isinstance(reader.source, TableSetSource):
        return
    try:
        reader.source.remove_tables([table])
    except Exception:
        logger.warning("source %s: could not stop delivering %s", reader.id, table, exc_info=True)


def detach(reader: SourceReader, worker: PipelineWorker, timeout: float | None) -> None:
    """Remove ``worker`` from its source after draining it (see the module docstring)."""
    reader.remove(worker)
    retire([worker], None if timeout is None else time.monotonic() + timeout)
    _undo_table(reader, worker.table)
    reader.try_ack()


def retire(
    workers: Sequence[PipelineWorker],
    deadline: float | None,
    *,
    drained: Callable[[], None] | None = None,
    flushed: Callable[[], None] | None = None,
) -> None:
    """The end of pipelines, written once (engine stop, pipeline and source removal): every
    worker applies what its buffer holds (all at once, until ``deadline``, a
    ``time.monotonic()`` value; one still busy then abandons the rest, which stays
    unacknowledged); ``drained()`` runs (the shutdown snapshot); every target of a pipeline that
    did not fail is flushed; ``flushed()`` runs (the ACK of what is now durable, while every
    target is still open); then every target is closed and its pipeline STOPPED."""
    for w in workers:
        w.end_input()
    for w in workers:
        w.drain(None if deadline is None else max(0.1, deadline - time.monotonic()))
    if drained is not None:
        drained()
    for w in workers:
        w.flush()
    if flushed is not None:
        flushed()
    for w in workers:
        w.close()
