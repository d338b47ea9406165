"""Optional capabilities the server reads from targets, sources and observers.

Small ``runtime_checkable`` Protocols in the style of :mod:`laredo.contracts`: the services test
``isinstance(target, QueryableTarget)`` instead of probing attributes. None of them is declared by
core yet; they belong in :mod:`laredo.contracts` next to ``CountableTarget`` and ``KeyedTarget``
(the engine reads ``indexes`` and observers' ``bind`` the same way).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

from laredo.contracts import SecondaryIndexed
from laredo.types import Row, TableIdentifier

logger = logging.getLogger(__name__)

__all__ = [
    "CountsSourceEvents",
    "DescribedSource",
    "DrainableTarget",
    "KeyListingTarget",
    "LazilyListenableTarget",
    "ListenableTarget",
    "LookupTarget",
    "PipelineLabelled",
    "QueryableTarget",
    "ReportsPosition",
    "RetainsWal",
    "SecondaryIndexed",
    "UniqueLookup",
    "VersionedTarget",
    "wal_retained",
]


@runtime_checkable
class QueryableTarget(Protocol):
    """A target whose rows can be read by key, listed and counted (the Query service)."""

    def get(self, *key: Any) -> Row | None: ...

    def items(self) -> Iterator[tuple[Any, Row]]: ...

    def count(self) -> int: ...


@runtime_checkable
class LookupTarget(Protocol):
    """Reads by the unique lookup fields (``lookup``) or by a named index (``lookup_all``)."""

    def lookup(self, *values: Any) -> Row | None: ...

    def lookup_all(self, index_name: str, *values: Any) -> list[Row]: ...


@runtime_checkable
class UniqueLookup(Protocol):
    """Declares the fields of its unique lookup index."""

    @property
    def lookup_fields(self) -> Sequence[str]: ...


@runtime_checkable
class KeyListingTarget(Protocol):
    """Lists its keys without copying rows."""

    def keys(self) -> list[Any]: ...


@runtime_checkable
class VersionedTarget(Protocol):
    """``version`` changes with every write (odd while a write is in progress)."""

    @property
    def version(self) -> int: ...


@runtime_checkable
class ReportsPosition(Protocol):
    """``position`` is the source position of the last change applied (None before any)."""

    @property
    def position(self) -> Any: ...


@runtime_checkable
class ListenableTarget(Protocol):
    """Calls ``fn(old, new)`` after every change; ``listen`` returns ``unsubscribe()``."""

    def listen(
        self, fn: Callable[[Any, Any], None], replay_existing: bool = False
    ) -> Callable[[], None]: ...


@runtime_checkable
class LazilyListenableTarget(Protocol):
    """``listen_lazily(fn)``: the current values as an iterator decoded outside the target's
    locks, then every later change to ``fn`` (a replay that streams a table of any size)."""

    def listen_lazily(
        self, fn: Callable[[Any, Any], None]
    ) -> tuple[Iterator[tuple[None, Any]], Callable[[], None]]: ...


@runtime_checkable
class DescribedSource(Protocol):
    """Adds source-specific details (slot name, stream ARN, ...) to ``GetSourceInfo``."""

    def details(self) -> Mapping[str, Any]: ...


@runtime_checkable
class RetainsWal(Protocol):
    """A source whose replication slot holds WAL back on the database server (PostgreSQL):
    ``wal_retained_bytes()`` is how much, None when unknown."""

    def wal_retained_bytes(self) -> int | None: ...


def wal_retained(source: object) -> int | None:
    """Bytes of WAL ``source``'s slot retains; None when it cannot tell (not
    :class:`RetainsWal`, or the read failed: a status read never fails for this)."""
    if not isinstance(source, RetainsWal):
        return None
    try:
        return source.wal_retained_bytes()
    except Exception as exc:
        logger.debug("wal retained of %r: %s", source, exc)
        return None


@runtime_checkable
class CountsSourceEvents(Protocol):
    """A source that counts events of its own (PostgreSQL: ``failovers_total``,
    ``slot_lost_total``): ``counters()`` maps each name to its monotonic count, exported as
    ``laredo_source_<name>``."""

    def counters(self) -> Mapping[str, int]: ...


@runtime_checkable
class PipelineLabelled(Protocol):
    """An observer that labels pipeline metrics with ``(source_id, table)`` per pipeline id."""

    def bind(self, pipelines: Mapping[str, tuple[str, TableIdentifier | str]]) -> None: ...


@runtime_checkable
class DrainableTarget(Protocol):
    """Hands its clients over to another server: ``drain(reason, timeout)`` sends every client
    GoAway with the deadline, serves them until it, then ends their streams and refuses new
    ones (the ``replication-fanout`` target). Idempotent."""

    def drain(self, reason: str = "draining", timeout: float = 5.0) -> None: ...

    @property
    def draining(self) -> bool: ...
