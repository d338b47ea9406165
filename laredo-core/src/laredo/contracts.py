"""Contracts (Protocols) between the engine and its plugins.

Required contracts are plain Protocols; optional capabilities are small runtime-checkable
Protocols the engine discovers with ``isinstance``. All calls come from engine threads; a source
must make ``state``, ``get_lag``, ``ack``, ``pause`` and ``resume`` safe to call concurrently with
``stream``.
"""

from __future__ import annotations

import builtins
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import IO, Any, Protocol, TypeAlias, runtime_checkable

from .batches import ChangeBatch
from .events import Event
from .types import (
    ChangeEvent,
    ColumnDefinition,
    DeadLetter,
    ErrorInfo,
    IndexDefinition,
    LagInfo,
    OrderingGuarantee,
    Position,
    Row,
    SchemaChangeResponse,
    SnapshotDescriptor,
    SnapshotMetadata,
    SourceConfig,
    SourceState,
    TableIdentifier,
    TableProblem,
    TableSnapshotInfo,
)

RowCallback = Callable[[TableIdentifier, Row], None]


@runtime_checkable
class ChangeHandler(Protocol):
    """Receives a source's stream. Returning from a call does not mean the change is durable.

    ``on_changes(events, complete=True)`` is the fast path (a transaction, in order); a source that
    splits a big transaction passes ``complete=False`` for every chunk but the last, so the
    transaction's position is acknowledged only once all of it is applied. Sources call it with
    both arguments; every handler takes ``complete`` (``on_changes(events)`` alone is deprecated:
    the PostgreSQL source warns and falls back to whole transactions). ``on_change`` is the
    per-event path. ``on_heartbeat(position)`` says "nothing for you up to here" so ACKs
    advance on idle sources; ``on_schema_change`` reports a table's new columns in stream order.
    A handler may also have ``on_resync_required(table, reason)`` (the engine's has): the
    source saw the table change in a way row changes cannot carry (a partition attached,
    detached or truncated) and asks for the table to be re-baselined; sources call it only
    when the handler has it.
    """

    def on_change(self, event: ChangeEvent) -> None: ...

    def on_changes(self, events: Sequence[ChangeEvent], complete: bool = True) -> None: ...

    def on_heartbeat(self, position: Position) -> None: ...

    def on_schema_change(
        self,
        table: TableIdentifier,
        old_columns: Sequence[ColumnDefinition],
        new_columns: Sequence[ColumnDefinition],
        position: Position,
    ) -> None: ...


@runtime_checkable
class BatchChangeHandler(Protocol):
    """A handler that takes a source's :class:`~laredo.batches.ChangeBatch` es (the engine's
    does). A source that builds batches calls ``on_change_batch(batch, complete)`` instead of
    ``on_changes`` when the handler has it; ``complete`` as for ``on_changes``. The handler
    passes the batch on without building its events (targets that store value tuples take it
    as it is; anyone else reads it as the ``Sequence[ChangeEvent]`` it also is)."""

    def on_change_batch(self, batch: ChangeBatch, complete: bool = True) -> None: ...


@runtime_checkable
class SyncSource(Protocol):
    """Produces a consistent baseline and an ordered change stream that starts right after it.

    ``ack(position)`` means every change at or before ``position`` is durable in every target;
    a stateful source persists it, and a restart resumes strictly after the last acked position.
    """

    def init(self, config: SourceConfig) -> dict[TableIdentifier, list[ColumnDefinition]]: ...

    def validate_tables(self, tables: Sequence[TableIdentifier]) -> list[TableProblem]: ...

    def baseline(
        self, tables: Sequence[TableIdentifier], row_callback: RowCallback
    ) -> Position: ...

    def stream(self, from_position: Position, handler: ChangeHandler) -> None: ...

    def ack(self, position: Position) -> None: ...

    def supports_resume(self) -> bool: ...

    def last_acked_position(self) -> Position | None: ...

    def compare_positions(self, a: Position, b: Position) -> int: ...

    def position_to_string(self, position: Position) -> str: ...

    def position_from_string(self, text: str) -> Position: ...

    def pause(self) -> None: ...

    def resume(self) -> None: ...

    def get_lag(self) -> LagInfo: ...

    def ordering_guarantee(self) -> OrderingGuarantee: ...

    def state(self) -> SourceState: ...

    def close(self) -> None: ...


@runtime_checkable
class Resettable(Protocol):
    """A source that can drop and recreate its replication state (slot, checkpoints).
    ``reset_source`` raises ``ConfigError`` only to refuse before changing anything (e.g. a
    publication it does not manage): the stream goes on and nothing re-baselines."""

    def reset_source(self, drop_publication: bool = False) -> None: ...


