"""The ``laredo`` command line: run the server, check configs, and operate a running server.

Global options (before the command): ``--address`` (``LAREDO_ADDRESS``, default
``localhost:4001``), ``--token`` (``LAREDO_TOKEN``), ``--output table|json``, ``--timeout``.
Errors print one line on stderr and exit non-zero: 1 for a failed call or a not-ready answer,
2 for usage and configuration errors. ``--output json`` prints one JSON document per command.
Plugins add commands with the ``laredo_register_cli_commands(app)`` hook (``app`` is this
Typer application).
"""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import dataclass
from typing import Annotated, Any, NoReturn

import typer
from rich.console import Console
from rich.table import Table as RichTable

app = typer.Typer(
    name="laredo",
    help="Laredo: a consistent baseline of database tables, then every change, into targets.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
config_app = typer.Typer(help="Check and print configuration files.", no_args_is_help=True)
snapshot_app = typer.Typer(help="Snapshots of the engine's targets.", no_args_is_help=True)
dl_app = typer.Typer(help="Changes that failed after every retry.", no_args_is_help=True)
replay_app = typer.Typer(help="Play a snapshot through targets.", no_args_is_help=True)
query_app = typer.Typer(help="Read rows from a table's in-memory target.", no_args_is_help=True)
app.add_typer(config_app, name="config")
app.add_typer(snapshot_app, name="snapshot")
app.add_typer(dl_app, name="dead-letters")
app.add_typer(replay_app, name="replay")
app.add_typer(query_app, name="query")

out = Console()
err = Console(stderr=True)


@dataclass
class Opts:
    address: str = "localhost:4001"
    token: str | None = None
    output: str = "table"
    timeout: float = 10.0
    tls: bool = False
    tls_ca: str | None = None


OPTS = Opts()


@app.callback()
def _global(
    *,
    address: Annotated[
        str, typer.Option("--address", "-a", envvar="LAREDO_ADDRESS", help="server host:port")
    ] = "localhost:4001",
    token: Annotated[
        str | None, typer.Option("--token", envvar="LAREDO_TOKEN", help="admin bearer token")
    ] = None,
    output: Annotated[str, typer.Option("--output", "-o", help="table or json")] = "table",
    timeout: Annotated[float, typer.Option("--timeout", help="seconds per call")] = 10.0,
    tls: Annotated[bool, typer.Option("--tls", help="connect with TLS")] = False,
    tls_ca: Annotated[
        str | None,
        typer.Option(
            "--tls-ca", envvar="LAREDO_TLS_CA", help="CA certificate file (implies --tls)"
        ),
    ] = None,
) -> None:
    columns = os.environ.get("COLUMNS", "")
    if columns.isdigit():  # honour the width of this invocation (consoles are module-level)
        out.width = err.width = int(columns)
    if output not in ("table", "json"):
        fail(f"--output must be table or json, not {output!r}", code=2)
    OPTS.address, OPTS.token, OPTS.output, OPTS.timeout = address, token, output, timeout
    OPTS.tls = tls or tls_ca is not None
    OPTS.tls_ca = tls_ca


def fail(message: str, code: int = 1) -> NoReturn:
    err.print(f"[red]error:[/red] {message}", highlight=False, soft_wrap=True)
    raise typer.Exit(code)


# -- gRPC plumbing -------------------------------------------------------------------------------


class Client:
    def __init__(self) -> None:
        import grpc

        from ._proto.laredo_proto.v1 import oam_pb2_grpc, query_pb2_grpc

        if OPTS.tls:
            from pathlib import Path

            ca = Path(OPTS.tls_ca).read_bytes() if OPTS.tls_ca else None
            creds = grpc.ssl_channel_credentials(root_certificates=ca)
            self.channel = grpc.secure_channel(OPTS.address, creds)
        else:
            self.channel = grpc.insecure_channel(OPTS.address)
        self.oam = oam_pb2_grpc.LaredoOAMServiceStub(self.channel)  # type: ignore[no-untyped-call]
        self.query = query_pb2_grpc.LaredoQueryServiceStub(  # type: ignore[no-untyped-call]
            self.channel
        )

    def metadata(self) -> list[tuple[str, str]]:
        return [("authorization", f"Bearer {OPTS.token}")] if OPTS.token else []

    def call(self, stub: Any, method: str, request: Any, timeout: float | None = -1) -> Any:
        import grpc

        try:
            return getattr(stub, method)(
                request,
                timeout=OPTS.timeout if timeout == -1 else timeout,
                metadata=self.metadata(),
            )
        except grpc.RpcError as exc:
            code = exc.code()
            details = exc.details() or ""
            if code == grpc.StatusCode.UNAVAILABLE:
                fail(
                    f"cannot reach the server at {OPTS.address} ({details}); is it running? "
                    "(--address / LAREDO_ADDRESS)"
                )
            fail(f"{code.name}: {details}")


_client: Client | None = None


def client() -> Client:
    global _client
    if _client is None:
        _client = Client()
    return _client


def oam_call(method: str, request: Any, timeout: float | None = -1) -> Any:
    c = client()
    return c.call(c.oam, method, request, timeout)


def query_call(method: str, request: Any) -> Any:
    c = client()
    return c.call(c.query, method, request)


def to_dict(msg: Any) -> Any:
    from google.protobuf.json_format import MessageToDict

    return MessageToDict(
        msg, preserving_proto_field_name=True, always_print_fields_with_no_presence=True
    )


def emit_json(data: Any) -> None:
    print(json.dumps(data, indent=2, default=str))


def table_of(title: str, columns: list[str], rows: list[list[Any]]) -> None:
    t = RichTable(title=title, title_justify="left")
    for c in columns:
        t.add_column(c, overflow="fold")
    for r in rows:
        t.add_row(*["" if v is None else str(v) for v in r])
    out.print(t)


def split_table(text: str) -> tuple[str, str]:
    if "." in text:
        schema, _, table = text.partition(".")
        return schema, table
    return "public", text


def state_name(value: int, prefix: str) -> str:
    from ._proto.laredo_proto.v1 import oam_pb2 as oam

    enum = oam.ServiceState if prefix == "SERVICE_STATE_" else oam.PipelineState
    return str(enum.Name(value)).removeprefix(prefix)


# -- serve and config ----------------------------------------------------------------------------


ConfDir = Annotated[
    list[str] | None,
    typer.Option("--conf-dir", help="extra directory of *.conf (default: <config dir>/conf.d)"),
]
SetOpt = Annotated[
    list[str] | None, typer.Option("--set", help="override a key: --set grpc.port=4001")
]


def _load(config: str | None, conf_dir: list[str] | None, sets: list[str] | None) -> Any:
    from laredo.errors import ConfigError

    from .config import load_config

    path = config or os.environ.get("LAREDO_CONFIG")
    if not path:
        fail("give --config FILE (or set LAREDO_CONFIG)", code=2)
    try:
        return load_config(path, conf_dirs=conf_dir, sets=sets or ())
    except ConfigError as exc:
        err.print(f"[red]invalid configuration[/red] ({path}):", highlight=False)
        for p in exc.problems:
            err.print(f"  - {p}", highlight=False, soft_wrap=True, markup=False)
        raise typer.Exit(2) from None


@app.command()
def serve(
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
    from .server import serve as run_server
    from .server import setup_logging

    loaded = _load(config, conf_dir, set_)
    obs = loaded.model.observability
    setup_logging(log_format or obs.log_format, log_level or obs.log_level)
    try:
        code = run_server(loaded.model, ready_file=ready_file)
    except Exception as exc:
        from laredo.errors import ConfigError

        if isinstance(exc, ConfigError):
            err.print("[red]invalid configuration:[/red]", highlight=False)
            for p in exc.problems:
                err.print(f"  - {p}", highlight=False, soft_wrap=True, markup=False)
            raise typer.Exit(2) from None
        raise
    raise typer.Exit(code)


@config_app.command("validate")
def config_validate(
    file: Annotated[str, typer.Argument(help="HOCON config file")],
    conf_dir: ConfDir = None,
    set_: SetOpt = None,
) -> None:
    """Check a configuration: every problem is listed; exit 2 when invalid."""
    loaded = _load(file, conf_dir, set_)
    model = loaded.model
    n = sum(len(t.targets) for t in model.tables)
    if OPTS.output == "json":
        emit_json({"valid": True, "files": [str(f) for f in loaded.files], "pipelines": n})
    else:
        out.print(
            f"[green]config is valid[/green]: {len(model.sources)} source(s), "
            f"{len(model.tables)} table(s), {n} pipeline(s) "
            f"(files: {', '.join(str(f) for f in loaded.files)})",
            highlight=False,
        )


@config_app.command("dump")
def config_dump(
    file: Annotated[str, typer.Argument(help="HOCON config file")],
    conf_dir: ConfDir = None,
    set_: SetOpt = None,
    fmt: Annotated[str, typer.Option("--format", help="hocon or json")] = "hocon",
) -> None:
    """Print the merged configuration (includes, conf.d, env, --set) with secrets masked."""
    from .config import dump_config

    loaded = _load(file, conf_dir, set_)
    print(dump_config(loaded, "json" if OPTS.output == "json" else fmt))


# -- status --------------------------------------------------------------------------------------


def _pipelines_table(pipes: list[Any], title: str = "pipelines") -> None:
    table_of(
        title,
        ["pipeline", "source", "table", "target", "state", "ready", "rows", "buffer", "error"],
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
                p.error,
            ]
            for p in pipes
        ],
    )


