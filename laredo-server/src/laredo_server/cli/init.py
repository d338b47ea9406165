"""``laredo init --connection URL [--tables a,b]``: inspect a PostgreSQL database (read-only)
and write a commented starter configuration for the chosen tables (default: every table),
each served from memory with its primary key as ``lookup_fields``. Tables without a key are
written commented out, with the fix. An existing file is kept unless ``--force``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from .common import CliState, hookimpl, state

__all__ = ["init"]


def _tables(cli: CliState, conn: Any, names: list[str], introspect: Any) -> list[Any]:
    if not names:
        found = introspect.user_tables(conn)
        if not found:
            cli.fail("the database has no tables (outside the system schemas) to sync")
        return list(found)
    out, missing = [], []
    for name in names:
        info = introspect.resolve_table(conn, name)
        if info is None:
            missing.append(name)
        elif not info.is_table:
            cli.fail(f"{name} is not a table (relkind {info.kind!r}); name the tables it reads")
        elif info not in out:
            out.append(info)
    if missing:
        known = ", ".join(str(t.table) for t in introspect.user_tables(conn)) or "none"
        cli.fail(f"no such table: {', '.join(missing)} (tables: {known})")
    return out


def init(
    ctx: typer.Context,
    *,
    connection: Annotated[
        str, typer.Option("--connection", help="PostgreSQL URI or key=value string")
    ],
    tables: Annotated[
        str | None,
        typer.Option("--tables", help="comma-separated tables (schema.table); default: all"),
    ] = None,
    config: Annotated[
        str, typer.Option("--config", "-c", help="file to write ('-': standard output)")
    ] = "laredo.conf",
    force: Annotated[bool, typer.Option("--force", help="overwrite an existing file")] = False,
    slot_mode: Annotated[
        str | None,
        typer.Option(
            "--slot-mode",
            help="ephemeral (the default) or stateful (the default with --delta-uri)",
        ),
    ] = None,
    delta_uri: Annotated[
        str | None,
        typer.Option(
            "--delta-uri",
            help="also archive each table to a Delta table under this path or s3:// URI",
        ),
    ] = None,
    slot_name: Annotated[str, typer.Option("--slot-name", help="replication slot")] = (
        "laredo_slot"
    ),
    source_id: Annotated[str, typer.Option("--source-id", help="the source's name")] = "pg",
) -> None:
    """Write a starter configuration for a PostgreSQL database's tables (read-only)."""
    cli = state(ctx)
    if slot_mode is None:  # a durable target keeps what it got: resume, do not re-baseline
        slot_mode = "stateful" if delta_uri else "ephemeral"
    if slot_mode not in ("ephemeral", "stateful"):
        cli.fail(f"--slot-mode must be ephemeral or stateful, not {slot_mode!r}", code=2)
    target = None if config == "-" else Path(config)
    if target is None and cli.json:
        cli.fail("--output json needs --config FILE (standard output holds the config)", code=2)
    if target is not None and target.exists() and not force:
        cli.fail(f"{target} exists; choose another --config FILE, or --force to overwrite it")
    try:
        from laredo_source_pg import (  # noqa: PLC0415 - lazy: psycopg; laredo init is PostgreSQL only
            introspect,
        )
    except ImportError:
        cli.fail("laredo init needs the PostgreSQL source: pip install laredo-source-pg", code=2)
    from laredo.errors import ConfigError, TransientError  # noqa: PLC0415 - lazy: `import laredo` (~0.3 s)

    from ..starter import render_config  # noqa: PLC0415 - lazy: as above

    clean, had_password = introspect.dsn_without_password(connection)
    try:
        conn = introspect.connect_readonly(connection, cli.options.timeout, "laredo-init")
    except TransientError as exc:
        cli.fail(str(exc))
    names = [n.strip() for n in (tables or "").split(",") if n.strip()]
    with conn:
        chosen = _tables(cli, conn, names, introspect)
    try:
        text, skipped = render_config(
            clean,
            chosen,
            source_id=source_id,
            slot_mode=slot_mode,
            slot_name=slot_name,
            delta_uri=delta_uri,
        )
    except ConfigError as exc:
        cli.fail("no table can be served: " + "; ".join(exc.problems))
    if target is None:
        print(text, end="")
    else:
        target.write_text(text)
    served = [t for t in chosen if t.table not in {s.table for s in skipped}]
    if cli.json:
        cli.emit_json(
            {
                "file": str(target) if target else None,
                "tables": [str(t.table) for t in served],
                "skipped": [
                    {"table": str(s.table), "reason": s.reason, "fix": s.fix} for s in skipped
                ],
                "password_removed": had_password,
            }
        )
        return
    out = cli.err if target is None else cli.out
    where = str(target) if target else "standard output"
    out.print(
        f"[green]wrote {where}[/green]: {len(served)} table(s): "
        f"{', '.join(str(t.table) for t in served)}",
        highlight=False,
    )
    if delta_uri and slot_mode == "ephemeral":
        out.print(
            "  warning: slot_mode = ephemeral with delta targets: every start writes a full "
            "new baseline version; slot_mode = stateful resumes instead",
            highlight=False,
            markup=False,
        )
    for s in skipped:
        out.print(f"  left out {s.table}: {s.reason}", highlight=False, markup=False)
        out.print(f"    fix: {s.fix}", highlight=False, markup=False)
    if had_password:
        out.print(
            "  the password was not written: use PGPASSWORD, ~/.pgpass, or "
            f"LAREDO_SOURCES__{source_id.upper().replace('-', '_')}__CONNECTION",
            highlight=False,
            markup=False,
        )
    name = where if target else "FILE"
    out.print(
        f"next: laredo check --config {name}   then: laredo serve --config {name}",
        highlight=False,
        markup=False,
    )


@hookimpl
def laredo_register_cli_commands(app: typer.Typer) -> None:
    app.command("init")(init)
