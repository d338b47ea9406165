"""Configuration models of the ``postgresql`` source (pydantic v2, unknown keys rejected)."""

from __future__ import annotations

from typing import Any, Literal

import pydantic
from laredo.errors import ConfigError
from laredo.registry import format_validation_error
from laredo.units import Duration, OptionalDuration
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from .credentials import check_provider_spec
from .dsn import mask_dsn, mask_text

__all__ = [
    "PUBLISH_OPERATIONS",
    "BaselineOptions",
    "PostgresSourceOptions",
    "PublicationOptions",
    "PublicationTableOptions",
    "ReconnectOptions",
]

PUBLISH_OPERATIONS = ("insert", "update", "delete", "truncate")


class PublicationTableOptions(BaseModel):
    """Per-table publication settings (PostgreSQL 15+): a row filter and a column list."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    row_filter: str | None = None
    """SQL boolean expression, e.g. ``"active = true"`` (becomes ``WHERE (...)``)."""
    columns: tuple[str, ...] | None = None
    """Published columns (must include the replica identity columns)."""


class PublicationOptions(BaseModel):
    """The publication the stream reads.

    ``create`` unset (``None``, the default): when the publication does not exist, create it
    for the configured tables (logged); when it exists and Laredo created it (it carries a
    marker comment), add configured tables missing from it; never change or drop anything
    else. ``create=True``: create it when missing, then keep it in sync with the configured
    tables: add missing tables, update row filters / column lists, change ``publish``
    operations. Tables not configured here are dropped from the publication only when Laredo
    created it or when ``drop_unconfigured=True``. ``create=False``: never touch it; it must
    already exist with the configured tables.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str | None = None
    """Defaults to ``<slot_name>_pub``."""
    create: bool | None = None
    """``None``: create when absent; ``True``: create and keep in sync; ``False``: never touch."""
    publish: tuple[str, ...] = PUBLISH_OPERATIONS
    tables: dict[str, PublicationTableOptions] = Field(default_factory=dict)
    """Keyed by ``"schema.table"``."""
    drop_unconfigured: bool = False

    @field_validator("publish", mode="before")
    @classmethod
    def _split_publish(cls, value: Any) -> Any:
        if isinstance(value, str):
            return tuple(p.strip().lower() for p in value.split(",") if p.strip())
        return value

    @field_validator("publish")
    @classmethod
    def _check_publish(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        bad = [p for p in value if p not in PUBLISH_OPERATIONS]
        if bad:
            raise ValueError(
                f"unknown publish operation(s) {bad}: use any of {', '.join(PUBLISH_OPERATIONS)}"
            )
        if not value:
            raise ValueError("publish must name at least one operation")
        return tuple(p for p in PUBLISH_OPERATIONS if p in value)

    @field_validator("tables")
    @classmethod
    def _check_tables(
        cls, value: dict[str, PublicationTableOptions]
    ) -> dict[str, PublicationTableOptions]:
        for key in value:
            schema, dot, table = key.partition(".")
            if not dot or not schema or not table:
                raise ValueError(f"publication table key {key!r} must be 'schema.table'")
        return value


class ReconnectOptions(BaseModel):
    """Exponential backoff for stateful reconnects; the attempt count resets after success."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_attempts: int = Field(default=10, ge=1)
    initial_backoff: Duration = Field(default=1.0, gt=0)
    """Seconds, or a duration such as ``"500ms"``."""
    max_backoff: Duration = Field(default=30.0, gt=0)
    multiplier: float = Field(default=2.0, ge=1.0)


class BaselineOptions(BaseModel):
    """``baseline { mode = snapshot | chunked, chunk_rows = 10000 }``: how a table's baseline
    is read. ``snapshot`` (the default): one pass under the slot's exported snapshot, before the
    stream starts. ``chunked``: the stream starts at once and each table is read in key-range
    chunks of ``chunk_rows`` rows, each in a short transaction, merged with the stream by
    watermarks (no long snapshot held; tables without a primary key fall back to
    ``snapshot``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    mode: Literal["snapshot", "chunked"] = "snapshot"
    chunk_rows: int = Field(default=10_000, ge=1, le=10_000_000)


class PostgresSourceOptions(BaseModel):
    """Options of ``laredo.source("postgresql", ...)`` (and ``type = postgresql`` in HOCON)."""

    model_config = ConfigDict(extra="forbid")

    connection: str = ""
    """Any libpq connection string (URI or ``key=value``). Never logged unmasked. Required
    unless ``connection_provider`` gives the whole string."""
    connection_provider: Any = None
    """Called before every connection (first connect and each reconnect) with ``connection``;
    returns the string to use or parameters merged into it (a rotated password, an RDS IAM
    token): ``{type = env | file | <plugin>, ...}``, ``"package.module:function"`` or a
    callable (see :mod:`laredo_source_pg.credentials`)."""
    slot_mode: Literal["ephemeral", "stateful"] = "ephemeral"
    slot_name: str = "laredo_slot"
    publication: PublicationOptions = Field(default_factory=PublicationOptions)
    reconnect: ReconnectOptions = Field(default_factory=ReconnectOptions)
    always_baseline: bool = False
    baseline: BaselineOptions = Field(default_factory=BaselineOptions)
    """How tables are baselined (``snapshot`` or ``chunked``, see :class:`BaselineOptions`)."""
    """Stateful mode: baseline on every start anyway (the slot is re-created for alignment)."""
    lease: bool = True
    """Stateful mode: hold a PostgreSQL advisory lock keyed by the slot so exactly one process
    consumes it; another instance waits in ``init`` and takes over when the holder goes away."""
    lease_timeout: OptionalDuration = None
    """How long to wait for the lease in ``init`` (None: wait until ``close()``)."""
    status_interval: Duration = Field(default=10.0, gt=0)
    """Time between standby status updates when nothing else is sent (e.g. ``"200ms"``)."""
    heartbeat_interval: Duration = Field(default=0.5, gt=0)
    """While the stream is idle, how often to ask the server for its WAL position and pass it on
    as a heartbeat (it is also asked right after changes arrive). ``Engine.wait_for`` on an idle
    source answers within about this long; each request is one small message each way."""
    catalog_check_interval: Duration = Field(default=5.0, ge=0)
    """How often the stream asks the catalog whether a tracked table's columns or partitions
    changed (two small queries), so a schema change (RENAME COLUMN, ADD/DROP COLUMN, ALTER
    TYPE) reaches the pipelines without waiting for the table's next row change, and a
    partition attached, detached, dropped or truncated re-baselines its parent. 0: off (schema
    changes then arrive with the next row change; partition changes are not seen)."""
    batch_size: int = Field(default=10_000, ge=1)
    """Largest chunk of one transaction passed to ``on_changes`` (a bigger transaction is passed
    on in chunks while it is received, so memory stays bounded); baseline fetch size."""
    proto_version: Literal[1, 2] = 1
    on_slot_invalidated: Literal["rebaseline", "fail"] = "rebaseline"
    """``rebaseline``: drop and re-create an invalidated slot, then re-baseline.
    ``fail``: report ``SLOT_INVALIDATED`` at validation and leave the slot alone."""
    slot_failover: bool = True
    """Stateful mode on PostgreSQL 17+: make the slot failover-enabled, so a standby with
    ``sync_replication_slots = on`` keeps a copy and the stream continues from it after a
    promotion (no re-baseline). ``false``: a plain slot. Ignored on 16 and older, and on a
    standby (which cannot hold a failover slot)."""
    connect_timeout: Duration = Field(default=10.0, gt=0)
    """Durations are seconds or text such as ``"5s"`` (see :mod:`laredo.units`)."""

    @field_validator("connection_provider")
    @classmethod
    def _check_provider(cls, value: Any) -> Any:
        return check_provider_spec(value)

    @model_validator(mode="after")
    def _check_connection(self) -> PostgresSourceOptions:
        # Parse errors are raised by PostgresSource itself, with the password masked: a
        # pydantic error here would echo the raw input (and its password).
        if not self.connection.strip() and self.connection_provider is None:
            raise ValueError(
                "connection must be a libpq connection string (URI or key=value), unless "
                "connection_provider gives it"
            )
        return self

    @field_validator("slot_name")
    @classmethod
    def _check_slot(cls, value: str) -> str:
        ok = all(c.islower() or c.isdigit() or c == "_" for c in value)
        if not value or len(value) > 63 or not ok:
            raise ValueError(
                f"slot_name {value!r} must be 1-63 characters of lower-case letters, digits "
                "and underscores (PostgreSQL's rule for replication slot names)"
            )
        return value

    @property
    def publication_name(self) -> str:
        """``publication.name``, or ``<slot_name>_pub`` when not set."""
        return self.publication.name or f"{self.slot_name}_pub"

    @property
    def stateful(self) -> bool:
        return self.slot_mode == "stateful"

    @classmethod
    def from_kwargs(cls, **kwargs: Any) -> PostgresSourceOptions:
        """Validate keyword options (``PostgresSource(connection=..., ...)``); every problem in
        one ``ConfigError``, prefixed ``postgresql source:`` and with passwords masked.

        ``publication=None`` and ``reconnect=None`` mean the defaults.
        """
        for key in ("publication", "reconnect"):
            if key in kwargs and kwargs[key] is None:
                del kwargs[key]
        try:
            return cls.model_validate(kwargs)
        except pydantic.ValidationError as exc:
            problems = [f"postgresql source: {p}" for p in format_validation_error(exc)]
            raise ConfigError([mask_text(p) for p in problems]) from None

    def __repr_args__(self) -> Any:
        for key, value in super().__repr_args__():
            yield key, (mask_dsn(value) if key == "connection" else value)
