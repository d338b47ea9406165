"""``foreachBatch`` sink writing each micro-batch of changes as Parquet or JSONL files.

Layout: ``<path>/batch=<id>/part-*.parquet`` (or ``part-*.json``, one JSON object per line),
written by Spark's own writers on the executors. A batch's directory is written with
``mode("overwrite")``, so a micro-batch replayed after a restart from the checkpoint (same id,
same offsets, same rows) replaces its own files: nothing is written twice and nothing is lost.
``spark.read.parquet(path)`` (or ``.json(path)``) reads every batch back, with ``batch`` as a
partition column; rows are the change frame of the ``laredo`` stream source (``position``,
``seq``, ``table``, ``action``, ``xid``, ``new_values``, ``old_values``, ``unchanged_toast``,
row values as typed JSON: decode with :func:`laredo_spark.frame.decode_json`).

Readers running while the stream writes should read only batch directories holding the
``_SUCCESS`` marker (Spark writes it last; :meth:`FileSink.complete_batches` lists them), or
use Spark's file sink (``writeStream.format("parquet")``), whose ``_spark_metadata`` log lists
committed files.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from laredo.errors import ConfigError

from .errors import short_error

__all__ = ["FileSink"]

_FORMATS = {"parquet": "parquet", "jsonl": "json", "json": "json"}


class FileSink:
    """Write each micro-batch to ``<path>/batch=<batch_id>`` as ``parquet`` or ``jsonl``.

    ``partition_by`` (e.g. ``["table"]``) adds Hive-style sub-directories inside each batch;
    ``tables`` keeps only those tables' changes. Call it from ``foreachBatch`` (alone or from
    your own function next to other sinks). Empty batches write nothing.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        format: str = "parquet",
        *,
        partition_by: Sequence[str] = (),
        tables: Sequence[Any] | None = None,
    ) -> None:
        if format not in _FORMATS:
            raise ConfigError(
                f"FileSink: format {format!r} is not supported: use 'parquet' or 'jsonl'"
            )
        self.path = os.fspath(path)
        self.format = format
        self.partition_by = list(partition_by)
        self.tables = [str(t) for t in tables] if tables is not None else None
        self.batches_written = 0

    def batch_path(self, batch_id: int) -> str:
        return f"{self.path.rstrip('/')}/batch={batch_id}"

    def complete_batches(self) -> list[str]:
        """Directories of the batches written completely (holding Spark's ``_SUCCESS``), in
        batch order: ``spark.read.option("basePath", sink.path).parquet(*dirs)`` reads them
        with their ``batch`` column, never a batch still being (re)written."""
        if not os.path.isdir(self.path):
            return []
        found = []
        for name in os.listdir(self.path):
            if name.startswith("batch=") and name[6:].isdigit():
                d = os.path.join(self.path, name)
                if os.path.exists(os.path.join(d, "_SUCCESS")):
                    found.append((int(name[6:]), d))
        return [d for _i, d in sorted(found)]

    def __call__(self, df: Any, batch_id: int) -> None:
        try:
            self.write(df, batch_id)
        except Exception as exc:
            raise short_error(f"laredo file sink, batch {batch_id}", exc) from None

    def write(self, df: Any, batch_id: int) -> None:
        if self.tables is not None:
            df = df.where(df["table"].isin(self.tables))
        if df.isEmpty():
            return
        writer = df.write.mode("overwrite")
        if self.partition_by:
            writer = writer.partitionBy(*self.partition_by)
        writer.format(_FORMATS[self.format]).save(self.batch_path(batch_id))
        self.batches_written += 1
