"""``laredo fanout status|clients|snapshots``: inspect a fan-out server over gRPC.

Credentials come from the environment (never the command line, where ``ps`` shows them):
``LAREDO_FANOUT_TOKEN`` (the port's ``grpc.auth`` token), ``LAREDO_FANOUT_TLS_CA`` (a PEM CA
file: TLS), ``LAREDO_FANOUT_TLS_CERT`` and ``LAREDO_FANOUT_TLS_KEY`` (a client certificate).

``register(app)`` (called from the ``laredo_register_cli_commands`` hook) accepts the ``laredo``
CLI's command group: a ``typer.Typer`` (gets a ``fanout`` sub-app) or a ``click.Group`` (gets a
``fanout`` group). The commands themselves are plain functions returning text, so any front end
can call them: ``run(["status", "--address", "h:4002", "--table", "public.users"])``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

__all__ = ["clients_text", "register", "run", "snapshots_text", "status_text"]


def _ms(ms: int) -> str:
    if not ms:
        return "-"
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S")


def _table(headers: list[str], rows: list[list[Any]]) -> str:
    cells = [headers, *[[str(c) for c in r] for r in rows]]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in cells]
    return "\n".join(lines)


def _credentials() -> Any:
    """``Credentials`` from the ``LAREDO_FANOUT_*`` environment variables."""
    from .calls import Credentials  # noqa: PLC0415 - lazy: grpc; the CLI hook must stay cheap

    def read(var: str) -> bytes | None:
        path = os.environ.get(var)
        if not path:
            return None
        with open(path, "rb") as f:
            return f.read()

    token = os.environ.get("LAREDO_FANOUT_TOKEN") or None
    return Credentials(
        read("LAREDO_FANOUT_TLS_CA"),
        read("LAREDO_FANOUT_TLS_CERT"),
        read("LAREDO_FANOUT_TLS_KEY"),
        token,
    )


def status_text(address: str, table: str, as_json: bool = False) -> str:
    from .client import replication_status  # noqa: PLC0415 - lazy: grpc; the CLI hook must stay cheap

    st = replication_status(address, table, _credentials())
    data = {
        "table": f"{st.schema}.{st.table}",
        "journal_id": st.journal_id,
        "current_sequence": st.current_sequence,
        "journal_oldest_sequence": st.journal_oldest_sequence,
        "journal_entry_count": st.journal_entry_count,
        "row_count": st.row_count,
        "connected_clients": st.connected_clients,
        "draining": st.draining,
        "latest_snapshot": st.latest_snapshot.snapshot_id or None,
    }
    if as_json:
        return json.dumps(data, indent=2)
    return "\n".join(f"{k:<24}{v}" for k, v in data.items())


def clients_text(address: str, table: str, as_json: bool = False) -> str:
    from .client import replication_status  # noqa: PLC0415 - lazy: grpc; the CLI hook must stay cheap

    st = replication_status(address, table, _credentials())
    rows = [
        [
            c.client_id,
            c.state,
            c.current_sequence,
            c.behind_count,
            c.buffer_depth,
            _ms(c.connected_at_unix_ms),
            c.peer,
        ]
        for c in st.clients
    ]
    if as_json:
        keys = ["client_id", "state", "sequence", "behind", "buffer_depth", "connected_at", "peer"]
        return json.dumps([dict(zip(keys, r, strict=True)) for r in rows], indent=2)
    if not rows:
        return f"no clients connected to {st.schema}.{st.table}"
    return _table(
        ["CLIENT", "STATE", "SEQUENCE", "BEHIND", "BUFFER", "CONNECTED AT (UTC)", "PEER"], rows
    )


def snapshots_text(address: str, table: str, limit: int = 0, as_json: bool = False) -> str:
    from .client import list_snapshots  # noqa: PLC0415 - lazy: grpc; the CLI hook must stay cheap

    snaps = list_snapshots(address, table, limit, _credentials())
    rows = [
        [
            s.snapshot_id,
            s.sequence,
            s.row_count,
            s.source_position or "-",
            _ms(s.created_at_unix_ms),
            "yes" if s.persisted else "no",
        ]
        for s in snaps
    ]
    if as_json:
        keys = ["snapshot_id", "sequence", "rows", "source_position", "created_at", "persisted"]
        return json.dumps([dict(zip(keys, r, strict=True)) for r in rows], indent=2)
    if not rows:
        return f"no snapshots retained for {table}"
    return _table(["SNAPSHOT", "SEQUENCE", "ROWS", "POSITION", "CREATED (UTC)", "PERSISTED"], rows)


_COMMANDS: dict[str, tuple[str, Callable[..., str]]] = {
    "status": ("journal, rows, clients and latest snapshot of a fan-out table", status_text),
    "clients": ("connected clients with sequence, lag and buffer depth", clients_text),
    "snapshots": ("snapshots the fan-out server retains", snapshots_text),
}


def run(argv: list[str] | None = None) -> int:
    """Plain argparse front end (``python -m laredo_target_fanout.cli status ...``)."""
    import grpc  # noqa: PLC0415 - lazy: grpc; the CLI hook must stay cheap

    parser = argparse.ArgumentParser(prog="laredo fanout")
    sub = parser.add_subparsers(dest="cmd", required=True)
    for name, (help_text, _) in _COMMANDS.items():
        p = sub.add_parser(name, help=help_text)
        p.add_argument("--address", default="127.0.0.1:4002", help="fan-out server host:port")
        p.add_argument("--table", required=True, help="schema.table")
        p.add_argument("--json", action="store_true", help="print JSON")
        if name == "snapshots":
            p.add_argument("--limit", type=int, default=0)
    args = parser.parse_args(argv)
    fn = _COMMANDS[args.cmd][1]
    try:
        if args.cmd == "snapshots":
            out = fn(args.address, args.table, args.limit, args.json)
        else:
            out = fn(args.address, args.table, args.json)
    except grpc.RpcError as exc:
        print(f"error: {exc.code().name}: {exc.details()}", file=sys.stderr)
        return 1
    print(out)
    return 0


def register(app: Any) -> None:
    """Add the ``fanout`` commands to the ``laredo`` CLI (typer app or click group)."""
    if hasattr(app, "add_typer"):
        _register_typer(app)
    elif hasattr(app, "add_command"):
        _register_click(app)
    else:
        raise TypeError(
            f"laredo fanout CLI: cannot add commands to {type(app).__name__}; expected a "
            "typer.Typer or a click.Group"
        )


def _register_click(group: Any) -> None:
    import click  # noqa: PLC0415 - lazy: click, only for a click front end

    @click.group("fanout", help="Inspect a replication fan-out server.")
    def fanout() -> None:
        pass

    for name, (help_text, fn) in _COMMANDS.items():
        fanout.add_command(_click_command(click, name, help_text, fn))
    group.add_command(fanout)


def _click_command(click: Any, name: str, help_text: str, fn: Any) -> Any:
    import grpc  # noqa: PLC0415 - lazy: grpc; the CLI hook must stay cheap

    params = [
        click.Option(["--address"], default="127.0.0.1:4002", help="fan-out server host:port"),
        click.Option(["--table"], required=True, help="schema.table"),
        click.Option(["--json", "as_json"], is_flag=True, help="print JSON"),
    ]
    if name == "snapshots":
        params.append(click.Option(["--limit"], type=int, default=0))

    def callback(address: str, table: str, as_json: bool, limit: int = 0) -> None:
        try:
            if name == "snapshots":
                out = fn(address, table, limit, as_json)
            else:
                out = fn(address, table, as_json)
        except grpc.RpcError as exc:
            raise click.ClickException(f"{exc.code().name}: {exc.details()}") from None
        click.echo(out)

    return click.Command(name, callback=callback, params=params, help=help_text)


def _register_typer(app: Any) -> None:
    import typer  # noqa: PLC0415 - lazy: typer, only for a typer front end

    sub = typer.Typer(name="fanout", help="Inspect a replication fan-out server.")
    for name, (help_text, fn) in _COMMANDS.items():
        sub.command(name, help=help_text)(_typer_command(typer, name, fn))
    app.add_typer(sub, name="fanout")


def _typer_command(typer: Any, name: str, fn: Any) -> Any:
    import grpc  # noqa: PLC0415 - lazy: grpc; the CLI hook must stay cheap

    def _call(*args: Any) -> None:
        try:
            typer.echo(fn(*args))
        except grpc.RpcError as exc:
            typer.echo(f"error: {exc.code().name}: {exc.details()}", err=True)
            raise typer.Exit(1) from None

    if name == "snapshots":

        def snapshots(
            table: str = typer.Option(..., help="schema.table"),
            address: str = typer.Option("127.0.0.1:4002", help="fan-out server host:port"),
            limit: int = typer.Option(0),
            as_json: bool = typer.Option(False, "--json"),
        ) -> None:
            _call(address, table, limit, as_json)

        return snapshots

    def command(
        table: str = typer.Option(..., help="schema.table"),
        address: str = typer.Option("127.0.0.1:4002", help="fan-out server host:port"),
        as_json: bool = typer.Option(False, "--json"),
    ) -> None:
        _call(address, table, as_json)

    return command


if __name__ == "__main__":
    sys.exit(run())
