"""Spark tasks write snapshot parts; the driver side only records and commits them.

``df.write.format("laredo-snapshot-parts")`` (built by :func:`write_parts`) is a PySpark Python
data source writer (``DataSourceArrowWriter``) running Spark's commit protocol over a
layout-2 snapshot store (:class:`laredo.snapshots.layout.ManifestSnapshotStore`: local, S3):

* ``write`` (in each task attempt): the partition's Arrow record batches go through the
  configured serializer into one **staged** part, named ``part-<partition>-<attempt>-<random>``,
  unique per attempt; the commit message carries the part (path, format, rows, bytes, SHA-256).
  A task with no rows writes nothing. A failing attempt removes its own part (what it could
  not remove, e.g. after a crash, is staged garbage nobody lists).
* ``commit`` (on the driver host, once, with one message per partition from the attempt Spark
  accepted): records those parts, in partition order, as a staged artifact
  (:meth:`~laredo.snapshots.layout.ManifestSnapshotStore.stage_artifact`).
* ``abort`` (on the driver host when the job fails): removes the parts of the tasks that had
  succeeded.

Nothing is visible until the snapshot is committed by its owner
(:meth:`~laredo.snapshots.layout.ManifestSnapshotStore.commit`, after every job): the manifest
lists exactly the recorded parts, one per partition, and every other staged file (parts of
failed, retried or speculative attempts) is removed then. A retried or speculative task can
therefore never add a row twice: its other attempt's part is simply not listed.

The job (store, snapshot id, table header, serializer) travels in the ``job`` option as a
pickled, base64-encoded :class:`PartsJob`; the store must pickle (``local`` and ``s3`` do).
"""

from __future__ import annotations

import base64
import re
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
from laredo.snapshots.manifest import TABLE, SnapshotArtifact, SnapshotPart
from laredo.types import TableIdentifier, TableSnapshotInfo
from pyspark import TaskContext, cloudpickle
from pyspark.sql.datasource import DataSource, DataSourceArrowWriter, WriterCommitMessage

from .frame import LaredoFrame
from .kinds import base_kind, kind_zone, zone_name

__all__ = [
    "PartMessage",
    "PartsJob",
    "SnapshotPartsDataSource",
    "frame_for_serializer",
    "frame_zones",
    "part_partition",
    "pickle_option",
    "unpickle_option",
    "write_parts",
]

_PART_INDEX = re.compile(r"/part-(\d+)-")
# cloudpickle (untyped): classes defined in a notebook or test travel by value
_pickle: Callable[[object], bytes] = cloudpickle.dumps
_unpickle: Callable[[bytes], object] = cloudpickle.loads


def pickle_option(obj: object) -> str:
    """``obj`` pickled (cloudpickle) as a data source option string (base64)."""
    return base64.b64encode(_pickle(obj)).decode("ascii")


def unpickle_option(text: str) -> Any:
    """The object of :func:`pickle_option`."""
    return _unpickle(base64.b64decode(text))


@dataclass(frozen=True)
class PartsJob:
    """What every task of one write job needs (pickled into the ``job`` option)."""

    store: Any
    """A :class:`~laredo.snapshots.layout.ManifestSnapshotStore` (it must pickle)."""
    snapshot_id: str
    table: TableIdentifier
    """The table key in the snapshot (``users~1`` for a second pipeline on ``users``)."""
    info: TableSnapshotInfo
    serializer: Any
    record: str
    """Name of the staged artifact record :meth:`PartsWriter.commit` writes."""
    encoded: dict[str, str] = field(default_factory=dict)
    """Column encodings of the batches (:mod:`laredo.snapshots.arrow`)."""
    zones: dict[str, str] = field(default_factory=dict)
    """``timestamptz`` columns and the zone their values are given back in."""

    def encode(self) -> str:
        return pickle_option(self)

    @staticmethod
    def decode(text: str) -> PartsJob:
        job = unpickle_option(text)
        if not isinstance(job, PartsJob):
            raise TypeError(f"the 'job' option holds a {type(job).__name__}, not a PartsJob")
        return job


@dataclass(frozen=True)
class PartMessage(WriterCommitMessage):
    """A task's commit message: its partition and the part it wrote (``None``: no rows)."""

    partition: int
    part: SnapshotPart | None


