"""The ``laredo`` command line: run the server, check configs, and operate a running server.

Global options: ``--address`` (``LAREDO_ADDRESS``, default ``localhost:4001``), ``--token``
(``LAREDO_TOKEN``; prefer it to ``--token``, which other users see in ``ps``), ``--output
table|json|yaml``, ``--timeout``, ``--tls``/``--tls-ca`` and a client certificate for mutual
TLS, ``--tls-cert``/``--tls-key`` (``LAREDO_TLS_CERT``/``LAREDO_TLS_KEY``); before
the command or after it (``laredo status --address A -o json``), unless that command has an
option of the same name (``laredo wait ... --timeout 30s`` is the wait's own). Errors print one
line on stderr and exit non-zero: 1 for a failed call or a not-ready answer, 2 for usage and
configuration errors. ``--output json`` (``yaml``) prints one document per command.

Every command group is a module registering its commands through the
``laredo_register_cli_commands(app)`` hook, exactly as plugins do (``app`` is this Typer
application); the first-party modules are registered explicitly, plugins through their entry
points. Per-invocation state lives in Click's context object (:class:`CliState`).
"""

from __future__ import annotations

import sys
from types import ModuleType
from typing import Annotated, Any

import pluggy
import typer
import typer.main
from rich.console import Console
from typer.core import TyperGroup

from ..addresses import DEFAULT_ADDRESS
from . import (
    admin,
    check,
    dead_letters,
    init,
    plugins,
    query,
    replay,
    serve,
    snapshots,
    status,
)
from .common import CliState, Options

__all__ = [
    "BUILTIN_MODULES",
    "add_plugin_commands",
    "app",
    "create_app",
    "hoist_global_options",
    "main",
]

BUILTIN_MODULES: tuple[ModuleType, ...] = (
    serve,
    check,
    init,
    status,
    admin,
    query,
    snapshots,
    dead_letters,
    replay,
    plugins,
)
"""The first-party command modules, each a ``laredo_register_cli_commands`` hook."""

HELP_ORDER = (
    "init",
    "check",
    "serve",
    "status",
    "pipelines",
    "tables",
    "source",
    "schema",
    "ready",
    "reload",
    "pause",
    "resume",
    "reset-source",
    "drain",
    "verify",
    "backfill",
    "watch",
    "plugins",
    "version",
    "quickstart",
    "config",
    "snapshot",
    "dead-letters",
    "replay",
    "query",
    "wait",
)
"""How ``laredo --help`` lists the built-in commands; plugin commands follow in the order
they were added."""


class LaredoGroup(TyperGroup):
    """Lists commands in :data:`HELP_ORDER`, whatever order the hooks added them in."""

    def list_commands(self, ctx: Any) -> list[str]:
        names = super().list_commands(ctx)
        rank = {name: i for i, name in enumerate(HELP_ORDER)}
        return sorted(names, key=lambda n: rank.get(n, len(rank)))


def global_options(
    ctx: typer.Context,
    *,
    address: Annotated[
        str, typer.Option("--address", "-a", envvar="LAREDO_ADDRESS", help="server host:port")
    ] = DEFAULT_ADDRESS,
    token: Annotated[
        str | None,
        typer.Option(
            "--token",
            envvar="LAREDO_TOKEN",
            help="admin bearer token (prefer the LAREDO_TOKEN variable: ps shows options)",
        ),
    ] = None,
    output: Annotated[str, typer.Option("--output", "-o", help="table, json or yaml")] = "table",
    timeout: Annotated[float, typer.Option("--timeout", help="seconds per call")] = 10.0,
    tls: Annotated[bool, typer.Option("--tls", help="connect with TLS")] = False,
    tls_ca: Annotated[
        str | None,
        typer.Option(
            "--tls-ca", envvar="LAREDO_TLS_CA", help="CA certificate file (implies --tls)"
        ),
    ] = None,
    tls_cert: Annotated[
        str | None,
        typer.Option(
            "--tls-cert",
            envvar="LAREDO_TLS_CERT",
            help="client certificate file for mutual TLS (with --tls-key; implies --tls)",
        ),
    ] = None,
    tls_key: Annotated[
        str | None,
        typer.Option("--tls-key", envvar="LAREDO_TLS_KEY", help="private key file of --tls-cert"),
    ] = None,
) -> None:
    cli = CliState(
        Options(
            address=address,
            token=token,
            output=output,
            timeout=timeout,
            tls=tls or tls_ca is not None or tls_cert is not None,
            tls_ca=tls_ca,
            tls_cert=tls_cert,
            tls_key=tls_key,
        )
    )
    ctx.obj = cli
    if output not in ("table", "json", "yaml"):
        cli.fail(f"--output must be table, json or yaml, not {output!r}", code=2)
    if (tls_cert is None) != (tls_key is None):
        cli.fail("--tls-cert and --tls-key go together (a client certificate and its key)", code=2)