@app.command()
def status(
    table: Annotated[str | None, typer.Option("--table", help="schema.table")] = None,
) -> None:
    """Service state, sources and pipelines (or one table's pipelines)."""
    from ._proto.laredo_proto.v1 import oam_pb2 as oam

    if table:
        schema, name = split_table(table)
        resp = oam_call("GetTableStatus", oam.GetTableStatusRequest(schema=schema, table=name))
        if OPTS.output == "json":
            return emit_json(to_dict(resp))
        return _pipelines_table(list(resp.pipelines), f"table {schema}.{name}")
    resp = oam_call("GetStatus", oam.GetStatusRequest())
    if OPTS.output == "json":
        return emit_json(to_dict(resp))
    out.print(
        f"state [bold]{state_name(resp.state, 'SERVICE_STATE_')}[/bold], "
        f"ready: {'yes' if resp.ready else 'no'}, version {resp.version}",
        highlight=False,
    )
    table_of(
        "sources",
        ["source", "type", "state", "ready", "acked", "current", "lag bytes", "error"],
        [
            [
                s.source_id,
                s.source_type,
                s.state,
                "yes" if s.ready else "no",
                s.acked_position,
                s.current_position,
                s.lag_bytes,
                s.error,
            ]
            for s in resp.sources
        ],
    )
    _pipelines_table(list(resp.pipelines))
    return None


