"""laredo-target-fanout's plugin registration: the ``replication-fanout`` target, the
``fanout`` cascade source and the ``laredo fanout ...`` CLI commands."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any, Literal

import laredo
import pydantic
from laredo.errors import ConfigError
from laredo.plugins import Registry, format_validation_error
from pydantic import BaseModel, ConfigDict, Field, field_validator

__all__ = [
    "ClientBufferOptions",
    "FanOutSourceOptions",
    "GrpcOptions",
    "JournalOptions",
    "ReplicationFanoutOptions",
    "SnapshotOptions",
    "TlsOptions",
    "coerce_options",
    "parse_duration",
]

_DUR = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$")
_UNIT = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, None: 1.0}


def parse_duration(value: Any) -> float | None:
    """Seconds from a number, a ``timedelta`` or text like ``200ms``, ``5s``, ``24h``, ``7d``."""
    if value is None:
        return None
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, bool):
        raise ValueError("expected a duration, got a boolean")
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        m = _DUR.match(value)
        if m:
            return float(m.group(1)) * _UNIT[m.group(2)]
    raise ValueError(f"invalid duration {value!r}: use seconds or text like 200ms, 5s, 24h, 7d")


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True)


class JournalOptions(_Model):
    """``journal { max_entries, max_age }``: the change journal's bounds."""

    max_entries: int = Field(default=100_000, ge=1)
    max_age: float | None = Field(
        default=86_400.0, description="seconds (or '24h'); None: no age limit"
    )

    @field_validator("max_age", mode="before")
    @classmethod
    def _dur(cls, v: Any) -> Any:
        return parse_duration(v)


class SnapshotOptions(_Model):
    """``snapshot { interval, keep_count, max_age, store, serializer }``."""

    interval: float | None = Field(default=None, description="periodic snapshot interval")
    keep_count: int = Field(default=3, ge=0, description="snapshots kept (0 = unlimited)")
    max_age: float | None = None
    store: Any = Field(
        default=None,
        description='a SnapshotStore, or {"type": "local", "path": ...} to persist snapshots',
    )
    serializer: Any = "jsonl"

    @field_validator("interval", "max_age", mode="before")
    @classmethod
    def _dur(cls, v: Any) -> Any:
        out = parse_duration(v)
        return out or None

    @field_validator("store")
    @classmethod
    def _store(cls, v: Any) -> Any:
        if v is None or callable(getattr(v, "save", None)):
            return v
        if isinstance(v, dict) and isinstance(v.get("type", "local"), str):
            return v
        raise ValueError('must be a SnapshotStore or {"type": "local", "path": "..."}')


class TlsOptions(_Model):
    cert_file: str
    key_file: str
    client_ca_file: str | None = None


class GrpcOptions(_Model):
    """``grpc { port, host, max_clients, tls, drain_timeout, max_batch }``."""

    port: int = Field(default=4002, ge=0, le=65535, description="0 picks a free port")
    host: str = Field(default="127.0.0.1", description="bind address; 0.0.0.0 for all")
    max_clients: int = Field(default=0, ge=0, description="0 = unlimited")
    tls: TlsOptions | None = None
    drain_timeout: float = 5.0
    max_batch: int = Field(default=1000, ge=1, description="rows or entries per message")
    linger: float | None = Field(
        default=None,
        description="minimum time between two reads of a stream, counted from the previous "
        "read, to batch changes (default: 0.2 ms per connected client, 1-20 ms)",
    )

    @field_validator("drain_timeout", "linger", mode="before")
    @classmethod
    def _dur(cls, v: Any) -> Any:
        return parse_duration(v)


class ClientBufferOptions(_Model):
    """``client_buffer { size, policy, max_wait }``: how far a live client may fall behind."""

    size: int = Field(default=10_000, ge=1)
    policy: Literal["drop_disconnect", "slow_down"] = "drop_disconnect"
    max_wait: float = Field(default=30.0, description="slow_down: longest writer wait per client")

    @field_validator("size", mode="before")
    @classmethod
    def _alias(cls, v: Any) -> Any:
        return v

    @field_validator("max_wait", mode="before")
    @classmethod
    def _dur(cls, v: Any) -> Any:
        return parse_duration(v)


class ReplicationFanoutOptions(_Model):
    """Options of the ``replication-fanout`` target."""

    journal: JournalOptions = Field(default_factory=JournalOptions)
    snapshot: SnapshotOptions = Field(default_factory=SnapshotOptions)
    grpc: GrpcOptions = Field(default_factory=GrpcOptions)
    client_buffer: ClientBufferOptions = Field(default_factory=ClientBufferOptions)
    heartbeat_interval: float = 5.0
    observer: Any = None

    @field_validator("client_buffer", mode="before")
    @classmethod
    def _max_size(cls, v: Any) -> Any:
        if isinstance(v, dict) and "max_size" in v and "size" not in v:
            v = {("size" if k == "max_size" else k): x for k, x in v.items()}
        return v

    @field_validator("heartbeat_interval", mode="before")
    @classmethod
    def _dur(cls, v: Any) -> Any:
        return parse_duration(v)


class FanOutSourceOptions(_Model):
    """Options of the ``fanout`` cascade source."""

    address: str
    table: str | None = None
    client_id: str = ""
    filters: list[Any] = Field(default_factory=list)
    root_certificates_file: str | None = None


def coerce_options(model: type[BaseModel], value: Any, where: str) -> Any:
    """A validated options model from None, a model instance or a mapping."""
    if value is None:
        return model()
    if isinstance(value, model):
        return value
    if isinstance(value, BaseModel):
        value = value.model_dump()
    if model is ClientBufferOptions and isinstance(value, dict) and "max_size" in value:
        value = {("size" if k == "max_size" else k): x for k, x in value.items()}
    try:
        return model.model_validate(value)
    except pydantic.ValidationError as exc:
        raise ConfigError(
            [f"replication-fanout target: {p}" for p in format_validation_error(exc, where)]
        ) from None


def _build_target(**kwargs: Any) -> Any:
    from .target import FanOutTarget

    return FanOutTarget(**kwargs)


def _build_source(**kwargs: Any) -> Any:
    from .source import FanOutSource

    return FanOutSource(**kwargs)


@laredo.hookimpl
def laredo_register_targets(registry: Registry) -> None:
    registry.add(
        "replication-fanout",
        _build_target,
        options=ReplicationFanoutOptions,
        description="in-memory state + change journal + snapshots served to replicas over gRPC",
    )


@laredo.hookimpl
def laredo_register_sources(registry: Registry) -> None:
    registry.add(
        "fanout",
        _build_source,
        options=FanOutSourceOptions,
        description="a replication-fanout server's table as a source (cascade)",
    )


@laredo.hookimpl
def laredo_register_cli_commands(app: Any) -> None:
    from .cli import register

    register(app)
