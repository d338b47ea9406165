"""Loading the configuration file of a command (``--config FILE`` or ``LAREDO_CONFIG``, with
``--conf-dir`` and ``--set``): every problem listed on stderr and exit 2 when it is invalid.

The options are declared here once for the commands that read a configuration (``serve``,
``check``, ``config validate|dump``)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Annotated, Any, NoReturn

import typer
from rich.markup import escape

from .common import CliState

__all__ = [
    "ConfDir",
    "ConfigOpt",
    "SetOpt",
    "exit_with_problems",
    "load_or_exit",
    "print_notes",
]

ConfDir = Annotated[
    list[str] | None,
    typer.Option("--conf-dir", help="extra directory of *.conf (default: <config dir>/conf.d)"),
]
SetOpt = Annotated[
    list[str] | None, typer.Option("--set", help="override a key: --set grpc.port=4001")
]
ConfigOpt = Annotated[
    str | None, typer.Option("--config", "-c", help="HOCON file (or LAREDO_CONFIG)")
]


def exit_with_problems(cli: CliState, title: str, problems: Sequence[str]) -> NoReturn:
    """Print ``title`` and one line per problem on stderr; exit 2."""
    cli.err.print(title, highlight=False)
    for p in problems:
        cli.err.print(f"  - {p}", highlight=False, soft_wrap=True, markup=False)
    raise typer.Exit(2)


def print_notes(cli: CliState, notes: Sequence[str]) -> None:
    """One ``deprecated:`` line per note on stderr (Go Laredo spellings accepted)."""
    for note in notes:
        cli.err.print(
            f"[yellow]deprecated:[/yellow] {escape(note)}", highlight=False, soft_wrap=True
        )


def load_or_exit(
    cli: CliState,
    config: str | None,
    conf_dir: list[str] | None,
    sets: list[str] | None,
    *,
    show_notes: bool = True,
) -> Any:
    """The loaded config (``laredo_server.config.LoadedConfig``); every problem listed and
    exit 2 when it is invalid or no file is given. Deprecation notes (Go Laredo spellings)
    are printed on stderr unless ``show_notes`` is False (``serve`` logs them instead)."""
    from laredo.errors import ConfigError  # noqa: PLC0415 - lazy: `import laredo` costs ~0.3 s (pydantic)

    from ..config import load_config  # noqa: PLC0415 - lazy: pydantic and the engine; only config commands

    path = config or os.environ.get("LAREDO_CONFIG")
    if not path:
        cli.fail("give --config FILE (or set LAREDO_CONFIG)", code=2)
    try:
        loaded = load_config(path, conf_dirs=conf_dir, sets=sets or (), log_notes=False)
    except ConfigError as exc:
        print_notes(cli, getattr(exc, "__notes__", []))
        exit_with_problems(cli, f"[red]invalid configuration[/red] ({path}):", exc.problems)
    if show_notes:
        print_notes(cli, loaded.notes)
    return loaded
