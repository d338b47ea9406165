"""Plugin registration of ``laredo-spark``.

The Spark runner adds no source, target or store types: it runs the ones other plugins
register. Its entry point exists so ``laredo plugins`` lists it, and for the CLI group
``laredo spark`` once the CLI offers ``laredo_register_cli_commands``.
"""

from __future__ import annotations

from typing import Any

import laredo


@laredo.hookimpl
def laredo_register_cli_commands(app: Any) -> None:
    from .cli import register

    register(app)
