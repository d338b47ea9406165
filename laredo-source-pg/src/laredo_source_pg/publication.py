"""``PublicationManager``: the publication the stream reads.

:meth:`PublicationManager.ensure` applies ``publication.create``. Unset (the default): create
the publication when it does not exist (logged, naming it), and add configured tables missing
from a publication Laredo created; nothing else is changed. ``True``: create it, or bring an
existing one in line with the configuration (tables, row filters and column lists on PostgreSQL
15+, ``publish`` operations); tables not configured are dropped only from a publication Laredo
created (marker comment) or with ``drop_unconfigured``. ``False``: never touched. Row filters
are compared in PostgreSQL's own deparsed text, so an equivalent filter written differently
does not churn the publication.

Partitioned tables: a publication Laredo creates has ``publish_via_partition_root = true``
(a partition's changes arrive under the parent's name, which is what a pipeline on the parent
needs); on an existing publication Laredo manages, it is turned on when a configured table is
partitioned. A publication Laredo does not manage is never changed: validation says what to run.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from typing import Any

import psycopg
from laredo.errors import ConfigError, SourceError
from laredo.types import TableIdentifier
from psycopg import sql

from .catalog import Connections, quote_ident, table_sql
from .dsn import mask_text
from .options import PUBLISH_OPERATIONS, PostgresSourceOptions, PublicationTableOptions
from .partitions import partitioned_tables

logger = logging.getLogger(__name__)

__all__ = ["MANAGED_COMMENT", "PublicationDetail", "PublicationManager"]

MANAGED_COMMENT = "managed by laredo"
"""The comment on publications Laredo created (it may then drop unconfigured tables)."""

PublicationDetail = dict[TableIdentifier, tuple[tuple[str, ...] | None, str | None]]
"""Published tables -> (explicit column list or None, row filter or None)."""

_PG13 = 130000
_PG15 = 150000
_PG18 = 180000


class PublicationManager:
    """Reads and manages the publication ``options.publication_name``."""

    def __init__(self, conns: Connections, options: PostgresSourceOptions) -> None:
        self._conns = conns
        self._options = options
        self.name = options.publication_name

    def exists(self) -> bool:
        row = (
            self._conns.query()
            .execute("SELECT 1 FROM pg_publication WHERE pubname = %s", (self.name,))
            .fetchone()
        )
        return row is not None

    def published_info(
        self,
    ) -> tuple[dict[TableIdentifier, set[str]], dict[TableIdentifier, str]]:
        """Explicit column lists and row filters (PG15+), used by baseline and discovery."""
        columns: dict[TableIdentifier, set[str]] = {}
        filters: dict[TableIdentifier, str] = {}
        if self._conns.server_version < _PG15 or not self.exists():
            return columns, filters
        for t, (cols, row_filter) in self.detail().items():
            if cols is not None:
                columns[t] = set(cols)
            if row_filter:
                filters[t] = row_filter
        return columns, filters

    def generated_columns(self) -> str:
        """``'s'`` when the publication publishes stored generated columns (PostgreSQL 18's
        ``pubgencols``), else ``''``."""
        if self._conns.server_version < _PG18:
            return ""
        row = (
            self._conns.query()
            .execute("SELECT pubgencols FROM pg_publication WHERE pubname = %s", (self.name,))
            .fetchone()
        )
        return "s" if row is not None and row[0] == "s" else ""

    def table_spec(self, table: TableIdentifier) -> sql.Composable:
        """``schema.table [(columns)] [WHERE (filter)]`` as configured for ``table``."""
        opts = self._options.publication.tables.get(str(table))
        parts: list[sql.Composable] = [table_sql(table)]
        if opts is not None and opts.columns:
            parts.append(
                sql.SQL(" ({})").format(sql.SQL(", ").join(sql.Identifier(c) for c in opts.columns))
            )
        if opts is not None and opts.row_filter:
            parts.append(sql.SQL(" WHERE ({})").format(sql.SQL(opts.row_filter)))
        return sql.Composed(parts)

    def ensure(
        self, tables: Sequence[TableIdentifier], configured: Sequence[TableIdentifier]
    ) -> None:
        """Apply ``publication.create`` (see the module docstring) for ``tables`` (the
        configured ones that exist); ``configured``: every configured table."""
        create = self._options.publication.create
        if create is False:
            return
        self._check_table_options(configured)
        if create:
            self.sync(tables, configured)
            return
        conn = self._conns.query()
        pub = sql.Identifier(self.name)
        try:
            row = conn.execute(
                "SELECT p.puballtables, obj_description(p.oid, 'pg_publication') "
                "FROM pg_publication p WHERE pubname = %s",
                (self.name,),
            ).fetchone()
            if row is None:
                publish = sql.Literal(", ".join(self._options.publication.publish))
                self._create(
                    conn,
                    pub,
                    publish,
                    tables,
                    note=" (it did not exist; publication.create = false forbids creating it)",
                )
                return
            all_tables, comment = row
            if comment != MANAGED_COMMENT:
                return
            self._via_root(conn, pub, tables)
            if all_tables:
                return
            published = self.detail()
            missing = [t for t in tables if t not in published]
            if missing:
                with conn.transaction():
                    for t in missing:
                        conn.execute(
                            sql.SQL("ALTER PUBLICATION {} ADD TABLE {}").format(
                                pub, self.table_spec(t)
                            )
                        )
                        logger.info("added %s to publication %s", t, self.name)
        except psycopg.Error as exc:
            listed = ", ".join(f"{quote_ident(t.schema)}.{quote_ident(t.table)}" for t in tables)
            raise SourceError(
                f"postgresql source {self._options.slot_name!r}: could not create or extend "
                f"publication {self.name!r} (publication.create is unset, so Laredo creates "
                f"it when it does not exist): {mask_text(str(exc)).strip()}; fix: have a role "
                f"that owns the tables run CREATE PUBLICATION {quote_ident(self.name)} FOR "
                f"TABLE {listed or '...'}, or give this role CREATE on the database and "
                "ownership of the tables (laredo check lists what is missing)"
            ) from None

    def drop_tables(
        self, tables: Sequence[TableIdentifier], configured: Sequence[TableIdentifier]
    ) -> None:
        """Drop ``tables`` (no longer configured) from the publication when Laredo manages it
        (``create = true``, or a publication Laredo created); otherwise leave it alone."""
        create = self._options.publication.create
        if create is False:
            return
        conn = self._conns.query()
        row = conn.execute(
            "SELECT p.puballtables, obj_description(p.oid, 'pg_publication') "
            "FROM pg_publication p WHERE pubname = %s",
            (self.name,),
        ).fetchone()
        if row is None or row[0]:
            return
        if not create and row[1] != MANAGED_COMMENT:
            return
        published = self.detail()
        pub = sql.Identifier(self.name)
        try:
            with conn.transaction():
                for t in tables:
                    if t in published and t not in configured:
                        conn.execute(
                            sql.SQL("ALTER PUBLICATION {} DROP TABLE {}").format(pub, table_sql(t))
                        )
                        logger.info("dropped %s from publication %s", t, self.name)
        except psycopg.Error as exc:
            logger.warning(
                "could not drop %s from publication %s: %s",
                ", ".join(map(str, tables)),
                self.name,
                mask_text(str(exc)).strip(),
            )

    def _check_table_options(self, configured: Sequence[TableIdentifier]) -> None:
        for key in self._options.publication.tables:
            t = TableIdentifier.parse(key)
            if t not in configured:
                raise ConfigError(
                    f"postgresql source {self._options.slot_name!r}: publication.tables names "
                    f"{key!r}, which is not one of the configured tables "
                    f"({', '.join(map(str, configured))})"
                )

    def sync(
        self, tables: Sequence[TableIdentifier], configured: Sequence[TableIdentifier]
    ) -> None:
        """Create the publication for ``tables`` (the configured ones that exist), or bring an
        existing one in line with the configuration. ``configured``: every configured table."""
        pub_opts = self._options.publication
        conn = self._conns.query()
        pub = sql.Identifier(self.name)
        publish = sql.Literal(", ".join(pub_opts.publish))
        self._check_table_options(configured)
        row = conn.execute(
            "SELECT p.puballtables, p.pubinsert, p.pubupdate, p.pubdelete, p.pubtruncate, "
            "obj_description(p.oid, 'pg_publication') FROM pg_publication p WHERE pubname = %s",
            (self.name,),
        ).fetchone()
        try:
            if row is None:
                self._create(conn, pub, publish, tables)
                return
            all_tables, ins, upd, dele, trunc, comment = row
            current_ops = tuple(
                op for op, on in zip(PUBLISH_OPERATIONS, (ins, upd, dele, trunc), strict=True) if on
            )
            if current_ops != tuple(pub_opts.publish):
                conn.execute(
                    sql.SQL("ALTER PUBLICATION {} SET (publish = {})").format(pub, publish)
                )
                logger.info("publication %s now publishes %s", self.name, pub_opts.publish)
            self._via_root(conn, pub, tables)
            if all_tables:
                return
            managed = comment == MANAGED_COMMENT or pub_opts.drop_unconfigured
            self._update_tables(conn, pub, tables, configured, managed)
        except psycopg.Error as exc:
            raise SourceError(
                f"postgresql source {self._options.slot_name!r}: could not create or update "
                f"publication {self.name!r}: {mask_text(str(exc)).strip()}"
            ) from None

    def _create(
        self,
        conn: psycopg.Connection[Any],
        pub: sql.Identifier,
        publish: sql.Literal,
        tables: Sequence[TableIdentifier],
        note: str = "",
    ) -> None:
        with_ = sql.SQL("publish = {}").format(publish)
        if self._conns.server_version >= _PG13:
            with_ = sql.SQL("{}, publish_via_partition_root = true").format(with_)
        if self._conns.server_version >= _PG18:  # their values arrive like any column's
            with_ = sql.SQL("{}, publish_generated_columns = stored").format(with_)
        if not tables:
            conn.execute(sql.SQL("CREATE PUBLICATION {} WITH ({})").format(pub, with_))
        else:
            conn.execute(
                sql.SQL("CREATE PUBLICATION {} FOR TABLE {} WITH ({})").format(
                    pub, sql.SQL(", ").join(self.table_spec(t) for t in tables), with_
                )
            )
        conn.execute(
            sql.SQL("COMMENT ON PUBLICATION {} IS {}").format(pub, sql.Literal(MANAGED_COMMENT))
        )
        logger.info(
            "created publication %s for %s%s",
            self.name,
            ", ".join(map(str, tables)) or "no table yet",
            note,
        )

    def _via_root(
        self, conn: psycopg.Connection[Any], pub: sql.Identifier, tables: Sequence[TableIdentifier]
    ) -> None:
        """Turn ``publish_via_partition_root`` on when a configured table is partitioned (its
        changes must arrive under its own name, not its partitions')."""
        if self._conns.server_version < _PG13:
            return
        row = conn.execute(
            "SELECT pubviaroot FROM pg_publication WHERE pubname = %s", (self.name,)
        ).fetchone()
        if row is None or row[0]:
            return
        parents = partitioned_tables(conn, tables)
        if parents:
            conn.execute(
                sql.SQL("ALTER PUBLICATION {} SET (publish_via_partition_root = true)").format(pub)
            )
            logger.info(
                "publication %s now publishes via the partition root (partitioned: %s)",
                self.name,
                ", ".join(map(str, parents)),
            )

    def _update_tables(
        self,
        conn: psycopg.Connection[Any],
        pub: sql.Identifier,
        tables: Sequence[TableIdentifier],
        configured: Sequence[TableIdentifier],
        managed: bool,
    ) -> None:
        published = self.detail()
        with conn.transaction():
            for t in tables:
                want = self._options.publication.tables.get(str(t), PublicationTableOptions())
                have = published.get(t)
                if have is None:
                    conn.execute(
                        sql.SQL("ALTER PUBLICATION {} ADD TABLE {}").format(pub, self.table_spec(t))
                    )
                    logger.info("added %s to publication %s", t, self.name)
                elif self._conns.server_version >= _PG15 and not self.same_spec(t, want, have):
                    conn.execute(
                        sql.SQL("ALTER PUBLICATION {} DROP TABLE {}").format(pub, table_sql(t))
                    )
                    conn.execute(
                        sql.SQL("ALTER PUBLICATION {} ADD TABLE {}").format(pub, self.table_spec(t))
                    )
                    logger.info("updated %s in publication %s", t, self.name)
            if managed:
                for t in published:
                    if t not in configured:
                        conn.execute(
                            sql.SQL("ALTER PUBLICATION {} DROP TABLE {}").format(pub, table_sql(t))
                        )
                        logger.info("dropped %s from publication %s", t, self.name)

    def detail(self) -> PublicationDetail:
        """Published tables with (explicit column list or None, row filter or None)."""
        conn = self._conns.query()
        if self._conns.server_version < _PG15:
            rows = conn.execute(
                "SELECT schemaname, tablename FROM pg_publication_tables WHERE pubname = %s",
                (self.name,),
            ).fetchall()
            return {TableIdentifier(s, t): (None, None) for s, t in rows}
        rows = conn.execute(
            """
            SELECT n.nspname, c.relname,
                   (SELECT array_agg(a.attname ORDER BY a.attnum) FROM pg_attribute a
                     WHERE a.attrelid = pr.prrelid AND a.attnum = ANY(pr.prattrs)),
                   pg_get_expr(pr.prqual, pr.prrelid)
            FROM pg_publication p
            JOIN pg_publication_rel pr ON pr.prpubid = p.oid
            JOIN pg_class c ON c.oid = pr.prrelid
            JOIN pg_namespace n ON n.oid = c.relnamespace
            WHERE p.pubname = %s
            """,
            (self.name,),
        ).fetchall()
        return {
            TableIdentifier(s, t): (tuple(cols) if cols else None, qual)
            for s, t, cols, qual in rows
        }

    def same_spec(
        self,
        table: TableIdentifier,
        want: PublicationTableOptions,
        have: tuple[tuple[str, ...] | None, str | None],
    ) -> bool:
        """Whether the published column list and row filter are the configured ones."""
        have_cols, have_filter = have
        if (set(want.columns) if want.columns else None) != (set(have_cols) if have_cols else None):
            return False
        if bool(want.row_filter) != bool(have_filter):
            return False
        if want.row_filter and have_filter:
            return self.deparse_filter(table, want.row_filter) == have_filter
        return True

    def deparse_filter(self, table: TableIdentifier, expr: str) -> str | None:
        """PostgreSQL's own text for a row filter: a publication created and rolled back."""
        conn = self._conns.query()
        name = f"laredo_probe_{os.getpid()}"
        try:
            with conn.transaction(force_rollback=True):
                conn.execute(
                    sql.SQL("CREATE PUBLICATION {} FOR TABLE {} WHERE ({})").format(
                        sql.Identifier(name),
                        table_sql(table),
                        sql.SQL(expr),
                    )
                )
                row = conn.execute(
                    "SELECT pg_get_expr(pr.prqual, pr.prrelid) FROM pg_publication_rel pr "
                    "JOIN pg_publication p ON p.oid = pr.prpubid WHERE p.pubname = %s",
                    (name,),
                ).fetchone()
        except psycopg.Error:
            return None
        return row[0] if row else None

    def check_droppable(self) -> bool:
        """Whether :meth:`drop` would drop something (False: the publication does not exist).
        ``ConfigError``, naming the fix, when Laredo does not manage it: ``publication.create =
        false`` (never touched) or no marker comment (another consumer may read it)."""
        if self._options.publication.create is False:
            raise ConfigError(
                f"publication {self.name!r}: not dropped, publication.create = false means "
                "Laredo never touches it; reset without drop_publication, or drop it by hand"
            )
        row = (
            self._conns.query()
            .execute(
                "SELECT obj_description(p.oid, 'pg_publication') FROM pg_publication p "
                "WHERE pubname = %s",
                (self.name,),
            )
            .fetchone()
        )
        if row is None:
            return False
        if row[0] != MANAGED_COMMENT:
            raise ConfigError(
                f"publication {self.name!r}: not dropped, Laredo did not create it (its comment "
                f"is not {MANAGED_COMMENT!r}) and other consumers may read it; reset without "
                "drop_publication, or drop it by hand"
            )
        return True

    def drop(self) -> None:
        """Drop the publication, only when Laredo manages it (see :meth:`check_droppable`,
        whose ``ConfigError`` it raises before dropping anything)."""
        if not self.check_droppable():
            return
        self._conns.query().execute(
            sql.SQL("DROP PUBLICATION IF EXISTS {}").format(sql.Identifier(self.name))
        )
        logger.info("dropped publication %s", self.name)