@runtime_checkable
class StoppableSource(Protocol):
    """A source whose blocking ``stream`` can be told to return (engine stop, reload)."""

    def stop_stream(self) -> None: ...


@runtime_checkable
class TableSetSource(Protocol):
    """A running source that can start and stop delivering tables (hot reload).

    ``add_tables`` makes the source deliver changes of ``tables`` from now on (a managed
    PostgreSQL publication gets them added) and returns their columns; it is called before the
    new tables' baseline, so every change after the baseline's position reaches the stream.
    ``remove_tables`` stops delivering them (a managed publication drops tables no pipeline
    needs). Both are called while ``stream`` runs, from another thread.
    """

    def add_tables(
        self, tables: Sequence[TableIdentifier]
    ) -> dict[TableIdentifier, list[ColumnDefinition]]: ...

    def remove_tables(self, tables: Sequence[TableIdentifier]) -> None: ...


@runtime_checkable
class TableDescriber(Protocol):
    """A running source that can read tables' columns from its live catalog without delivering
    them (no publication change, nothing else touched): a hot reload checks new and changed
    pipelines against it before it changes anything. Missing tables are left out. Called
    while ``stream`` runs, from another thread."""

    def describe_tables(
        self, tables: Sequence[TableIdentifier]
    ) -> dict[TableIdentifier, list[ColumnDefinition]]: ...


@runtime_checkable
class RowCounter(Protocol):
    """A source that counts a table's rows exactly at a position of its stream (PostgreSQL:
    ``count(*)`` under a temporary slot's exported snapshot). Periodic row-count validation of
    a pipeline without filters, transforms or TTL then compares the target with the source at
    that position instead of with the engine's own count. Called from a worker thread while
    ``stream`` runs."""

    def count_rows_at(self, table: TableIdentifier) -> tuple[int, Position]: ...


@runtime_checkable
class DeadLetterBindable(Protocol):
    """A source that dead-letters bad records itself: the engine hands it its dead-letter
    store (if one is configured) before ``init``."""

    def bind_dead_letter_store(self, store: DeadLetterStore) -> None: ...


@runtime_checkable
class BatchBaselineSource(Protocol):
    """Optional fast path: rows delivered in lists instead of one callback per row."""

    def baseline_batches(
        self,
        tables: Sequence[TableIdentifier],
        batch_callback: Callable[[TableIdentifier, Sequence[Row]], None],
    ) -> Position: ...


class SyncTarget(Protocol):
    """Consumes one table's baseline rows and changes.

    ``is_durable()`` is true when applied changes survive a restart of this process by
    themselves (a database, an HTTP peer that answered 2xx). Memory targets are not durable: the
    engine then acknowledges them no further than their latest completed snapshot.
    """

    def on_init(self, table: TableIdentifier, columns: Sequence[ColumnDefinition]) -> None: ...

    def on_baseline_row(self, table: TableIdentifier, row: Row) -> None: ...

    def on_baseline_complete(self, table: TableIdentifier) -> None: ...

    def on_insert(self, table: TableIdentifier, row: Row) -> None: ...

    def on_update(self, table: TableIdentifier, row: Row, identity: Row | None) -> None:
        """Replace the row. A column absent from ``row`` (an unchanged TOAST value the source
        did not send) keeps the value the target already stores; it is never dropped."""
        ...

    def on_delete(self, table: TableIdentifier, identity: Row) -> None: ...

    def on_truncate(self, table: TableIdentifier) -> None: ...

    def is_durable(self) -> bool: ...

    def on_schema_change(
        self,
        table: TableIdentifier,
        old_columns: Sequence[ColumnDefinition],
        new_columns: Sequence[ColumnDefinition],
    ) -> SchemaChangeResponse: ...

    def export_snapshot(self) -> list[Row]: ...

    def restore_snapshot(self, info: TableSnapshotInfo, rows: Iterable[Row]) -> None: ...

    def supports_consistent_snapshot(self) -> bool: ...

    def on_close(self, table: TableIdentifier) -> None: ...


@dataclass(frozen=True, slots=True)
class PipelineContext:
    """What the engine tells a target about the pipeline it serves (see ``PipelineAware``)."""

    pipeline_id: str
    source_id: str
    table: TableIdentifier
    observer: Observer
    position_to_string: Callable[[Position], str]
    position_from_string: Callable[[str], Position]
    compare_positions: Callable[[Position, Position], int]


@runtime_checkable
class PipelineAware(Protocol):
    """A target that wants its pipeline id, the engine's observer and the source's position
    functions. ``bind_pipeline`` is called once, before ``on_init``."""

    def bind_pipeline(self, context: PipelineContext) -> None: ...


@runtime_checkable
class PositionedTarget(Protocol):
    """The engine calls ``set_change_position(position)`` before ``on_baseline_complete`` with
    the baseline's position (and, on the deprecated per-change path, before each change)."""

    def set_change_position(self, position: Position) -> None: ...


