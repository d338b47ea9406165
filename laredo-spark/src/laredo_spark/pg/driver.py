"""The one driver of a parallel PostgreSQL baseline on Spark; what it writes is a sink's.

:func:`run_pg_baseline` does, once for every kind of output: build and check the source
(``slot_mode = stateful``), normalise the pipelines' tables, let the sink check its side, run
the source's ``init`` and table validation, create the slot with an exported snapshot
(:class:`laredo_source_pg.ExportedSnapshot`), cut each table into ctid slices, and per pipeline
build the slice-reading frame under that snapshot with the pipeline's filters and transforms
applied (:func:`laredo_spark.compile.apply_chain`). The sink only writes each frame
(:meth:`BaselineSink.write`) and commits (:meth:`BaselineSink.commit`, after the snapshot is
released). On any failure the sink aborts what it staged and the slot this run created is
dropped: nothing half-written is ever committed or resumed from. The whole run holds the
slot's advisory-lock lease (:func:`.slot.slot_lease`), so a second driver, or a ``laredo serve``
streaming from the slot, is refused at once instead of dropping a slot in use.

Sinks: snapshot parts (:mod:`laredo_spark.pg.baseline`) and Delta versions
(:mod:`laredo_spark.delta_baseline`).
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from laredo.errors import ConfigError
from laredo.pipeline import Pipeline
from laredo.plugins import source as build_source
from laredo.types import ColumnDefinition, SourceConfig, TableIdentifier

from ..compile import apply_chain
from ..frame import LaredoFrame
from ..kinds import kind_of_column
from .slices import plan_slices, slices_data_source
from .slot import ExportedSnapshot, slot_lease

__all__ = ["BaselineSink", "PipelineFrame", "PlannedBaseline", "run_pg_baseline"]


@dataclasses.dataclass(frozen=True)
class PipelineFrame:
    """One pipeline's rows, ready to write: ``frame`` reads the table's ``slices`` ctid ranges
    under the exported snapshot, the pipeline's chain applied (lazy: writing runs the job)."""

    index: int
    pipeline: Pipeline
    table: TableIdentifier
    columns: tuple[ColumnDefinition, ...]
    frame: LaredoFrame
    slices: int
    position: str
    consistent_point: int


@dataclasses.dataclass(frozen=True)
class PlannedBaseline:
    """What :func:`run_pg_baseline` did: the slot's consistent point (LSN text) and the seconds
    per phase (``init``, ``slot``, ``write``, ``commit``)."""

    position: str
    phases: dict[str, float]


class BaselineSink(Protocol):
    """Where a Spark baseline's rows go. ``label`` starts every message (``spark baseline``).
    The driver calls ``check`` before the slot exists, ``write`` once per pipeline while the
    snapshot is held, ``commit`` after, and ``abort`` on any failure (then the slot is
    dropped)."""

    label: str
    data_sources: tuple[Any, ...]
    """Spark Python data sources the sink's writes use (registered with the session)."""

    def check(self, pipelines: Sequence[Pipeline], source_id: str) -> None: ...

    def write(self, spark: Any, job: PipelineFrame) -> None: ...

    def commit(self, source_id: str, position: str) -> None: ...

    def abort(self) -> None: ...


def _check_positive(label: str, name: str, value: Any) -> None:
    if type(value) is not int or value < 1:
        raise ConfigError(f"{label}: {name} must be an integer >= 1 (got {value!r})")


def source_from(source: Any, label: str) -> Any:
    """A ``PostgresSource`` with its own lease off (the driver never streams, and holds the
    slot's lease itself for the run, :func:`.slot.slot_lease`; a source taking it in ``init``
    would wait for the driver forever) from its config mapping, or ``source`` itself (a copy
    with its lease off when it is on); ``ConfigError`` for any other source type or a
    non-stateful slot."""
    if isinstance(source, Mapping):
        cfg = {k: v for k, v in source.items() if k != "type"}
        kind = str(source.get("type", "postgresql"))
        if kind not in ("postgresql", "pg"):
            raise ConfigError(
                f"{label}: source type {kind!r} is not supported; the parallel baseline "
                "needs a 'postgresql' source (other sources: run the local baseline)"
            )
        cfg["lease"] = False
        source = build_source("postgresql", **cfg)
    opts = getattr(source, "options", None)
    if opts is None or not hasattr(opts, "connection"):
        raise ConfigError(f"{label}: source must be a postgresql source or its config")
    if opts.slot_mode != "stateful":
        raise ConfigError(
            f"{label}: the postgresql source needs slot_mode = stateful: the stream "
            "continues from the slot the baseline creates, and a temporary slot would vanish"
        )
    if getattr(opts, "lease", False) and hasattr(opts, "model_copy"):
        source = type(source)(opts.model_copy(update={"lease": False}))
    return source


def check_sizes(label: str, partitions: int | None, fetch_size: int, max_slice_pages: int) -> None:
    """``ConfigError`` unless each given size is an integer >= 1."""
    if partitions is not None:
        _check_positive(label, "partitions", partitions)
    _check_positive(label, "fetch_size", fetch_size)
    _check_positive(label, "max_slice_pages", max_slice_pages)


