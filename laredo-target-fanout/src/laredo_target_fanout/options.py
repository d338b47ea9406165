"""Options of the ``replication-fanout`` target and the ``fanout`` cascade source.

Durations accept every form of :mod:`laredo.units` (seconds, ``"200ms"``, ``"5s"``,
``"1h30m"``, ``"2d"``, a ``timedelta``) and are stored as seconds.

Go Laredo's spellings of this target's options are accepted, each reported once through
:func:`laredo.deprecation.deprecated_option` (a note of ``laredo config validate``):
``max_clients`` (write ``grpc { max_clients }``), ``client_buffer { max_size }`` (``size``),
``snapshot { retention { keep_count, max_age } }`` (``snapshot { keep_count, max_age }``).
Go's cold ``archive { store, ... }`` is an error naming its replacement.
"""

from __future__ import annotations

from typing import Any, Literal, TypeVar

import pydantic
from laredo.auth import (
    ListenerAuth,
    TokenConfig,
    auth_problems,
    is_loopback,
    open_listener_warning,
)
from laredo.deprecation import deprecated_option
from laredo.errors import ConfigError
from laredo.preflight import ListenerClaim
from laredo.registry import format_validation_error
from laredo.units import Duration, OptionalDuration
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic_core import PydanticCustomError

__all__ = [
    "FANOUT_PORT",
    "ClientBufferOptions",
    "FanOutAuth",
    "FanOutSourceOptions",
    "GrpcOptions",
    "JournalOptions",
    "ReplicationFanoutOptions",
    "SnapshotOptions",
    "TlsOptions",
    "coerce_options",
]


class OptionsModel(BaseModel):
    """Base of the options models: unknown keys are errors."""

    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True)


class JournalOptions(OptionsModel):
    """``journal { max_entries, max_age }``: the change journal's bounds."""

    max_entries: int = Field(default=100_000, ge=1)
    max_age: OptionalDuration = Field(
        default=86_400.0, description="seconds (or '24h'); None: no age limit"
    )


class SnapshotOptions(OptionsModel):
    """``snapshot { interval, keep_count, max_age, store, serializer }``."""

    interval: OptionalDuration = Field(
        default=None, description="periodic snapshot interval (None or 0: off)"
    )
    keep_count: int = Field(default=3, ge=0, description="snapshots kept (0 = unlimited)")
    max_age: OptionalDuration = Field(default=None, description="None or 0: no age limit")
    store: Any = Field(
        default=None,
        description='a SnapshotStore, or {"type": "local", "path": ...} to persist snapshots',
    )
    serializer: Any = "jsonl"

    @model_validator(mode="before")
    @classmethod
    def _go_retention(cls, v: Any) -> Any:
        """Go's ``retention { keep_count, max_age }``, moved up one level."""
        if not isinstance(v, dict) or not isinstance(v.get("retention"), dict):
            return v
        v = dict(v)
        retention = dict(v.pop("retention"))
        for key in ("keep_count", "max_age"):
            if key in retention:
                if key in v:
                    raise ValueError(f"give {key} or retention.{key} (Go's spelling), not both")
                v[key] = retention.pop(key)
                deprecated_option(
                    f"snapshot.retention.{key} is Go Laredo's spelling; write snapshot.{key}"
                )
        if retention:
            raise ValueError(
                f"retention.{', '.join(sorted(retention))}: unknown key (retention has "
                "keep_count and max_age)"
            )
        return v

    @field_validator("interval", "max_age")
    @classmethod
    def _zero_is_off(cls, v: float | None) -> float | None:
        return v or None

    @field_validator("store")
    @classmethod
    def _store(cls, v: Any) -> Any:
        if v is None or callable(getattr(v, "save", None)):
            return v
        if isinstance(v, dict) and isinstance(v.get("type", "local"), str):
            return v
        raise ValueError('must be a SnapshotStore or {"type": "local", "path": "..."}')


class TlsOptions(OptionsModel):
    cert_file: str
    key_file: str
    client_ca_file: str | None = None


class FanOutAuth(ListenerAuth):
    """``grpc.auth { token | token_file | allow_unauthenticated }`` of a fan-out port: every
    RPC must carry ``authorization: Bearer <token>``; the rule and its messages are
    :mod:`laredo.auth`'s. ``protect_reads`` is rejected: every fan-out RPC reads rows, so the
    token already guards all of them."""

    @model_validator(mode="before")
    @classmethod
    def _no_protect_reads(cls, v: Any) -> Any:
        if isinstance(v, dict) and "protect_reads" in v:
            raise PydanticCustomError(
                "protect_reads",
                "protect_reads does not apply to a fan-out port (every RPC there reads rows, "
                "so a token guards all of them); remove it",
            )
        return v


FANOUT_PORT = "the fan-out replication port"


class GrpcOptions(OptionsModel):
    """``grpc { port, host, max_clients, tls, auth, drain_timeout, max_batch, linger }``."""

    port: int = Field(default=4002, ge=0, le=65535, description="0 picks a free port")
    host: str = Field(default="127.0.0.1", description="bind address; 0.0.0.0 for all")
    max_clients: int = Field(default=0, ge=0, description="0 = unlimited")
    tls: TlsOptions | None = None
    auth: FanOutAuth = Field(default_factory=FanOutAuth)
    drain_timeout: Duration = 5.0
    max_batch: int = Field(default=1000, ge=1, description="rows or entries per message")
    linger: OptionalDuration = Field(
        default=None,
        description="minimum time between two reads of a stream, counted from the previous "
        "read, to batch changes (default: 0.2 ms per connected client, 1-20 ms)",
    )

    @model_validator(mode="after")
    def _fail_closed(self) -> GrpcOptions:
        problems = self.problems()
        if problems:
            raise PydanticCustomError("auth", "; ".join(problems))
        return self

    def problems(self, key: str = "grpc") -> list[str]:
        """Why this port may not start (:func:`laredo.auth.auth_problems`), keys under ``key``."""
        return auth_problems(self.auth, key=f"{key}.auth", host=self.host, serves=FANOUT_PORT)


