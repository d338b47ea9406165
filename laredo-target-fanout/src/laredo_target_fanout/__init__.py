"""Replication fan-out for Laredo: one source, many indexed client replicas over gRPC.

* ``FanOutTarget`` (plugin ``replication-fanout``): state + journal + snapshots, served over
  gRPC by a ``ReplicationServer``.
* ``FanOutClient``: a local ``IndexedTarget`` replica kept in sync with a fan-out server.
* ``FanOutSource`` (plugin source ``fanout``): a fan-out server's table as a Laredo source.

The gRPC parts (``FanOutClient``, ``FanOutSource``, ``ReplicationServer``) are imported on
first use.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ._filters import Predicate
from .options import ReplicationFanoutOptions
from .target import FanOutTarget

if TYPE_CHECKING:
    from .client import FanOutClient
    from .service import ReplicationServer
    from .source import FanOutSource

__all__ = [
    "FanOutClient",
    "FanOutSource",
    "FanOutTarget",
    "Predicate",
    "ReplicationFanoutOptions",
    "ReplicationServer",
]

_LAZY = {"FanOutClient": ".client", "FanOutSource": ".source", "ReplicationServer": ".service"}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)  # lazy: grpc
    globals()[name] = value
    return value
