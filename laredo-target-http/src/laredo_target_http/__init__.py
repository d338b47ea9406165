"""Laredo HTTP sync target: a table's baseline and changes as batched JSON POSTs.

``HttpSyncTarget`` (plugin type ``http-sync``) reports durable only what a receiver answered 2xx
for; ``encode_value``/``decode_value`` implement the typed JSON value encoding (``laredo-json/1``)
so a Python receiver can round-trip values exactly.
"""

from __future__ import annotations

from laredo.units import parse_duration

from ._client import HttpSyncError, parse_retry_after
from ._codec import (
    ENCODING_NAME,
    decode_change,
    decode_row,
    decode_value,
    encode_row,
    encode_value,
)
from ._options import HttpSyncOptions
from ._target import HttpSyncTarget
from .replica import Replica

__version__ = "0.1.0"

__all__ = [
    "ENCODING_NAME",
    "HttpSyncError",
    "HttpSyncOptions",
    "HttpSyncTarget",
    "Replica",
    "__version__",
    "decode_change",
    "decode_row",
    "decode_value",
    "encode_row",
    "encode_value",
    "parse_duration",
    "parse_retry_after",
]
