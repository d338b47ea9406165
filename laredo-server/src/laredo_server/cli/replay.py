"""``laredo replay start|status|stop``: play a snapshot through the tables' targets."""

from __future__ import annotations

import time
from typing import Annotated, Any

import typer

from .common import CliState, hookimpl, state, to_dict


def _replay_out(cli: CliState, st: Any) -> None:
    if cli.json:
        cli.emit_json(to_dict(st))
        return
    cli.out.print(
        f"{st.replay_id}: {st.state}, {st.rows_replayed} rows in {st.elapsed_seconds:.2f}s, "
        f"{st.tables_completed} table(s) done {st.error}",
        highlight=False,
    )


def replay_start(
    ctx: typer.Context,
    *,
    snapshot_id: Annotated[str, typer.Argument()],
    tables_: Annotated[list[str] | None, typer.Argument(help="tables (default: all)")] = None,
    speed: Annotated[str, typer.Option("--speed", help="full, realtime or rows/s")] = "full",
    pipeline: Annotated[str | None, typer.Option("--pipeline")] = None,
    timestamp_field: Annotated[str | None, typer.Option("--timestamp-field")] = None,
    wait: Annotated[bool, typer.Option("--wait", help="follow until it ends")] = False,
    yes: Annotated[bool, typer.Option("--yes", "--confirm", "-y", help="do not ask")] = False,
) -> None:
    """Play a snapshot through the tables' live targets (each pipeline's worker applies its
    rows between batches); prints the replay id. Asks first: the snapshot's rows overwrite the
    targets' current ones."""
    cli = state(ctx)
    where = f"pipeline {pipeline!r}" if pipeline else ", ".join(tables_ or []) or "every table"
    if not yes and not typer.confirm(
        f"Overwrite the live rows of {where} with those of snapshot {snapshot_id}?"
    ):
        cli.fail("aborted", code=1)
    resp = cli.oam(
        "StartReplay",
        snapshot_id=snapshot_id,
        tables=tables_ or [],
        speed=speed,
        target_pipeline_id=pipeline or "",
        timestamp_field=timestamp_field or "",
        confirm=True,
    )
    if not wait:
        if cli.json:
            return cli.emit_json(to_dict(resp))
        print(resp.replay_id)
        return None
    while True:
        st = cli.oam("GetReplayStatus", replay_id=resp.replay_id)
        if st.state != "running":
            break
        time.sleep(0.2)
    _replay_out(cli, st)
    raise typer.Exit(0 if st.state == "completed" else 1)


def replay_status(ctx: typer.Context, replay_id: Annotated[str, typer.Argument()]) -> None:
    """State and progress of a replay."""
    cli = state(ctx)
    _replay_out(cli, cli.oam("GetReplayStatus", replay_id=replay_id))


def replay_stop(ctx: typer.Context, replay_id: Annotated[str, typer.Argument()]) -> None:
    """Stop a running replay."""
    cli = state(ctx)
    resp = cli.oam("StopReplay", replay_id=replay_id)
    if cli.json:
        return cli.emit_json(to_dict(resp))
    cli.out.print("stopped" if resp.stopped else "was not running", highlight=False)
    return None


@hookimpl
def laredo_register_cli_commands(app: typer.Typer) -> None:
    replay_app = typer.Typer(help="Play a snapshot through targets.", no_args_is_help=True)
    replay_app.command("start")(replay_start)
    replay_app.command("status")(replay_status)
    replay_app.command("stop")(replay_stop)
    app.add_typer(replay_app, name="replay")
