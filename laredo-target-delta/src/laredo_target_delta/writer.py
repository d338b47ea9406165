"""The Delta operations of one ``delta`` target: each call is one Delta commit (or none).

Every commit carries the source position it makes durable (see :mod:`.archive`); a commit
either happens completely or not at all (the Delta log's atomic put), so after a crash the
table holds exactly the versions that were committed. Changes are appended as change rows and
compacted when they reach a fraction of the table (merge-on-read, see :mod:`.layout`), so a
flush writes bytes in proportion to its changes, not to the table.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from laredo.errors import TargetError, Terminal
from laredo.types import (
    ColumnDefinition,
    Row,
    TableIdentifier,
    no_primary_key_problem,
    primary_key_columns,
)

from .archive import (
    COMPACTION,
    DELETED,
    INSERTED,
    PARTIAL,
    PROGRESS,
    UPDATED,
    Commit,
    commit_metadata,
    commits,
    position_order,
    progress_of,
    table_reader,
)
from .changes import (
    NetChanges,
    change_rows,
    kept_keys,
    key_queries,
)
from .columns import (
    ColumnCodec,
    DescriptionError,
    TableDescription,
    arrow_schema,
    codecs_for,
    decode_description,
    encode_description,
    rows_of,
    to_arrow,
)
from .layout import SEQ, has_changes, latest, meta_schema, with_meta
from .options import DeltaTargetOptions, masked

logger = logging.getLogger(__name__)

__all__ = ["CommitStats", "DeltaConfigError", "DeltaWriter"]

CDF = {"delta.enableChangeDataFeed": "true"}


class DeltaConfigError(TargetError, Terminal):
    """The table at ``uri`` cannot be used as configured (another table, no primary key,
    incompatible columns): retrying does not help."""


@dataclass(frozen=True, slots=True)
class CommitStats:
    """What one flush wrote (``bytes_added``/``files_removed``: 0 when not measured)."""

    version: int
    rows: int
    seconds: float
    bytes_added: int
    files_removed: int


class DeltaWriter:
    """Writes one table's Delta versions. Not thread-safe: the target serialises calls."""

    def __init__(self, options: DeltaTargetOptions, table: TableIdentifier, source_id: str):
        self.options = options
        self.uri = options.uri
        self.storage = dict(options.storage_options)
        self.table = table
        self.source_id = source_id
        self.columns: list[ColumnDefinition] = []
        self.codecs: list[ColumnCodec] = []
        self.keys: list[str] = []
        self.dt: Any = None
        self.commits_since_maintenance = 0
        self.base_rows = 0  # compacted rows (see .layout)
        self.change_rows = 0  # change rows appended since
        self.last_partial = False

    # -- errors ---------------------------------------------------------------------------
    def _fail(self, what: str, exc: BaseException) -> TargetError:
        return TargetError(
            f"delta target {self.table}: uri = {self.uri!r}: {what} failed "
            f"({type(exc).__name__}: {exc}); storage_options {masked(self.storage)}"
        )

    # -- opening ----------------------------------------------------------------------------
    def set_columns(self, columns: Sequence[ColumnDefinition]) -> None:
        keys = primary_key_columns(list(columns))
        if not keys:
            raise DeltaConfigError(no_primary_key_problem(self.table, "delta", "key_fields"))
        self.columns = list(columns)
        self.codecs = codecs_for(self.columns)
        self.keys = keys

    def open_existing(self) -> TableDescription | None:
        """Open the table at ``uri`` if there is one; check it mirrors this table. Raises
        ``TargetError`` naming ``uri`` for another table or an unreachable store."""
        from deltalake import DeltaTable  # noqa: PLC0415 - lazy: deltalake loads a native library

        try:
            exists = DeltaTable.is_deltatable(self.uri, storage_options=self.storage)
        except Exception as exc:
            raise self._fail("reading the table", exc) from None
        if not exists:
            self._check_writable()
            return None
        try:
            self.dt = DeltaTable(self.uri, storage_options=self.storage)
        except Exception as exc:
            raise self._fail("opening the table", exc) from None
        try:
            desc = decode_description(self.dt.metadata().description)
        except DescriptionError as exc:
            msg = f"delta target {self.table}: uri = {self.uri!r}: {exc}"
            raise DeltaConfigError(msg) from None
        if desc is None or desc.table != self.table:
            held = "a table not written by laredo" if desc is None else f"table {desc.table}"
            raise DeltaConfigError(
                f"delta target {self.table}: uri = {self.uri!r} holds {held}; give each "
                "pipeline its own uri"
            )
        self._count_rows()
        return desc

    def _count_rows(self) -> None:
        """Read how many compacted and change rows the table holds (compaction's trigger)."""
        from deltalake import QueryBuilder  # noqa: PLC0415 - lazy: deltalake native library

        names = pa.schema(self.dt.schema().to_arrow()).names
        change = f'count("{SEQ}")' if has_changes(names) else "0"
        try:
            got = pa.table(
                QueryBuilder()
                .register("t", self.dt)
                .execute(f"SELECT count(*) AS n, {change} AS c FROM t")
                .read_all()
            ).to_pylist()[0]
        except Exception as exc:
            raise self._fail("counting the table's rows", exc) from None
        self.change_rows = int(got["c"])
        self.base_rows = int(got["n"]) - self.change_rows

    def _check_writable(self) -> None:
        if "://" in self.uri and not self.uri.startswith("file://"):
            return  # object stores: the first commit reports a refused write
        path = self.uri.removeprefix("file://")
        try:
            os.makedirs(path, exist_ok=True)
        except OSError as exc:
            raise self._fail("creating the directory", exc) from None
        if not os.access(path, os.W_OK | os.X_OK):
            raise DeltaConfigError(
                f"delta target {self.table}: uri = {self.uri!r}: the directory is not writable"
            )

    def last_commit(self) -> Commit | None:
        """The newest commit that carries a position of this source."""
        if self.dt is None:
            return None
        for c in reversed(commits(self.dt)):
            if c.position and not c.partial and c.source_id in (None, self.source_id):
                return c
        return None

    def last_progress(self) -> str | None:
        """The unfinished chunked baseline's progress record the table holds (None: none)."""
        return None if self.dt is None else progress_of(commits(self.dt))

    # -- commits ----------------------------------------------------------------------------
    def _props(
        self,
        position_text: str,
        order: int | None,
        kind: str,
        progress: str | None = None,
        **more: Any,
    ) -> Any:
        from deltalake import CommitProperties  # noqa: PLC0415 - lazy: deltalake native library

        if progress is not None:
            more[PROGRESS] = progress
        meta = commit_metadata(position_text, order, self.source_id, str(self.table), kind, **more)
        return CommitProperties(custom_metadata=meta)

    def _description(self) -> str:
        return encode_description(TableDescription(self.table, tuple(self.columns)))

    def write_baseline(
        self,
        parts: Iterable[pa.Table],
        position_text: str,
        position: Any,
        progress: str | None = None,
    ) -> CommitStats:
        """Replace the table's contents (a new version; the first one of a new table);
        ``progress``: a chunked baseline's record to commit with it (see :mod:`.archive`)."""
        from deltalake import DeltaTable, write_deltalake  # noqa: PLC0415 - lazy: native library

        started = time.monotonic()
        schema = arrow_schema(self.codecs)
        full = meta_schema(schema)
        batches = [with_meta(b, full) for t in parts for b in t.cast(schema).to_batches()]
        reader = pa.RecordBatchReader.from_batches(full, batches)
        try:
            write_deltalake(
                self.dt if self.dt is not None else self.uri,
                reader,
                mode="overwrite",
                schema_mode="overwrite",
                name=str(self.table),
                description=self._description(),
                configuration=CDF,
                storage_options=self.storage if self.dt is None else None,
                commit_properties=self._props(
                    position_text, position_order(position), "baseline", progress=progress
                ),
            )
            if self.dt is None:
                self.dt = DeltaTable(self.uri, storage_options=self.storage)
            else:
                self.dt.update_incremental()
                if decode_description(self.dt.metadata().description) != TableDescription(
                    self.table, tuple(self.columns)
                ):
                    self.dt.alter.set_table_description(
                        self._description(),
                        commit_properties=self._props(
                            position_text, position_order(position), "schema"
                        ),
                    )
        except TargetError:
            raise
        except Exception as exc:
            raise self._fail("writing the baseline", exc) from None
        rows = sum(len(b) for b in batches)
        self.base_rows, self.change_rows = rows, 0
        return CommitStats(self.dt.version(), rows, time.monotonic() - started, 0, 0)

    def merge(
        self,
        net: NetChanges,
        position_text: str,
        position: Any,
        partial: bool = False,
        progress: str | None = None,
    ) -> CommitStats | None:
        """One commit applying ``net``: an append of one change row per key (see
        :mod:`.layout`); None when there is nothing to write (a commit of no rows when there
        is a ``progress`` record to commit). The name stays from the MERGE this replaced."""
        from deltalake import write_deltalake  # noqa: PLC0415 - lazy: deltalake native library

        if not net.rows and not net.truncated:
            return None if progress is None else self._mark(position_text, position, progress)
        if self.dt is None:
            raise DeltaConfigError(
                f"delta target {self.table}: uri = {self.uri!r} holds no Delta table, but the "
                "source resumes streaming; reset the source so the table is baselined again"
            )
        if net.truncated:
            return self._replace(net, position_text, position, partial, progress)
        started = time.monotonic()
        current = self._current(kept_keys(net))
        table, counts = change_rows(net, self.codecs, self.keys, self.dt.version() + 1, current)
        if not table.num_rows:
            return None if progress is None else self._mark(position_text, position, progress)
        more: dict[str, Any] = {PARTIAL: True} if partial else {}
        more.update({INSERTED: counts["insert"], UPDATED: counts["update"]})
        more[DELETED] = counts["delete"]
        props = self._props(
            position_text, position_order(position), "changes", progress=progress, **more
        )
        try:
            write_deltalake(
                self.dt, table, mode="append", schema_mode="merge", commit_properties=props
            )
        except Exception as exc:
            raise self._fail(
                f"appending {table.num_rows} change(s) at {position_text}", exc
            ) from None
        self.commits_since_maintenance += 1
        self.change_rows += table.num_rows
        self.last_partial = partial
        return CommitStats(self.dt.version(), table.num_rows, time.monotonic() - started, 0, 0)

    def _mark(self, position_text: str, position: Any, progress: str) -> CommitStats | None:
        """A commit of no rows that records ``progress`` (kind ``progress``; none without a
        table: nothing to record)."""
        from deltalake import write_deltalake  # noqa: PLC0415 - lazy: deltalake native library

        if self.dt is None:
            return None
        started = time.monotonic()
        empty = meta_schema(arrow_schema(self.codecs)).empty_table()
        props = self._props(position_text, position_order(position), "progress", progress=progress)
        try:
            write_deltalake(self.dt, empty, mode="append", commit_properties=props)
        except Exception as exc:
            raise self._fail("recording the chunked baseline's progress", exc) from None
        return CommitStats(self.dt.version(), 0, time.monotonic() - started, 0, 0)

    def _current(self, keys: list[tuple[Any, ...]]) -> dict[tuple[Any, ...], Row | None]:
        """The rows the table holds now for ``keys`` (None: deleted; absent: never held).
        Only columns an UPDATE left unchanged (TOAST) need them: a delete is written as a
        delete row without looking (PostgreSQL deletes rows it holds; a delete of a key the
        table lacks, e.g. redelivered, changes nothing in the state)."""
        from deltalake import QueryBuilder  # noqa: PLC0415 - lazy: deltalake native library

        if not keys:
            return {}
        try:
            queries = key_queries(keys, self.keys)
        except TypeError as exc:
            raise TargetError(f"delta target {self.table}: reading rows by key: {exc}") from None
        try:
            found = pa.concat_tables(
                [
                    pa.table(QueryBuilder().register("t", self.dt).execute(q).read_all())
                    for q in queries
                ],
                promote_options="permissive",
            )
        except Exception as exc:
            raise self._fail("looking up rows by key", exc) from None
        return latest(rows_of(found, self.codecs), self.keys)

    def _replace(
        self,
        net: NetChanges,
        position_text: str,
        position: Any,
        partial: bool,
        progress: str | None,
    ) -> CommitStats:
        """A run that starts with a TRUNCATE: the table becomes the rows upserted after it
        (one overwrite commit; MERGE's not-matched-by-source delete is not used because
        delta-rs 1.6 fails it when the change data feed is on)."""

        started = time.monotonic()
        rows = [item[0] for item in net.rows.values() if item is not None]
        more = {PARTIAL: True} if partial else {}
        props = self._props(
            position_text, position_order(position), "changes", progress=progress, **more
        )
        try:
            self._overwrite(to_arrow(self.codecs, rows), props)
        except Exception as exc:
            raise self._fail(f"TRUNCATE and {len(rows)} row(s) at {position_text}", exc) from None
        self.commits_since_maintenance += 1
        self.base_rows, self.change_rows = len(rows), 0
        self.last_partial = partial
        return CommitStats(self.dt.version(), len(rows), time.monotonic() - started, 0, 0)

    def add_columns(
        self,
        added: Sequence[ColumnDefinition],
        columns: Sequence[ColumnDefinition],
        position_text: str,
        position: Any,
    ) -> None:
        """Evolve the schema: the new columns (NULL in existing rows) and the new description."""
        from deltalake import Field  # noqa: PLC0415 - lazy: deltalake native library

        old_codecs = self.codecs
        self.set_columns(columns)
        if self.dt is None:
            return
        names = {c.name for c in added}
        fields = [
            Field.from_arrow(pa.field(c.name, c.arrow_type, nullable=True))
            for c in self.codecs
            if c.name in names and c.name not in {o.name for o in old_codecs}
        ]
        props = self._props(position_text, position_order(position), "schema")
        try:
            if fields:
                self.dt.alter.add_columns(fields, commit_properties=props)
            self.dt.alter.set_table_description(self._description(), commit_properties=props)
        except Exception as exc:
            raise self._fail(f"adding columns {sorted(names)}", exc) from None

    def _overwrite(self, data: pa.Table, props: Any) -> None:
        """Replace the table's rows with ``data`` (plain rows: both change-row columns NULL)."""
        from deltalake import write_deltalake  # noqa: PLC0415 - lazy: deltalake native library

        schema = arrow_schema(self.codecs)
        full = meta_schema(schema)
        batches = [with_meta(b, full) for b in data.cast(schema).to_batches()]
        write_deltalake(
            self.dt,
            pa.Table.from_batches(batches, full),
            mode="overwrite",
            schema_mode="overwrite",
            commit_properties=props,
        )
        self.dt.update_incremental()

    def compact_changes(
        self, position_text: str, position: Any, force: bool = False, progress: str | None = None
    ) -> bool:
        """When the change rows reach ``maintenance.compact_fraction`` of the compacted ones
        (and ``compact_min_rows``), or with ``force``: one overwrite commit holding the current
        state as plain rows (``laredo.kind = compaction``, the same position, partial when the
        last commit was). Returns whether it compacted. It costs one rewrite of the table,
        amortised over the changes since the last one."""
        m = self.options.maintenance
        if self.dt is None or not self.change_rows:
            return False
        due = self.change_rows >= max(m.compact_fraction * self.base_rows, m.compact_min_rows)
        if not (due or force):
            return False
        more: dict[str, Any] = {PARTIAL: True} if self.last_partial else {}
        props = self._props(
            position_text, position_order(position), COMPACTION, progress=progress, **more
        )
        started = time.monotonic()
        try:
            state = table_reader(self.dt, self.uri).read_all()
            self._overwrite(state, props)
        except Exception as exc:
            raise self._fail(f"compacting {self.change_rows} change row(s)", exc) from None
        logger.info(
            "delta target %s: compacted %d change row(s) into %d row(s) in %.1f s",
            self.table,
            self.change_rows,
            state.num_rows,
            time.monotonic() - started,
            extra={"table": str(self.table)},
        )
        self.base_rows, self.change_rows = state.num_rows, 0
        return True

    def maintain(self, position_text: str, position: Any, progress: str | None = None) -> None:
        """Compact the change rows when due (:meth:`compact_changes`), and small files (and
        vacuum) after every ``compact_every`` commits (see the options). A failed compaction
        is logged and retried after the next commit: the commits before it hold the state."""
        try:
            self.compact_changes(position_text, position, progress=progress)
        except TargetError as exc:
            logger.warning(
                "delta target %s: compaction failed (retried after the next commit): %s",
                self.table,
                exc,
                extra={"table": str(self.table)},
            )
        m = self.options.maintenance
        if (
            self.dt is None
            or not m.compact_every
            or self.commits_since_maintenance < m.compact_every
        ):
            return
        self.commits_since_maintenance = 0
        props = self._props(position_text, position_order(position), "maintenance")
        try:
            self.dt.optimize.compact(commit_properties=props)
            if m.vacuum_retention is not None:
                self.dt.vacuum(
                    retention_hours=int(m.vacuum_retention // 3600),
                    dry_run=False,
                    enforce_retention_duration=False,
                    commit_properties=props,
                )
        except Exception as exc:  # maintenance never fails the pipeline
            logger.warning(
                "delta target %s: maintenance failed (the next one retries): %s",
                self.table,
                exc,
                extra={"table": str(self.table)},
            )
