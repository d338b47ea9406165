"""``foreachBatch`` sink keeping a Laredo snapshot of each table's current rows, written by the
executors.

After every micro-batch holding changes of its tables the sink commits a new snapshot
``<prefix>-<batch id>`` (layout 2, one artifact per table, many parts) tagged with the batch's
last position for ``source_id``; the local engine restores it and streams on from there. Per
table and batch, in Spark jobs (no row of the table passes through the driver's Python
process; the driver reads two numbers per table and commits the manifest):

1. the table's rows of the previous snapshot (the sink's newest, else ``seed_snapshot``), as
   typed-JSON row texts, one task per part (JSONL parts are not even decoded);
2. the batch's changes of the table through the pipeline's chain
   (:meth:`laredo.pipeline_ops.Chain.prepare`: filters, transforms, an UPDATE leaving the
   filter becomes a DELETE), in the tasks;
3. rows whose key no change touches are kept as they are (a broadcast anti-join on the key);
   for touched keys the previous row and the changes are folded in stream order (the last
   change wins; unchanged TOAST columns are taken from the row before; a TRUNCATE drops every
   earlier row);
4. the result is written as the parts of the new snapshot (:mod:`laredo_spark.parts`) and the
   driver commits it, then prunes the sink's older snapshots (``keep``).

Exactly once: the batch id is in the snapshot's id and metadata; a replayed batch (at or below
the newest snapshot's batch id) is skipped, and a batch that failed half-way left only staged
files, which the next attempt removes. Keys are :func:`laredo.types.row_key_columns` (the
primary key, else every column), compared as their typed-JSON text.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa
from laredo.errors import SnapshotError
from laredo.filters import as_filter
from laredo.pipeline_ops import Chain
from laredo.serialization import dumps_row, loads_row
from laredo.snapshots.jsonl import JsonlSerializer
from laredo.snapshots.manifest import SnapshotArtifact
from laredo.transforms import as_transform
from laredo.types import (
    ChangeAction,
    ColumnDefinition,
    SnapshotMetadata,
    TableIdentifier,
    TableSnapshotInfo,
    row_key_columns,
)
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from ..errors import short_error, task_failure
from ..frame import OPAQUE_COLUMN
from ..parts import PartsJob, SnapshotPartsDataSource, write_parts
from ..snapshot_source import SnapshotRowsDataSource, rows_frame
from .changes import CHANGE_SCHEMA, decode_change_rows

logger = logging.getLogger(__name__)

__all__ = ["SnapshotSink"]

_ROW, _UPSERT, _DELETE = "ROW", "UPSERT", "DELETE"
_FOLD_SCHEMA = "seq LONG, sub INT, op STRING, row STRING, toast STRING"
_ROWS_PER_PART = 500_000


def _prepare(chain: Chain) -> Any:
    """The ``mapInArrow`` function running ``chain`` over a table's change rows."""
    schema = pa.schema(
        [
            ("seq", pa.int64()),
            ("sub", pa.int32()),
            ("op", pa.string()),
            ("row", pa.string()),
            ("toast", pa.string()),
        ]
    )

    def run(batches: Iterator[Any]) -> Iterator[Any]:
        for batch in batches:
            records: list[tuple[int, int, str, str | None, str | None]] = []
            emit = records.append
            for change in batch.to_pylist():
                seq = int(change["seq"])
                for prepared in chain.prepare(decode_change_rows([change])).events:
                    action = prepared.action
                    if action is ChangeAction.INSERT or action is ChangeAction.UPDATE:
                        if action is ChangeAction.UPDATE and prepared.old_values:
                            emit((seq, 0, _DELETE, dumps_row(prepared.old_values), None))
                        toast = sorted(prepared.unchanged_toast or ())
                        new = dumps_row(prepared.new_values or {})
                        emit((seq, 1, _UPSERT, new, dumps_row({"c": toast}) if toast else None))
                    elif action is ChangeAction.DELETE:
                        emit((seq, 0, _DELETE, dumps_row(prepared.old_values or {}), None))
            columns = list(zip(*records, strict=True)) if records else [()] * len(schema)
            yield pa.RecordBatch.from_arrays(
                [pa.array(c, f.type) for c, f in zip(columns, schema, strict=True)], schema=schema
            )

    return run


def _fold(batches: Iterator[Any]) -> Iterator[Any]:
    """Rows sorted by key, then stream order: the last state of each key (``mapInArrow``)."""
    key: Any = object()
    state: str | None = None
    for batch in batches:
        out: list[str] = []
        cols = batch.to_pydict()
        for k, op, row, toast in zip(
            cols["k"], cols["op"], cols["row"], cols["toast"], strict=True
        ):
            if k != key:
                if state is not None:
                    out.append(state)
                key, state = k, None
            if op == _ROW:
                state = row
            elif op == _UPSERT:
                if toast is not None and state is not None:
                    before = loads_row(state)
                    kept = {c: before.get(c) for c in loads_row(toast)["c"]}
                    state = dumps_row({**kept, **loads_row(row)})
                else:
                    state = row
            else:
                state = None
        yield pa.RecordBatch.from_arrays([pa.array(out, pa.string())], [OPAQUE_COLUMN])
    if state is not None:
        yield pa.RecordBatch.from_arrays([pa.array([state], pa.string())], [OPAQUE_COLUMN])


