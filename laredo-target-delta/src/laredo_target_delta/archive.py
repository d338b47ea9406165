"""The Delta table as an archive: commit metadata, history, and point-in-time reads.

Every commit a ``delta`` target makes carries, in its commit info, ``laredo.position`` (the
source position, in the source's own text), ``laredo.position_order`` (an integer that orders
positions, when the source's positions are integers: PostgreSQL LSNs), ``laredo.source_id``,
``laredo.table`` and ``laredo.kind`` (``baseline``, ``changes``, ``schema``, ``maintenance``).
While a chunked baseline runs, its commits also carry ``laredo.progress``, the progress record
(:class:`laredo.ProgressTarget`) their rows complete, in the same commit as those rows; ``""``
marks the baseline finished (see :func:`progress_of`).
A version holds every change at or before its position and none after it, except a commit
marked ``laredo.partial`` (made at shutdown, not knowing whether the transaction at its position
was complete): it may hold only part of that transaction. Point-in-time reads never choose a
partial commit (they take the last whole one before it), and a restarted target resumes after
the last whole commit, so the source redelivers that transaction and the next commit applies
it whole: every change is an upsert or a delete by key, so applying it again over the part the
partial commit holds changes nothing twice.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa
from laredo.errors import LaredoError
from laredo.types import primary_key_columns

from .columns import (
    DescriptionError,
    TableDescription,
    codecs_for,
    decode_description,
    rows_of,
)
from .layout import META, has_changes, state_sql
from .options import masked
from .paths import check_files

logger = logging.getLogger(__name__)

__all__ = [
    "COMPACTION",
    "DELETED",
    "INSERTED",
    "KIND",
    "ORDER",
    "PARTIAL",
    "POSITION",
    "PROGRESS",
    "SOURCE_ID",
    "TABLE",
    "UPDATED",
    "ArchiveError",
    "Commit",
    "commit_metadata",
    "commits",
    "description_of",
    "history",
    "open_table",
    "position_order",
    "progress_of",
    "read_as_of",
    "rows_as_of",
    "select_commit",
]

POSITION = "laredo.position"
ORDER = "laredo.position_order"
SOURCE_ID = "laredo.source_id"
TABLE = "laredo.table"
KIND = "laredo.kind"
PARTIAL = "laredo.partial"
PROGRESS = "laredo.progress"
INSERTED = "laredo.inserted"
UPDATED = "laredo.updated"
DELETED = "laredo.deleted"
COMPACTION = "compaction"

_LSN = re.compile(r"([0-9A-Fa-f]{1,8})/([0-9A-Fa-f]{1,8})")


def commit_metadata(
    position_text: str, position: Any, source_id: str, table: str, kind: str, **more: Any
) -> dict[str, Any]:
    """The commit info of a ``delta`` target's commit (writers other than the target, e.g.
    the Spark baseline, use it too)."""
    meta: dict[str, Any] = {
        POSITION: position_text,
        SOURCE_ID: source_id,
        TABLE: table,
        KIND: kind,
        **more,
    }
    order = position_order(position)
    if order is None:
        order = position_order(position_text)
    if order is not None:
        meta[ORDER] = order
    return meta


class ArchiveError(LaredoError):
    """The Delta archive cannot answer (no such table, no commit at that position...)."""


def position_order(position: Any) -> int | None:
    """An integer ordering ``position``: an int, integer text or LSN text ``X/Y``; else None."""
    if isinstance(position, bool):
        return None
    if isinstance(position, int):
        return position
    if isinstance(position, str):
        text = position.strip()
        m = _LSN.fullmatch(text)
        if m is not None:
            return (int(m.group(1), 16) << 32) + int(m.group(2), 16)
        if text.lstrip("-").isdigit():
            return int(text)
    return None


def open_table(
    uri: str, storage_options: Mapping[str, str] | None = None, *, key: str = "uri"
) -> Any:
    """The ``DeltaTable`` at ``uri``; ``ArchiveError`` naming ``key`` when there is none or the
    store cannot be reached (storage options shown masked)."""
    from deltalake import DeltaTable  # noqa: PLC0415 - lazy: deltalake loads a native library

    try:
        return DeltaTable(uri, storage_options=dict(storage_options or {}))
    except Exception as exc:
        raise ArchiveError(
            f"{key} = {uri!r}: no readable Delta table there ({type(exc).__name__}: {exc}); "
            f"check the path and storage_options {masked(dict(storage_options or {}))}"
        ) from None


def description_of(dt: Any, uri: str, key: str = "uri") -> TableDescription:
    """The Laredo description of a Delta table; ``ArchiveError`` when another writer made it
    or it cannot be read."""
    try:
        desc = decode_description(dt.metadata().description)
    except DescriptionError as exc:
        raise ArchiveError(f"{key} = {uri!r}: {exc}") from None
    if desc is None:
        raise ArchiveError(
            f"{key} = {uri!r}: this Delta table was not written by a laredo delta target (its "
            "description holds no laredo table metadata)"
        )
    return desc


@dataclass(frozen=True, slots=True)
class Commit:
    """One version of the archive."""

    version: int
    timestamp: datetime
    operation: str
    position: str | None
    order: int | None
    source_id: str | None
    table: str | None
    kind: str | None
    partial: bool
    inserted: int
    updated: int
    deleted: int
    progress: str | None = None
    """``laredo.progress`` of the commit (``""``: a chunked baseline finished; None: absent)."""


def _text(value: Any) -> str | None:
    return None if value is None else str(value)


def _commit(info: Mapping[str, Any]) -> Commit:
    metrics = info.get("operationMetrics") or {}
    order = info.get(ORDER)
    operation = str(info.get("operation", ""))
    if INSERTED in info:  # an append of change rows (see .layout): our own counts
        ins, upd, dels = (int(info.get(k, 0)) for k in (INSERTED, UPDATED, DELETED))
    elif operation == "MERGE":
        ins = int(metrics.get("num_target_rows_inserted", 0))
        upd = int(metrics.get("num_target_rows_updated", 0))
        dels = int(metrics.get("num_target_rows_deleted", 0))
    elif operation in ("WRITE", "CREATE TABLE") and info.get(KIND) not in (
        "maintenance",
        COMPACTION,
    ):
        ins, upd, dels = int(metrics.get("num_added_rows", 0)), 0, 0
    else:
        ins = upd = dels = 0
    return Commit(
        version=int(info["version"]),
        timestamp=datetime.fromtimestamp(int(info.get("timestamp", 0)) / 1000, UTC),
        operation=operation,
        position=_text(info.get(POSITION)),
        order=int(order) if order is not None else None,
        source_id=_text(info.get(SOURCE_ID)),
        table=_text(info.get(TABLE)),
        kind=_text(info.get(KIND)),
        partial=bool(info.get(PARTIAL, False)),
        inserted=ins,
        updated=upd,
        deleted=dels,
        progress=_text(info.get(PROGRESS)),
    )


def commits(dt: Any) -> list[Commit]:
    """Every version still in the log, oldest first; ``ArchiveError`` for commit info that
    cannot be read (a damaged or forged log)."""
    out = []
    try:
        infos = dt.history()
    except Exception as exc:
        raise ArchiveError(
            f"uri = {dt.table_uri!r}: the Delta log cannot be read ({type(exc).__name__}: "
            f"{str(exc)[:200]}); it was damaged or forged"
        ) from None
    for info in infos:
        try:
            out.append(_commit(info))
        except (KeyError, TypeError, ValueError, OverflowError, AttributeError, OSError) as exc:
            raise ArchiveError(
                f"uri = {dt.table_uri!r}: unreadable commit info in the Delta log "
                f"({type(exc).__name__}: {str(exc)[:200]}); the log was damaged or forged"
            ) from None
    return sorted(out, key=lambda c: c.version)


def progress_of(all_commits: list[Commit]) -> str | None:
    """The chunked baseline's progress record the table holds: that of the newest commit
    carrying one (a partial commit too: its rows are in the table); None when there is none or
    the baseline finished. Writers other than the target (the Spark baseline) use it too."""
    for c in reversed(all_commits):
        if c.progress is not None:
            return c.progress or None
    return None


def history(uri: str, storage_options: Mapping[str, str] | None = None) -> list[Commit]:
    """The archive's versions, oldest first (``laredo archive history``)."""
    return commits(open_table(uri, storage_options))


