"""JSON documents of the S3 dead-letter store: core's dead-letter document
(``laredo.serialization``). Snapshot manifests are core's (``laredo.snapshots.manifest``)."""

from __future__ import annotations

import json

from laredo import serialization
from laredo.types import DeadLetter


def dead_letter_to_json(entry: DeadLetter) -> bytes:
    doc = serialization.encode_dead_letter(entry)
    return json.dumps(doc, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def dead_letter_from_json(data: bytes) -> DeadLetter:
    return serialization.decode_dead_letter(json.loads(data))
