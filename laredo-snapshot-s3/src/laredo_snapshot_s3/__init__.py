"""Laredo on S3: a snapshot store and a dead-letter store (plugin name ``s3`` for both).

``S3SnapshotStore`` and ``S3DeadLetterStore`` are imported lazily so that loading the plugin
never imports boto3.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from laredo.errors import SnapshotNotFoundError

if TYPE_CHECKING:
    from .dead_letters import S3DeadLetterStore
    from .store import S3SnapshotStore

__all__ = ["S3DeadLetterStore", "S3SnapshotStore", "SnapshotNotFoundError"]


def __getattr__(name: str) -> Any:
    if name == "S3DeadLetterStore":
        from .dead_letters import S3DeadLetterStore

        return S3DeadLetterStore
    if name == "S3SnapshotStore":
        from .store import S3SnapshotStore

        return S3SnapshotStore
    raise AttributeError(name)
