"""Operating a server: ``reload``, ``pause``, ``resume``, ``reset-source``, ``drain`` and
``verify``, ``backfill`` (admin RPCs: they need ``--token`` when the server has one)."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from .common import CliState, hookimpl, split_table, state, to_dict
from .status import pipelines_table


def _answer(cli: CliState, resp: Any, ok: bool = True) -> None:
    """Print an admin RPC's answer (its JSON with ``-o json``, else its message); exit 1 when
    not ``ok``."""
    if cli.json:
        cli.emit_json(to_dict(resp))
    else:
        cli.out.print(resp.message, highlight=False)
    if not ok:
        raise typer.Exit(1)


def reload(
    ctx: typer.Context,
    table: Annotated[str | None, typer.Argument(help="schema.table (omit with --all)")] = None,
    source_: Annotated[str | None, typer.Option("--source")] = None,
    all_: Annotated[bool, typer.Option("--all", help="every table (of --source)")] = False,
) -> None:
    """Re-baseline a table (or all): targets are emptied and reloaded; no change is lost."""
    cli = state(ctx)
    if all_ == bool(table):
        cli.fail("give a table or --all", code=2)
    if all_:
        resp = cli.oam("ReloadAll", timeout=None, source_id=source_ or "")
    else:
        s, t = split_table(table or "")
        resp = cli.oam("ReloadTable", timeout=None, source_id=source_ or "", schema=s, table=t)
    _answer(cli, resp)


def pause(ctx: typer.Context, source_id: Annotated[str, typer.Argument()]) -> None:
    """Pause a source: changes keep buffering and are applied after resume."""
    cli = state(ctx)
    resp = cli.oam("PauseSync", source_id=source_id)
    if cli.json:
        return cli.emit_json(to_dict(resp))
    pipelines_table(cli, list(resp.pipelines))
    return None


def resume(ctx: typer.Context, source_id: Annotated[str, typer.Argument()]) -> None:
    """Resume a paused source."""
    cli = state(ctx)
    resp = cli.oam("ResumeSync", source_id=source_id)
    if cli.json:
        return cli.emit_json(to_dict(resp))
    pipelines_table(cli, list(resp.pipelines))
    return None


def reset_source(
    ctx: typer.Context,
    source_id: Annotated[str, typer.Argument()],
    drop_publication: Annotated[bool, typer.Option("--drop-publication")] = False,
    yes: Annotated[bool, typer.Option("--yes", "--confirm", "-y", help="do not ask")] = False,
) -> None:
    """Drop and recreate a source's replication slot (the next start re-baselines)."""
    cli = state(ctx)
    if not yes and not typer.confirm(
        f"Reset source {source_id!r}"
        + (" and drop its publication" if drop_publication else "")
        + "?"
    ):
        cli.fail("aborted", code=1)
    resp = cli.oam(
        "ResetSource", source_id=source_id, confirm=True, drop_publication=drop_publication
    )
    _answer(cli, resp)


def drain(
    ctx: typer.Context,
    table: Annotated[
        str | None, typer.Argument(help="schema.table (omit: every fan-out table)")
    ] = None,
    deadline: Annotated[
        str,
        typer.Option(help="time clients get to hand off, e.g. 30s (0: the server's default)"),
    ] = "0",
) -> None:
    """Hand the fan-out clients off to another server: they get GoAway with the deadline; the
    table refuses new clients until the server restarts. Exit 1 when nothing was drained."""
    from laredo.units import parse_duration  # noqa: PLC0415 - lazy: `import laredo` costs ~0.3 s (pydantic)

    cli = state(ctx)
    try:
        seconds = parse_duration(deadline)
    except ValueError as exc:
        cli.fail(f"--deadline: {exc}", code=2)
    s, t = split_table(table) if table else ("", "")
    resp = cli.oam(
        "DrainReplication", schema=s, table=t, drain_deadline_seconds=round(seconds or 0)
    )
    _answer(cli, resp, ok=resp.accepted)


def verify(
    ctx: typer.Context,
    table: Annotated[str, typer.Argument(help="schema.table")],
    pipeline: Annotated[
        str | None, typer.Option("--pipeline", help="pipeline id (a table with several)")
    ] = None,
    max_keys: Annotated[int, typer.Option(help="keys listed per kind of difference")] = 100,
    wait: Annotated[int, typer.Option(help="seconds the server may take")] = 300,
) -> None:
    """Compare a table's target with PostgreSQL (the source) key by key and row by row,
    exactly at one source position, while it streams. Exit 1 when they differ, listing the
    keys missing from the target, only in the target, and whose rows differ."""
    cli = state(ctx)
    s, t = split_table(table)
    resp = cli.oam(
        "VerifyTable",
        timeout=wait + 30,
        schema=s,
        table=t,
        pipeline_id=pipeline or "",
        max_keys=max_keys,
        timeout_seconds=wait,
    )
    _answer(cli, resp, ok=resp.match)


def backfill(
    ctx: typer.Context,
    table: Annotated[str, typer.Argument(help="schema.table")],
    *,
    where: Annotated[
        str | None, typer.Option("--where", help="SQL condition: only the rows matching it")
    ] = None,
    source_: Annotated[str | None, typer.Option("--source")] = None,
    chunk_rows: Annotated[int, typer.Option(help="rows per chunk (0: the source's)")] = 0,
    wait: Annotated[int, typer.Option(help="seconds to wait for the end (0: don't)")] = 0,
) -> None:
    """Re-sync a table (or the rows matching --where) in key-range chunks while every table
    keeps streaming: rows are upserted; without --where, rows the source lacks are removed. Exit 1
    when the backfill failed."""
    cli = state(ctx)
    s, t = split_table(table)
    resp = cli.oam(
        "BackfillTable",
        timeout=wait + 30,
        source_id=source_ or "",
        schema=s,
        table=t,
        where=where or "",
        chunk_rows=chunk_rows,
        wait_seconds=wait,
    )
    _answer(cli, resp, ok=not resp.error)


@hookimpl
def laredo_register_cli_commands(app: typer.Typer) -> None:
    app.command()(reload)
    app.command()(pause)
    app.command()(resume)
    app.command("reset-source")(reset_source)
    app.command()(drain)
    app.command()(verify)
    app.command()(backfill)
