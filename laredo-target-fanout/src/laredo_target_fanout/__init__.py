"""Replication fan-out for Laredo: one source, many indexed client replicas over gRPC.

* ``FanOutTarget`` (plugin ``replication-fanout``): state + journal + snapshots + gRPC service.
* ``FanOutClient``: a local ``IndexedTarget`` replica kept in sync with a fan-out server.
* ``FanOutSource`` (plugin source ``fanout``): a fan-out server's table as a Laredo source.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._filters import Predicate

if TYPE_CHECKING:
    from .client import FanOutClient
    from .source import FanOutSource
    from .target import FanOutTarget

__all__ = ["FanOutClient", "FanOutSource", "FanOutTarget", "Predicate"]


def __getattr__(name: str) -> Any:
    if name == "FanOutTarget":
        from .target import FanOutTarget

        return FanOutTarget
    if name == "FanOutClient":
        from .client import FanOutClient

        return FanOutClient
    if name == "FanOutSource":
        from .source import FanOutSource

        return FanOutSource
    raise AttributeError(name)
