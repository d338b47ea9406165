"""Plugin registration of ``laredo-spark``.

The Spark runner adds no source, target or store types: it runs the ones other plugins
register. Its entry point lists it in ``laredo plugins``, adds the CLI group ``laredo spark``
(:mod:`laredo_spark.cli`, which imports neither pyspark nor typer until a command runs) and
registers its configuration section ``spark`` (:mod:`laredo_spark.section`), which every runner
validates in a shared file.
"""

from __future__ import annotations

from typing import Any

import laredo
from laredo.registry import Registry

from .cli import register
from .section import SparkSection


@laredo.hookimpl
def laredo_register_cli_commands(app: Any) -> None:
    register(app)


@laredo.hookimpl
def laredo_register_config_sections(registry: Registry) -> None:
    registry.add(
        "spark",
        SparkSection,
        options=SparkSection,
        description="the Spark runner: master, partitions, conf (laredo spark ...)",
    )
