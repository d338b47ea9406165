"""``laredo snapshot create|list|inspect|restore|delete|prune``."""

from __future__ import annotations

import json
import time
from typing import Annotated, Any

import typer

from .common import CliState, hookimpl, state, to_dict


def _snap_rows(cli: CliState, snaps: list[Any]) -> None:
    cli.table(
        "snapshots",
        ["snapshot", "created", "format", "tables", "rows", "size", "positions"],
        [
            [
                s.snapshot_id,
                time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(s.created_at / 1000)),
                s.format,
                len(s.tables),
                sum(t.row_count for t in s.tables),
                s.size_bytes,
                ", ".join(f"{k}={v}" for k, v in s.source_positions.items()),
            ]
            for s in snaps
        ],
    )


def snapshot_create(
    ctx: typer.Context,
    meta: Annotated[
        list[str] | None, typer.Option("--meta", help="user metadata key=value")
    ] = None,
) -> None:
    """Take a snapshot now; prints its id."""
    cli = state(ctx)
    user = {}
    for m in meta or []:
        k, eq, v = m.partition("=")
        if not eq:
            cli.fail(f"--meta {m!r}: write key=value", code=2)
        user[k] = v
    resp = cli.oam("CreateSnapshot", timeout=None, user_meta_json=json.dumps(user))
    if cli.json:
        return cli.emit_json(to_dict(resp))
    print(resp.snapshot_id)
    return None


def snapshot_list(
    ctx: typer.Context,
    table: Annotated[str | None, typer.Option("--table")] = None,
    limit: Annotated[int, typer.Option("--limit")] = 0,
) -> None:
    """Snapshots in the engine's store, newest first."""
    cli = state(ctx)
    resp = cli.oam("ListSnapshots", table=table or "", limit=limit)
    if cli.json:
        return cli.emit_json([to_dict(s) for s in resp.snapshots])
    _snap_rows(cli, list(resp.snapshots))
    return None


def snapshot_inspect(ctx: typer.Context, snapshot_id: Annotated[str, typer.Argument()]) -> None:
    """A snapshot's tables, row counts, positions, parts and metadata."""
    cli = state(ctx)
    resp = cli.oam("InspectSnapshot", snapshot_id=snapshot_id)
    s = resp.snapshot
    if cli.json:  # the snapshot's fields, plus its layout and parts
        full = to_dict(resp)
        return cli.emit_json(
            {**to_dict(s), "layout": resp.layout, "artifacts": full.get("artifacts", [])}
        )
    _snap_rows(cli, [s])
    cli.table(
        "tables",
        ["table", "rows", "target", "position", "pipeline"],
        [
            [f"{t.schema}.{t.table}", t.row_count, t.target_type, t.position, t.pipeline_id]
            for t in s.tables
        ],
    )
    if resp.artifacts:
        cli.table(
            f"parts (layout {resp.layout})",
            ["kind", "table", "part", "format", "rows", "size", "sha256"],
            [
                [
                    a.kind,
                    f"{a.schema}.{a.table}",
                    p.path,
                    p.format,
                    p.rows,
                    p.size_bytes,
                    p.sha256[:12],
                ]
                for a in resp.artifacts
                for p in a.parts
            ],
        )
    cli.out.print(f"user metadata: {s.user_meta_json}", highlight=False, markup=False)
    return None


def snapshot_restore(
    ctx: typer.Context,
    snapshot_id: Annotated[str, typer.Argument()],
    yes: Annotated[bool, typer.Option("--yes", "-y")] = False,
) -> None:
    """Restart the engine from a snapshot (targets replaced, streaming resumes after it)."""
    cli = state(ctx)
    if not yes and not typer.confirm(f"Replace every target's state with {snapshot_id}?"):
        cli.fail("aborted")
    resp = cli.oam("RestoreSnapshot", timeout=None, snapshot_id=snapshot_id, confirm=True)
    if cli.json:
        return cli.emit_json(to_dict(resp))
    cli.out.print(resp.message, highlight=False)
    return None


def snapshot_delete(ctx: typer.Context, snapshot_id: Annotated[str, typer.Argument()]) -> None:
    """Delete one snapshot."""
    cli = state(ctx)
    resp = cli.oam("DeleteSnapshot", snapshot_id=snapshot_id)
    if cli.json:
        return cli.emit_json(to_dict(resp))
    cli.out.print(f"deleted {snapshot_id}", highlight=False)
    return None


def snapshot_prune(
    ctx: typer.Context,
    keep: Annotated[int, typer.Option("--keep", help="newest snapshots to keep")],
    table: Annotated[str | None, typer.Option("--table")] = None,
) -> None:
    """Delete all but the newest --keep snapshots."""
    cli = state(ctx)
    resp = cli.oam("PruneSnapshots", keep=keep, table=table or "")
    if cli.json:
        return cli.emit_json(to_dict(resp))
    cli.out.print(f"deleted {resp.deleted_count}: {', '.join(resp.deleted_ids)}", highlight=False)
    return None


@hookimpl
def laredo_register_cli_commands(app: typer.Typer) -> None:
    snapshot_app = typer.Typer(help="Snapshots of the engine's targets.", no_args_is_help=True)
    snapshot_app.command("create")(snapshot_create)
    snapshot_app.command("list")(snapshot_list)
    snapshot_app.command("inspect")(snapshot_inspect)
    snapshot_app.command("restore")(snapshot_restore)
    snapshot_app.command("delete")(snapshot_delete)
    snapshot_app.command("prune")(snapshot_prune)
    app.add_typer(snapshot_app, name="snapshot")
