"""The starter configuration ``laredo init`` writes: commented HOCON for a PostgreSQL database's
tables, each with an ``indexed-memory`` target whose ``lookup_fields`` are the table's key, and
with ``delta_uri`` a ``delta`` target (a Delta table per table under it) too.

Tables whose rows cannot be identified (no primary key or replica identity index) are written
commented out, with the fix. The output always validates (``laredo config validate``) when at
least one table has a key; :func:`render_config` refuses otherwise.
"""

from __future__ import annotations

import json
import re
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from laredo.errors import ConfigError
from laredo.types import TableIdentifier

__all__ = ["Skipped", "StarterTable", "hocon_string", "render_config"]

_BARE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_RESERVED = frozenset({"true", "false", "null", "yes", "no", "on", "off", "include"})


class StarterTable(Protocol):
    """What the starter needs to know of a table (``laredo_source_pg.introspect.TableSummary``
    has it)."""

    @property
    def table(self) -> TableIdentifier: ...

    @property
    def key(self) -> tuple[str, ...]: ...

    @property
    def estimated_rows(self) -> int: ...

    def identity_problem(self) -> str | None: ...


@dataclass(frozen=True, slots=True)
class Skipped:
    """A table written commented out: why, and the fix."""

    table: TableIdentifier
    reason: str
    fix: str


def hocon_string(value: str) -> str:
    """``value`` as a HOCON string: bare when it is a plain identifier, else quoted."""
    if _BARE.fullmatch(value) and value.lower() not in _RESERVED:
        return value
    return json.dumps(value)


def _sql_name(t: TableIdentifier) -> str:
    def q(s: str) -> str:
        return s if _BARE.fullmatch(s) and s == s.lower() else '"' + s.replace('"', '""') + '"'

    return f"{q(t.schema)}.{q(t.table)}"


def _skip(t: StarterTable) -> Skipped | None:
    why = t.identity_problem()
    name = _sql_name(t.table)
    if why is not None:
        return Skipped(
            t.table,
            f"{why}: its updates and deletes cannot be replicated",
            f"ALTER TABLE {name} ADD PRIMARY KEY (...); (or ALTER TABLE {name} REPLICA "
            "IDENTITY FULL, and set lookup_fields to columns that identify a row)",
        )
    if not t.key:
        return Skipped(
            t.table,
            "no primary key: the target has no columns to identify a row",
            f"ALTER TABLE {name} ADD PRIMARY KEY (...); or set lookup_fields to columns that "
            "identify a row",
        )
    return None


def _comment(text: str, prefix: str = "  # ") -> list[str]:
    return textwrap.wrap(
        text,
        width=96,
        initial_indent=prefix,
        subsequent_indent=prefix + "  ",
        break_long_words=False,
    )


def _table_block(
    source: str, t: StarterTable, lookup: Sequence[str], prefix: str, delta_uri: str | None
) -> list[str]:
    fields = ", ".join(hocon_string(f) for f in lookup) if lookup else "..."
    lines = [
        "{",
        f"  source = {hocon_string(source)}, schema = {hocon_string(t.table.schema)}, "
        f"table = {hocon_string(t.table.table)}",
        "  targets = [",
        "    # the rows in memory, served by `laredo query get|lookup|list|count`",
        f"    {{ type = indexed-memory, lookup_fields = [{fields}] }}",
    ]
    if delta_uri is not None:
        uri = f"{delta_uri.rstrip('/')}/{t.table.schema}.{t.table.table}"
        lines += [
            "    # a Delta table with the table's history (laredo archive history|reconstruct)",
            f"    {{ type = delta, uri = {json.dumps(uri)} }}",
        ]
    lines += [
        "  ]",
        "}",
    ]
    return [f"{prefix}{line}" for line in lines]


