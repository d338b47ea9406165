"""``laredo dead-letters list|replay|purge``: changes that failed after every retry."""

from __future__ import annotations

from typing import Annotated

import typer

from .common import hookimpl, state, to_dict


def dl_list(
    ctx: typer.Context,
    pipeline: Annotated[str | None, typer.Argument()] = None,
    limit: Annotated[int, typer.Option("--limit")] = 100,
) -> None:
    """Dead letters of a pipeline (or of all)."""
    cli = state(ctx)
    resp = cli.oam("ListDeadLetters", pipeline_id=pipeline or "", limit=limit)
    if cli.json:
        return cli.emit_json([to_dict(e) for e in resp.entries])
    cli.table(
        "dead letters",
        ["pipeline", "table", "action", "position", "error"],
        [
            [e.pipeline_id, f"{e.schema}.{e.table}", e.action, e.position, e.error]
            for e in resp.entries
        ],
    )
    return None


def dl_replay(ctx: typer.Context, pipeline: Annotated[str, typer.Argument()]) -> None:
    """Apply a pipeline's dead letters to its target again (removed once applied)."""
    cli = state(ctx)
    resp = cli.oam("ReplayDeadLetters", pipeline_id=pipeline)
    if cli.json:
        return cli.emit_json(to_dict(resp))
    cli.out.print(resp.message, highlight=False)
    return None


def dl_purge(ctx: typer.Context, pipeline: Annotated[str | None, typer.Argument()] = None) -> None:
    """Delete the dead letters of a pipeline (or of all)."""
    cli = state(ctx)
    resp = cli.oam("PurgeDeadLetters", pipeline_id=pipeline or "")
    if cli.json:
        return cli.emit_json(to_dict(resp))
    cli.out.print(f"purged {resp.purged}", highlight=False)
    return None


@hookimpl
def laredo_register_cli_commands(app: typer.Typer) -> None:
    dl_app = typer.Typer(help="Changes that failed after every retry.", no_args_is_help=True)
    dl_app.command("list")(dl_list)
    dl_app.command("replay")(dl_replay)
    dl_app.command("purge")(dl_purge)
    app.add_typer(dl_app, name="dead-letters")
