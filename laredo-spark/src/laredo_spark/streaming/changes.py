"""The change frame of ``spark.readStream.format("laredo")``: its schema, and back to events.

One row per change: ``position`` (the source's serialised position), ``seq`` (order within the
micro-batch), ``table`` (``schema.table``), ``action`` (INSERT, UPDATE, DELETE, TRUNCATE,
SCHEMA_CHANGE), ``xid``, ``new_values`` / ``old_values`` (typed JSON of the row, see
:mod:`laredo.serialization`) and ``unchanged_toast`` (JSON list of column names).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from laredo.serialization import dumps_row
from laredo.types import ChangeAction, ChangeEvent, Row, TableIdentifier

from ..kinds import decode_json

__all__ = ["CHANGE_SCHEMA", "decode_change_rows", "encode_row"]

CHANGE_SCHEMA = (
    "position STRING, seq LONG, table STRING, action STRING, xid LONG, "
    "new_values STRING, old_values STRING, unchanged_toast STRING"
)


def encode_row(row: Row | None) -> str | None:
    """A row as typed-JSON text (``None`` stays ``None``)."""
    if row is None:
        return None
    return dumps_row(row)


def decode_change_rows(rows: Sequence[Any]) -> list[ChangeEvent]:
    """Spark rows of the change schema as change events, in stream order (sorted by ``seq``);
    positions stay in their serialised (string) form."""
    out = []
    for r in sorted(rows, key=lambda r: r["seq"]):
        out.append(
            ChangeEvent(
                table=TableIdentifier.parse(r["table"]),
                action=ChangeAction[r["action"]],
                position=r["position"],
                timestamp=None,
                new_values=decode_json(r["new_values"]) if r["new_values"] is not None else None,
                old_values=decode_json(r["old_values"]) if r["old_values"] is not None else None,
                unchanged_toast=frozenset(json.loads(r["unchanged_toast"] or "[]")),
            )
        )
    return out
