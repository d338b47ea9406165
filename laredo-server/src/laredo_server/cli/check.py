"""``laredo check --config FILE``: the preflight checks of every configured plugin, every
problem at once with its fix. Exit 0 when nothing is an error (1 otherwise; with ``--strict``
warnings count too), 2 for an invalid configuration. ``-o json`` prints one document:
``{"ok", "errors", "warnings", "checked", "findings": [{severity, code, message, fix, where,
table}]}``.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer

from .common import CliState, hookimpl, state
from .configfile import ConfDir, ConfigOpt, SetOpt, load_or_exit

__all__ = ["check", "print_report"]

_STYLE = {"error": "bold red", "warning": "yellow", "info": "dim"}


def print_report(cli: CliState, report: Any, *, quiet: bool = False) -> None:
    """The findings of ``report`` (a ``laredo.preflight.CheckReport``) for a person."""
    for f in report.findings:
        sev = f.severity.value
        if quiet and sev == "info":
            continue
        style = _STYLE.get(sev, "")
        cli.out.print(
            f"[{style}]{sev.upper():7}[/{style}] [bold]{f.code}[/bold]  [dim]{f.where}[/dim]",
            highlight=False,
        )
        cli.out.print(f"        {f.message}", highlight=False, markup=False, soft_wrap=True)
        if f.fix:
            cli.out.print(f"        fix: {f.fix}", highlight=False, markup=False, soft_wrap=True)


def check(
    ctx: typer.Context,
    *,
    config: ConfigOpt = None,
    conf_dir: ConfDir = None,
    set_: SetOpt = None,
    strict: Annotated[bool, typer.Option("--strict", help="warnings fail the check too")] = False,
    quiet: Annotated[
        bool, typer.Option("--quiet", "-q", help="only errors and warnings, no infos")
    ] = False,
) -> None:
    """Preflight: connect as the configured roles and report every problem with its fix.

    Read-only (nothing is created). Exit 0 when all checks pass, 1 otherwise, 2 for an
    invalid configuration. `laredo serve` runs the same checks at startup."""
    from laredo.config import run_checks  # noqa: PLC0415 - lazy: the engine and the plugins (~0.3 s)

    cli = state(ctx)
    loaded = load_or_exit(cli, config, conf_dir, set_)
    report = run_checks(loaded.model, timeout=cli.options.timeout)
    passed = report.passed(strict)
    if cli.json:
        cli.emit_json({**report.to_dict(), "passed": passed, "files": list(map(str, loaded.files))})
        raise typer.Exit(0 if passed else 1)
    if not report.checked:
        cli.out.print(
            "no installed plugin has checks for this configuration's sources, targets and "
            "stores; nothing to check",
            highlight=False,
        )
        raise typer.Exit(0)
    print_report(cli, report, quiet=quiet)
    errors, warnings = len(report.errors), len(report.warnings)
    summary = (
        f"{errors} error(s), {warnings} warning(s) in {', '.join(report.checked)}"
        if errors or warnings
        else f"all checks passed: {', '.join(report.checked)}"
    )
    color = "red" if not passed else ("yellow" if warnings else "green")
    cli.out.print(f"[{color}]{summary}[/{color}]", highlight=False)
    raise typer.Exit(0 if passed else 1)


@hookimpl
def laredo_register_cli_commands(app: typer.Typer) -> None:
    app.command("check")(check)