class Phases:
    """Seconds per named phase, each measured from the end of the one before."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self._mark = time.monotonic()

    def end(self, name: str) -> None:
        now = time.monotonic()
        self.seconds[name] = self.seconds.get(name, 0.0) + now - self._mark
        self._mark = now


def baseline_tables(pipes: Sequence[Pipeline]) -> list[TableIdentifier]:
    """The pipelines' tables, each once, in order (each ``p.table`` becomes a
    ``TableIdentifier``)."""
    tables: list[TableIdentifier] = []
    for p in pipes:
        t = p.table if isinstance(p.table, TableIdentifier) else TableIdentifier.parse(p.table)
        p.table = t
        if t not in tables:
            tables.append(t)
    return tables


def init_source(
    src: Any,
    pipes: Sequence[Pipeline],
    tables: Sequence[TableIdentifier],
    sink: BaselineSink,
    source_id: str,
) -> dict[TableIdentifier, Any]:
    """The sink's checks, then the source's ``init`` (publication, columns) and table
    validation; closes the source."""
    label = sink.label
    try:
        sink.check(pipes, source_id)
        columns: dict[TableIdentifier, Any] = src.init(SourceConfig(list(tables)))
        problems = [str(e) for e in src.validate_tables(tables)]
        if problems:
            raise ConfigError([f"{label}: {p}" for p in problems])
    finally:
        src.close()
    return columns


def pipeline_frame(spark: Any, source_name: str, plan: dict[str, Any], p: Pipeline) -> LaredoFrame:
    """The frame that reads ``plan``'s slices in tasks, with ``p``'s filters and transforms."""
    table = p.table
    assert isinstance(table, TableIdentifier)
    df = spark.read.format(source_name).option("plan", json.dumps(plan))
    return apply_chain(LaredoFrame(df.load(), plan["kinds"], table), p.filters, p.transforms)


def run_pg_baseline(
    spark: Any,
    source: Any,
    pipelines: Sequence[Pipeline],
    sink: BaselineSink,
    *,
    source_id: str | None = None,
    partitions: int | None = None,
    fetch_size: int = 10_000,
    max_slice_pages: int = 2048,
) -> PlannedBaseline:
    """Baseline ``pipelines`` of a PostgreSQL ``source`` (a ``PostgresSource`` or its config,
    ``slot_mode = stateful``) into ``sink`` (see the module docstring). ``partitions`` (default:
    Spark's default parallelism) is the least number of ctid slices per table; big tables get
    more so that no slice exceeds ``max_slice_pages`` pages. The existing slot, if any, is
    dropped and re-created (it must not be in use). The slot's lease is held for the whole run
    (:func:`.slot.slot_lease`): ``SourceError`` at once, before anything is read or written,
    while another laredo process holds it. Spark is used only once the checks pass."""
    label = sink.label
    check_sizes(label, partitions, fetch_size, max_slice_pages)
    src = source_from(source, label)
    opts = src.options
    pipes = list(pipelines)
    if not pipes:
        raise ConfigError(f"{label}: no pipelines given")
    with slot_lease(opts, label):  # before anything is read, written or dropped
        return _one_pass(
            spark,
            src,
            pipes,
            sink,
            source_id=source_id,
            partitions=partitions,
            fetch_size=fetch_size,
            max_slice_pages=max_slice_pages,
        )


def _one_pass(
    spark: Any,
    src: Any,
    pipes: list[Pipeline],
    sink: BaselineSink,
    *,
    source_id: str | None,
    partitions: int | None,
    fetch_size: int,
    max_slice_pages: int,
) -> PlannedBaseline:
    """:func:`run_pg_baseline` once the slot's lease is held."""
    opts = src.options
    sid = source_id or pipes[0].source_id
    tables = baseline_tables(pipes)
    phases = Phases()
    columns = init_source(src, pipes, tables, sink, sid)
    phases.end("init")
    slices_source = slices_data_source(opts)  # tasks connect with the source's own options
    for ds in (slices_source, *sink.data_sources):  # also for sessions built elsewhere
        spark.dataSource.register(ds)
    n_parts = int(partitions or spark.sparkContext.defaultParallelism or 1)
    row_filters = {
        TableIdentifier.parse(k): v.row_filter
        for k, v in opts.publication.tables.items()
        if v.row_filter
    }
    slot = ExportedSnapshot(opts, src.slot_name)
    try:
        with slot as snap:
            slices, zone = plan_slices(opts, snap.snapshot_name, tables, n_parts, max_slice_pages)
            phases.end("slot")
            for i, p in enumerate(pipes):
                table = p.table
                assert isinstance(table, TableIdentifier)
                cols = tuple(columns.get(table, ()))
                plan = {
                    "snapshot": snap.snapshot_name,
                    "schema": table.schema,
                    "table": table.table,
                    "kinds": {c.name: kind_of_column(c, zone) for c in cols},
                    "slices": slices[table],
                    "row_filter": row_filters.get(table),
                    "fetch_size": fetch_size,
                }
                frame = pipeline_frame(spark, slices_source.name(), plan, p)
                n_slices = len(slices[table])
                job = PipelineFrame(
                    i, p, table, cols, frame, n_slices, snap.position, snap.consistent_point
                )
                sink.write(spark, job)
            position = snap.position
        phases.end("write")
        sink.commit(sid, position)
        phases.end("commit")
    except BaseException:
        sink.abort()
        slot.drop()
        raise
    return PlannedBaseline(position, phases.seconds)