@runtime_checkable
class DurablePositionTarget(Protocol):
    """A target that buffers: it reports the highest position it has made durable (or None).

    Its baseline counts as durable once ``on_baseline_complete`` returned; the engine waits for
    ``durable_position`` only to pass the changes it handed over since (see
    ``PipelineWorker.confirmed``)."""

    def durable_position(self) -> Position | None: ...


@runtime_checkable
class ProgressTarget(Protocol):
    """A durable target that keeps a chunked baseline's progress with its own state, so a
    restart after a crash continues after the last chunk it holds (issue 32).

    ``save_progress(table, record)`` is called on the pipeline's thread after the rows of a
    chunk were handed to ``apply`` (``record`` an opaque text; ``None``: the baseline finished,
    forget it). The record must become durable no earlier than those rows (ideally in the same
    commit); ``load_progress(table)`` returns the last durable record (``None``: none)."""

    def save_progress(self, table: TableIdentifier, record: str | None) -> None: ...

    def load_progress(self, table: TableIdentifier) -> str | None: ...


@runtime_checkable
class FlushableTarget(Protocol):
    """A buffering target the engine asks to flush on idle heartbeats and at shutdown."""

    def flush(self) -> None: ...


@runtime_checkable
class TargetDoor(Protocol):
    """The engine's one way into a target: ``apply`` for changes, ``load`` for baseline rows.

    ``apply(table, changes, complete)``: changes of one table in source order, already filtered
    and transformed (a :class:`~laredo.batches.ChangeBatch` is one: a target may read its value
    tuples). ``complete=True``: the last change ends its transaction (a buffering target may
    make it durable now); a big transaction arrives in chunks with ``complete=False`` but the
    last, and an empty ``changes`` with ``complete=True`` ends the buffered one. On UPDATE a
    column absent from ``new_values`` keeps the stored value. A failure after the first change
    raises ``BatchApplyError(index)`` (the ones before it stay applied); the engine retries
    from there, one change per call.

    ``load(table, rows)``: baseline rows (a :class:`~laredo.batches.RowBatch` may be given).
    ``laredo.base.RowTarget`` implements both over the per-change methods;
    ``laredo.base.BufferingTarget`` over ``write(batch)``. A target without them is reached
    through the deprecated per-change protocol (``laredo.base.LegacyDoor``)."""

    def apply(
        self, table: TableIdentifier, changes: Sequence[ChangeEvent], complete: bool = True
    ) -> None: ...

    def load(self, table: TableIdentifier, rows: Sequence[Row]) -> None: ...


@runtime_checkable
class BatchTarget(Protocol):
    """Deprecated (implement :class:`TargetDoor`): a run of changes of one table at once.

    ``events`` are already filtered and transformed (their ``new_values``/``old_values`` are
    what the target should store). The engine calls it instead of the per-change methods.
    On UPDATE, a column absent from ``new_values`` (listed in ``unchanged_toast``) keeps the
    value the target already stores. Only the deprecation path (``laredo.base.LegacyDoor``)
    calls it.
    """

    def apply_changes(self, table: TableIdentifier, events: Sequence[ChangeEvent]) -> None: ...


@runtime_checkable
class ChangeBatchTarget(Protocol):
    """Deprecated (implement :class:`TargetDoor`): apply a
    :class:`~laredo.batches.ChangeBatch` (one table, one position) from its value tuples,
    without building events. Same semantics, atomicity and errors as
    ``BatchTarget.apply_changes``. Only the deprecation path (``laredo.base.LegacyDoor``) calls
    it, for a batch the chain left as it was."""

    def apply_change_batch(self, table: TableIdentifier, batch: ChangeBatch) -> None: ...


@runtime_checkable
class BaselineBatchTarget(Protocol):
    """Deprecated (implement :class:`TargetDoor`): baseline rows in chunks. ``rows`` may be a
    :class:`~laredo.batches.RowBatch` (value tuples; a target may read its ``names`` and
    ``values`` instead of building dicts)."""

    def on_baseline_rows(self, table: TableIdentifier, rows: Sequence[Row]) -> None: ...


@runtime_checkable
class CountableTarget(Protocol):
    def count(self) -> int: ...


@runtime_checkable
class SecondaryIndexed(Protocol):
    """A target with secondary indexes (a snapshot records them with the table)."""

    @property
    def indexes(self) -> Sequence[IndexDefinition]: ...


@runtime_checkable
class SelfFilteringTarget(Protocol):
    """A target that filters rows itself: ``counts_delivered_rows = False`` means its
    ``count()`` is not comparable with the rows the engine delivered (row-count validation is
    skipped)."""

    counts_delivered_rows: bool


