"""The changes of a range of Delta versions, read from the change data feed, as Laredo actions.

One reading for every consumer of a ``delta`` target's history (the ``delta`` source, the
fan-out cold archive): a change row (see :mod:`.layout`) is its ``_laredo_op``; a MERGE's or an
overwrite's feed rows are their change type; a ``compaction`` version holds no change (the same
state rewritten) and is skipped. Within a version, deletes come first, then updates, then
inserts (an overwrite's new rows replace the rows it removed).
"""

from __future__ import annotations

from collections.abc import Container, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from laredo.types import ChangeAction, Row

from .columns import ColumnCodec, rows_of
from .layout import META, OP

__all__ = ["FeedRow", "FeedTooLarge", "feed"]

_FEED = ("_change_type", "_commit_version", "_commit_timestamp")
_ACTIONS = {
    "delete": ChangeAction.DELETE,
    "update_postimage": ChangeAction.UPDATE,
    "update": ChangeAction.UPDATE,
    "insert": ChangeAction.INSERT,
}
_ORDER = {ChangeAction.DELETE: 0, ChangeAction.UPDATE: 1, ChangeAction.INSERT: 2}
_EPOCH = datetime.fromtimestamp(0, UTC)


class FeedTooLarge(Exception):
    """The range holds more change-feed rows than the caller's ``max_rows``."""


@dataclass(frozen=True, slots=True)
class FeedRow:
    """One change: its version, action, commit time and row (a delete's row holds its key)."""

    version: int
    action: ChangeAction
    at: datetime
    row: Row


def _action(r: Row) -> ChangeAction | None:
    kind = r.get("_change_type")
    if kind == "insert" and r.get(OP) in _ACTIONS:
        return _ACTIONS[str(r[OP])]
    return _ACTIONS.get(str(kind)) if kind in _ACTIONS else None


def feed(
    dt: Any,
    first: int,
    last: int,
    codecs: Sequence[ColumnCodec],
    key_columns: Sequence[str],
    *,
    skip: Container[int] = (),
    max_rows: int | None = None,
) -> list[FeedRow]:
    """The changes of versions ``first..last`` of ``dt`` in order, without the versions in
    ``skip`` (pass the ``compaction`` versions). With ``max_rows``, the feed is read batch by
    batch and :class:`FeedTooLarge` raised as soon as it holds more rows than that (so no more
    is ever held)."""
    import pyarrow as pa  # noqa: PLC0415 - lazy: pyarrow, only when reading

    if last < first:
        return []
    reader = pa.RecordBatchReader.from_stream(
        dt.load_cdf(starting_version=first, ending_version=last)
    )
    batches = []
    n = 0
    for batch in reader:
        n += batch.num_rows
        if max_rows is not None and n > max_rows:
            raise FeedTooLarge(f"more than {max_rows} change-feed rows")
        batches.append(batch)
    cdf = pa.Table.from_batches(batches, schema=reader.schema)
    out: list[tuple[int, int, FeedRow]] = []
    for r in rows_of(cdf, codecs):
        version = int(r["_commit_version"])
        action = _action(r)
        if action is None or version in skip:
            continue
        stamp = r.get("_commit_timestamp")
        at = _EPOCH
        if isinstance(stamp, datetime):
            at = stamp if stamp.tzinfo else stamp.replace(tzinfo=UTC)
        row = {k: v for k, v in r.items() if k not in _FEED and k not in META}
        if action is ChangeAction.DELETE:
            row = {k: row.get(k) for k in key_columns}
        out.append((version, _ORDER[action], FeedRow(version, action, at, row)))
    out.sort(key=lambda t: (t[0], t[1]))
    return [t[2] for t in out]