def _key(row: Any, names: Sequence[str]) -> Any:
    """The key of a typed-JSON row text, as JSON text (computed in the JVM)."""
    as_map = F.from_json(row, T.MapType(T.StringType(), T.StringType()))
    return F.to_json(F.array(*[as_map.getItem(n) for n in names]))


class SnapshotSink:
    """``foreachBatch`` sink keeping each table's current rows as a Laredo snapshot written by
    the executors (see the module docstring).

    ``columns`` maps each table to its columns (the snapshot's headers; primary-key columns
    are the keys); ``pipelines`` give each table's filters and transforms (engine semantics).
    Without a snapshot of its own yet the sink starts from ``seed_snapshot`` (e.g. a
    :func:`~laredo_spark.spark_baseline` result: stream with ``starting_position`` = its
    position). ``serializer`` defaults to JSONL (row texts pass through untouched; Parquet
    works and decodes each row in the tasks). ``keep`` (default 3) of the sink's snapshots
    are kept; other snapshots in the store are left alone.
    """

    def __init__(
        self,
        store: Any,
        columns: Mapping[TableIdentifier, Sequence[ColumnDefinition]],
        *,
        source_id: str,
        serializer: Any = None,
        prefix: str = "spark-stream",
        keep: int | None = 3,
        pipelines: Sequence[Any] = (),
        seed_snapshot: str | None = None,
    ) -> None:
        self.store = store
        self.serializer = serializer if serializer is not None else JsonlSerializer()
        self.source_id = source_id
        self.prefix = prefix
        self.keep = keep
        self.columns = {k: list(v) for k, v in columns.items()}
        self.keys = {t: list(row_key_columns(c)) for t, c in self.columns.items()}
        self.chains: dict[TableIdentifier, Chain] = {}
        for p in pipelines:
            t = p.table if isinstance(p.table, TableIdentifier) else TableIdentifier.parse(p.table)
            self.chains[t] = Chain(
                t,
                tuple(as_filter(f) for f in p.filters),
                tuple(as_transform(x) for x in p.transforms),
            )
        self.seed_snapshot = seed_snapshot
        self.position: str | None = None
        self.batch_id = -1
        self.snapshot_id: str | None = None
        """The snapshot holding the sink's current rows (its newest, or the seed)."""
        self._loaded = False

    def _load(self) -> None:
        self._loaded = True
        for desc in self.store.list():
            if desc.user_meta.get("sink") != self.prefix:
                continue
            self.snapshot_id = desc.snapshot_id
            self.position = desc.source_positions.get(self.source_id)
            self.batch_id = int(desc.user_meta.get("batch_id", -1))
            logger.info(
                "snapshot sink: resumed from %s (batch %d)", self.snapshot_id, self.batch_id
            )
            return
        if self.seed_snapshot is not None:
            desc = self.store.describe(self.seed_snapshot)
            self.snapshot_id = self.seed_snapshot
            self.position = desc.source_positions.get(self.source_id)
            logger.info("snapshot sink: seeded from %s at %s", self.seed_snapshot, self.position)

    def __call__(self, df: Any, batch_id: int) -> None:
        try:
            self.write(df, batch_id)
        except Exception as exc:
            raise short_error(f"laredo snapshot sink, batch {batch_id}", exc) from None

    def apply(self, rows: Any, batch_id: int) -> None:
        """:meth:`write` for rows already collected (``df.collect()``) or a DataFrame."""
        if hasattr(rows, "sparkSession"):
            self.write(rows, batch_id)
            return
        spark = SparkSession.getActiveSession()
        if spark is None:
            raise RuntimeError("snapshot sink: no active SparkSession to process the rows")
        self.write(spark.createDataFrame(list(rows), CHANGE_SCHEMA), batch_id)

    def rows(self, table: TableIdentifier) -> list[Any]:
        """The current rows of ``table`` (read from the sink's snapshot; for inspection)."""
        if not self._loaded:
            self._load()
        if self.snapshot_id is None:
            return []
        _meta, data = self.store.load(self.snapshot_id)
        return list(data.get(table, ()))

    def write(self, df: Any, batch_id: int) -> None:
        """Apply one micro-batch of the change frame (see the module docstring)."""
        if not self._loaded:
            self._load()
        if batch_id <= self.batch_id:
            logger.info("snapshot sink: batch %d already saved, skipping the replay", batch_id)
            return
        spark = df.sparkSession
        for ds in (SnapshotPartsDataSource, SnapshotRowsDataSource):
            spark.dataSource.register(ds)
        tracked = [str(t) for t in self.columns]
        changes = df.where(F.col("table").isin(tracked)).persist()
        try:
            last = changes.orderBy(F.col("seq").desc()).select("position").limit(1).collect()
            if not last:  # nothing for these tables: the current snapshot still holds
                self.batch_id = batch_id
                return
            self._save(spark, changes, batch_id, str(last[0][0]))
        finally:
            changes.unpersist()

    def _save(self, spark: Any, changes: Any, batch_id: int, position: str) -> None:
        snap_id = f"{self.prefix}-{batch_id:012d}"
        store = self.store
        store.abort(snap_id)  # the staged files of an earlier attempt of this batch
        base = store.manifest(self.snapshot_id).table_artifacts() if self.snapshot_id else {}
        artifacts: list[SnapshotArtifact] = []
        infos: list[TableSnapshotInfo] = []
        try:
            for i, (table, cols) in enumerate(self.columns.items()):
                info = TableSnapshotInfo(table, 0, columns=tuple(cols), position=position)
                record = f"table-{i:04d}"
                job = PartsJob(
                    store, snap_id, table, info, self.serializer, record, {OPAQUE_COLUMN: "row"}
                )
                previous = base.get(table)
                rows = self._table_rows(spark, changes, table, previous)
                try:
                    write_parts(rows, job)
                except Exception as exc:
                    raise task_failure(exc, f"snapshot sink, {table}", SnapshotError) from None
                artifact = store.staged_artifacts(snap_id)[record]
                artifacts.append(artifact)
                infos.append(
                    TableSnapshotInfo(table, artifact.rows, columns=tuple(cols), position=position)
                )
            meta = SnapshotMetadata(
                snapshot_id=snap_id,
                created_at=datetime.now(UTC),
                source_positions={self.source_id: position},
                tables=tuple(infos),
                format=self.serializer.format_id(),
                user_meta={"sink": self.prefix, "batch_id": batch_id, "runner": "spark"},
            )
            store.commit(snap_id, meta, artifacts)
        except BaseException:
            store.abort(snap_id)
            raise
        self.snapshot_id, self.position, self.batch_id = snap_id, position, batch_id
        self._prune()

    def _table_rows(
        self, spark: Any, changes: Any, table: TableIdentifier, previous: SnapshotArtifact | None
    ) -> Any:
        """The table's rows after the batch, as one ``__laredo_row`` column."""
        keys = self.keys.get(table) or []
        mine = changes.where(F.col("table") == str(table))
        truncated = mine.where(F.col("action") == "TRUNCATE").agg(F.max("seq")).collect()[0][0]
        if truncated is not None:
            mine = mine.where(F.col("seq") > truncated)
        chain = self.chains.get(table) or Chain(table)
        prepared = mine.mapInArrow(_prepare(chain), _FOLD_SCHEMA)
        prepared = prepared.withColumn("k", _key(F.col("row"), keys))
        if previous is None or truncated is not None or self.snapshot_id is None:
            state = spark.createDataFrame([], f"{OPAQUE_COLUMN} STRING")
        else:
            state = rows_frame(spark, self.store, self.snapshot_id, table)
        state = state.withColumn("k", _key(F.col(OPAQUE_COLUMN), keys))
        touched = prepared.select("k").distinct()
        untouched = state.join(F.broadcast(touched), "k", "left_anti").select(OPAQUE_COLUMN)
        before = state.join(F.broadcast(touched), "k", "left_semi").select(
            "k",
            F.lit(-1).cast("long").alias("seq"),
            F.lit(0).alias("sub"),
            F.lit(_ROW).alias("op"),
            F.col(OPAQUE_COLUMN).alias("row"),
            F.lit(None).cast("string").alias("toast"),
        )
        n = max(1, int(spark.sparkContext.defaultParallelism))
        folded = (
            before.unionByName(prepared.select("k", "seq", "sub", "op", "row", "toast"))
            .repartition(n, "k")
            .sortWithinPartitions("k", "seq", "sub")
            .mapInArrow(_fold, f"{OPAQUE_COLUMN} STRING")
        )
        rows = previous.rows if previous is not None else 0
        parts = max(n, -(-rows // _ROWS_PER_PART))
        return untouched.unionByName(folded).coalesce(parts)

    def _prune(self) -> None:
        if not self.keep:  # only this sink's snapshots; others in the store are left alone
            return
        with contextlib.suppress(Exception):
            own = [d for d in self.store.list() if d.user_meta.get("sink") == self.prefix]
            for d in own[self.keep :]:
                self.store.delete(d.snapshot_id)
