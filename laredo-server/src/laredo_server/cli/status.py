"""Reading a server's state: ``status``, ``pipelines``, ``tables``, ``source``, ``schema``,
``ready`` and ``watch``."""

from __future__ import annotations

import json
import time
from typing import Annotated, Any

import typer

from .common import CliState, hookimpl, split_table, state, state_name, table_ref, to_dict


def size_text(n: int) -> str:
    """Bytes for people: ``512 B``, ``1.5 KiB``, ``3.2 GiB``; ``-`` when unknown (negative)."""
    if n < 0:
        return "-"
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{n} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def age_text(seconds: float) -> str:
    """A duration for people: ``42s``, ``5m 3s``, ``2h 10m``, ``3d 4h``."""
    s = max(0, int(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m {s % 60}s"
    if s < 86400:
        return f"{s // 3600}h {s % 3600 // 60}m"
    return f"{s // 86400}d {s % 86400 // 3600}h"


def _stamp(ms: int) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ms / 1000))


def pipelines_table(cli: CliState, pipes: list[Any], title: str = "pipelines") -> None:
    """Pipeline statuses as a table (applied and errors are counted since the server started;
    dead letters is the backlog stored for the pipeline, ``-`` when unknown)."""
    cli.table(
        title,
        [
            "pipeline",
            "source",
            "table",
            "target",
            "state",
            "ready",
            "rows",
            "buffer",
            "applied",
            "errors",
            "dead letters",
            "error",
        ],
        [
            [
                p.pipeline_id,
                p.source_id,
                f"{p.schema}.{p.table}",
                p.target_type,
                state_name(p.state, "PIPELINE_STATE_"),
                "yes" if p.ready else "no",
                p.row_count if p.has_row_count else "-",
                f"{p.buffer_depth}/{p.buffer_capacity}",
                p.changes_applied,
                p.change_errors,
                "-" if p.dead_letters < 0 else p.dead_letters,
                p.error,
            ]
            for p in pipes
        ],
    )


def _removed(b: Any) -> str:
    """The sweep's column: rows removed once it ran, else its state (``skipped: <reason>``)."""
    if b.sweep in ("done", "pending"):
        return str(b.rows_removed) + (" (pending)" if b.sweep == "pending" else "")
    return b.sweep or "-"


def backfills_table(cli: CliState, backfills: list[Any]) -> None:
    """Chunked baselines and backfills: running ones and the last of each table (rows read of
    the estimate taken at the start; the ETA at the rate so far, ``-`` when unknown)."""
    cli.table(
        "backfills",
        [
            "source",
            "table",
            "state",
            "chunks",
            "rows read",
            "applied",
            "dropped",
            "removed",
            "started",
            "ETA",
        ],
        [
            [
                b.source_id,
                f"{b.schema}.{b.table}",
                b.state + (f": {b.error}" if b.error and b.state != "done" else ""),
                b.chunks,
                f"{b.rows_read} of ~{b.rows_estimated}" if b.rows_estimated >= 0 else b.rows_read,
                b.rows_applied,
                b.rows_dropped,
                _removed(b),
                _stamp(b.started_at) if b.started_at else "-",
                age_text(b.eta_seconds) if b.has_eta else "-",
            ]
            for b in backfills
        ],
    )


def status(
    ctx: typer.Context,
    table: Annotated[str | None, typer.Option("--table", help="schema.table")] = None,
) -> None:
    """Service state, sources and pipelines (or one table's pipelines)."""
    cli = state(ctx)
    if table:
        schema, name = split_table(table)
        resp = cli.oam("GetTableStatus", schema=schema, table=name)
        if cli.json:
            return cli.emit_json(to_dict(resp))
        return pipelines_table(cli, list(resp.pipelines), f"table {schema}.{name}")
    resp = cli.oam("GetStatus")
    if cli.json:
        return cli.emit_json(to_dict(resp))
    cli.out.print(
        f"state [bold]{state_name(resp.state, 'SERVICE_STATE_')}[/bold], "
        f"ready: {'yes' if resp.ready else 'no'}, version {resp.version}, "
        f"config generation {resp.config_generation or 1}",
        highlight=False,
    )
    for warning in resp.security_warnings:
        cli.out.print(f"[bold yellow]WARNING[/bold yellow] {warning}", highlight=False)
    cli.table(
        "sources",
        [
            "source",
            "type",
            "state",
            "ready",
            "acked",
            "current",
            "lag bytes",
            "WAL retained",
            "error",
        ],
        [
            [
                s.source_id,
                s.source_type,
                s.state,
                "yes" if s.ready else "no",
                s.acked_position,
                s.current_position,
                s.lag_bytes,
                size_text(s.wal_retained_bytes),
                s.error,
            ]
            for s in resp.sources
        ],
    )
    pipelines_table(cli, list(resp.pipelines))
    if resp.backfills:
        backfills_table(cli, list(resp.backfills))
    _snapshot_line(cli, resp.snapshot_status)
    _reload_lines(cli, resp)
    return None


