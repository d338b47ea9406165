"""Options of the ``replication-fanout`` target and the ``fanout`` cascade source.

Durations accept every form of :mod:`laredo.units` (seconds, ``"200ms"``, ``"5s"``,
``"1h30m"``, ``"2d"``, a ``timedelta``) and are stored as seconds.
"""

from __future__ import annotations

import ipaddress
from pathlib import Path
from typing import Any, Literal, TypeVar

import pydantic
from laredo.errors import ConfigError
from laredo.registry import format_validation_error
from laredo.units import Duration, OptionalDuration
from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator

__all__ = [
    "AuthOptions",
    "ClientBufferOptions",
    "FanOutSourceOptions",
    "GrpcOptions",
    "JournalOptions",
    "ReplicationFanoutOptions",
    "SnapshotOptions",
    "TlsOptions",
    "coerce_options",
    "is_loopback",
    "listener_problem",
    "read_token_file",
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


def is_loopback(host: str) -> bool:
    """True for an address only this machine can reach (``localhost``, 127.0.0.0/8, ``::1``).
    Anything else, ``0.0.0.0``, ``::``, an empty host or a host name included, is not."""
    h = host.strip().strip("[]").lower()
    if h == "localhost":
        return True
    try:
        return ipaddress.ip_address(h).is_loopback
    except ValueError:
        return False


def read_token_file(path: str, key: str) -> str:
    """The stripped token in ``path``; ConfigError naming ``key`` when it is unreadable or
    empty (a secret mounted before it was filled must not turn authentication off)."""
    try:
        token = Path(path).read_text().strip()
    except OSError as exc:
        raise ConfigError(f"{key}: cannot read {path!r}: {exc.strerror or exc}") from None
    if not token:
        raise ConfigError(f"{key}: {path!r} is empty; put the token in it")
    return token


def _check_token(v: SecretStr | None) -> SecretStr | None:
    if v is not None and not v.get_secret_value().strip():
        raise ValueError("the token is empty or whitespace; set a non-empty token")
    return v


def _check_token_file(v: str | None) -> str | None:
    if v is not None:
        try:
            read_token_file(v, "token_file")
        except ConfigError as exc:
            raise ValueError(str(exc).removeprefix("token_file: ")) from None
    return v


class AuthOptions(OptionsModel):
    """``grpc.auth { token | token_file | allow_unauthenticated }`` of a fan-out port: every
    RPC must carry ``authorization: Bearer <token>``. ``allow_unauthenticated`` lets a port
    bound off loopback run without a token (with a WARNING at every start)."""

    token: SecretStr | None = None
    token_file: str | None = None
    allow_unauthenticated: bool = False

    @field_validator("token")
    @classmethod
    def _token(cls, v: SecretStr | None) -> SecretStr | None:
        return _check_token(v)

    @field_validator("token_file")
    @classmethod
    def _token_file(cls, v: str | None) -> str | None:
        return _check_token_file(v)

    @model_validator(mode="after")
    def _one_token(self) -> AuthOptions:
        if self.token is not None and self.token_file is not None:
            raise ValueError("set one of token and token_file, not both")
        return self

    def secret(self) -> str | None:
        """The token (stripped; read from ``token_file`` now), or None when none is set."""
        if self.token is not None:
            return self.token.get_secret_value().strip()
        if self.token_file is not None:
            return read_token_file(self.token_file, "grpc.auth.token_file")
        return None


def listener_problem(host: str, auth: AuthOptions, key: str = "grpc") -> str | None:
    """Why a listener on ``host`` may not start with ``auth`` (None: it may). Fail closed: off
    loopback it needs a token or an explicit ``allow_unauthenticated``."""
    if is_loopback(host) or auth.token is not None or auth.token_file is not None:
        return None
    if auth.allow_unauthenticated:
        return None
    return (
        f"{key}.host = {host!r} is reachable from other machines but no token is set: set "
        f"{key}.auth.token or {key}.auth.token_file (or {key}.auth.allow_unauthenticated = "
        "true to serve every row to anyone who can reach the port)"
    )


class GrpcOptions(OptionsModel):
    """``grpc { port, host, max_clients, tls, auth, drain_timeout, max_batch, linger }``."""

    port: int = Field(default=4002, ge=0, le=65535, description="0 picks a free port")
    host: str = Field(default="127.0.0.1", description="bind address; 0.0.0.0 for all")
    max_clients: int = Field(default=0, ge=0, description="0 = unlimited")
    tls: TlsOptions | None = None
    auth: AuthOptions = Field(default_factory=AuthOptions)
    drain_timeout: Duration = 5.0
    max_batch: int = Field(default=1000, ge=1, description="rows or entries per message")
    linger: OptionalDuration = Field(
        default=None,
        description="minimum time between two reads of a stream, counted from the previous "
        "read, to batch changes (default: 0.2 ms per connected client, 1-20 ms)",
    )

    @model_validator(mode="after")
    def _fail_closed(self) -> GrpcOptions:
        problem = listener_problem(self.host, self.auth, "grpc")
        if problem is not None:
            raise ValueError(problem)
        return self


class ClientBufferOptions(OptionsModel):
    """``client_buffer { size, policy, max_wait }``: how far a live client may fall behind
    (``max_size`` is accepted for ``size``)."""

    size: int = Field(default=10_000, ge=1)
    policy: Literal["drop_disconnect", "slow_down"] = "drop_disconnect"
    max_wait: Duration = Field(default=30.0, description="slow_down: longest writer wait")

    @model_validator(mode="before")
    @classmethod
    def _max_size(cls, v: Any) -> Any:
        if isinstance(v, dict) and "max_size" in v and "size" not in v:
            v = {("size" if k == "max_size" else k): x for k, x in v.items()}
        return v


class ArchiveOptions(OptionsModel):
    """``archive { uri, storage_options }``: a Delta table of the same table, kept by a
    ``delta`` target, that clients behind the journal catch up from (see ``.archive``)."""

    uri: str
    storage_options: dict[str, str] = Field(default_factory=dict, repr=False)


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


class FanOutSourceOptions(OptionsModel):
    """Options of the ``fanout`` cascade source."""

    address: str
    table: str | None = None
    client_id: str = ""
    filters: list[Any] = Field(default_factory=list)
    root_certificates_file: str | None = None
    token: SecretStr | None = None
    """Sent as ``authorization: Bearer <token>`` on every call (the server's grpc.auth)."""
    token_file: str | None = None
    client_cert_file: str | None = None
    """PEM client certificate for a server that requires one (``tls.client_ca_file``)."""
    client_key_file: str | None = None

    @field_validator("token")
    @classmethod
    def _token(cls, v: SecretStr | None) -> SecretStr | None:
        return _check_token(v)

    @field_validator("token_file")
    @classmethod
    def _token_file(cls, v: str | None) -> str | None:
        return _check_token_file(v)

    def secret(self) -> str | None:
        """The token to send (stripped; read from ``token_file`` now), or None."""
        if self.token is not None:
            return self.token.get_secret_value().strip()
        if self.token_file is not None:
            return read_token_file(self.token_file, "token_file")
        return None

    @model_validator(mode="after")
    def _credentials(self) -> FanOutSourceOptions:
        if self.token is not None and self.token_file is not None:
            raise ValueError("set one of token and token_file, not both")
        if (self.client_cert_file is None) != (self.client_key_file is None):
            raise ValueError("client_cert_file and client_key_file go together; set both")
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
