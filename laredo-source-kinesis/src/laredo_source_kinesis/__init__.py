"""Laredo source ``kinesis``: baseline from S3 objects, changes from a Kinesis stream.

See :mod:`laredo_source_kinesis.source` (guarantees), :mod:`.records` (the record format),
:mod:`.baseline` (the S3 layout) and :mod:`.checkpoints` (DynamoDB).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .position import KinesisPosition, compare_positions
from .records import BadRecord, dumps_record, encode_record

if TYPE_CHECKING:
    from .source import KinesisSource

__all__ = [
    "BadRecord",
    "KinesisPosition",
    "KinesisSource",
    "compare_positions",
    "dumps_record",
    "encode_record",
]


def __getattr__(name: str) -> Any:
    if name == "KinesisSource":
        from .source import KinesisSource

        return KinesisSource
    raise AttributeError(name)
