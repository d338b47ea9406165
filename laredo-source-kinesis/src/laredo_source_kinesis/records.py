"""The change-record format carried on the Kinesis stream.

One Kinesis record holds one change as a UTF-8 JSON object, or a JSON array of such objects
(several changes of one source transaction, delivered together and in order)::

    {
      "table":  "public.users",                      # "schema.table" (required)
      "action": "INSERT" | "UPDATE" | "DELETE" | "TRUNCATE",   # required
      "new":    {"id": 1, "name": "Ann"},             # INSERT, UPDATE: the new row
      "old":    {"id": 1, "name": "Anne"},            # UPDATE, DELETE: the old row (optional)
      "key":    {"id": 1},                            # UPDATE, DELETE: the row's key
      "seq":    1234,                                 # producer's own sequence (optional int)
      "ts":     "2026-01-01T12:00:00Z"                # change time (optional, ISO 8601)
    }

- DELETE needs ``key`` or ``old``; the change's identity (``old_values``) is ``old`` if given,
  else ``key``. UPDATE's identity is likewise ``old`` or ``key`` (optional; when the key
  changed, give the old key). When the manifest declares primary-key columns, ``new`` of
  INSERT/UPDATE and the identity of DELETE must contain them all.
- Values use Laredo's typed JSON encoding ``laredo-json/1`` (:mod:`laredo.serialization`):
  plain JSON values as themselves, others tagged, e.g. ``{"$type": "decimal", "value":
  "1.50"}``, ``{"$type": "timestamptz", "value": "2024-01-02T03:04:05+00:00"}``, ``uuid``,
  ``bytes``, ``date``, ``time``, ``interval``, ``json``; the 0.1 spelling ``{"$t", "v"}`` is
  still read. Baseline JSONL rows use the same encoding, so a value has the same Python type
  whether it came from the baseline or the stream. :func:`encode_record` writes this format.
- ``seq`` lets the source line the stream up with the baseline: when the baseline manifest
  says it includes changes up to ``source_sequence``, records with ``seq`` at or below it are
  skipped (they are already in the baseline).
- Upstream (Go) compatibility: ``row`` is read as ``new`` and ``identity`` as ``key``.

A record that cannot be used is a *bad record* (:class:`BadRecord`, with the reason): not
UTF-8/JSON, not an object, no or malformed ``table``, an unknown action, a missing key, a
value that does not decode. The source reports it (dead-letter store, log, counter) and goes on.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from laredo import serialization
from laredo.types import ChangeAction, Row, TableIdentifier

ACTIONS = {
    "INSERT": ChangeAction.INSERT,
    "UPDATE": ChangeAction.UPDATE,
    "DELETE": ChangeAction.DELETE,
    "TRUNCATE": ChangeAction.TRUNCATE,
}


class BadRecord(ValueError):
    """A record that cannot become a change; ``reason`` says why, ``table`` if it was known."""

    def __init__(self, reason: str, table: TableIdentifier | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.table = table


@dataclass(frozen=True, slots=True)
class ParsedChange:
    table: TableIdentifier
    action: ChangeAction
    new_values: Row | None
    old_values: Row | None
    seq: int | None
    timestamp: dt.datetime | None


def _row(doc: Mapping[str, Any], name: str, table: TableIdentifier) -> Row | None:
    value = doc.get(name)
    if value is None:
        return None
    if not isinstance(value, dict):
        raise BadRecord(f"'{name}' of a {table} change must be a JSON object", table)
    try:
        return serialization.decode_row(value)
    except (ValueError, TypeError) as exc:
        raise BadRecord(f"bad value in '{name}' of a {table} change: {exc}", table) from None


def parse_change(doc: Any, key_columns: Mapping[TableIdentifier, Sequence[str]]) -> ParsedChange:
    """One change object -> :class:`ParsedChange` (raises :class:`BadRecord`)."""
    if not isinstance(doc, dict):
        raise BadRecord(f"a change must be a JSON object, got {type(doc).__name__}")
    name = doc.get("table")
    if not isinstance(name, str) or not name:
        raise BadRecord("missing 'table' (write \"schema.table\")")
    if "." not in name:
        raise BadRecord(f'table {name!r} has no schema (write "schema.table")')
    try:
        table = TableIdentifier.parse(name)
    except ValueError as exc:
        raise BadRecord(str(exc)) from None
    action_name = doc.get("action")
    action = ACTIONS.get(action_name.upper()) if isinstance(action_name, str) else None
    if action is None:
        raise BadRecord(
            f"unknown action {action_name!r} for {table} (use INSERT, UPDATE, DELETE or TRUNCATE)",
            table,
        )
    new = _row(doc, "new", table)
    if new is None and "row" in doc:
        new = _row(doc, "row", table)
    old = _row(doc, "old", table)
    key = _row(doc, "key", table)
    if key is None and "identity" in doc:
        key = _row(doc, "identity", table)
    identity = old if old is not None else key
    pk = key_columns.get(table, ())
    if action in (ChangeAction.INSERT, ChangeAction.UPDATE):
        if not new:
            raise BadRecord(f"{action.name} of {table} has no 'new' row", table)
        missing = [c for c in pk if c not in new and (identity is None or c not in identity)]
        if missing:
            raise BadRecord(
                f"missing key: {action.name} of {table} lacks primary-key column(s) "
                f"{', '.join(missing)}",
                table,
            )
    elif action is ChangeAction.DELETE:
        if not identity:
            raise BadRecord(f"missing key: DELETE of {table} has neither 'key' nor 'old'", table)
        missing = [c for c in pk if c not in identity]
        if missing:
            raise BadRecord(
                f"missing key: DELETE of {table} lacks primary-key column(s) {', '.join(missing)}",
                table,
            )
    seq = doc.get("seq")
    if seq is not None and type(seq) is not int:
        raise BadRecord(f"'seq' of a {table} change must be an integer, got {seq!r}", table)
    ts_raw = doc.get("ts")
    ts: dt.datetime | None = None
    if ts_raw is not None:
        try:
            ts = dt.datetime.fromisoformat(str(ts_raw).replace("Z", "+00:00"))
        except ValueError:
            raise BadRecord(
                f"'ts' of a {table} change is not ISO 8601: {ts_raw!r}", table
            ) from None
        if ts.tzinfo is None:
            ts = ts.replace(tzinfo=dt.UTC)
    return ParsedChange(table, action, new, identity, seq, ts)


def parse_record(
    data: bytes, key_columns: Mapping[TableIdentifier, Sequence[str]]
) -> list[ParsedChange]:
    """A Kinesis record's data -> its changes, in order. Raises only :class:`BadRecord`: any
    error decoding the record (too deeply nested JSON included) makes it a bad record for the
    dead letters, never an error that stops the source."""
    try:
        doc = json.loads(data)
    except UnicodeDecodeError as exc:
        raise BadRecord(f"record is not UTF-8: {exc}") from None
    except ValueError as exc:
        raise BadRecord(f"malformed JSON: {exc}") from None
    except RecursionError:
        raise BadRecord("malformed JSON: nested too deeply") from None
    try:
        if isinstance(doc, list):
            if not doc:
                raise BadRecord("empty JSON array: a record must hold at least one change")
            return [parse_change(item, key_columns) for item in doc]
        return [parse_change(doc, key_columns)]
    except BadRecord:
        raise
    except Exception as exc:  # RecursionError included: never stop the source
        text = str(exc)
        text = text if len(text) <= 200 else text[:200] + "..."
        raise BadRecord(f"cannot decode the record: {type(exc).__name__}: {text}") from None


def encode_record(
    table: TableIdentifier | str,
    action: ChangeAction | str,
    *,
    new: Row | None = None,
    old: Row | None = None,
    key: Row | None = None,
    seq: int | None = None,
    ts: dt.datetime | None = None,
) -> dict[str, Any]:
    """Build one change object in the record format (values typed-encoded)."""
    doc: dict[str, Any] = {
        "table": str(table),
        "action": action.name if isinstance(action, ChangeAction) else str(action).upper(),
    }
    if new is not None:
        doc["new"] = serialization.encode_row(new)
    if old is not None:
        doc["old"] = serialization.encode_row(old)
    if key is not None:
        doc["key"] = serialization.encode_row(key)
    if seq is not None:
        doc["seq"] = seq
    if ts is not None:
        doc["ts"] = ts.isoformat()
    return doc


def dumps_record(changes: dict[str, Any] | Iterable[dict[str, Any]]) -> bytes:
    """Record data for one change object or a list of them (one transaction)."""
    value = changes if isinstance(changes, dict) else list(changes)
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
