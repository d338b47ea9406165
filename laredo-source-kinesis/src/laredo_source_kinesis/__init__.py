"""Laredo source ``kinesis``: baseline from S3 objects, changes from a Kinesis stream.

See :mod:`laredo_source_kinesis.source` (guarantees), :mod:`.records` (the record format),
:mod:`.baseline` (the S3 layout) and :mod:`.checkpoints` (DynamoDB).
"""

from __future__ import annotations

from .position import KinesisPosition, compare_positions
from .records import BadRecord, dumps_record, encode_record
from .source import KinesisSource

__all__ = [
    "BadRecord",
    "KinesisPosition",
    "KinesisSource",
    "compare_positions",
    "dumps_record",
    "encode_record",
]
