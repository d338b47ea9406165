"""laredo-target-http's plugin registration: target type ``http-sync``."""

from __future__ import annotations

import laredo
from laredo.plugins import Registry

from ._options import HttpSyncOptions
from ._target import HttpSyncTarget


@laredo.hookimpl
def laredo_register_targets(registry: Registry) -> None:
    registry.add(
        "http-sync",
        HttpSyncTarget.from_options,
        options=HttpSyncOptions,
        takes_options=True,
        description="batched JSON POSTs to an HTTP receiver; durable after a 2xx",
    )