@app.command()
def pipelines() -> None:
    """Every pipeline with its state, rows and buffer."""
    from ._proto.laredo_proto.v1 import oam_pb2 as oam

    resp = oam_call("GetStatus", oam.GetStatusRequest())
    if OPTS.output == "json":
        return emit_json([to_dict(p) for p in resp.pipelines])
    _pipelines_table(list(resp.pipelines))
    return None


@app.command()
def tables() -> None:
    """Configured tables, their sources and targets."""
    from ._proto.laredo_proto.v1 import oam_pb2 as oam

    resp = oam_call("ListTables", oam.ListTablesRequest())
    if OPTS.output == "json":
        return emit_json([to_dict(t) for t in resp.tables])
    table_of(
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


@app.command()
def source(source_id: Annotated[str | None, typer.Argument()] = None) -> None:
    """Source details: positions (current, acknowledged), lag, ordering."""
    from ._proto.laredo_proto.v1 import oam_pb2 as oam

    resp = oam_call("GetSourceInfo", oam.GetSourceInfoRequest(source_id=source_id or ""))
    if OPTS.output == "json":
        return emit_json([to_dict(s) for s in resp.sources])
    table_of(
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


@app.command()
def schema(table: Annotated[str, typer.Argument(help="schema.table")]) -> None:
    """Columns of a table as the source reported them."""
    from ._proto.laredo_proto.v1 import oam_pb2 as oam

    s, t = split_table(table)
    resp = oam_call("GetTableSchema", oam.GetTableSchemaRequest(schema=s, table=t))
    if OPTS.output == "json":
        return emit_json([to_dict(c) for c in resp.columns])
    table_of(
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


@app.command()
def ready(
    source_: Annotated[str | None, typer.Option("--source")] = None,
    table: Annotated[str | None, typer.Option("--table")] = None,
    pipeline: Annotated[str | None, typer.Option("--pipeline")] = None,
) -> None:
    """Exit 0 when ready (globally, or for a source/table/pipeline), 1 with reasons if not."""
    from ._proto.laredo_proto.v1 import oam_pb2 as oam

    resp = oam_call(
        "CheckReady",
        oam.CheckReadyRequest(source=source_ or "", table=table or "", pipeline_id=pipeline or ""),
    )
    if OPTS.output == "json":
        emit_json(to_dict(resp))
    elif resp.ready:
        out.print("[green]ready[/green]")
    else:
        out.print("[yellow]not ready[/yellow]")
        for r in resp.not_ready_reasons:
            out.print(f"  - {r}", highlight=False, markup=False)
    raise typer.Exit(0 if resp.ready else 1)


# -- admin ---------------------------------------------------------------------------------------


@app.command()
def reload(
    table: Annotated[str | None, typer.Argument(help="schema.table (omit with --all)")] = None,
    source_: Annotated[str | None, typer.Option("--source")] = None,
    all_: Annotated[bool, typer.Option("--all", help="every table (of --source)")] = False,
) -> None:
    """Re-baseline a table (or all): targets are emptied and reloaded; no change is lost."""
    from ._proto.laredo_proto.v1 import oam_pb2 as oam

    if all_ == bool(table):
        fail("give a table or --all", code=2)
    if all_:
        resp = oam_call("ReloadAll", oam.ReloadAllRequest(source_id=source_ or ""), timeout=None)
    else:
        s, t = split_table(table or "")
        resp = oam_call(
            "ReloadTable",
            oam.ReloadTableRequest(source_id=source_ or "", schema=s, table=t),
            timeout=None,
        )
    if OPTS.output == "json":
        return emit_json(to_dict(resp))
    out.print(resp.message, highlight=False)
    return None


@app.command()
def pause(source_id: Annotated[str, typer.Argument()]) -> None:
    """Pause a source: changes keep buffering and are applied after resume."""
    from ._proto.laredo_proto.v1 import oam_pb2 as oam

    resp = oam_call("PauseSync", oam.PauseSyncRequest(source_id=source_id))
    if OPTS.output == "json":
        return emit_json(to_dict(resp))
    _pipelines_table(list(resp.pipelines))
    return None


@app.command()
def resume(source_id: Annotated[str, typer.Argument()]) -> None:
    """Resume a paused source."""
    from ._proto.laredo_proto.v1 import oam_pb2 as oam

    resp = oam_call("ResumeSync", oam.ResumeSyncRequest(source_id=source_id))
    if OPTS.output == "json":
        return emit_json(to_dict(resp))
    _pipelines_table(list(resp.pipelines))
    return None


@app.command("reset-source")
def reset_source(
    source_id: Annotated[str, typer.Argument()],
    drop_publication: Annotated[bool, typer.Option("--drop-publication")] = False,
    yes: Annotated[bool, typer.Option("--yes", "--confirm", "-y", help="do not ask")] = False,
) -> None:
    """Drop and recreate a source's replication slot (the next start re-baselines)."""
    from ._proto.laredo_proto.v1 import oam_pb2 as oam

    if not yes and not typer.confirm(
        f"Reset source {source_id!r}"
        + (" and drop its publication" if drop_publication else "")
        + "?"
    ):
        fail("aborted", code=1)
    resp = oam_call(
        "ResetSource",
        oam.ResetSourceRequest(
            source_id=source_id, confirm=True, drop_publication=drop_publication
        ),
    )
    if OPTS.output == "json":
        return emit_json(to_dict(resp))
    out.print(resp.message, highlight=False)
    return None


# -- query ---------------------------------------------------------------------------------------


def _typed(values: list[str]) -> list[str]:
    """CLI values -> typed JSON: numbers, true/false/null and JSON stay typed, else strings."""
    outv = []
    for v in values:
        try:
            json.loads(v)
            outv.append(v)
        except ValueError:
            outv.append(json.dumps(v))
    return outv


def _ref(table: str, pipeline: str | None) -> Any:
    from ._proto.laredo_proto.v1 import query_pb2 as q

    s, t = split_table(table)
    return q.TableRef(schema=s, table=t, pipeline_id=pipeline or "")


def _rows_out(rows: list[Any], title: str) -> None:
    from laredo.serialization import object_hook

    if OPTS.output == "json":
        emit_json([json.loads(r.json) for r in rows])
        return
    decoded = [json.loads(r.json, object_hook=object_hook) for r in rows]
    cols: list[str] = []
    for r in decoded:
        for k in r:
            if k not in cols:
                cols.append(k)
    table_of(title, cols, [[r.get(c) for c in cols] for r in decoded])


PipelineOpt = Annotated[
    str | None, typer.Option("--pipeline", help="pipeline id when a table has several targets")
]


@query_app.command("lookup")
def query_lookup(
    table: Annotated[str, typer.Argument(help="schema.table")],
    values: Annotated[list[str], typer.Argument(help="key values (JSON or text)")],
    index: Annotated[str | None, typer.Option("--index", help="index name")] = None,
    all_: Annotated[bool, typer.Option("--all", help="every matching row")] = False,
    pipeline: PipelineOpt = None,
) -> None:
    """Rows by the lookup index (or --index NAME)."""
    from ._proto.laredo_proto.v1 import query_pb2 as q

    if all_:
        if not index:
            fail("--all needs --index NAME", code=2)
        resp = query_call(
            "LookupAll",
            q.LookupAllRequest(
                table=_ref(table, pipeline), index_name=index, key_values=_typed(values)
            ),
        )
        return _rows_out(list(resp.rows), table)
    resp = query_call(
        "Lookup",
        q.LookupRequest(
            table=_ref(table, pipeline), index_name=index or "", key_values=_typed(values)
        ),
    )
    if not resp.found:
        fail("not found")
    _rows_out([resp.row], table)
    return None


@query_app.command("get")
def query_get(
    table: Annotated[str, typer.Argument(help="schema.table")],
    key: Annotated[list[str], typer.Argument(help="primary key value(s), in key order")],
    pipeline: PipelineOpt = None,
) -> None:
    """One row by primary key (composite keys: give every key column)."""
    from ._proto.laredo_proto.v1 import query_pb2 as q

    resp = query_call(
        "GetRow", q.GetRowRequest(table=_ref(table, pipeline), primary_key=_typed(key))
    )
    if not resp.found:
        fail("not found")
    _rows_out([resp.row], table)


@query_app.command("list")
def query_list(
    table: Annotated[str, typer.Argument(help="schema.table")],
    limit: Annotated[int, typer.Option("--limit", help="rows per page")] = 100,
    page_token: Annotated[str | None, typer.Option("--page-token")] = None,
    all_pages: Annotated[bool, typer.Option("--all", help="follow every page")] = False,
    pipeline: PipelineOpt = None,
) -> None:
    """Rows in key order, one page at a time (prints the next page token)."""
    from ._proto.laredo_proto.v1 import query_pb2 as q

    token = page_token or ""
    rows: list[Any] = []
    while True:
        resp = query_call(
            "ListRows",
            q.ListRowsRequest(table=_ref(table, pipeline), page_size=limit, page_token=token),
        )
        rows.extend(resp.rows)
        token = resp.next_page_token
        if not all_pages or not token:
            break
    if OPTS.output == "json":
        from laredo.serialization import object_hook  # noqa: F401 - keep tags as-is in JSON

        emit_json(
            {
                "rows": [json.loads(r.json) for r in rows],
                "next_page_token": token,
                "total_count": resp.total_count,
            }
        )
        return
    _rows_out(rows, f"{table} ({len(rows)} of {resp.total_count})")
    if token:
        out.print(f"next page: --page-token {token}", highlight=False)


@query_app.command("count")
def query_count(
    table: Annotated[str, typer.Argument(help="schema.table")], pipeline: PipelineOpt = None
) -> None:
    """Number of rows in the table's target."""
    from ._proto.laredo_proto.v1 import query_pb2 as q

    resp = query_call("CountRows", q.CountRowsRequest(table=_ref(table, pipeline)))
    if OPTS.output == "json":
        return emit_json({"count": resp.count})
    print(resp.count)
    return None


@app.command()
def watch(
    table: Annotated[
        str | None, typer.Argument(help="schema.table: stream its row changes")
    ] = None,
    pipeline: Annotated[list[str] | None, typer.Option("--pipeline")] = None,
    replay_existing: Annotated[bool, typer.Option("--replay-existing")] = False,
    count: Annotated[int, typer.Option("--count", help="stop after N events (0 = never)")] = 0,
) -> None:
    """Follow status events (or, with a table, every row change of that table) until Ctrl-C."""
    from ._proto.laredo_proto.v1 import oam_pb2 as oam
    from ._proto.laredo_proto.v1 import query_pb2 as q

    c = client()
    n = 0
    try:
        if table:
            stream = c.query.Subscribe(
                q.SubscribeRequest(table=_ref(table, None), replay_existing=replay_existing),
                metadata=c.metadata(),
            )
            for resp in stream:
                for ev in resp.events:
                    if OPTS.output == "json":
                        doc = {
                            "action": ev.action,
                            "old": json.loads(ev.old_values.json) if ev.old_values.json else None,
                            "new": json.loads(ev.new_values.json) if ev.new_values.json else None,
                            "position": ev.position,
                        }
                        print(json.dumps(doc), flush=True)
                    else:
                        row = ev.new_values.json or ev.old_values.json
                        out.print(
                            f"{ev.action:8} {ev.position:>14}  {row}",
                            highlight=False,
                            markup=False,
                        )
                    n += 1
                    if count and n >= count:
                        return
            return
        stream = c.oam.WatchStatus(
            oam.WatchStatusRequest(pipeline_ids=pipeline or []), metadata=c.metadata()
        )
        for ev in stream:
            kind = ev.WhichOneof("event")
            body: Any = getattr(ev, kind) if kind else None
            if OPTS.output == "json":
                print(json.dumps({"type": kind, **to_dict(body)} if body else {}), flush=True)
            else:
                stamp = time.strftime("%H:%M:%S", time.localtime(ev.timestamp / 1000))
                if kind == "pipeline_state_change":
                    text = (
                        f"{body.pipeline_id}: {state_name(body.old_state, 'PIPELINE_STATE_')}"
                        f" -> {state_name(body.new_state, 'PIPELINE_STATE_')} {body.error}"
                    )
                elif kind == "service_state_change":
                    text = (
                        f"service: {state_name(body.old_state, 'SERVICE_STATE_')} -> "
                        f"{state_name(body.new_state, 'SERVICE_STATE_')}"
                    )
                elif kind == "row_change":
                    text = f"{body.pipeline_id}: {body.count} change(s) applied"
                elif kind == "source_state_change":
                    text = f"source {body.source_id}: {body.state} {body.reason} {body.position}"
                else:
                    text = f"snapshot {body.snapshot_id}: {body.event} {body.message}"
                if ev.dropped_before:
                    text += f" ({ev.dropped_before} event(s) dropped before this one)"
                out.print(f"{stamp} {text}", highlight=False, markup=False)
            n += 1
            if count and n >= count:
                break
    except KeyboardInterrupt:
        return
    except Exception as exc:
        import grpc

        if isinstance(exc, grpc.RpcError):
            fail(f"{exc.code().name}: {exc.details()}")
        raise


# -- snapshots -----------------------------------------------------------------------------------


def _snap_rows(snaps: list[Any]) -> None:
    table_of(
        "snapshots",
        ["snapshot", "created", "format", "tables", "rows", "size", "positions"],
        [
            [
                s.snapshot_id,
                time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(s.created_at / 1000)),
                s.format,
                len(s.tables),
                sum(t.row_count for t in s.tables),
                s.size_bytes,
                ", ".join(f"{k}={v}" for k, v in s.source_positions.items()),
            ]
            for s in snaps
        ],
    )


@snapshot_app.command("create")
def snapshot_create(
    meta: Annotated[
        list[str] | None, typer.Option("--meta", help="user metadata key=value")
    ] = None,
) -> None:
    """Take a snapshot now; prints its id."""
    from ._proto.laredo_proto.v1 import oam_pb2 as oam

    user = {}
    for m in meta or []:
        k, eq, v = m.partition("=")
        if not eq:
            fail(f"--meta {m!r}: write key=value", code=2)
        user[k] = v
    resp = oam_call(
        "CreateSnapshot", oam.CreateSnapshotRequest(user_meta_json=json.dumps(user)), timeout=None
    )
    if OPTS.output == "json":
        return emit_json(to_dict(resp))
    print(resp.snapshot_id)
    return None


@snapshot_app.command("list")
def snapshot_list(
    table: Annotated[str | None, typer.Option("--table")] = None,
    limit: Annotated[int, typer.Option("--limit")] = 0,
) -> None:
    """Snapshots in the engine's store, newest first."""
    from ._proto.laredo_proto.v1 import oam_pb2 as oam

    resp = oam_call("ListSnapshots", oam.ListSnapshotsRequest(table=table or "", limit=limit))
    if OPTS.output == "json":
        return emit_json([to_dict(s) for s in resp.snapshots])
    _snap_rows(list(resp.snapshots))
    return None


@snapshot_app.command("inspect")
def snapshot_inspect(snapshot_id: Annotated[str, typer.Argument()]) -> None:
    """A snapshot's tables, row counts, positions and metadata."""
    from ._proto.laredo_proto.v1 import oam_pb2 as oam

    resp = oam_call("InspectSnapshot", oam.InspectSnapshotRequest(snapshot_id=snapshot_id))
    s = resp.snapshot
    if OPTS.output == "json":
        return emit_json(to_dict(s))
    _snap_rows([s])
    table_of(
        "tables",
        ["table", "rows", "target", "position", "pipeline"],
        [
            [f"{t.schema}.{t.table}", t.row_count, t.target_type, t.position, t.pipeline_id]
            for t in s.tables
        ],
    )
    out.print(f"user metadata: {s.user_meta_json}", highlight=False, markup=False)
    return None


@snapshot_app.command("restore")
def snapshot_restore(
    snapshot_id: Annotated[str, typer.Argument()],
    yes: Annotated[bool, typer.Option("--yes", "-y")] = False,
) -> None:
    """Restart the engine from a snapshot (targets replaced, streaming resumes after it)."""
    from ._proto.laredo_proto.v1 import oam_pb2 as oam

    if not yes and not typer.confirm(f"Replace every target's state with {snapshot_id}?"):
        fail("aborted")
    resp = oam_call(
        "RestoreSnapshot",
        oam.RestoreSnapshotRequest(snapshot_id=snapshot_id, confirm=True),
        timeout=None,
    )
    if OPTS.output == "json":
        return emit_json(to_dict(resp))
    out.print(resp.message, highlight=False)
    return None


@snapshot_app.command("delete")
def snapshot_delete(snapshot_id: Annotated[str, typer.Argument()]) -> None:
    """Delete one snapshot."""
    from ._proto.laredo_proto.v1 import oam_pb2 as oam

    resp = oam_call("DeleteSnapshot", oam.DeleteSnapshotRequest(snapshot_id=snapshot_id))
    if OPTS.output == "json":
        return emit_json(to_dict(resp))
    out.print(f"deleted {snapshot_id}", highlight=False)
    return None


@snapshot_app.command("prune")
def snapshot_prune(
    keep: Annotated[int, typer.Option("--keep", help="newest snapshots to keep")],
    table: Annotated[str | None, typer.Option("--table")] = None,
) -> None:
    """Delete all but the newest --keep snapshots."""
    from ._proto.laredo_proto.v1 import oam_pb2 as oam

    resp = oam_call("PruneSnapshots", oam.PruneSnapshotsRequest(keep=keep, table=table or ""))
    if OPTS.output == "json":
        return emit_json(to_dict(resp))
    out.print(f"deleted {resp.deleted_count}: {', '.join(resp.deleted_ids)}", highlight=False)
    return None


# -- dead letters --------------------------------------------------------------------------------


@dl_app.command("list")
def dl_list(
    pipeline: Annotated[str | None, typer.Argument()] = None,
    limit: Annotated[int, typer.Option("--limit")] = 100,
) -> None:
    """Dead letters of a pipeline (or of all)."""
    from ._proto.laredo_proto.v1 import oam_pb2 as oam

    resp = oam_call(
        "ListDeadLetters", oam.ListDeadLettersRequest(pipeline_id=pipeline or "", limit=limit)
    )
    if OPTS.output == "json":
        return emit_json([to_dict(e) for e in resp.entries])
    table_of(
        "dead letters",
        ["pipeline", "table", "action", "position", "error"],
        [
            [e.pipeline_id, f"{e.schema}.{e.table}", e.action, e.position, e.error]
            for e in resp.entries
        ],
    )
    return None


@dl_app.command("replay")
def dl_replay(pipeline: Annotated[str, typer.Argument()]) -> None:
    """Apply a pipeline's dead letters to its target again (removed once applied)."""
    from ._proto.laredo_proto.v1 import oam_pb2 as oam

    resp = oam_call("ReplayDeadLetters", oam.ReplayDeadLettersRequest(pipeline_id=pipeline))
    if OPTS.output == "json":
        return emit_json(to_dict(resp))
    out.print(resp.message, highlight=False)
    return None


@dl_app.command("purge")
def dl_purge(pipeline: Annotated[str | None, typer.Argument()] = None) -> None:
    """Delete the dead letters of a pipeline (or of all)."""
    from ._proto.laredo_proto.v1 import oam_pb2 as oam

    resp = oam_call("PurgeDeadLetters", oam.PurgeDeadLettersRequest(pipeline_id=pipeline or ""))
    if OPTS.output == "json":
        return emit_json(to_dict(resp))
    out.print(f"purged {resp.purged}", highlight=False)
    return None


# -- replay --------------------------------------------------------------------------------------


@replay_app.command("start")
def replay_start(
    *,
    snapshot_id: Annotated[str, typer.Argument()],
    tables_: Annotated[list[str] | None, typer.Argument(help="tables (default: all)")] = None,
    speed: Annotated[str, typer.Option("--speed", help="full, realtime or rows/s")] = "full",
    pipeline: Annotated[str | None, typer.Option("--pipeline")] = None,
    timestamp_field: Annotated[str | None, typer.Option("--timestamp-field")] = None,
    wait: Annotated[bool, typer.Option("--wait", help="follow until it ends")] = False,
) -> None:
    """Play a snapshot through the tables' targets; prints the replay id."""
    from ._proto.laredo_proto.v1 import oam_pb2 as oam

    resp = oam_call(
        "StartReplay",
        oam.StartReplayRequest(
            snapshot_id=snapshot_id,
            tables=tables_ or [],
            speed=speed,
            target_pipeline_id=pipeline or "",
            timestamp_field=timestamp_field or "",
        ),
    )
    if not wait:
        if OPTS.output == "json":
            return emit_json(to_dict(resp))
        print(resp.replay_id)
        return None
    while True:
        st = oam_call("GetReplayStatus", oam.GetReplayStatusRequest(replay_id=resp.replay_id))
        if st.state != "running":
            break
        time.sleep(0.2)
    _replay_out(st)
    raise typer.Exit(0 if st.state == "completed" else 1)


def _replay_out(st: Any) -> None:
    if OPTS.output == "json":
        emit_json(to_dict(st))
        return
    out.print(
        f"{st.replay_id}: {st.state}, {st.rows_replayed} rows in {st.elapsed_seconds:.2f}s, "
        f"{st.tables_completed} table(s) done {st.error}",
        highlight=False,
    )


@replay_app.command("status")
def replay_status(replay_id: Annotated[str, typer.Argument()]) -> None:
    """State and progress of a replay."""
    from ._proto.laredo_proto.v1 import oam_pb2 as oam

    _replay_out(oam_call("GetReplayStatus", oam.GetReplayStatusRequest(replay_id=replay_id)))


@replay_app.command("stop")
def replay_stop(replay_id: Annotated[str, typer.Argument()]) -> None:
    """Stop a running replay."""
    from ._proto.laredo_proto.v1 import oam_pb2 as oam

    resp = oam_call("StopReplay", oam.StopReplayRequest(replay_id=replay_id))
    if OPTS.output == "json":
        return emit_json(to_dict(resp))
    out.print("stopped" if resp.stopped else "was not running", highlight=False)
    return None


# -- plugins, version, quickstart ----------------------------------------------------------------


@app.command()
def plugins() -> None:
    """Installed plugins: distribution and version, the types they register, hooks."""
    from laredo.plugins import KINDS, get_plugin_manager, registry

    pm = get_plugin_manager()
    listed = pm.list_plugins()
    types: list[dict[str, str]] = []
    for kind in KINDS:
        for e in registry(kind).entries():
            types.append(
                {"kind": kind, "name": e.name, "provider": e.provider, "description": e.description}
            )
    if OPTS.output == "json":
        return emit_json({"plugins": listed, "types": types})
    table_of(
        "plugins",
        ["plugin", "provider", "hooks"],
        [[p["name"], p["provider"], ", ".join(sorted(p["hooks"]))] for p in listed],
    )
    table_of(
        "types",
        ["kind", "name", "provider", "description"],
        [[t["kind"], t["name"], t["provider"], t["description"]] for t in types],
    )
    return None


@app.command()
def version() -> None:
    """Print the version."""
    from . import __version__

    print(f"laredo {__version__}")


@app.command()
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
    from .quickstart import run_quickstart

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


_hooked = False


def _load_plugin_commands() -> None:
    global _hooked
    if _hooked:
        return
    _hooked = True
    try:
        from laredo.plugins import get_plugin_manager

        get_plugin_manager().call_cli_hook(app)
    except Exception as exc:
        err.print(f"[yellow]warning:[/yellow] a plugin failed to add CLI commands: {exc}")


_VALUE_OPTS = frozenset({"--address", "-a", "--token", "--output", "-o", "--timeout"})


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


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    builtin = {
        c.name or (c.callback.__name__ if c.callback else "") for c in app.registered_commands
    }
    builtin |= {g.name or "" for g in app.registered_groups}
    if _command_of(args) not in builtin:
        # plugin commands (and --help) need the plugins; built-in commands start faster without
        _load_plugin_commands()
    try:
        app(args=args, prog_name="laredo", standalone_mode=True)
    except SystemExit as exc:
        return int(exc.code or 0) if not isinstance(exc.code, str) else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
