"""Snapshot retention helpers: which snapshots to delete for a keep count and a maximum age.

The engine's scheduler calls :func:`apply_retention` after each snapshot; the rules are pure
functions over ``SnapshotDescriptor`` lists so every store behaves the same way.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from laredo.errors import ConfigError
from laredo.types import SnapshotDescriptor, TableIdentifier
from laredo.units import parse_timedelta

__all__ = ["apply_retention", "snapshots_to_delete"]


def __getattr__(name: str) -> Any:
    if name == "parse_duration":  # 0.1 name: a second parse_duration with another return type
        warnings.warn(
            "laredo.snapshots.schedule.parse_duration is deprecated: use "
            "laredo.units.parse_timedelta (a timedelta) or laredo.units.parse_duration (seconds)",
            DeprecationWarning,
            stacklevel=2,
        )
        return parse_timedelta
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def snapshots_to_delete(
    snapshots: Sequence[SnapshotDescriptor],
    *,
    keep_count: int | None = None,
    max_age: Any = None,
    now: datetime | None = None,
    min_keep: int = 1,
) -> list[str]:
    """Ids to delete, newest-first order of ``snapshots`` is not assumed.

    * ``keep_count``: keep only the ``keep_count`` newest (``None`` or 0: no count limit).
    * ``max_age``: delete snapshots created more than ``max_age`` before ``now``
      (``timedelta`` or text such as ``"7d"``; ``None``: no age limit). The ``min_keep`` newest
      snapshots (default 1) are never deleted for age alone, so a source that has been idle
      longer than ``max_age`` still has something to restore from.
    """
    if keep_count is not None and keep_count < 0:
        raise ConfigError(f"snapshot retention keep_count must be >= 0, got {keep_count}")
    ordered = sorted(snapshots, key=lambda d: (d.created_at.timestamp(), d.snapshot_id))
    ordered.reverse()
    age = None if max_age is None else parse_timedelta(max_age, "snapshot retention max_age")
    now = now or datetime.now(UTC)
    if now.tzinfo is None:
        now = now.replace(tzinfo=UTC)
    doomed = []
    for i, d in enumerate(ordered):
        if keep_count and i >= keep_count:
            doomed.append(d.snapshot_id)
            continue
        if age is not None and i >= min_keep:
            created = d.created_at if d.created_at.tzinfo else d.created_at.replace(tzinfo=UTC)
            if now - created > age:
                doomed.append(d.snapshot_id)
    return doomed


def apply_retention(
    store: Any,
    *,
    keep_count: int | None = None,
    max_age: Any = None,
    table: TableIdentifier | None = None,
    now: datetime | None = None,
    min_keep: int = 1,
) -> list[str]:
    """Delete what :func:`snapshots_to_delete` selects from ``store.list(table)``; returns the
    deleted ids. A snapshot that is already gone is skipped."""
    doomed = snapshots_to_delete(
        store.list(table), keep_count=keep_count, max_age=max_age, now=now, min_keep=min_keep
    )
    deleted = []
    for sid in doomed:
        try:
            store.delete(sid)
        except LookupError:
            continue
        deleted.append(sid)
    return deleted
