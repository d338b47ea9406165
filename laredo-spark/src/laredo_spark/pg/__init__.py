"""PostgreSQL on Spark: the parallel consistent baseline (:mod:`.baseline`), the slot and its
exported snapshot (:mod:`.slot`) and the ctid-slice reader that runs in tasks (:mod:`.slices`).
"""

from __future__ import annotations

from .baseline import BaselineResult, spark_baseline
from .slices import PgSliceDataSource, ctid_slices, read_slice
from .slot import ExportedSnapshot

__all__ = [
    "BaselineResult",
    "ExportedSnapshot",
    "PgSliceDataSource",
    "ctid_slices",
    "read_slice",
    "spark_baseline",
]
