"""``spark.read.format("laredo-snapshot")``: a table of a Laredo snapshot as a DataFrame.

Options: ``store`` (snapshot store plugin type, e.g. ``local``), ``store_config`` (JSON of its
options, e.g. ``{"path": "/data/snapshots"}``), ``table`` (``schema.table``), optional
``snapshot_id`` (default: the newest snapshot holding the table). Every column is a string of
typed JSON (:mod:`laredo.serialization`) unless ``kinds`` (JSON ``{column: kind}``, see
:mod:`laredo_spark.frame`) gives native kinds; the schema is read from the snapshot header on
the driver. Stores with a layout-2 manifest (``local``, ``s3``) are read with one task per
part of the table (every part verified); a JSONL part of a ``local`` store larger than
``split_bytes`` (default 64 MiB) is split further into byte ranges of lines (after the driver
checked its size and checksum). Other stores are read by one task.

Tasks yield Arrow record batches: a Parquet part's columns already in the requested kind's form
(``json`` and ``decimal`` text, native numbers, strings, dates, timestamps) pass through
without a Python object per value; other columns and JSONL parts are converted value by value.
A value that does not fit the requested kind fails the read naming the column.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator, Mapping
from typing import Any

import pyarrow as pa
from laredo.errors import ConfigError, SnapshotError
from laredo.plugins import snapshot_store
from laredo.serialization import dumps_row, loads_row
from laredo.snapshots.layout import ManifestSnapshotStore
from laredo.snapshots.local import LocalSnapshotStore
from laredo.snapshots.manifest import SnapshotPart
from laredo.types import TableIdentifier
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from .batches import BATCH_ROWS, convert_batch, rows_batches
from .frame import OPAQUE_COLUMN
from .kinds import spark_schema
from .parts import pickle_option, unpickle_option

__all__ = ["SnapshotDataSource", "SnapshotRowsDataSource", "rows_frame"]


def _store(options: Mapping[str, str]) -> Any:
    if "store" not in options or "table" not in options:
        raise ConfigError("laredo-snapshot: set the 'store' and 'table' options")
    return snapshot_store(options["store"], **json.loads(options.get("store_config", "{}")))


def _open(options: Mapping[str, str]) -> tuple[Any, str, TableIdentifier]:
    store = _store(options)
    table = TableIdentifier.parse(options["table"])
    snap = options.get("snapshot_id")
    if not snap:
        listed = store.list(table)
        if not listed:
            raise SnapshotError(f"laredo-snapshot: no snapshot holds {table}")
        snap = listed[0].snapshot_id
    return store, snap, table


def _kinds(options: Mapping[str, str]) -> dict[str, str]:
    if "kinds" in options:
        return dict(json.loads(options["kinds"]))
    store, snap, table = _open(options)
    desc = store.describe(snap)
    for info in desc.tables:
        if info.table == table:
            return {c.name: "json" for c in info.columns}
    raise SnapshotError(f"laredo-snapshot: snapshot {snap} has no table {table}")


DEFAULT_SPLIT_BYTES = 64 * 1024 * 1024


class _Range(InputPartition):
    """Lines starting in ``[start, end)`` of a local JSONL part file."""

    def __init__(self, path: str, start: int, end: int) -> None:
        super().__init__(path)
        self.path = path
        self.start = start
        self.end = end


class _Part(InputPartition):
    """One whole part of a layout-2 snapshot."""

    def __init__(self, snapshot_id: str, part: SnapshotPart) -> None:
        super().__init__(part.path)
        self.snapshot_id = snapshot_id
        self.part = part


class _Whole(InputPartition):
    """The whole table of a snapshot in a store without a manifest of parts."""

    def __init__(self, snapshot_id: str) -> None:
        super().__init__(snapshot_id)
        self.snapshot_id = snapshot_id


def _ranges(options: Mapping[str, str]) -> list[InputPartition]:
    """One partition per part (byte ranges of big local JSONL parts), or one for the table."""
    split = int(options.get("split_bytes", DEFAULT_SPLIT_BYTES))
    if split <= 0:
        raise ConfigError(f"laredo-snapshot: split_bytes must be positive (got {split})")
    store, snap, table = _open(options)
    if not isinstance(store, ManifestSnapshotStore):
        return [_Whole(snap)]
    artifact = store.manifest(snap).table_artifacts().get(table)
    if artifact is None:
        raise SnapshotError(f"laredo-snapshot: snapshot {snap} has no table {table}")
    out: list[InputPartition] = []
    for part in artifact.parts:
        if (
            isinstance(store, LocalSnapshotStore)
            and part.format == "jsonl"
            and part.size_bytes > split
        ):
            store.check_part(snap, part)  # size and checksum, once, on the driver
            path = str(store.part_file(snap, part.path))
            size = part.size_bytes
            out.extend(_Range(path, s, min(s + split, size)) for s in range(0, size, split))
        else:
            out.append(_Part(snap, part))
    return out or [_Whole(snap)]


def _range_rows(p: _Range) -> Iterator[Any]:
    """Rows on the lines starting in ``[start, end)``; line 1 (the header) is skipped."""
    with open(p.path, "rb") as f:
        f.seek(max(p.start - 1, 0))
        pos = f.tell()
        # from 0: skip the header line; else the line the range before owns (if the byte
        # before start is a newline, this reads just that byte)
        pos += len(f.readline())
        while pos < p.end:
            line = f.readline()
            if not line:
                break
            pos += len(line)
            if not line.endswith(b"\n"):
                raise SnapshotError(f"{p.path}: last line has no newline: the file is truncated")
            yield loads_row(line)


class _Reader(DataSourceReader):
    def __init__(self, options: Mapping[str, str], kinds: dict[str, str]) -> None:
        self.options = dict(options)
        self.kinds = kinds

    def partitions(self) -> list[InputPartition]:
        return _ranges(self.options)

    def read(self, partition: Any) -> Iterator[Any]:
        where = getattr(partition, "path", None) or getattr(partition, "snapshot_id", "")
        try:
            yield from self._batches(partition)
        except TypeError as exc:
            raise SnapshotError(f"laredo-snapshot: {where}: {exc}") from None

    def _batches(self, partition: Any) -> Iterator[Any]:
        kinds = self.kinds
        if isinstance(partition, _Range):
            yield from rows_batches(kinds, _range_rows(partition))
            return
        store = _store(self.options)
        table = TableIdentifier.parse(self.options["table"])
        if isinstance(partition, _Part):
            sid, part = partition.snapshot_id, partition.part
            got = store.read_part_batches(sid, table, part)
            if got is not None:
                encoded, batches = got
                for batch in batches:
                    yield convert_batch(kinds, batch, encoded)
                return
            yield from rows_batches(kinds, store.read_part(sid, table, part))
            return
        _meta, data = store.load(partition.snapshot_id)
        yield from rows_batches(kinds, data[table])


class SnapshotDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "laredo-snapshot"

    def schema(self) -> Any:
        return spark_schema(_kinds(self.options))

    def reader(self, schema: Any) -> _Reader:
        return _Reader(self.options, {f.name: _kind_of(f, self.options) for f in schema.fields})


def _kind_of(field: Any, options: Mapping[str, str]) -> str:
    kinds = json.loads(options["kinds"]) if "kinds" in options else {}
    return str(kinds.get(field.name, "json"))


class _RowsPart(InputPartition):
    def __init__(self, part: SnapshotPart) -> None:
        super().__init__(part.path)
        self.part = part


class _RowsReader(DataSourceReader):
    def __init__(self, store: Any, snapshot_id: str, table: TableIdentifier) -> None:
        self.store = store
        self.snapshot_id = snapshot_id
        self.table = table

    def partitions(self) -> list[InputPartition]:
        artifact = self.store.manifest(self.snapshot_id).table_artifacts().get(self.table)
        parts = [_RowsPart(p) for p in artifact.parts] if artifact is not None else []
        return list(parts) or [InputPartition(None)]

    def read(self, partition: Any) -> Iterator[Any]:
        if not isinstance(partition, _RowsPart):
            return
        part = partition.part
        store, sid = self.store, self.snapshot_id
        if part.format != "jsonl":
            rows = store.read_part(sid, self.table, part)
            for chunk in _chunks((dumps_row(r) for r in rows), BATCH_ROWS):
                yield pa.RecordBatch.from_arrays([pa.array(chunk, pa.string())], [OPAQUE_COLUMN])
            return
        with contextlib.closing(store.open_part(sid, part)) as inp:
            inp.readline()  # the header
            lines = (line.decode("utf-8").rstrip("\n") for line in inp)
            for chunk in _chunks(lines, BATCH_ROWS):
                yield pa.RecordBatch.from_arrays([pa.array(chunk, pa.string())], [OPAQUE_COLUMN])


def _chunks(items: Iterator[str], size: int) -> Iterator[list[str]]:
    chunk: list[str] = []
    for item in items:
        chunk.append(item)
        if len(chunk) >= size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


class SnapshotRowsDataSource(DataSource):
    """``laredo-snapshot-rows`` (internal, used by the snapshot sink): one table of a layout-2
    snapshot as whole rows of typed JSON (``__laredo_row``), one task per part; JSONL lines are
    passed on as written (verified, not decoded). Option ``job``: a pickled
    ``(store, snapshot_id, table)`` (see :func:`rows_frame`)."""

    @classmethod
    def name(cls) -> str:
        return "laredo-snapshot-rows"

    def schema(self) -> str:
        return f"{OPAQUE_COLUMN} STRING"

    def reader(self, schema: Any) -> _RowsReader:
        store, snapshot_id, table = unpickle_option(self.options["job"])
        return _RowsReader(store, snapshot_id, table)


def rows_frame(spark: Any, store: Any, snapshot_id: str, table: TableIdentifier) -> Any:
    """A DataFrame of one table of a snapshot as whole typed-JSON rows (see
    :class:`SnapshotRowsDataSource`)."""
    job = pickle_option((store, snapshot_id, table))
    return spark.read.format(SnapshotRowsDataSource.name()).option("job", job).load()
