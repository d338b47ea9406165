"""Plugin registration of ``laredo-spark``.

The Spark runner adds no source, target or store types: it runs the ones other plugins
register. Its entry point lists it in ``laredo plugins`` and adds the CLI group ``laredo spark``
(:mod:`laredo_spark.cli`, which imports neither pyspark nor typer until a command runs).
"""

from __future__ import annotations

from typing import Any

import laredo

from .cli import register


@laredo.hookimpl
def laredo_register_cli_commands(app: Any) -> None:
    register(app)
