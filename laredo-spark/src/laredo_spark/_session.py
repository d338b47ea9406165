"""A SparkSession configured for Laredo: loopback binding, the running interpreter, UTC."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import Any

from pyspark.sql import SparkSession

from .baseline_source import BaselineDataSource
from .parts import SnapshotPartsDataSource
from .pg.slices import PgSliceDataSource
from .snapshot_source import SnapshotDataSource, SnapshotRowsDataSource
from .streaming.reader import LaredoStreamDataSource

__all__ = ["prepare_environment", "register_data_sources", "spark_session"]


def prepare_environment(master: str = "local[*]") -> None:
    """Set the process environment the Spark JVM and its Python workers inherit.

    Workers run this interpreter (``PYSPARK_PYTHON``), never another one found on ``PATH``.
    For ``local`` masters the JVM binds 127.0.0.1 only (``SPARK_LOCAL_IP``): without it Spark
    binds a non-loopback address. On a cluster these are left to the cluster's own settings.
    """
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    if master.startswith("local"):
        os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"


def spark_session(
    master: str = "local[*]",
    app_name: str = "laredo",
    conf: Mapping[str, Any] | None = None,
) -> Any:
    """Get or create a SparkSession for Laredo (``local[*]`` by default; any master URL works).

    Sets: loopback driver host/bind address for local masters, the Spark UI off, UTC session
    time zone, few shuffle partitions, Arrow for Python data, and registers Laredo's Python
    data sources (``laredo``, ``laredo-snapshot``, ``laredo-baseline``, ``laredo-pg-slices``,
    ``laredo-snapshot-parts``). ``conf`` overrides any of them.
    """
    prepare_environment(master)
    builder = SparkSession.builder.master(master).appName(app_name)
    settings: dict[str, Any] = {
        "spark.ui.enabled": "false",
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.shuffle.partitions": "4",
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        "spark.python.worker.reuse": "true",
        "spark.ui.showConsoleProgress": "false",
    }
    if master.startswith("local"):
        # local mode runs executors inside the driver JVM: give it room for task results
        settings["spark.driver.memory"] = "2g"
        settings["spark.driver.host"] = "127.0.0.1"
        settings["spark.driver.bindAddress"] = "127.0.0.1"
    settings.update(conf or {})
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    register_data_sources(spark)
    return spark


def register_data_sources(spark: Any) -> None:
    """Register Laredo's Python data sources on ``spark`` (idempotent)."""
    for ds in (
        LaredoStreamDataSource,
        PgSliceDataSource,
        SnapshotDataSource,
        BaselineDataSource,
        SnapshotPartsDataSource,
        SnapshotRowsDataSource,
    ):
        spark.dataSource.register(ds)