def _snapshot_line(cli: CliState, snap: Any) -> None:
    if not snap.store_configured:
        cli.out.print("snapshots: no store configured", highlight=False)
        return
    every = f"every {age_text(snap.schedule_seconds)}" if snap.schedule_seconds else "none"
    if snap.last_snapshot_id:
        age = age_text(time.time() - snap.last_snapshot_at / 1000)
        latest = (
            f"latest {snap.last_snapshot_id} ({age} old, "
            f"{size_text(snap.last_snapshot_size_bytes)})"
        )
    else:
        latest = "none taken yet"
    cli.out.print(
        f"snapshots: {latest}; schedule {every}; {snap.snapshots_created} created since start",
        highlight=False,
        markup=False,
    )
    if snap.last_error:
        cli.out.print(f"  last snapshot error: {snap.last_error}", highlight=False, markup=False)


def _reload_lines(cli: CliState, resp: Any) -> None:
    if not resp.HasField("last_reload"):
        return
    r = resp.last_reload
    outcome = "applied" if r.accepted else "rejected"
    cli.out.print(
        f"last reload: {outcome} at {_stamp(resp.last_reload_at)}, generation {r.generation}"
        + (f": {r.message}" if r.message else ""),
        highlight=False,
        markup=False,
    )
    for c in r.changes:
        detail = f" ({c.detail})" if c.detail else ""
        cli.out.print(f"  {c.kind} {c.id}{detail}", highlight=False, markup=False)
    for e in r.errors:
        cli.out.print(f"  error: {e}", highlight=False, markup=False)


def pipelines(ctx: typer.Context) -> None:
    """Every pipeline with its state, rows and buffer."""
    cli = state(ctx)
    resp = cli.oam("GetStatus")
    if cli.json:
        return cli.emit_json([to_dict(p) for p in resp.pipelines])
    pipelines_table(cli, list(resp.pipelines))
    return None


def tables(ctx: typer.Context) -> None:
    """Configured tables, their sources and targets."""
    cli = state(ctx)
    resp = cli.oam("ListTables")
    if cli.json:
        return cli.emit_json([to_dict(t) for t in resp.tables])
    cli.table(
        "tables",
        ["table", "source", "targets", "ready", "rows"],
        [
            [
                f"{t.schema}.{t.table}",
                t.source_id,
                ", ".join(t.target_types),
                "yes" if t.ready else "no",
                t.row_count,
            ]
            for t in resp.tables
        ],
    )
    return None


def source(ctx: typer.Context, source_id: Annotated[str | None, typer.Argument()] = None) -> None:
    """Source details: positions (current, acknowledged), lag, ordering."""
    cli = state(ctx)
    resp = cli.oam("GetSourceInfo", source_id=source_id or "")
    if cli.json:
        return cli.emit_json([to_dict(s) for s in resp.sources])
    cli.table(
        "sources",
        [
            "source",
            "type",
            "resume",
            "ordering",
            "current",
            "acked",
            "lag bytes",
            "lag s",
            "details",
        ],
        [
            [
                s.id,
                s.type,
                "yes" if s.supports_resume else "no",
                s.ordering_guarantee,
                s.current_position,
                s.acked_position,
                s.lag_bytes,
                "-" if s.lag_seconds < 0 else f"{s.lag_seconds:.3f}",
                ", ".join(f"{k}={v}" for k, v in sorted(s.details.items())),
            ]
            for s in resp.sources
        ],
    )
    return None


def schema(ctx: typer.Context, table: Annotated[str, typer.Argument(help="schema.table")]) -> None:
    """Columns of a table as the source reported them."""
    cli = state(ctx)
    s, t = split_table(table)
    resp = cli.oam("GetTableSchema", schema=s, table=t)
    if cli.json:
        return cli.emit_json([to_dict(c) for c in resp.columns])
    cli.table(
        f"{s}.{t}",
        ["#", "column", "type", "not null", "primary key"],
        [
            [
                c.ordinal_position,
                c.column_name,
                c.data_type,
                "yes" if c.not_null else "",
                c.primary_key_ordinal if c.is_primary_key else "",
            ]
            for c in resp.columns
        ],
    )
    return None


