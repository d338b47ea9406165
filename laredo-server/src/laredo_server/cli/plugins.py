"""``laredo plugins`` (installed plugins and the types they register) and ``laredo version``."""

from __future__ import annotations

import typer

from .. import __version__
from .common import hookimpl, state


def plugins(ctx: typer.Context) -> None:
    """Installed plugins: distribution and version, the types they register, hooks."""
    from laredo.plugins import (  # noqa: PLC0415 - lazy: `import laredo` costs ~0.3 s (pydantic)
        KINDS,
        get_plugin_manager,
        registry,
    )

    cli = state(ctx)
    pm = get_plugin_manager()
    listed = pm.list_plugins()
    types: list[dict[str, str]] = []
    for kind in KINDS:
        for e in registry(kind).entries():
            types.append(
                {"kind": kind, "name": e.name, "provider": e.provider, "description": e.description}
            )
    if cli.json:
        return cli.emit_json({"plugins": listed, "types": types})
    cli.table(
        "plugins",
        ["plugin", "provider", "hooks"],
        [[p["name"], p["provider"], ", ".join(sorted(p["hooks"]))] for p in listed],
    )
    cli.table(
        "types",
        ["kind", "name", "provider", "description"],
        [[t["kind"], t["name"], t["provider"], t["description"]] for t in types],
    )
    return None


def version() -> None:
    """Print the version."""
    print(f"laredo {__version__}")


@hookimpl
def laredo_register_cli_commands(app: typer.Typer) -> None:
    app.command()(plugins)
    app.command()(version)