def select_commit(all_commits: list[Commit], position: Any, uri: str) -> Commit:
    """The last whole commit at or before ``position`` (never a partial one: it may hold half
    a transaction); ``ArchiveError`` when it predates them all."""
    order = position_order(position)
    text = str(position)
    chosen: Commit | None = None
    for c in all_commits:
        if c.position is None or c.partial:
            continue
        if order is not None and c.order is not None:
            if c.order <= order:
                chosen = c
        elif c.position == text:
            chosen = c
    if chosen is None:
        first = next((c.position for c in all_commits if c.position is not None), None)
        raise ArchiveError(
            f"--as-of {text}: the archive at {uri!r} has no commit at or before this position "
            f"(its first commit is at {first}); the position predates the archive"
        )
    return chosen


def table_reader(dt: Any, uri: str = "") -> pa.RecordBatchReader:
    """The rows of ``dt``'s loaded version (its current state: see :mod:`.layout`) as Arrow
    batches in their Delta types, read by delta-rs. Every data file the log names must lie
    inside the table (``ArchiveError`` otherwise: see :mod:`.paths`).

    Not ``to_pyarrow_table()``: that scans a pyarrow dataset over a Python file system whose
    read-ahead can still hold Python buffers after it returns; freed on an Arrow thread while
    the interpreter exits, they abort the process ("terminate called without an active
    exception", apache/arrow#34314; seen here in one ``laredo archive`` run in two)."""
    from deltalake import QueryBuilder  # noqa: PLC0415 - lazy: deltalake native library

    check_files(dt, uri or dt.table_uri, ArchiveError)
    schema = pa.schema(dt.schema().to_arrow())
    names = [n for n in schema.names if n not in META]
    sql = "SELECT * FROM t"
    if has_changes(schema.names):
        desc = description_of(dt, uri or dt.table_uri)
        keys = primary_key_columns(desc.columns) if desc is not None else []
        if not keys:
            raise ArchiveError(
                f"uri = {uri or dt.table_uri!r}: the table holds change rows but its "
                "description names no key columns; it was not written by a laredo delta target"
            )
        sql = state_sql(names, keys)
    stream = QueryBuilder().register("t", dt).execute(sql)
    out = pa.schema([schema.field(n) for n in names])
    return pa.RecordBatchReader.from_stream(stream).cast(out)


