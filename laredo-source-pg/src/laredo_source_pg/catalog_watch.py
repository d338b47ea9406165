"""``CatalogWatch``: schema and partition changes seen without waiting for a row change.

pgoutput describes a table's new columns only with its next row change, and sends nothing
when a partition is attached, detached, dropped or truncated (under
``publish_via_partition_root``). Every ``catalog_check_interval`` the stream's reader asks the
catalog (two small queries on the side connection) for the tracked tables' columns and their
partitions:

* **Columns.** A table whose columns (names and types, as pgoutput would describe them)
  differ from what the stream last reported gets a schema change, in stream order: it is
  reported once the stream has passed the WAL position read with the catalog (every change
  made under the old columns is delivered first), outside a transaction, unless the stream
  reported a newer description meanwhile. The pipeline's schema-change response then applies
  as for a change pgoutput reported.
* **Partitions.** A partitioned parent whose leaves (or their storage: TRUNCATE gives a leaf
  new storage) differ from those its baseline read is re-baselined through the handler's
  ``on_resync_required(table, reason)``; the engine reloads the table from a fresh snapshot
  aligned with the stream (changes meanwhile are kept), as ``laredo reload`` does.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

from laredo.types import ColumnDefinition, TableIdentifier

from .catalog import Catalog, Connections
from .dsn import mask_text
from .lsn import parse_lsn
from .partitions import partition_fingerprints
from .typmods import Signature, column_signature, signature_typmod

logger = logging.getLogger(__name__)
_LSN = (
    "SELECT CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn() "
    "ELSE pg_current_wal_lsn() END::text"
)
"""Where the catalog was read: the WAL written on a primary, the WAL replayed on a hot standby
(``pg_current_wal_lsn()`` fails there)."""

__all__ = ["CatalogWatch", "Signature"]


_SIGNATURES = """
SELECT x.s, x.t,
       ARRAY(SELECT a.attname::text FROM pg_attribute a
              WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
                AND a.attgenerated IN ('', %s::"char") ORDER BY a.attnum),
       ARRAY(SELECT a.atttypid::bigint FROM pg_attribute a
              WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
                AND a.attgenerated IN ('', %s::"char") ORDER BY a.attnum),
       ARRAY(SELECT a.atttypmod FROM pg_attribute a
              WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
                AND a.attgenerated IN ('', %s::"char") ORDER BY a.attnum)
FROM unnest(%s::text[], %s::text[]) AS x(s, t)
JOIN pg_class c ON c.oid = to_regclass(format('%%I.%%I', x.s, x.t))
"""


@dataclass(frozen=True, slots=True)
class _Pending:
    table: TableIdentifier
    lsn: int
    """The WAL position read with the catalog: the change is reported once the stream passed it."""
    seen: Signature | None
    """What the stream knew at the check (a newer description from the stream cancels this)."""
    signature: Signature


class CatalogWatch:
    """The periodic catalog check of one stream (see the module docstring)."""

    def __init__(self, conns: Connections, catalog: Catalog, interval: float) -> None:
        self._conns = conns
        self._catalog = catalog
        self.interval = interval
        self._next = time.monotonic() + interval if interval > 0 else float("inf")
        self._pending: dict[TableIdentifier, _Pending] = {}

    def due(self, now: float) -> bool:
        return now >= self._next or bool(self._pending)

    def tick(
        self,
        known: dict[TableIdentifier, Signature],
        passed: int,
        on_columns: Callable[[TableIdentifier, list[ColumnDefinition]], None],
        on_resync: Callable[[TableIdentifier, str], None],
    ) -> None:
        """Run the check when due and report what is ready. Call outside a transaction.

        ``known``: the signatures the stream reported last; ``passed``: a WAL position the
        stream has delivered everything up to; ``on_columns(table, columns)`` reports a
        schema change, ``on_resync(table, reason)`` asks for a re-baseline."""
        now = time.monotonic()
        if now >= self._next:
            self._next = now + self.interval
            try:
                self._check(known, on_resync)
            except Exception as exc:
                logger.warning(
                    "catalog check of %s failed (retried in %ss): %s",
                    ", ".join(map(str, self._catalog.tables)),
                    self.interval,
                    mask_text(str(exc)).strip(),
                )
        if self._pending:
            self._report(known, passed, on_columns)

    def _check(
        self,
        known: dict[TableIdentifier, Signature],
        on_resync: Callable[[TableIdentifier, str], None],
    ) -> None:
        catalog = self._catalog
        tables = list(catalog.tables)
        if not tables:
            return
        schemas = [t.schema for t in tables]
        names = [t.table for t in tables]

        def read(conn: Any) -> tuple[int, list[Any], dict[TableIdentifier, Any]]:
            lsn_row = conn.execute(_LSN).fetchone()
            gen = self._catalog.generated  # stored generated columns, when published
            rows = conn.execute(_SIGNATURES, (gen, gen, gen, schemas, names)).fetchall()
            return parse_lsn(lsn_row[0]), rows, partition_fingerprints(conn, tables)

        lsn, rows, fingerprints = self._conns.side(read)
        for schema, name, cols, oids, mods in rows:
            table = TableIdentifier(schema, name)
            published = catalog.published_columns.get(table)
            sig = tuple(
                (str(c), int(o), signature_typmod(int(o), int(m)))
                for c, o, m in zip(cols, oids, mods, strict=True)
                if published is None or c in published
            )
            seen = known.get(table)
            if seen is not None and sig != seen and table not in self._pending:
                self._pending[table] = _Pending(table, lsn, seen, sig)
        for table, fp in fingerprints.items():
            before = catalog.partitions.get(table)
            catalog.partitions[table] = fp
            if before is not None and before != fp:
                added = len({oid for oid, _ in fp} - {oid for oid, _ in before})
                removed = len({oid for oid, _ in before} - {oid for oid, _ in fp})
                reason = (
                    f"partitions of {table} changed ({added} attached, {removed} detached or "
                    "dropped)"
                    if added or removed
                    else f"a partition of {table} was truncated or rewritten"
                )
                on_resync(table, reason)

    def _discover(self, table: TableIdentifier, conn: Any) -> list[ColumnDefinition] | None:
        return self._catalog.discover([table], conn).get(table)

    def _report(
        self,
        known: dict[TableIdentifier, Signature],
        passed: int,
        on_columns: Callable[[TableIdentifier, list[ColumnDefinition]], None],
    ) -> None:
        for table, p in list(self._pending.items()):
            if passed < p.lsn:
                continue
            del self._pending[table]
            if table not in self._catalog.tracked.values():
                continue
            if known.get(table) != p.seen:
                continue  # the stream described the table meanwhile: it is up to date
            columns = self._conns.side(partial(self._discover, table))
            if columns is None:
                continue  # dropped meanwhile: the next check or the stream says more
            if column_signature(columns) != p.signature:
                continue  # changed again since the check: the next check reports it
            on_columns(table, columns)
