"""``laredo serve``, ``laredo config validate|dump`` and ``laredo quickstart``.

The server stack and the configuration loader are imported when one of these commands runs,
not when the CLI starts: ``import laredo`` alone costs ~0.3 s (pydantic), gRPC ~0.15 s more.
"""

from __future__ import annotations

import json
import logging
from typing import Annotated, Any

import typer

from ..quickstart import run_quickstart
from .common import hookimpl, state
from .configfile import ConfDir, ConfigOpt, SetOpt, exit_with_problems, load_or_exit

logger = logging.getLogger("laredo_server.config")


def serve(
    ctx: typer.Context,
    *,
    config: ConfigOpt = None,
    conf_dir: ConfDir = None,
    set_: SetOpt = None,
    log_format: Annotated[
        str | None, typer.Option(help="json or console (default: observability.log_format)")
    ] = None,
    log_level: Annotated[str | None, typer.Option(help="debug, info, warning, error")] = None,
    ready_file: Annotated[
        str | None, typer.Option(hidden=True, help="write the bound ports here once serving")
    ] = None,
    skip_checks: Annotated[
        bool, typer.Option("--skip-checks", help="do not run the preflight checks at startup")
    ] = False,
    drain_grace: Annotated[
        str | None,
        typer.Option(
            "--drain-grace",
            help="shutdown.drain: on SIGTERM, report not-ready and hand fan-out clients off "
            "for this long (e.g. 10s) before stopping",
        ),
    ] = None,
) -> None:
    """Run the engine with gRPC, health and metrics listeners until SIGTERM/SIGINT.

    The preflight checks of `laredo check` run first and are logged; the server starts
    anyway. The last startup line says where everything listens and what to try next."""
    from laredo.errors import ConfigError  # noqa: PLC0415 - lazy: `import laredo` costs ~0.3 s (pydantic)

    from ..config import load_config  # noqa: PLC0415 - lazy: pydantic and the engine; only config commands
    from ..logs import setup_logging  # noqa: PLC0415 - lazy: imports laredo (~0.3 s); only laredo serve
    from ..serve import serve as run_server  # noqa: PLC0415 - lazy: the server stack (grpc, protobuf, engine)

    cli = state(ctx)
    sets = [*(set_ or []), *drain_set(drain_grace)]
    loaded = load_or_exit(cli, config, conf_dir, sets, show_notes=False)
    obs = loaded.model.observability
    setup_logging(log_format or obs.log_format, log_level or obs.log_level)
    log_notes(loaded.notes)
    main_file = loaded.files[0]

    def load_again() -> Any:
        """The configuration re-read as at start (files, conf.d, environment, --set)."""
        return load_config(main_file, conf_dirs=conf_dir, sets=sets).model

    try:
        code = run_server(
            loaded.model, ready_file=ready_file, checks=not skip_checks, load=load_again
        )
    except ConfigError as exc:
        exit_with_problems(cli, "[red]invalid configuration:[/red]", exc.problems)
    raise typer.Exit(code)


def drain_set(drain_grace: str | None) -> list[str]:
    """``--drain-grace`` (Go Laredo's flag) as the ``--set`` of ``shutdown.drain`` it is."""
    return [] if drain_grace is None else [f"shutdown.drain={json.dumps(drain_grace)}"]


def log_notes(notes: list[str]) -> None:
    """Log each deprecation note once (after logging is set up)."""
    for note in notes:
        logger.warning("deprecated: %s", note)


def config_validate(
    ctx: typer.Context,
    file: Annotated[str, typer.Argument(help="HOCON config file")],
    conf_dir: ConfDir = None,
    set_: SetOpt = None,
) -> None:
    """Check a configuration: every problem is listed; exit 2 when invalid."""
    cli = state(ctx)
    loaded = load_or_exit(cli, file, conf_dir, set_)
    model = loaded.model
    n = sum(len(t.targets) for t in model.tables)
    if cli.json:
        cli.emit_json(
            {
                "valid": True,
                "files": [str(f) for f in loaded.files],
                "pipelines": n,
                "notes": loaded.notes,
            }
        )
    else:
        cli.out.print(
            f"[green]config is valid[/green]: {len(model.sources)} source(s), "
            f"{len(model.tables)} table(s), {n} pipeline(s) "
            f"(files: {', '.join(str(f) for f in loaded.files)})",
            highlight=False,
        )


def config_dump(
    ctx: typer.Context,
    file: Annotated[str, typer.Argument(help="HOCON config file")],
    conf_dir: ConfDir = None,
    set_: SetOpt = None,
    fmt: Annotated[str, typer.Option("--format", help="hocon or json")] = "hocon",
) -> None:
    """Print the merged configuration (includes, conf.d, env, --set) with secrets masked."""
    from ..config import dump_config  # noqa: PLC0415 - lazy: pydantic and the engine; only config commands

    cli = state(ctx)
    loaded = load_or_exit(cli, file, conf_dir, set_)
    print(dump_config(loaded, "json" if cli.json else fmt))


def quickstart(
    *,
    rows: Annotated[int, typer.Option(help="demo rows to create")] = 10_000,
    rate: Annotated[float, typer.Option(help="live changes per second")] = 200.0,
    grpc_port: Annotated[int, typer.Option(help="gRPC port")] = 4001,
    health_port: Annotated[int, typer.Option(help="health/metrics port")] = 8080,
    duration: Annotated[float, typer.Option(help="seconds to run (0 = until Ctrl-C)")] = 0.0,
    workdir: Annotated[str | None, typer.Option(help="where to put the demo files")] = None,
) -> None:
    """Start an embedded PostgreSQL, a demo table, a live workload, and the server on it."""
    raise typer.Exit(
        run_quickstart(
            rows=rows,
            rate=rate,
            grpc_port=grpc_port,
            health_port=health_port,
            duration=duration,
            workdir=workdir,
        )
    )


def config_reload(
    ctx: typer.Context,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="show what would change without applying it")
    ] = False,
) -> None:
    """Make the running server re-read its configuration (files, conf.d, environment) and
    apply the difference; an invalid configuration is rejected with every problem listed and
    the running one stays. Exit 1 when rejected."""
    cli = state(ctx)
    resp = cli.oam("ReloadConfig", dry_run=dry_run, timeout=None)
    if cli.json:
        cli.emit_json(
            {
                "accepted": resp.accepted,
                "message": resp.message,
                "generation": resp.generation,
                "changes": [{"kind": c.kind, "id": c.id, "detail": c.detail} for c in resp.changes],
                "errors": list(resp.errors),
            }
        )
    else:
        verdict = "[green]applied[/green]" if resp.accepted else "[red]rejected[/red]"
        message = resp.message
        if resp.accepted and dry_run:  # the server's message already says "dry run"
            verdict, message = "dry run", message.removeprefix("dry run: ")
        cli.out.print(f"{verdict}: {message} (generation {resp.generation})")
        for c in resp.changes:
            detail = f"  {c.detail}" if c.detail else ""
            cli.out.print(f"  {c.kind.replace('_', ' ')}: {c.id}{detail}", highlight=False)
        for e in resp.errors:
            cli.err.print(f"  - {e}", highlight=False, markup=False)
    if not resp.accepted:
        raise typer.Exit(1)


@hookimpl
def laredo_register_cli_commands(app: typer.Typer) -> None:
    app.command("serve")(serve)
    app.command("quickstart")(quickstart)
    config_app = typer.Typer(help="Check and print configuration files.", no_args_is_help=True)
    config_app.command("validate")(config_validate)
    config_app.command("dump")(config_dump)
    config_app.command("reload")(config_reload)
    app.add_typer(config_app, name="config")
