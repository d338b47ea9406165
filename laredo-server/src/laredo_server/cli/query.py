"""``laredo query lookup|get|list|count``: rows from a table's in-memory target.

Key values given on the command line are typed JSON when they parse as JSON (numbers,
true/false/null, objects) and strings otherwise.
"""

from __future__ import annotations

import json
from typing import Annotated, Any, NoReturn

import typer

from .common import CliState, hookimpl, split_table, state, table_ref


def qualified(table: str) -> str:
    """``schema.table`` of a table argument (schema defaults to public)."""
    return ".".join(split_table(table))


PipelineOpt = Annotated[
    str | None, typer.Option("--pipeline", help="pipeline id when a table has several targets")
]


def typed(values: list[str]) -> list[str]:
    """CLI values -> typed JSON: numbers, true/false/null and JSON stay typed, else strings."""
    outv = []
    for v in values:
        try:
            json.loads(v)
            outv.append(v)
        except ValueError:
            outv.append(json.dumps(v))
    return outv


def _not_found(cli: CliState, table: str, resp: Any, values: list[str]) -> NoReturn:
    """``not found`` naming the table, the pipeline that answered and the key fields used."""
    fields = list(resp.key_fields)
    pairs = ", ".join(
        f"{fields[i] if i < len(fields) else '?'} = {v}" for i, v in enumerate(values)
    )
    where = f" (pipeline {resp.pipeline_id})" if resp.pipeline_id else ""
    cli.fail(f"not found: no row of {qualified(table)}{where} with {pairs}")


def _rows_out(cli: CliState, rows: list[Any], title: str) -> None:
    if cli.json:
        cli.emit_json([json.loads(r.json) for r in rows])
        return
    from laredo.serialization import object_hook  # noqa: PLC0415 - lazy: `import laredo` costs ~0.3 s

    decoded = [json.loads(r.json, object_hook=object_hook) for r in rows]
    cols: list[str] = []
    for r in decoded:
        for k in r:
            if k not in cols:
                cols.append(k)
    cli.table(title, cols, [[r.get(c) for c in cols] for r in decoded])


def query_lookup(
    ctx: typer.Context,
    *,
    table: Annotated[str, typer.Argument(help="schema.table")],
    values: Annotated[list[str], typer.Argument(help="key values (JSON or text)")],
    index: Annotated[str | None, typer.Option("--index", help="index name")] = None,
    all_: Annotated[bool, typer.Option("--all", help="every matching row")] = False,
    pipeline: PipelineOpt = None,
) -> None:
    """Rows by the lookup index (or --index NAME)."""
    cli = state(ctx)
    ref = table_ref(table, pipeline)
    if all_:
        if not index:
            cli.fail("--all needs --index NAME", code=2)
        resp = cli.query("LookupAll", table=ref, index_name=index, key_values=typed(values))
        return _rows_out(cli, list(resp.rows), table)
    resp = cli.query("Lookup", table=ref, index_name=index or "", key_values=typed(values))
    if not resp.found:
        _not_found(cli, table, resp, values)
    _rows_out(cli, [resp.row], table)
    return None


def query_get(
    ctx: typer.Context,
    table: Annotated[str, typer.Argument(help="schema.table")],
    key: Annotated[list[str], typer.Argument(help="primary key value(s), in key order")],
    pipeline: PipelineOpt = None,
) -> None:
    """One row by primary key (composite keys: give every key column)."""
    cli = state(ctx)
    resp = cli.query("GetRow", table=table_ref(table, pipeline), primary_key=typed(key))
    if not resp.found:
        _not_found(cli, table, resp, key)
    _rows_out(cli, [resp.row], table)


def query_list(
    ctx: typer.Context,
    *,
    table: Annotated[str, typer.Argument(help="schema.table")],
    limit: Annotated[int, typer.Option("--limit", help="rows per page")] = 100,
    page_token: Annotated[str | None, typer.Option("--page-token")] = None,
    all_pages: Annotated[bool, typer.Option("--all", help="follow every page")] = False,
    pipeline: PipelineOpt = None,
) -> None:
    """Rows in key order, one page at a time (prints the next page token)."""
    cli = state(ctx)
    token = page_token or ""
    rows: list[Any] = []
    while True:
        resp = cli.query(
            "ListRows", table=table_ref(table, pipeline), page_size=limit, page_token=token
        )
        rows.extend(resp.rows)
        token = resp.next_page_token
        if not all_pages or not token:
            break
    if cli.json:
        cli.emit_json(
            {
                "rows": [json.loads(r.json) for r in rows],  # typed-JSON tags kept as they are
                "next_page_token": token,
                "total_count": resp.total_count,
            }
        )
        return
    _rows_out(cli, rows, f"{table} ({len(rows)} of {resp.total_count})")
    if token:
        cli.out.print(f"next page: --page-token {token}", highlight=False)


def query_count(
    ctx: typer.Context,
    table: Annotated[str, typer.Argument(help="schema.table")],
    pipeline: PipelineOpt = None,
) -> None:
    """Number of rows in the table's target."""
    cli = state(ctx)
    resp = cli.query("CountRows", table=table_ref(table, pipeline))
    if cli.json:
        return cli.emit_json({"count": resp.count})
    print(resp.count)
    return None


def wait(
    ctx: typer.Context,
    source: Annotated[str, typer.Argument(help="source id")],
    position: Annotated[
        str, typer.Argument(help="the source's position text (PostgreSQL: pg_current_wal_lsn())")
    ],
    timeout: Annotated[
        str, typer.Option("--timeout", help="how long to wait, e.g. 30s, 500ms, 2m")
    ] = "30s",
    durable: Annotated[
        bool,
        typer.Option(
            "--durable",
            help="wait until every target holds the changes durably (a buffering target "
            "flushed them; what the source may be acknowledged), not only applied",
        ),
    ] = False,
) -> None:
    """Wait until every pipeline of SOURCE applied every change at or before POSITION
    (read-your-writes; with --durable: made it durable). Exit 0 when reached, 1 when the
    timeout passed first."""
    from laredo.units import parse_duration  # noqa: PLC0415 - lazy: `import laredo` costs ~0.3 s

    cli = state(ctx)
    try:
        seconds = parse_duration(timeout, "--timeout")
    except ValueError as exc:
        cli.fail(str(exc), code=2)
    fields: dict[str, object] = {
        "source_id": source,
        "position": position,
        "timeout_ms": max(1, int(seconds * 1e3)),
    }
    if durable:
        fields["durable"] = True
    resp = cli.client().call("query", "WaitForPosition", fields, seconds + 5)
    if cli.json:
        cli.emit_json(
            {
                "reached": resp.reached,
                "applied_position": resp.applied_position,
                "durable_position": resp.durable_position,
            }
        )
    else:
        state_text = "reached" if resp.reached else "not reached (timeout)"
        cli.out.print(
            f"{state_text}; applied through {resp.applied_position or '-'}, durable through "
            f"{resp.durable_position or '-'}"
        )
    if not resp.reached:
        raise typer.Exit(1)


@hookimpl
def laredo_register_cli_commands(app: typer.Typer) -> None:
    app.command("wait")(wait)
    query_app = typer.Typer(help="Read rows from a table's in-memory target.", no_args_is_help=True)
    query_app.command("lookup")(query_lookup)
    query_app.command("get")(query_get)
    query_app.command("list")(query_list)
    query_app.command("count")(query_count)
    app.add_typer(query_app, name="query")