def _load(dt: Any, version: int, uri: str) -> pa.Table:
    """The state at ``version``; ``ArchiveError`` for a version delta-rs cannot read."""
    try:
        dt.load_as_version(version)
        return table_reader(dt, uri).read_all()
    except ArchiveError:
        raise
    except Exception as exc:
        raise ArchiveError(
            f"uri = {uri!r}: version {version} cannot be read ({type(exc).__name__}: "
            f"{str(exc)[:200]})"
        ) from None


def read_as_of(
    uri: str, position: Any, storage_options: Mapping[str, str] | None = None
) -> tuple[pa.Table, str]:
    """The table as it was at the last commit at or before ``position`` (a source position,
    or its text: an LSN ``X/Y`` or an integer), with that commit's position. Columns hold the
    Delta types (see :mod:`laredo_target_delta.columns`); :func:`rows_as_of` decodes them."""
    dt = open_table(uri, storage_options)
    description_of(dt, uri)
    chosen = select_commit(commits(dt), position, uri)
    return _load(dt, chosen.version, uri), str(chosen.position)


def rows_as_of(
    uri: str, position: Any, storage_options: Mapping[str, str] | None = None
) -> tuple[list[dict[str, Any]], str, TableDescription]:
    """Like :func:`read_as_of`, the rows decoded to Laredo values, and the table's description."""
    dt = open_table(uri, storage_options)
    chosen = select_commit(commits(dt), position, uri)
    table = _load(dt, chosen.version, uri)
    desc = description_of(dt, uri)
    return rows_of(table, codecs_for(desc.columns)), str(chosen.position), desc
