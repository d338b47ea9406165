"""Laredo on S3: a snapshot store and a dead-letter store (plugin name ``s3`` for both).

Importing the package (or loading the plugin) never imports boto3: clients are created on
first use.
"""

from __future__ import annotations

from laredo.errors import SnapshotNotFoundError

from .dead_letters import S3DeadLetterStore
from .store import S3SnapshotStore

__all__ = ["S3DeadLetterStore", "S3SnapshotStore", "SnapshotNotFoundError"]
