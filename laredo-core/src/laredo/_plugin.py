"""laredo-core's own plugin: built-in filters, transforms, stores, serializers and observers.

Registered through the ``laredo`` entry point of the ``laredo-core`` distribution, exactly as a
third-party plugin would be.
"""

from __future__ import annotations

from .hookspecs import hookimpl
from .observers import LoggingObserver, NullObserver
from .plugins import Registry


@hookimpl
def laredo_register_observers(registry: Registry) -> None:
    registry.add("null", NullObserver, description="does nothing")
    registry.add("logging", LoggingObserver, description="logs engine events")