@runtime_checkable
class KeyedTarget(Protocol):
    """A target that can enumerate ``(key, row)`` pairs (TTL scanning)."""

    def items(self) -> Iterator[tuple[Any, Row]]: ...


@runtime_checkable
class ListsKeys(Protocol):
    """A target that can list the keys of the rows it holds: an on-demand backfill of the whole
    table then removes the rows the source no longer has (``laredo.engine.backfill_sweep``).

    ``stored_key_fields(table)`` names the fields of the stored (filtered and transformed) rows
    its keys are made of, in order; ``stored_keys(table)`` gives one tuple per stored row, of
    those fields' values in that order, as the target holds them at the call (a consistent
    listing: no key twice, none left out; it may be a copy). Values compare by value as the
    source's rows do (equal values, equal keys), so the engine can tell which rows the source
    lacks. Called on the pipeline's thread, between two changes."""

    def stored_key_fields(self, table: TableIdentifier) -> Sequence[str]: ...

    def stored_keys(self, table: TableIdentifier) -> Iterable[tuple[Any, ...]]: ...


@runtime_checkable
class PipelineFilter(Protocol):
    def include(self, table: TableIdentifier, row: Row) -> bool: ...


@runtime_checkable
class PipelineTransform(Protocol):
    """Returns the transformed row, or ``None`` to drop it."""

    def transform(self, table: TableIdentifier, row: Row) -> Row | None: ...


class SnapshotSerializer(Protocol):
    def format_id(self) -> str: ...

    def write(self, info: TableSnapshotInfo, rows: Iterable[Row], out: IO[bytes]) -> int:
        """Write the table header and rows; returns the number of rows written."""
        ...

    def read(self, inp: IO[bytes]) -> tuple[TableSnapshotInfo, Iterator[Row]]: ...


class SnapshotStore(Protocol):
    """Stores snapshots. ``save`` is atomic: a snapshot is listed only once complete."""

    def save(
        self,
        snapshot_id: str,
        metadata: SnapshotMetadata,
        tables: Mapping[TableIdentifier, Iterable[Row]],
        serializer: SnapshotSerializer,
    ) -> SnapshotDescriptor: ...

    def load(
        self, snapshot_id: str, serializer: SnapshotSerializer | None = None
    ) -> tuple[SnapshotMetadata, dict[TableIdentifier, Iterator[Row]]]: ...

    def describe(self, snapshot_id: str) -> SnapshotDescriptor: ...

    def list(self, table: TableIdentifier | None = None) -> builtins.list[SnapshotDescriptor]: ...

    def delete(self, snapshot_id: str) -> None: ...

    def prune(self, keep: int, table: TableIdentifier | None = None) -> builtins.list[str]: ...


class DeadLetterStore(Protocol):
    def write(
        self,
        pipeline_id: str,
        change: ChangeEvent,
        error: ErrorInfo,
        position: str | None = None,
    ) -> None:
        """Store one dead letter; ``position`` is the change's serialised source position."""
        ...

    def read(self, pipeline_id: str, limit: int = 0) -> list[DeadLetter]: ...

    def replay(self, pipeline_id: str, target: SyncTarget) -> int: ...

    def purge(self, pipeline_id: str) -> int: ...

    def pipelines(self) -> list[str]: ...


@runtime_checkable
class CountsDeadLetters(Protocol):
    """A dead-letter store that counts a pipeline's entries without reading them (the status
    backlog asks on every scrape); :func:`laredo.deadletter.count_dead_letters` falls back to
    ``len(read(pipeline_id))`` for a store without it."""

    def count(self, pipeline_id: str) -> int: ...


class Observer(Protocol):
    """Receives engine events (the values of :mod:`laredo.events`) synchronously from engine
    threads; must not block or raise (a composite logs and ignores a raising observer).
    Subclass :class:`laredo.NullObserver`; per-change events (``Event.opt_in``) are only emitted
    to observers listing them in an ``opted_in`` collection."""

    def on_event(self, ev: Event) -> None: ...


EngineObserver = Observer
"""The former name of :class:`Observer` (its ``on_xxx`` methods are deprecated)."""

DeprecatedObserver: TypeAlias = object
"""An observer written against the deprecated ``on_xxx`` methods, with no ``on_event``
(removed in 0.3). Where :data:`ObserverLike` is taken it is wrapped by
:func:`laredo.observers.as_observer` (a :class:`~laredo.observers.LegacyObserver`), so it still
type-checks; an object with neither receives nothing."""

ObserverLike: TypeAlias = Observer | DeprecatedObserver
"""What ``Engine(observers=...)``, ``build_engine`` and ``CompositeObserver`` take: an
:class:`Observer`, or a :data:`DeprecatedObserver` they wrap with ``as_observer``."""
