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
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any

from laredo.errors import ConfigError, SnapshotError
from laredo.serialization import loads_row
from laredo.snapshots.layout import ManifestSnapshotStore
from laredo.snapshots.local import LocalSnapshotStore
from laredo.snapshots.manifest import SnapshotPart
from laredo.types import TableIdentifier
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from .frame import row_to_tuple, spark_schema

__all__ = ["SnapshotDataSource"]


def _open(options: Mapping[str, str]) -> tuple[Any, str, TableIdentifier]:
    import laredo

    if "store" not in options or "table" not in options:
        raise ConfigError("laredo-snapshot: set the 'store' and 'table' options")
    store = laredo.snapshot_store(options["store"], **json.loads(options.get("store_config", "{}")))
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


def _ranges(options: Mapping[str, str]) -> list[InputPartition]:
    """One partition per part (byte ranges of big local JSONL parts), or one for the table."""
    split = int(options.get("split_bytes", DEFAULT_SPLIT_BYTES))
    if split <= 0:
        raise ConfigError(f"laredo-snapshot: split_bytes must be positive (got {split})")
    store, snap, table = _open(options)
    if not isinstance(store, ManifestSnapshotStore):
        return [InputPartition(None)]
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
    return out or [InputPartition(None)]


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

    def read(self, partition: Any) -> Iterator[tuple[Any, ...]]:
        if isinstance(partition, _Range):
            for row in _range_rows(partition):
                yield row_to_tuple(self.kinds, row)
            return
        store, snap, table = _open(self.options)
        if isinstance(partition, _Part):
            for row in store.read_part(partition.snapshot_id, table, partition.part):
                yield row_to_tuple(self.kinds, row)
            return
        _meta, data = store.load(snap)
        for row in data[table]:
            yield row_to_tuple(self.kinds, row)


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
