"""JSON documents of the S3 stores, built on core's typed encoding (``laredo.serialization``).

``metadata.json`` is core's snapshot-metadata document plus a ``files`` object
(``{"schema.table": {"file": name, "size": bytes}}``) that the S3 store uses to find table
objects and report sizes without listing them. Dead letters are core's dead-letter document.
"""

from __future__ import annotations

import json
from typing import Any

from laredo import serialization
from laredo.types import DeadLetter, SnapshotDescriptor, SnapshotMetadata


def metadata_to_json(meta: SnapshotMetadata, files: dict[str, Any]) -> bytes:
    doc = serialization.encode_metadata(meta)
    doc["files"] = files
    return json.dumps(doc, indent=2).encode("utf-8")


def metadata_from_json(data: bytes) -> tuple[SnapshotMetadata, dict[str, Any]]:
    doc = json.loads(data)
    files = doc.get("files") if isinstance(doc, dict) else None
    return serialization.decode_metadata(doc), dict(files or {})


def descriptor_of(meta: SnapshotMetadata, size_bytes: int) -> SnapshotDescriptor:
    return SnapshotDescriptor(
        snapshot_id=meta.snapshot_id,
        created_at=meta.created_at,
        format=meta.format,
        tables=meta.tables,
        size_bytes=size_bytes,
        source_positions=dict(meta.source_positions),
        user_meta=dict(meta.user_meta),
    )


def dead_letter_to_json(entry: DeadLetter) -> bytes:
    doc = serialization.encode_dead_letter(entry)
    return json.dumps(doc, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def dead_letter_from_json(data: bytes) -> DeadLetter:
    return serialization.decode_dead_letter(json.loads(data))
