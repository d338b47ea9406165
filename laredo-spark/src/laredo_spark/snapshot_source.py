"""``spark.read.format("laredo-snapshot")``: a table of a Laredo snapshot as a DataFrame.

Options: ``store`` (snapshot store plugin type, e.g. ``local``), ``store_config`` (JSON of its
options, e.g. ``{"path": "/data/snapshots"}``), ``table`` (``schema.table``), optional
``snapshot_id`` (default: the newest snapshot holding the table). Every column is a string of
typed JSON (:mod:`laredo.serialization`) unless ``kinds`` (JSON ``{column: kind}``, see
:mod:`laredo_spark.frame`) gives native kinds; the schema is read from the snapshot header on
the driver, and the rows are read by one task.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any

from laredo.errors import ConfigError, SnapshotError
from laredo.types import TableIdentifier
from pyspark.sql.datasource import DataSource, DataSourceReader

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


class _Reader(DataSourceReader):
    def __init__(self, options: Mapping[str, str], kinds: dict[str, str]) -> None:
        self.options = dict(options)
        self.kinds = kinds

    def read(self, partition: Any) -> Iterator[tuple[Any, ...]]:
        store, snap, table = _open(self.options)
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