class ClientBufferOptions(OptionsModel):
    """``client_buffer { size, policy, max_wait }``: how far a live client may fall behind
    (Go's ``max_size`` is accepted for ``size``, with a deprecation note)."""

    size: int = Field(default=10_000, ge=1)
    policy: Literal["drop_disconnect", "slow_down"] = "drop_disconnect"
    max_wait: Duration = Field(default=30.0, description="slow_down: longest writer wait")

    @model_validator(mode="before")
    @classmethod
    def _max_size(cls, v: Any) -> Any:
        if isinstance(v, dict) and "max_size" in v and "size" not in v:
            v = {("size" if k == "max_size" else k): x for k, x in v.items()}
            deprecated_option(
                "client_buffer.max_size is Go Laredo's spelling; write client_buffer.size"
            )
        return v


class ArchiveOptions(OptionsModel):
    """``archive { uri, storage_options }``: a Delta table of the same table, kept by a
    ``delta`` target, that clients behind the journal catch up from (see ``.archive``)."""

    uri: str
    storage_options: dict[str, str] = Field(default_factory=dict, repr=False)
    max_entries: int = Field(default=100_000, ge=1)
    """Most changes one client replays from the archive; a client further behind gets a full
    snapshot (the replay is held in memory until it is sent)."""
    max_concurrent: int = Field(default=2, ge=1)
    """Archive replays read at once (each reads outside the target's lock); more wait."""


class ReplicationFanoutOptions(OptionsModel):
    """Options of the ``replication-fanout`` target. ``grpc = None``: the plugin factory does
    not serve the target (it can be added to a ``ReplicationServer`` by hand)."""

    journal: JournalOptions = Field(default_factory=JournalOptions)
    snapshot: SnapshotOptions = Field(default_factory=SnapshotOptions)
    grpc: GrpcOptions | None = Field(default_factory=GrpcOptions)
    client_buffer: ClientBufferOptions = Field(default_factory=ClientBufferOptions)
    heartbeat_interval: Duration = Field(default=5.0, gt=0)
    archive: ArchiveOptions | None = None
    observer: Any = None

    @model_validator(mode="before")
    @classmethod
    def _go_max_clients(cls, v: Any) -> Any:
        """Go's target-level ``max_clients``, moved into ``grpc``."""
        if not isinstance(v, dict) or "max_clients" not in v:
            return v
        grpc = v.get("grpc")
        if grpc is None:
            grpc = {}
        if not isinstance(grpc, dict) or "max_clients" in grpc:
            return v  # left as is: the validation names the key
        v = dict(v)
        v["grpc"] = {**grpc, "max_clients": v.pop("max_clients")}
        deprecated_option("max_clients is Go Laredo's spelling; write grpc { max_clients = ... }")
        return v

    @field_validator("archive", mode="before")
    @classmethod
    def _go_archive(cls, v: Any) -> Any:
        if isinstance(v, dict) and "uri" not in v:
            raise ValueError(
                "Go Laredo's cold archive (laredo-snapshotter) is replaced by a Delta table: "
                "keep one with a delta target on the same table and write archive { uri = <its "
                "uri> } here (pip install laredo-target-fanout[archive]); without it a client "
                "that fell behind the journal gets a full snapshot"
            )
        return v

    def listener_claims(self) -> list[ListenerClaim]:
        """The port this target serves on (:class:`laredo.preflight.ClaimsListeners`): targets
        sharing it must have identical ``grpc`` sections (checked at config time)."""
        g = self.grpc
        if g is None:
            return []
        warning = ""
        if g.auth.allow_unauthenticated and not g.auth.configured and not is_loopback(g.host):
            warning = open_listener_warning(
                key="grpc.auth", host=g.host, port=g.port, serves=FANOUT_PORT
            )
        return [ListenerClaim("grpc", g.host, g.port, g.model_dump(), warning)]


class FanOutSourceOptions(OptionsModel, TokenConfig):
    """Options of the ``fanout`` cascade source. ``token`` / ``token_file`` (from
    :class:`laredo.auth.TokenConfig`) is sent as ``authorization: Bearer <token>`` on every
    call (the server's ``grpc.auth``)."""

    address: str
    table: str | None = None
    client_id: str = ""
    filters: list[Any] = Field(default_factory=list)
    root_certificates_file: str | None = None
    client_cert_file: str | None = None
    """PEM client certificate for a server that requires one (``tls.client_ca_file``)."""
    client_key_file: str | None = None

    @model_validator(mode="after")
    def _credentials(self) -> FanOutSourceOptions:
        problems = self.token_problems("")
        if (self.client_cert_file is None) != (self.client_key_file is None):
            problems.append("client_cert_file and client_key_file go together; set both")
        if problems:
            raise PydanticCustomError("credentials", "; ".join(problems))
        return self


M = TypeVar("M", bound=BaseModel)


def coerce_options(model: type[M], value: Any, where: str = "") -> M:
    """A validated ``model`` from None (the defaults), a model instance or a mapping; a
    ``ConfigError`` lists every problem, each prefixed with ``where``."""
    if value is None:
        return model()
    if isinstance(value, model):
        return value
    if isinstance(value, BaseModel):
        value = value.model_dump()
    try:
        return model.model_validate(value)
    except pydantic.ValidationError as exc:
        raise ConfigError(
            [f"replication-fanout target: {p}" for p in format_validation_error(exc, where)]
        ) from None