def render_config(
    connection: str,
    tables: Sequence[StarterTable],
    *,
    source_id: str = "pg",
    slot_mode: str = "ephemeral",
    slot_name: str = "laredo_slot",
    shown_connection: str | None = None,
    delta_uri: str | None = None,
) -> tuple[str, list[Skipped]]:
    """The configuration text and the tables written commented out. ``connection`` is
    written as is (strip the password first); ``shown_connection`` names the database in the
    header (default: ``connection``); ``delta_uri``: a ``delta`` target per table under it
    (pass ``slot_mode="stateful"`` with it: a Delta table keeps what it received, an
    ephemeral slot would write a full new version at every start). ``ConfigError`` when no
    table can be served."""
    skipped = {t.table: s for t in tables if (s := _skip(t)) is not None}
    if len(skipped) == len(tables):
        raise ConfigError(
            [f"{s.table}: {s.reason}; fix: {s.fix}" for s in skipped.values()]
            or ["no table to configure"]
        )
    sid = hocon_string(source_id)
    out = [
        f"# Laredo configuration for {shown_connection or connection}, written by `laredo init`.",
        "#",
        "#   laredo check --config FILE    # what the database still needs, with the fixes",
        "#   laredo serve --config FILE    # run it; then, in another terminal:",
        "#   laredo status                 # and: laredo query count SCHEMA.TABLE",
        "#",
        "# `laredo config validate FILE` checks this file; every key is described in the",
        "# laredo-server README.",
        "",
        "sources {",
        f"  {sid} {{",
        "    type = postgresql",
        "    # A libpq URI or key=value string. Keep passwords out of this file: libpq reads",
        "    # PGPASSWORD and ~/.pgpass, or put the whole string in the environment variable",
        f"    # LAREDO_SOURCES__{source_id.upper().replace('-', '_')}__CONNECTION.",
        f"    connection = {json.dumps(connection)}",
        "",
        '    # slot_mode: "ephemeral" reads through a temporary replication slot and takes a',
        "    # full baseline (a consistent copy of the tables) on every start; nothing stays on",
        '    # the server when Laredo stops. "stateful" keeps a named slot, so a restart resumes',
        "    # where it stopped, but PostgreSQL keeps WAL for the slot while Laredo is down (set",
        "    # max_slot_wal_keep_size so that it cannot fill the disk).",
        f"    slot_mode = {hocon_string(slot_mode)}",
        "",
        "    # slot_name: the replication slot, unique per running source on this server",
        "    # (lower-case letters, digits and _, at most 63 characters).",
        f"    slot_name = {hocon_string(slot_name)}",
        "",
        f"    # publication: the tables PostgreSQL streams, named {slot_name}_pub unless",
        "    # publication.name is set. With `create` unset, laredo serve creates it for the",
        "    # tables below when it does not exist (the role needs CREATE on the database and",
        "    # must own the tables). create = true: Laredo also keeps its tables, row filters",
        "    # and column lists in sync with this file. create = false: you manage it yourself",
        "    # (CREATE PUBLICATION ... FOR TABLE ...).",
        f"    # publication {{ name = {slot_name}_pub, create = true }}",
        "  }",
        "}",
        "",
        "tables = [",
    ]
    for t in tables:  # the served tables first, then those left out
        if t.table not in skipped:
            rows = f", ~{t.estimated_rows:,} rows" if t.estimated_rows else ""
            out.append(f"  # {t.table}: key ({', '.join(t.key)}){rows}")
            out += _table_block(source_id, t, t.key, "  ", delta_uri)
    for t in tables:
        skip = skipped.get(t.table)
        if skip is not None:
            out += _comment(f"{t.table} is left out: {skip.reason}.")
            out += _comment(f"Fix: {skip.fix}")
            out.append("  # Then uncomment it and set lookup_fields:")
            out += _table_block(source_id, t, (), "  # ", delta_uri)
    out += [
        "]",
        "",
        "# The gRPC OAM and Query services (laredo status, laredo query, ...) and the HTTP",
        "# health, metrics and JSON endpoints. These are the defaults, on loopback only.",
        '# grpc { port = 4001, host = "127.0.0.1" }     # grpc.port = 0 turns gRPC off',
        '# health { port = 8080, host = "127.0.0.1" }',
        "",
    ]
    return "\n".join(out), list(skipped.values())