def ready(
    ctx: typer.Context,
    source_: Annotated[str | None, typer.Option("--source")] = None,
    table: Annotated[str | None, typer.Option("--table")] = None,
    pipeline: Annotated[str | None, typer.Option("--pipeline")] = None,
) -> None:
    """Exit 0 when ready (globally, or for a source/table/pipeline), 1 with reasons if not."""
    cli = state(ctx)
    resp = cli.oam(
        "CheckReady", source=source_ or "", table=table or "", pipeline_id=pipeline or ""
    )
    if cli.json:
        cli.emit_json(to_dict(resp))
    elif resp.ready:
        cli.out.print("[green]ready[/green]")
    else:
        cli.out.print("[yellow]not ready[/yellow]")
        for r in resp.not_ready_reasons:
            cli.out.print(f"  - {r}", highlight=False, markup=False)
    raise typer.Exit(0 if resp.ready else 1)


def _status_text(kind: str | None, body: Any) -> str:
    if kind == "pipeline_state_change":
        return (
            f"{body.pipeline_id}: {state_name(body.old_state, 'PIPELINE_STATE_')}"
            f" -> {state_name(body.new_state, 'PIPELINE_STATE_')} {body.error}"
        )
    if kind == "service_state_change":
        return (
            f"service: {state_name(body.old_state, 'SERVICE_STATE_')} -> "
            f"{state_name(body.new_state, 'SERVICE_STATE_')}"
        )
    if kind == "row_change":
        return f"{body.pipeline_id}: {body.count} change(s) applied"
    if kind == "source_state_change":
        return f"source {body.source_id}: {body.state} {body.reason} {body.position}"
    return f"snapshot {body.snapshot_id}: {body.event} {body.message}"


def _watch_rows(cli: CliState, table: str, replay_existing: bool, count: int) -> None:
    n = 0
    for resp in cli.stream(
        "query", "Subscribe", table=table_ref(table, None), replay_existing=replay_existing
    ):
        for ev in resp.events:
            if cli.json:
                doc = {
                    "action": ev.action,
                    "old": json.loads(ev.old_values.json) if ev.old_values.json else None,
                    "new": json.loads(ev.new_values.json) if ev.new_values.json else None,
                    "position": ev.position,
                }
                print(json.dumps(doc), flush=True)
            else:
                row = ev.new_values.json or ev.old_values.json
                cli.out.print(
                    f"{ev.action:8} {ev.position:>14}  {row}", highlight=False, markup=False
                )
            n += 1
            if count and n >= count:
                return


def _watch_status(cli: CliState, pipeline: list[str] | None, count: int) -> None:
    for n, ev in enumerate(cli.stream("oam", "WatchStatus", pipeline_ids=pipeline or []), 1):
        kind = ev.WhichOneof("event")
        body: Any = getattr(ev, kind) if kind else None
        if cli.json:
            print(json.dumps({"type": kind, **to_dict(body)} if body else {}), flush=True)
        else:
            stamp = time.strftime("%H:%M:%S", time.localtime(ev.timestamp / 1000))
            text = _status_text(kind, body)
            if ev.dropped_before:
                text += f" ({ev.dropped_before} event(s) dropped before this one)"
            cli.out.print(f"{stamp} {text}", highlight=False, markup=False)
        if count and n >= count:
            return


def watch(
    ctx: typer.Context,
    table: Annotated[
        str | None, typer.Argument(help="schema.table: stream its row changes")
    ] = None,
    pipeline: Annotated[list[str] | None, typer.Option("--pipeline")] = None,
    replay_existing: Annotated[bool, typer.Option("--replay-existing")] = False,
    count: Annotated[int, typer.Option("--count", help="stop after N events (0 = never)")] = 0,
) -> None:
    """Follow status events (or, with a table, every row change of that table) until Ctrl-C."""
    cli = state(ctx)
    try:
        if table:
            _watch_rows(cli, table, replay_existing, count)
        else:
            _watch_status(cli, pipeline, count)
    except KeyboardInterrupt:
        return


@hookimpl
def laredo_register_cli_commands(app: typer.Typer) -> None:
    for command in (status, pipelines, tables, source, schema, ready, watch):
        app.command()(command)
