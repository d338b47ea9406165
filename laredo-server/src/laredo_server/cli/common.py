"""What every command of the ``laredo`` CLI shares: the per-invocation state kept in Click's
context object (options, consoles, the gRPC client), output helpers and ``fail``.

Commands that talk to a server name the RPC and its request fields
(``cli.oam("GetTableStatus", schema=s, table=t)``); the request message is built from the
service descriptor here, so command modules never import gRPC or protobuf, and commands that
do not call a server (``--help``, ``version``, ``config validate``) start without them.
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, Literal, NoReturn

import pluggy
import typer
from rich.console import Console
from rich.table import Table as RichTable

from ..addresses import DEFAULT_ADDRESS

__all__ = [
    "CliState",
    "Client",
    "Options",
    "hookimpl",
    "split_table",
    "state",
    "state_name",
    "table_ref",
    "to_dict",
    "to_yaml",
]

hookimpl = pluggy.HookimplMarker("laredo")
"""The same marker as ``laredo.hookimpl`` (pluggy matches markers by the project name,
``laredo``). The first-party command modules use this instance so that commands which only
talk to a server do not import the engine (``import laredo`` costs ~0.3 s, mostly pydantic)."""

Service = Literal["oam", "query"]


@dataclass(frozen=True, slots=True)
class Options:
    """The global options of one invocation."""

    address: str = DEFAULT_ADDRESS
    token: str | None = None
    output: str = "table"
    timeout: float = 10.0
    tls: bool = False
    tls_ca: str | None = None
    tls_cert: str | None = None
    tls_key: str | None = None


class Client:
    """A channel to the server with stubs of both services; errors end the command through
    ``fail`` (UNAVAILABLE with a hint about ``--address``)."""

    def __init__(self, cli: CliState) -> None:
        import grpc  # noqa: PLC0415 - lazy: grpc and the stubs add ~0.15 s; only commands that call a server
        from laredo.grpc_auth import channel_credentials  # noqa: PLC0415 - lazy: as above

        from .._proto.laredo_proto.v1 import (  # noqa: PLC0415 - lazy: as above
            oam_pb2,
            oam_pb2_grpc,
            query_pb2,
            query_pb2_grpc,
        )

        self.cli = cli
        self._grpc = grpc
        opts = cli.options
        if opts.tls:
            try:
                ca = Path(opts.tls_ca).read_bytes() if opts.tls_ca else None
                cert = Path(opts.tls_cert).read_bytes() if opts.tls_cert else None
                key = Path(opts.tls_key).read_bytes() if opts.tls_key else None
            except OSError as exc:
                cli.fail(
                    f"cannot read {exc.filename}: {exc.strerror} (--tls-ca/--tls-cert/--tls-key)",
                    code=2,
                )
            creds = channel_credentials(ca, key, cert)
            self.channel = grpc.secure_channel(opts.address, creds)
        else:
            self.channel = grpc.insecure_channel(opts.address)
        self.stubs: dict[Service, Any] = {
            "oam": oam_pb2_grpc.LaredoOAMServiceStub(self.channel),  # type: ignore[no-untyped-call]
            "query": query_pb2_grpc.LaredoQueryServiceStub(  # type: ignore[no-untyped-call]
                self.channel
            ),
        }
        self._modules: dict[Service, tuple[ModuleType, str]] = {
            "oam": (oam_pb2, "LaredoOAMService"),
            "query": (query_pb2, "LaredoQueryService"),
        }

    def metadata(self) -> list[tuple[str, str]]:
        token = self.cli.options.token
        return [("authorization", f"Bearer {token}")] if token else []

    def request(self, service: Service, method: str, fields: dict[str, Any]) -> Any:
        """The request message of ``service.method`` with ``fields`` (nested messages may be
        given as dicts)."""
        module, name = self._modules[service]
        input_type = module.DESCRIPTOR.services_by_name[name].methods_by_name[method].input_type
        return getattr(module, input_type.name)(**fields)

    def call(
        self, service: Service, method: str, fields: dict[str, Any], timeout: float | None
    ) -> Any:
        """A unary call; ``timeout`` None waits as long as the server takes."""
        try:
            return getattr(self.stubs[service], method)(
                self.request(service, method, fields), timeout=timeout, metadata=self.metadata()
            )
        except self._grpc.RpcError as exc:
            self._fail(exc)

    def stream(self, service: Service, method: str, fields: dict[str, Any]) -> Iterator[Any]:
        """The responses of a server-streaming call, until the server ends it."""
        try:
            yield from getattr(self.stubs[service], method)(
                self.request(service, method, fields), metadata=self.metadata()
            )
        except self._grpc.RpcError as exc:
            self._fail(exc)

    def _fail(self, exc: Any) -> NoReturn:
        code = exc.code()
        details = exc.details() or ""
        if code == self._grpc.StatusCode.UNAVAILABLE:
            self.cli.fail(
                f"cannot reach the server at {self.cli.options.address} ({details}); "
                "is it running? (--address / LAREDO_ADDRESS)"
            )
        self.cli.fail(f"{code.name}: {details}")


PIPED_WIDTH = 10_000


def console(*, stderr: bool = False) -> Console:
    """A console for stdout (or stderr): the terminal's width on a terminal or with
    ``COLUMNS``; piped into a file or another program, lines never wrap (a table is as wide
    as its content), so ``grep`` and ``awk`` see one row per line."""
    stream = sys.stderr if stderr else sys.stdout
    if os.environ.get("COLUMNS") or stream.isatty():
        return Console(stderr=stderr)
    return Console(stderr=stderr, width=PIPED_WIDTH)


class CliState:
    """Per-invocation state, kept in ``ctx.obj`` by the global options callback."""

    def __init__(self, options: Options | None = None) -> None:
        self.options = options or Options()
        self.out = console()
        self.err = console(stderr=True)
        self._client: Client | None = None

    @property
    def json(self) -> bool:
        """``--output json`` (or ``yaml``): one document per command."""
        return self.options.output in ("json", "yaml")

    def fail(self, message: str, code: int = 1) -> NoReturn:
        """Print one error line on stderr and exit with ``code``."""
        self.err.print(f"[red]error:[/red] {message}", highlight=False, soft_wrap=True)
        raise typer.Exit(code)

    def client(self) -> Client:
        if self._client is None:
            self._client = Client(self)
        return self._client

    def oam(self, method: str, *, timeout: float | None = -1, **fields: Any) -> Any:
        """Call ``LaredoOAMService.<method>``; ``timeout`` -1 means ``--timeout``."""
        return self.client().call("oam", method, fields, self._timeout(timeout))

    def query(self, method: str, **fields: Any) -> Any:
        """Call ``LaredoQueryService.<method>`` with ``--timeout``."""
        return self.client().call("query", method, fields, self.options.timeout)

    def stream(self, service: Service, method: str, **fields: Any) -> Iterator[Any]:
        return self.client().stream(service, method, fields)

    def _timeout(self, timeout: float | None) -> float | None:
        return self.options.timeout if timeout == -1 else timeout

    # output -----------------------------------------------------------------------------
    def emit_json(self, data: Any) -> None:
        """Print ``data`` as JSON, or as YAML with ``--output yaml``."""
        if self.options.output == "yaml":
            print(to_yaml(json.loads(json.dumps(data, default=str))), end="")
        else:
            print(json.dumps(data, indent=2, default=str))

    def table(self, title: str, columns: list[str], rows: list[list[Any]]) -> None:
        t = RichTable(title=title, title_justify="left")
        for c in columns:
            t.add_column(c, overflow="fold")
        for r in rows:
            t.add_row(*["" if v is None else str(v) for v in r])
        self.out.print(t)


_PLAIN = re.compile(r"[A-Za-z_][A-Za-z0-9_./-]*")
_YAML_WORDS = frozenset({"true", "false", "yes", "no", "on", "off", "null", "y", "n", "~"})


def _yaml_scalar(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return json.dumps(value)
    if value == {}:
        return "{}"
    if value == []:
        return "[]"
    text = str(value)
    if _PLAIN.fullmatch(text) and text.lower() not in _YAML_WORDS:
        return text
    return json.dumps(text, ensure_ascii=False)  # a JSON string is a YAML double-quoted one


def _yaml_lines(value: Any, depth: int) -> list[str]:
    pad = "  " * depth
    nested = (dict, list)
    out: list[str] = []
    if isinstance(value, dict) and value:
        for key, item in value.items():
            if isinstance(item, nested) and item:
                out.append(f"{pad}{_yaml_scalar(str(key))}:")
                out += _yaml_lines(item, depth + 1)
            else:
                out.append(f"{pad}{_yaml_scalar(str(key))}: {_yaml_scalar(item)}")
    elif isinstance(value, list) and value:
        for item in value:
            if isinstance(item, nested) and item:
                sub = _yaml_lines(item, depth + 1)
                out += [f"{pad}- {sub[0].lstrip()}", *sub[1:]]
            else:
                out.append(f"{pad}- {_yaml_scalar(item)}")
    else:
        out.append(pad + _yaml_scalar(value))
    return out


def to_yaml(data: Any) -> str:
    """A JSON-compatible value (dicts, lists, strings, numbers, booleans, None) as a YAML
    document (block style; strings quoted whenever they could read as something else)."""
    return "\n".join(_yaml_lines(data, 0)) + "\n"


def state(ctx: typer.Context) -> CliState:
    """The invocation's state (created with default options when no callback set it)."""
    return ctx.ensure_object(CliState)


def to_dict(msg: Any) -> Any:
    """A response message as the protobuf JSON mapping (field names as in the .proto)."""
    from google.protobuf.json_format import (  # noqa: PLC0415 - lazy: protobuf loads only with a response
        MessageToDict,
    )

    return MessageToDict(
        msg, preserving_proto_field_name=True, always_print_fields_with_no_presence=True
    )


def split_table(text: str) -> tuple[str, str]:
    """``schema.table`` (schema defaults to public)."""
    if "." in text:
        schema, _, table = text.partition(".")
        return schema, table
    return "public", text


def table_ref(table: str, pipeline: str | None) -> dict[str, str]:
    """The ``TableRef`` fields of ``schema.table`` (and a pipeline id when given)."""
    s, t = split_table(table)
    return {"schema": s, "table": t, "pipeline_id": pipeline or ""}


def state_name(value: int, prefix: str) -> str:
    """The name of a service or pipeline state enum value without its prefix."""
    from .._proto.laredo_proto.v1 import oam_pb2  # noqa: PLC0415 - lazy: protobuf loads only with a response

    enum = oam_pb2.ServiceState if prefix == "SERVICE_STATE_" else oam_pb2.PipelineState
    return str(enum.Name(value)).removeprefix(prefix)
