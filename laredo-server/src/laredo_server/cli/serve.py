"""``laredo serve``, ``laredo config validate|dump`` and ``laredo quickstart``.

The server stack and the configuration loader are imported when one of these commands runs,
not when the CLI starts: ``import laredo`` alone costs ~0.3 s (pydantic), gRPC ~0.15 s more.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Annotated, Any, NoReturn

import typer

from ..quickstart import run_quickstart
from .common import CliState, hookimpl, state

ConfDir = Annotated[
    list[str] | None,
    typer.Option("--conf-dir", help="extra directory of *.conf (default: <config dir>/conf.d)"),
]
SetOpt = Annotated[
    list[str] | None, typer.Option("--set", help="override a key: --set grpc.port=4001")
]


def _problems(cli: CliState, title: str, problems: Sequence[str]) -> NoReturn:
    cli.err.print(title, highlight=False)
    for p in problems:
        cli.err.print(f"  - {p}", highlight=False, soft_wrap=True, markup=False)
    raise typer.Exit(2)


def _load(
    cli: CliState, config: str | None, conf_dir: list[str] | None, sets: list[str] | None
) -> Any:
    """The loaded config; every problem listed and exit 2 when it is invalid."""
    from laredo.errors import ConfigError  # lazy: `import laredo` costs ~0.3 s (pydantic)

    from ..config import load_config  # lazy: pydantic and the engine; only config commands

    path = config or os.environ.get("LAREDO_CONFIG")
    if not path:
        cli.fail("give --config FILE (or set LAREDO_CONFIG)", code=2)
    try:
        return load_config(path, conf_dirs=conf_dir, sets=sets or ())
    except ConfigError as exc:
        _problems(cli, f"[red]invalid configuration[/red] ({path}):", exc.problems)


def serve(
    ctx: typer.Context,
    *,
    config: Annotated[
        str | None, typer.Option("--config", "-c", help="HOCON file (or LAREDO_CONFIG)")
    ] = None,
    conf_dir: ConfDir = None,
    set_: Annotated[
        list[str] | None, typer.Option("--set", help="override a key: --set grpc.port=4001")
    ] = None,
    log_format: Annotated[
        str | None, typer.Option(help="json or console (default: observability.log_format)")
    ] = None,
    log_level: Annotated[str | None, typer.Option(help="debug, info, warning, error")] = None,
    ready_file: Annotated[
        str | None, typer.Option(hidden=True, help="write the bound ports here once serving")
    ] = None,
) -> None:
    """Run the engine with gRPC, health and metrics listeners until SIGTERM/SIGINT."""
    from laredo.errors import ConfigError  # lazy: `import laredo` costs ~0.3 s (pydantic)

    from ..logs import setup_logging  # lazy: imports laredo (~0.3 s); only laredo serve
    from ..serve import serve as run_server  # lazy: the server stack (grpc, protobuf, engine)

    cli = state(ctx)
    loaded = _load(cli, config, conf_dir, set_)
    obs = loaded.model.observability
    setup_logging(log_format or obs.log_format, log_level or obs.log_level)
    try:
        code = run_server(loaded.model, ready_file=ready_file)
    except ConfigError as exc:
        _problems(cli, "[red]invalid configuration:[/red]", exc.problems)
    raise typer.Exit(code)


def config_validate(
    ctx: typer.Context,
    file: Annotated[str, typer.Argument(help="HOCON config file")],
    conf_dir: ConfDir = None,
    set_: SetOpt = None,
) -> None:
    """Check a configuration: every problem is listed; exit 2 when invalid."""
    cli = state(ctx)
    loaded = _load(cli, file, conf_dir, set_)
    model = loaded.model
    n = sum(len(t.targets) for t in model.tables)
    if cli.json:
        cli.emit_json({"valid": True, "files": [str(f) for f in loaded.files], "pipelines": n})
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
    from ..config import dump_config  # lazy: pydantic and the engine; only config commands

    cli = state(ctx)
    loaded = _load(cli, file, conf_dir, set_)
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


@hookimpl
def laredo_register_cli_commands(app: typer.Typer) -> None:
    app.command("serve")(serve)
    app.command("quickstart")(quickstart)
    config_app = typer.Typer(help="Check and print configuration files.", no_args_is_help=True)
    config_app.command("validate")(config_validate)
    config_app.command("dump")(config_dump)
    app.add_typer(config_app, name="config")
