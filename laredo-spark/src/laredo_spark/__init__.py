"""Laredo on Spark: the same pipelines, config and plugins, executed by PySpark.

* :func:`spark_session` -- a SparkSession set up for Laredo (loopback for local masters, this
  interpreter for workers, Laredo's data sources registered).
* :func:`apply_chain` -- a pipeline's filters and transforms as Spark column expressions.
* :func:`spark_baseline` -- a parallel, consistent PostgreSQL baseline: tasks read, transform
  and write the parts of a Laredo snapshot, the driver commits it; the local engine restores it
  and streams from the slot (no gap, no duplicate).
* ``spark.readStream.format("laredo")`` -- any Laredo source as a Structured Streaming source;
  :class:`TargetSink` / :class:`SnapshotSink` / :class:`FileSink` for ``foreachBatch``.
* ``spark.read.format("laredo-snapshot")`` / ``format("laredo-baseline")`` -- a snapshot table
  (one Spark partition per part) or an S3 baseline (kinesis source layout) as a DataFrame.
* ``df.write.format("laredo-snapshot-parts")`` -- tasks write snapshot parts under Spark's commit
  protocol (:mod:`laredo_spark.parts`).
* :func:`run_spark` -- the runner entry point over the same config dict as ``laredo serve``.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._session import prepare_environment, spark_session
    from .compile import apply_chain, compile_filter
    from .file_sink import FileSink
    from .frame import LaredoFrame, frame_from_rows, infer_kinds
    from .pg.baseline import spark_baseline
    from .pg.slot import ExportedSnapshot
    from .runner import run_spark
    from .streaming.reader import stream_options
    from .streaming.snapshot_sink import SnapshotSink
    from .streaming.target_sink import TargetSink

# Lazy: the plugin entry point imports this package, and ``laredo`` must stay free of pyspark
# until a Spark feature is used.
_LAZY = {
    "prepare_environment": "._session",
    "spark_session": "._session",
    "apply_chain": ".compile",
    "compile_filter": ".compile",
    "FileSink": ".file_sink",
    "LaredoFrame": ".frame",
    "frame_from_rows": ".frame",
    "infer_kinds": ".frame",
    "ExportedSnapshot": ".pg.slot",
    "spark_baseline": ".pg.baseline",
    "run_spark": ".runner",
    "SnapshotSink": ".streaming.snapshot_sink",
    "TargetSink": ".streaming.target_sink",
    "stream_options": ".streaming.reader",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'laredo_spark' has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


__all__ = [
    "ExportedSnapshot",
    "FileSink",
    "LaredoFrame",
    "SnapshotSink",
    "TargetSink",
    "apply_chain",
    "compile_filter",
    "frame_from_rows",
    "infer_kinds",
    "prepare_environment",
    "run_spark",
    "spark_baseline",
    "spark_session",
    "stream_options",
]
