"""Values in HTTP sync bodies use Laredo's one typed JSON encoding, ``laredo-json/1``.

The encoding itself (tags, payloads, compatibility) is defined and documented once, in
:mod:`laredo.serialization`; this module re-exports it for receivers and adds the decoding of
one ``/changes`` entry.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from laredo.serialization import ENCODING_NAME, decode_value, encode_row, encode_value
from laredo.serialization import decode_row as _decode_row

__all__ = [
    "ENCODING_NAME",
    "decode_change",
    "decode_row",
    "decode_value",
    "encode_row",
    "encode_value",
]


def decode_row(row: dict[str, Any] | None) -> dict[str, Any] | None:
    """Decode every value of an encoded row (``None`` stays ``None``)."""
    return None if row is None else _decode_row(row)


def decode_change(change: dict[str, Any]) -> dict[str, Any]:
    """Decode one change of a ``/changes`` body: values, and ``timestamp``/``commit_timestamp``
    parsed into ``datetime``. Other fields are returned as sent."""
    out = dict(change)
    out["new"] = decode_row(change.get("new"))
    out["old"] = decode_row(change.get("old"))
    for key in ("timestamp", "commit_timestamp"):
        if out.get(key) is not None:
            out[key] = datetime.fromisoformat(out[key])
    return out
