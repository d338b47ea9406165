"""``laredo archive reconstruct|history``: read a ``delta`` target's table as of a position.

``register(app)`` is called from the ``laredo_register_cli_commands`` hook with the ``laredo``
CLI's ``typer.Typer``; typer is imported only then (it comes with laredo-server). The work is
done by plain functions (:func:`reconstruct`, :func:`history_text`) that any front end can call.

* ``laredo archive reconstruct URI --as-of POSITION [--format jsonl|parquet] [--output PATH]``
  writes the table as it was at the last commit at or before ``POSITION``: JSON Lines (one row
  per line, values in ``laredo-json/1``) on stdout by default, or a Parquet file of the Delta
  column types. The commit's version and position go to stderr.
* ``laredo archive history URI [--json]``: version, time, source position, rows inserted,
  updated and deleted of every version.

``--storage-option KEY=VALUE`` (repeatable) passes object-store settings; errors show them
masked. Errors print one line on stderr and exit 1.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping, Sequence
from typing import IO, Any

from laredo.errors import LaredoError
from laredo.serialization import RowEncoder

__all__ = ["history_text", "parse_storage_options", "reconstruct", "register"]


def parse_storage_options(items: Sequence[str] | None) -> dict[str, str]:
    """``["K=V", ...]`` as a dict; ``ValueError`` for an item without ``=``."""
    out: dict[str, str] = {}
    for item in items or ():
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValueError(f"--storage-option {key!r}: write KEY=VALUE")
        out[key] = value
    return out


def reconstruct(
    uri: str,
    as_of: str,
    *,
    fmt: str = "jsonl",
    out: IO[bytes] | None = None,
    path: str | None = None,
    storage_options: Mapping[str, str] | None = None,
) -> tuple[int, str]:
    """Write the table as of ``as_of`` to ``path`` (or ``out``); returns (rows, position).
    ``as_of = "latest"``: the last whole commit. A position past the last whole commit raises
    ``ArchiveError`` saying how far the archive reaches (it cannot know what came after)."""
    from .archive import read_as_of, rows_as_of  # noqa: PLC0415 - lazy: pyarrow, CLI start-up

    as_of = _within_reach(uri, as_of, storage_options)
    if fmt == "parquet":
        import pyarrow.parquet as pq  # noqa: PLC0415 - lazy: only for Parquet output

        if path is None:
            raise ValueError("--format parquet needs --output PATH")
        table, position = read_as_of(uri, as_of, storage_options)
        pq.write_table(table, path)
        return table.num_rows, position
    if fmt != "jsonl":
        raise ValueError(f"--format {fmt!r}: use jsonl or parquet")
    rows, position, _ = rows_as_of(uri, as_of, storage_options)
    encoder = RowEncoder()
    default = out if out is not None else sys.stdout.buffer
    target = open(path, "wb") if path is not None else default  # noqa: SIM115 - closed below
    try:
        for row in rows:
            target.write(encoder.dumps(row).encode() + b"\n")
        target.flush()
    finally:
        if path is not None:
            target.close()
    return len(rows), position


def _within_reach(uri: str, as_of: str, storage_options: Mapping[str, str] | None) -> str:
    """``as_of``, or the last whole commit's position for ``latest``; ``ArchiveError`` when
    ``as_of`` lies past it (answering with that older version would be silently wrong)."""
    from .archive import (  # noqa: PLC0415 - lazy: pyarrow, CLI start-up
        ArchiveError,
        commits,
        open_table,
        position_order,
    )

    whole = [c for c in commits(open_table(uri, storage_options)) if c.position and not c.partial]
    last = whole[-1] if whole else None
    if as_of.strip().lower() == "latest":
        if last is None or last.position is None:
            raise ArchiveError(f"--as-of latest: the archive at {uri!r} has no whole commit yet")
        return last.position
    order = position_order(as_of)
    if last is not None and last.order is not None and order is not None and order > last.order:
        raise ArchiveError(
            f"--as-of {as_of}: the archive at {uri!r} reaches only position {last.position} "
            f"(version {last.version}, its last whole commit); what the source did after it is "
            f"not in the archive yet. Ask for --as-of {last.position} (or latest), or wait "
            "until the delta target has committed past this position"
        )
    return as_of


def history_text(
    uri: str, storage_options: Mapping[str, str] | None = None, as_json: bool = False
) -> str:
    """The archive's versions as a table (or JSON)."""
    from .archive import commits, open_table  # noqa: PLC0415 - lazy: pyarrow, CLI start-up

    all_commits = commits(open_table(uri, storage_options))
    data = [
        {
            "version": c.version,
            "time": c.timestamp.isoformat(timespec="milliseconds"),
            "operation": c.operation,
            "position": c.position,
            "kind": c.kind,
            "inserted": c.inserted,
            "updated": c.updated,
            "deleted": c.deleted,
        }
        for c in all_commits
    ]
    if as_json:
        return json.dumps(data, indent=2)
    headers = list(data[0]) if data else ["version"]
    cells = [headers, *[["-" if v is None else str(v) for v in d.values()] for d in data]]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    return "\n".join(
        "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in cells
    )


