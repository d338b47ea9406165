"""Structured Streaming with Laredo (the names of 0.1; the code lives in
:mod:`laredo_spark.streaming`): ``spark.readStream.format("laredo")`` with
:func:`stream_options`, and the ``foreachBatch`` sinks :class:`TargetSink` and
:class:`SnapshotSink`."""

from __future__ import annotations

from .streaming.changes import CHANGE_SCHEMA, decode_change_rows
from .streaming.reader import LaredoStreamDataSource, build_source, stream_options
from .streaming.snapshot_sink import SnapshotSink
from .streaming.target_sink import TargetSink

__all__ = [
    "CHANGE_SCHEMA",
    "LaredoStreamDataSource",
    "SnapshotSink",
    "TargetSink",
    "build_source",
    "decode_change_rows",
    "stream_options",
]
