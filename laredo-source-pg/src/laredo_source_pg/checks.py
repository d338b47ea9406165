"""The preflight check of the ``postgresql`` source (``laredo check``; ``laredo serve`` at
startup): everything the database side needs, every problem at once, each with its fix.

It connects with the configured connection (``connect_timeout`` respected) in a read-only
session and only reads catalogs and settings: it creates nothing (no slot, no publication).
Codes: ``CONNECTION_FAILED``; ``WAL_LEVEL``, ``MAX_REPLICATION_SLOTS``, ``MAX_WAL_SENDERS``,
``WAL_RETENTION_UNLIMITED`` (stateful only), ``PUBLICATION_FILTERS_UNSUPPORTED``;
``MISSING_REPLICATION_PRIVILEGE``; ``PUBLICATION_NOT_FOUND``, ``PUBLICATION_CREATE_PRIVILEGE``,
``PUBLICATION_ALTER_PRIVILEGE``, ``TABLE_NOT_IN_PUBLICATION``; ``TABLE_NOT_FOUND``,
``NOT_A_TABLE``, ``MISSING_SELECT_PRIVILEGE``, ``REPLICA_IDENTITY``, ``KEY_REQUIRED`` (a target
that stores rows by key on a table without one), ``COLUMN_NOT_FOUND``, ``COLUMN_NOT_PUBLISHED``;
``CHUNKED_WITHOUT_KEY`` (a warning: ``baseline.mode = chunked`` on a table without a key);
``SLOT_CONFLICT``, ``SLOT_NAME_IN_USE``, ``SLOT_INVALIDATED``, ``SLOT_ACTIVE``; and infos
(``SERVER``, ``PUBLICATION_WILL_BE_CREATED``, ``SLOT_EXISTS``, ...).
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import psycopg
from laredo.errors import TransientError
from laredo.preflight import CheckRequest, Finding, TableUse, missing_field_findings
from laredo.types import TableIdentifier

from .catalog import quote_ident, quote_literal, resolve_conninfo
from .checks_ha import ha_findings
from .credentials import build_provider
from .dsn import mask_text
from .introspect import TableSummary, connect_readonly, describe_table, user_tables
from .options import PUBLISH_OPERATIONS, PostgresSourceOptions
from .partitions import memberships, publication_problem
from .publication import MANAGED_COMMENT

__all__ = ["check_source"]

_PG15 = 150000


def _q(t: TableIdentifier) -> str:
    return f"{quote_ident(t.schema)}.{quote_ident(t.table)}"


@dataclass
class _Server:
    role: str
    database: str
    version: str
    version_num: int
    wal_level: str
    max_slots: int
    max_senders: int
    wal_keep: str | None
    superuser: bool
    replication: bool
    create_on_db: bool
    slots_used: int
    senders_used: int


@dataclass
class _Check:
    """One run of the check on one open connection."""

    conn: psycopg.Connection[Any]
    opts: PostgresSourceOptions
    request: CheckRequest
    out: list[Finding] = field(default_factory=list)
    role: str = ""

    @property
    def where(self) -> str:
        return self.request.where

    def add(self, finding: Finding) -> None:
        self.out.append(finding)

    # -- settings and role ---------------------------------------------------------------
    def server(self) -> _Server:
        row = self.conn.execute(
            """
            SELECT current_user, current_database(), current_setting('server_version'),
                   current_setting('server_version_num')::int, current_setting('wal_level'),
                   current_setting('max_replication_slots')::int,
                   current_setting('max_wal_senders')::int,
                   current_setting('max_slot_wal_keep_size', true),
                   r.rolsuper, r.rolreplication,
                   has_database_privilege(current_database(), 'CREATE'),
                   (SELECT count(*) FROM pg_replication_slots)::int,
                   (SELECT count(*) FROM pg_stat_replication)::int
            FROM pg_roles r WHERE r.rolname = current_user
            """
        ).fetchone()
        assert row is not None
        return _Server(*row)

    def settings(self, s: _Server) -> None:
        opts = self.opts
        self.add(
            Finding.info(
                "SERVER",
                f"PostgreSQL {s.version}, database {s.database!r}, role {s.role!r}",
            )
        )
        restart = "then restart PostgreSQL"
        if s.wal_level != "logical":
            self.add(
                Finding.error(
                    "WAL_LEVEL",
                    f"wal_level is {s.wal_level!r}; logical replication needs 'logical'",
                    f"ALTER SYSTEM SET wal_level = logical; {restart} (Amazon RDS/Aurora: "
                    "rds.logical_replication = 1 in the parameter group; Cloud SQL: the "
                    "cloudsql.logical_decoding flag)",
                )
            )
        slot = self.slot_row()
        needed = 0 if (slot is not None and opts.stateful) else 1
        free = s.max_slots - s.slots_used
        if free < needed:
            self.add(
                Finding.error(
                    "MAX_REPLICATION_SLOTS",
                    f"max_replication_slots is {s.max_slots} and {s.slots_used} slot(s) exist: "
                    f"none is free for slot {opts.slot_name!r}",
                    f"ALTER SYSTEM SET max_replication_slots = {s.slots_used + 4}; {restart} "
                    "(or drop unused slots: SELECT slot_name, active FROM pg_replication_slots)",
                )
            )
        if s.max_senders - s.senders_used < 1:
            self.add(
                Finding.error(
                    "MAX_WAL_SENDERS",
                    f"max_wal_senders is {s.max_senders} and {s.senders_used} are in use: "
                    "none is free for the replication connection",
                    f"ALTER SYSTEM SET max_wal_senders = {s.senders_used + 4}; {restart}",
                )
            )
        if opts.stateful and s.wal_keep is not None and s.wal_keep.strip() == "-1":
            after = (
                "a slot that falls further behind is invalidated and Laredo re-baselines"
                if opts.on_slot_invalidated == "rebaseline"
                else "a slot that falls further behind is invalidated (reported as "
                "SLOT_INVALIDATED; on_slot_invalidated = fail)"
            )
            self.add(
                Finding.warning(
                    "WAL_RETENTION_UNLIMITED",
                    f"max_slot_wal_keep_size is -1 (unlimited): while Laredo is stopped or "
                    f"behind, slot {opts.slot_name!r} keeps every WAL segment and the disk "
                    "can fill",
                    "ALTER SYSTEM SET max_slot_wal_keep_size = '10GB'; SELECT pg_reload_conf(); "
                    f"(choose a size well below the free disk; {after})",
                )
            )
        filtered = [k for k, v in opts.publication.tables.items() if v.row_filter or v.columns]
        if filtered and s.version_num < _PG15:
            self.add(
                Finding.error(
                    "PUBLICATION_FILTERS_UNSUPPORTED",
                    f"row filters and column lists need PostgreSQL 15+; this is {s.version} "
                    f"({', '.join(filtered)})",
                    "remove row_filter/columns from publication.tables, or upgrade PostgreSQL",
                    where=f"{self.where}.publication.tables",
                )
            )
        if not (s.superuser or s.replication):
            self.add(
                Finding.error(
                    "MISSING_REPLICATION_PRIVILEGE",
                    f"role {s.role!r} lacks the REPLICATION attribute, so it cannot open a "
                    "replication connection",
                    f"ALTER ROLE {quote_ident(s.role)} REPLICATION; (as a superuser; Amazon "
                    f"RDS: GRANT rds_replication TO {quote_ident(s.role)};)",
                )
            )

    # -- tables ----------------------------------------------------------------------------
    def tables(self) -> dict[TableIdentifier, TableSummary]:
        found: dict[TableIdentifier, TableSummary] = {}
        for use in self.request.tables:
            info = describe_table(self.conn, use.table)
            if info is None:
                self.missing_table(use)
                continue
            found[use.table] = info
            self.table(use, info)
        return found

    def missing_table(self, use: TableUse) -> None:
        names = [t.table.table for t in user_tables(self.conn, use.table.schema)]
        close = difflib.get_close_matches(use.table.table, names, n=3)
        hint = (
            f" (did you mean {', '.join(f'{use.table.schema}.{n}' for n in close)}?)"
            if close
            else ""
        )
        self.add(
            Finding.error(
                "TABLE_NOT_FOUND",
                f"table {use.table} does not exist, or is not visible to this role{hint}",
                f"correct schema/table at {use.where}, or create the table",
                where=use.where,
                table=use.table,
            )
        )

    def table(self, use: TableUse, info: TableSummary) -> None:
        t = use.table
        if not info.is_table:
            self.add(
                Finding.error(
                    "NOT_A_TABLE",
                    f"{t} is not a table (relkind {info.kind!r}: views and foreign tables "
                    "cannot be replicated)",
                    f"configure the table(s) it reads from at {use.where} instead",
                    where=use.where,
                    table=t,
                )
            )
            return
        if not info.can_select:
            self.add(
                Finding.error(
                    "MISSING_SELECT_PRIVILEGE",
                    f"role {self.role!r} cannot SELECT from {t} (the baseline reads it)",
                    f"GRANT SELECT ON {_q(t)} TO {quote_ident(self.role)};",
                    where=use.where,
                    table=t,
                )
            )
        publish = set(self.opts.publication.publish)
        why = info.identity_problem()
        if why and publish & {"update", "delete"}:
            self.add(
                Finding.error(
                    "REPLICA_IDENTITY",
                    f"{t} has {why}: its updates and deletes cannot be replicated (and fail on "
                    "PostgreSQL once the table is published)",
                    f"ALTER TABLE {_q(t)} ADD PRIMARY KEY (...); or ALTER TABLE {_q(t)} "
                    "REPLICA IDENTITY FULL; (whole old rows in the WAL)",
                    where=use.where,
                    table=t,
                )
            )
        for where, fields in use.keyed:
            if not fields and not info.key:
                self.add(
                    Finding.error(
                        "KEY_REQUIRED",
                        f"{t} has no primary key (nor replica identity index), and the target at "
                        f"{where} stores its rows by key",
                        f"set key_fields at {where} to columns that identify a row (with "
                        f"ALTER TABLE {_q(t)} REPLICA IDENTITY FULL;), or ALTER TABLE {_q(t)} "
                        "ADD PRIMARY KEY (...);",
                        where=where,
                        table=t,
                    )
                )
        self.chunked_key(use, info)
        cols = set(info.columns)
        listed = self.opts.publication.tables.get(str(t))
        published = set(listed.columns) if listed is not None and listed.columns else None
        for u in use.fields:
            if u.field in cols and published is not None and u.field not in published:
                self.add(
                    Finding.error(
                        "COLUMN_NOT_PUBLISHED",
                        f"field {u.field!r} of {t} is not in the publication's column list "
                        f"({', '.join(sorted(published))}), so rows arrive without it",
                        f'add {u.field!r} to {self.where}.publication.tables."{t}".columns',
                        where=u.where,
                        table=t,
                    )
                )
        self.out.extend(missing_field_findings(use, cols))

    def chunked_key(self, use: TableUse, info: TableSummary) -> None:
        """A chunked baseline needs a key to page by (primary key or replica identity index);
        a table without one keeps the snapshot baseline."""
        table_mode = use.baseline_mode
        mode = table_mode or self.opts.baseline.mode
        if mode != "chunked" or info.key:
            return
        t = use.table
        key = f"{use.where}.baseline.mode" if table_mode else f"{self.where}.baseline.mode"
        self.add(
            Finding.warning(
                "CHUNKED_WITHOUT_KEY",
                f"{t} has no primary key nor replica identity index: {key} = chunked cannot "
                "page it by key, so its baseline is read in one snapshot",
                f"ALTER TABLE {_q(t)} ADD PRIMARY KEY (...); or ALTER TABLE {_q(t)} REPLICA "
                f"IDENTITY USING INDEX <unique index on NOT NULL columns>; or set "
                f"{use.where}.baseline.mode = snapshot",
                where=key,
                table=t,
            )
        )

    # -- publication -----------------------------------------------------------------------
    def publication(self, s: _Server, tables: dict[TableIdentifier, TableSummary]) -> None:
        name = self.opts.publication_name
        create = self.opts.publication.create
        where = f"{self.where}.publication"
        existing = [t for t, i in tables.items() if i.is_table]
        listed = ", ".join(_q(t) for t in existing) or "..."
        plain = ", ".join(map(str, existing)) or "no table yet"
        row = self.conn.execute(
            "SELECT p.puballtables, p.pubinsert, p.pubupdate, p.pubdelete, p.pubtruncate, "
            "obj_description(p.oid, 'pg_publication'), pg_has_role(p.pubowner, 'USAGE') "
            "FROM pg_publication p WHERE p.pubname = %s",
            (name,),
        ).fetchone()
        not_owned = [t for t in existing if not tables[t].owned]
        if row is None:
            if create is False:
                self.add(
                    Finding.error(
                        "PUBLICATION_NOT_FOUND",
                        f"publication {name!r} does not exist, and publication.create = false "
                        "forbids Laredo to create it",
                        f"CREATE PUBLICATION {quote_ident(name)} FOR TABLE {listed}; (as an "
                        "owner of the tables), or remove publication.create = false so that "
                        "laredo serve creates it",
                        where=where,
                    )
                )
                return
            self.add(
                Finding.info(
                    "PUBLICATION_WILL_BE_CREATED",
                    f"publication {name!r} does not exist: laredo serve will create it for {plain}",
                    where=where,
                )
            )
            if not s.superuser and (not s.create_on_db or not_owned):
                self.privilege_finding("PUBLICATION_CREATE_PRIVILEGE", "create", s, not_owned)
            return
        all_tables, ins, upd, dele, trunc, comment, pub_owned = row
        if all_tables:
            return
        members = memberships(self.conn, name, existing)
        missing = [t for t in existing if members[t].kind == "missing"]
        separate = [t for t in existing if members[t].kind == "via_partitions"]
        ops = tuple(
            op for op, on in zip(PUBLISH_OPERATIONS, (ins, upd, dele, trunc), strict=True) if on
        )
        managed = create is True or (create is None and comment == MANAGED_COMMENT)
        changes = (
            bool(missing)
            or bool(separate)
            or (create is True and ops != self.opts.publication.publish)
        )
        fixable = {"missing", "via_partitions"} if managed else set()
        if managed and changes:
            if not s.superuser and (not pub_owned or [t for t in missing if t in not_owned]):
                owners = [t for t in missing if t in not_owned]
                self.privilege_finding(
                    "PUBLICATION_ALTER_PRIVILEGE", "alter", s, owners, pub_owned=bool(pub_owned)
                )
            else:
                if missing:
                    self.add(
                        Finding.info(
                            "PUBLICATION_WILL_BE_UPDATED",
                            f"laredo serve will add {', '.join(map(str, missing))} to "
                            f"publication {name!r}",
                            where=where,
                        )
                    )
                if separate:
                    self.add(
                        Finding.info(
                            "PUBLICATION_WILL_BE_UPDATED",
                            f"laredo serve will set publish_via_partition_root = true on "
                            f"publication {name!r} (partitioned: {', '.join(map(str, separate))})",
                            where=where,
                        )
                    )
        for t in existing:
            if members[t].kind in fixable:
                continue
            problem = publication_problem(t, members[t], name, create)
            if problem is not None:
                self.add(
                    Finding.error(problem.code, problem.message, problem.fix, where=where, table=t)
                )

    def privilege_finding(
        self,
        code: str,
        verb: str,
        s: _Server,
        not_owned: Sequence[TableIdentifier],
        *,
        pub_owned: bool = True,
    ) -> None:
        name = self.opts.publication_name
        role = quote_ident(s.role)
        lacks, fixes = [], []
        if verb == "create" and not s.create_on_db:
            lacks.append(f"CREATE on database {s.database!r}")
            fixes.append(f"GRANT CREATE ON DATABASE {quote_ident(s.database)} TO {role};")
        if not pub_owned:
            lacks.append(f"ownership of publication {name!r}")
            fixes.append(f"ALTER PUBLICATION {quote_ident(name)} OWNER TO {role};")
        if not_owned:
            lacks.append(f"ownership of {', '.join(map(str, not_owned))}")
            fixes += [f"ALTER TABLE {_q(t)} OWNER TO {role};" for t in not_owned]
        manual = (
            f"CREATE PUBLICATION {quote_ident(name)} FOR TABLE ..."
            if verb == "create"
            else f"ALTER PUBLICATION {quote_ident(name)} ADD TABLE ..."
        )
        self.add(
            Finding.error(
                code,
                f"laredo serve must {verb} publication {name!r} but role {s.role!r} lacks "
                f"{' and '.join(lacks)}",
                f"{' '.join(fixes)} Or have an owner of the tables run {manual}; and set "
                "publication.create = false",
                where=f"{self.where}.publication",
            )
        )

    # -- slot ------------------------------------------------------------------------------
    def slot_row(self) -> tuple[Any, ...] | None:
        return self.conn.execute(
            """
            SELECT s.slot_type, s.plugin, s.database, s.temporary, s.active, s.active_pid,
                   s.wal_status, a.application_name, a.client_addr::text,
                   s.confirmed_flush_lsn::text
            FROM pg_replication_slots s LEFT JOIN pg_stat_activity a ON a.pid = s.active_pid
            WHERE s.slot_name = %s
            """,
            (self.opts.slot_name,),
        ).fetchone()

    def slot(self, s: _Server) -> None:
        opts = self.opts
        name = opts.slot_name
        row = self.slot_row()
        drop = f"SELECT pg_drop_replication_slot({quote_literal(name)});"
        if row is None:
            if opts.stateful:
                self.add(
                    Finding.info(
                        "SLOT_WILL_BE_CREATED",
                        f"slot {name!r} does not exist: laredo serve creates it and baselines",
                    )
                )
            return
        kind, plugin, database, temporary, active, pid, wal_status, app, addr, lsn = row
        other = None
        if kind != "logical":
            other = f"a {kind} slot"
        elif plugin != "pgoutput":
            other = f"a logical slot of output plugin {plugin!r}"
        elif database != s.database:
            other = f"a slot of database {database!r}"
        if other is not None:
            self.add(
                Finding.error(
                    "SLOT_CONFLICT",
                    f"replication slot {name!r} exists but is {other}",
                    f"choose another slot_name at {self.where}.slot_name, or drop it if "
                    f"unused: {drop}",
                    where=f"{self.where}.slot_name",
                )
            )
            return
        about = [f"application_name {app!r}" if app else "", f"client {addr}" if addr else ""]
        who = f"process {pid}" + (f" ({', '.join(a for a in about if a)})" if any(about) else "")
        if active and app == f"laredo:{name}":  # what a Laredo source of this slot is
            self.add(
                Finding.info(
                    "SLOT_ACTIVE",
                    f"slot {name!r} is streaming to a running Laredo server ({who}), "
                    "presumably the one this configuration is for: nothing to fix"
                    + (
                        " (a second laredo serve with it waits for the lease)"
                        if opts.stateful and opts.lease
                        else ""
                    ),
                )
            )
            return
        if not opts.stateful:
            self.add(
                Finding.error(
                    "SLOT_NAME_IN_USE",
                    f"a replication slot named {name!r} already exists"
                    + (f", in use by {who}" if active else ""),
                    f"choose another slot_name at {self.where}.slot_name (ephemeral mode "
                    "creates a temporary slot of that name)"
                    + ("" if active or temporary else f", or drop the unused slot: {drop}"),
                    where=f"{self.where}.slot_name",
                )
            )
            return
        if wal_status == "lost":
            if opts.on_slot_invalidated == "fail":
                self.add(
                    Finding.error(
                        "SLOT_INVALIDATED",
                        f"replication slot {name!r} was invalidated: the WAL it needed is gone "
                        "(max_slot_wal_keep_size)",
                        "laredo reset-source (drops the slot; the next start baselines), or "
                        f"{drop} or set on_slot_invalidated = rebaseline",
                    )
                )
            else:
                self.add(
                    Finding.warning(
                        "SLOT_INVALIDATED",
                        f"replication slot {name!r} was invalidated: the WAL it needed is "
                        "gone; laredo serve will drop and re-create it and re-baseline",
                        "none needed; to keep it from happening again, raise "
                        "max_slot_wal_keep_size or keep Laredo running",
                    )
                )
        if active:
            if opts.lease and app and str(app).startswith("laredo"):
                self.add(
                    Finding.info(
                        "SLOT_ACTIVE",
                        f"slot {name!r} is in use by another Laredo instance ({who}); this "
                        "one waits for the lease and takes over when it stops",
                    )
                )
            else:
                self.add(
                    Finding.error(
                        "SLOT_ACTIVE",
                        f"replication slot {name!r} is active in another {who}",
                        "stop that consumer, or choose another slot_name; to end it now: "
                        f"SELECT pg_terminate_backend({pid});",
                        where=f"{self.where}.slot_name",
                    )
                )
            return
        if wal_status != "lost":
            self.add(
                Finding.info(
                    "SLOT_EXISTS",
                    f"slot {name!r} exists (confirmed up to {lsn}): laredo serve resumes from it",
                )
            )

    def run(self) -> list[Finding]:
        s = self.server()
        self.role = s.role
        self.settings(s)
        tables = self.tables()
        self.publication(s, tables)
        self.slot(s)
        return self.out


def check_source(request: CheckRequest) -> list[Finding]:
    """The findings of the ``postgresql`` source at ``request.where`` (see the module doc)."""
    opts = request.options
    if not isinstance(opts, PostgresSourceOptions):
        opts = PostgresSourceOptions.model_validate(opts)
    try:
        provider = build_provider(opts.connection_provider)
        dsn = resolve_conninfo(opts.connection, provider, f"{request.where}.connection_provider")
        conn = connect_readonly(dsn, opts.connect_timeout)
    except TransientError as exc:
        return [
            Finding.error(
                "CONNECTION_FAILED",
                f"cannot connect: {exc}",
                f"check host, port, database and user in {request.where}.connection, that "
                "PostgreSQL is running and that pg_hba.conf admits this client",
                where=f"{request.where}.connection",
            )
        ]
    try:
        with conn:
            found = _Check(conn, opts, request).run()
            return found + ha_findings(conn, opts, request.where, dsn)
    except psycopg.Error as exc:
        return [
            Finding.error(
                "CHECK_QUERY_FAILED",
                f"a catalog query failed: {mask_text(str(exc)).strip()}",
                "run laredo check again; if it persists, report it with the PostgreSQL version",
            )
        ]
