"""In-memory targets for Laredo: ``IndexedTarget`` (rows with indexes) and ``CompiledTarget``
(rows compiled to objects). Both are registered as plugins (``indexed-memory``,
``compiled-memory``), keep state in memory only (the engine persists them through snapshots),
and are safe to read from any thread while the engine writes."""

from __future__ import annotations

from .compiled import CompiledTarget
from .compilers import dict_compiler, namedtuple_compiler, object_compiler
from .indexed import IndexedTarget
from .options import LOOKUP_INDEX

__all__ = [
    "LOOKUP_INDEX",
    "CompiledTarget",
    "IndexedTarget",
    "dict_compiler",
    "namedtuple_compiler",
    "object_compiler",
]