def create_app() -> typer.Typer:
    """A ``laredo`` application with the built-in commands (no plugin commands yet)."""
    app = typer.Typer(
        name="laredo",
        cls=LaredoGroup,
        help="Laredo: a consistent baseline of database tables, then every change, into targets.",
        no_args_is_help=True,
        add_completion=False,
        pretty_exceptions_enable=False,
    )
    app.callback()(global_options)
    pm = pluggy.PluginManager("laredo")
    for module in BUILTIN_MODULES:
        pm.register(module, name=f"laredo-cli:{module.__name__.rsplit('.', 1)[-1]}")
    pm.hook.laredo_register_cli_commands(app=app)
    return app


def add_plugin_commands(app: typer.Typer) -> None:
    """Let installed plugins add their commands to ``app``; a failing plugin is a warning."""
    try:
        from laredo.plugins import (  # noqa: PLC0415 - lazy: loads the engine (~0.3 s) and every plugin
            get_plugin_manager,
        )

        get_plugin_manager().call_cli_hook(app)
    except Exception as exc:
        Console(stderr=True).print(
            f"[yellow]warning:[/yellow] a plugin failed to add CLI commands: {exc}"
        )


app = create_app()
"""The application with the built-in commands (``main`` adds plugin commands when needed)."""

_VALUE_OPTS = frozenset(
    {
        "--address",
        "-a",
        "--token",
        "--output",
        "-o",
        "--timeout",
        "--tls-ca",
        "--tls-cert",
        "--tls-key",
    }
)
_FLAG_OPTS = frozenset({"--tls"})


def _takes_value(arg: str, opts: frozenset[str]) -> bool:
    return arg in opts and "=" not in arg


def hoist_global_options(app: typer.Typer, args: list[str]) -> list[str]:
    """Move the global options written after the command (Go Laredo's CLI takes them there:
    ``laredo status --address A -o json``) in front of it. An option the command declares
    itself stays where it is."""
    group = typer.main.get_command(app)
    i = 0
    while i < len(args) and args[i].startswith("-") and args[i] != "--":
        i += 2 if _takes_value(args[i], _VALUE_OPTS) else 1
    start = i
    cmd: Any = group
    while i < len(args) and args[i] in (getattr(cmd, "commands", None) or {}):
        cmd = cmd.commands[args[i]]
        i += 1
    if cmd is group:
        return args
    own_value: set[str] = set()
    own: set[str] = set()
    for param in cmd.params:
        if getattr(param, "param_type_name", "") == "option":
            names = {*param.opts, *param.secondary_opts}
            own |= names
            if not param.is_flag and not param.count:
                own_value |= names
    moved: list[str] = []
    kept: list[str] = []
    rest = args[i:]
    j = 0
    while j < len(rest):
        arg = rest[j]
        name = arg.split("=", 1)[0]
        if arg == "--":
            kept += rest[j:]
            break
        width = 2 if (arg in own_value or _takes_value(arg, _VALUE_OPTS)) else 1
        if name not in own and (name in _VALUE_OPTS or name in _FLAG_OPTS):
            moved += rest[j : j + width]
        else:
            kept += rest[j : j + width]
        j += width
    return [*args[:start], *moved, *args[start:i], *kept]


def _command_of(args: list[str]) -> str | None:
    skip = False
    for a in args:
        if skip:
            skip = False
            continue
        if a in _VALUE_OPTS:
            skip = True
            continue
        if a.startswith("-"):
            continue
        return a
    return None


def _builtin_names(app: typer.Typer) -> set[str]:
    names = {c.name or (c.callback.__name__ if c.callback else "") for c in app.registered_commands}
    return names | {g.name or "" for g in app.registered_groups}


def main(argv: list[str] | None = None) -> int:
    """The ``laredo`` console script; returns the exit code."""
    args = list(sys.argv[1:] if argv is None else argv)
    cli_app = create_app()
    if _command_of(args) not in _builtin_names(cli_app):
        # plugin commands (and --help) need the plugins; built-in commands start faster without
        add_plugin_commands(cli_app)
    args = hoist_global_options(cli_app, args)
    try:
        cli_app(args=args, prog_name="laredo", standalone_mode=True)
    except SystemExit as exc:
        return int(exc.code or 0) if not isinstance(exc.code, str) else 1
    return 0