def _fail(exc: BaseException) -> Any:
    import typer  # noqa: PLC0415 - lazy: typer comes with the laredo CLI

    print(f"error: {exc}", file=sys.stderr)
    raise typer.Exit(1)


def register(app: Any) -> None:
    """Add ``laredo archive ...`` to the ``laredo`` CLI (a ``typer.Typer``, or a
    ``click.Group``)."""
    import typer  # noqa: PLC0415 - lazy: typer comes with the laredo CLI
    import typer.main  # noqa: PLC0415 - lazy: typer comes with the laredo CLI

    archive = typer.Typer(
        help="Read a Delta archive written by a delta target.", no_args_is_help=True
    )

    @archive.command("reconstruct")
    def reconstruct_cmd(
        uri: str = typer.Argument(help="the Delta table (path or s3://...)"),
        as_of: str = typer.Option(
            ..., "--as-of", help="a source position (e.g. 0/16B3748), or latest"
        ),
        fmt: str = typer.Option("jsonl", "--format", help="jsonl or parquet"),
        output: str | None = typer.Option(None, "--output", help="file (default: stdout)"),
        storage_option: list[str] | None = typer.Option(  # noqa: B008 - typer's idiom
            None, "--storage-option", help="object store setting KEY=VALUE (repeatable)"
        ),
    ) -> None:
        """The table as it was at the last commit at or before a source position. A position
        past the archive's last commit fails (exit 1) naming how far the archive reaches."""
        try:
            rows, position = reconstruct(
                uri,
                as_of,
                fmt=fmt,
                path=output,
                storage_options=parse_storage_options(storage_option),
            )
        except (LaredoError, ValueError, OSError) as exc:
            _fail(exc)
        print(f"{rows} row(s) as of position {position}", file=sys.stderr)

    @archive.command("history")
    def history_cmd(
        uri: str = typer.Argument(help="the Delta table (path or s3://...)"),
        as_json: bool = typer.Option(False, "--json", help="print JSON"),
        storage_option: list[str] | None = typer.Option(  # noqa: B008 - typer's idiom
            None, "--storage-option", help="object store setting KEY=VALUE (repeatable)"
        ),
    ) -> None:
        """Version, time, source position and rows inserted/updated/deleted per version."""
        try:
            text = history_text(uri, parse_storage_options(storage_option), as_json)
        except (LaredoError, ValueError, OSError) as exc:
            _fail(exc)
        print(text)

    if hasattr(app, "add_typer"):
        app.add_typer(archive, name="archive")
    elif hasattr(app, "add_command"):  # a click group
        app.add_command(typer.main.get_command(archive), "archive")
    else:
        raise TypeError(
            f"laredo archive CLI: cannot add commands to {type(app).__name__}; expected a "
            "typer.Typer or a click.Group"
        )
