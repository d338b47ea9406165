"""Laredo on Delta Lake: a ``delta`` target keeping a Delta table equal to a source table, with
its history (one version per flush, each carrying its source position); point-in-time reads
(:func:`read_as_of`); and a ``delta`` archive source that replays the table's versions.

pyarrow and deltalake load on first use of a name below, not when the plugin is discovered.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .options import DeltaSourceOptions, DeltaTargetOptions, MaintenanceOptions

if TYPE_CHECKING:
    from .archive import ArchiveError, Commit, history, progress_of, read_as_of, rows_as_of
    from .source import DeltaSource
    from .target import DeltaTarget

__version__ = "0.1.0"

__all__ = [
    "ArchiveError",
    "Commit",
    "DeltaSource",
    "DeltaSourceOptions",
    "DeltaTarget",
    "DeltaTargetOptions",
    "MaintenanceOptions",
    "__version__",
    "history",
    "progress_of",
    "read_as_of",
    "rows_as_of",
]

_LAZY = {
    "ArchiveError": "archive",
    "Commit": "archive",
    "history": "archive",
    "progress_of": "archive",
    "read_as_of": "archive",
    "rows_as_of": "archive",
    "DeltaSource": "source",
    "DeltaTarget": "target",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f".{module}", __name__), name)