def part_partition(part: SnapshotPart) -> int | None:
    """The Spark partition a part was written by (from its name)."""
    m = _PART_INDEX.search(part.path)
    return int(m.group(1)) if m else None


def _with_zones(batches: Iterator[Any], zones: dict[str, str]) -> Iterator[Any]:
    """Batches whose ``timestamptz`` columns carry their zone (the same instants)."""
    schema = None
    for batch in batches:
        if schema is None:
            fields = []
            for f in batch.schema:
                zone = zones.get(f.name)
                if zone is not None and pa.types.is_timestamp(f.type):
                    f = pa.field(f.name, pa.timestamp(f.type.unit, tz=zone), f.nullable)
                fields.append(f)
            schema = pa.schema(fields)
        if batch.schema.equals(schema):
            yield batch
        else:
            arrays = [
                col.cast(f.type) if col.type != f.type else col
                for col, f in zip(batch.columns, schema, strict=True)
            ]
            yield pa.RecordBatch.from_arrays(arrays, schema=schema)


class PartsWriter(DataSourceArrowWriter):
    """See the module docstring."""

    def __init__(self, job: PartsJob) -> None:
        self.job = job

    def write(self, iterator: Iterator[Any]) -> PartMessage:
        ctx = TaskContext.get()
        partition = ctx.partitionId() if ctx is not None else 0
        attempt = ctx.taskAttemptId() if ctx is not None else 0
        first = next(iterator, None)
        if first is None:
            return PartMessage(partition, None)
        job = self.job

        def batches() -> Iterator[Any]:
            yield first
            yield from iterator

        stream = _with_zones(batches(), job.zones) if job.zones else batches()
        name = f"part-{partition:05d}-{attempt}-{uuid.uuid4().hex[:8]}"
        part = job.store.write_part_batches(
            job.snapshot_id,
            job.table,
            name,
            job.info,
            stream,
            serializer=job.serializer,
            encoded=job.encoded,
        )
        return PartMessage(partition, part)

    def commit(self, messages: Sequence[WriterCommitMessage | None]) -> None:
        job = self.job
        got = sorted(
            (m for m in messages if isinstance(m, PartMessage) and m.part is not None),
            key=lambda m: m.partition,
        )
        parts = tuple(m.part for m in got if m.part is not None)
        artifact = SnapshotArtifact(
            TABLE, job.table, parts, job.info.pipeline_id, None, job.info.position
        )
        job.store.stage_artifact(job.snapshot_id, job.record, artifact)

    def abort(self, messages: Sequence[WriterCommitMessage | None]) -> None:
        paths = [m.part.path for m in messages if isinstance(m, PartMessage) and m.part is not None]
        if paths:
            self.job.store.abort(self.job.snapshot_id, paths)


class SnapshotPartsDataSource(DataSource):
    """``laredo-snapshot-parts``: write-only; see the module docstring and
    :func:`write_parts`."""

    @classmethod
    def name(cls) -> str:
        return "laredo-snapshot-parts"

    def writer(self, schema: Any, overwrite: bool) -> PartsWriter:
        return PartsWriter(PartsJob.decode(self.options["job"]))


def frame_for_serializer(frame: LaredoFrame, format_id: str) -> tuple[Any, dict[str, str]]:
    """The DataFrame tasks should hand a serializer of ``format_id``, and its encodings:
    typed-JSON row lines built in the JVM for ``jsonl`` (written as they are), the frame's
    own columns otherwise."""
    if format_id == "jsonl":
        lines = frame.json_lines()
        return lines, {lines.columns[0]: "row"}
    return frame.df, frame.arrow_encoding()


def frame_zones(frame: LaredoFrame) -> dict[str, str]:
    """The zone of each ``timestamptz`` column of a (non-opaque) frame."""
    if frame.opaque:
        return {}
    out = {}
    for name, kind in frame.kinds.items():
        if base_kind(kind) == "timestamptz":
            out[name] = zone_name(kind_zone(kind)) or "UTC"
    return out


def write_parts(df: Any, job: PartsJob) -> None:
    """Run one Spark job writing ``df`` as staged parts of ``job`` (see the module docstring);
    raises what Spark raises when the job fails (its parts are then removed)."""
    df.write.format(SnapshotPartsDataSource.name()).option("job", job.encode()).mode(
        "append"
    ).save()
