"""Connection providers: the connection string and password, asked for at every connect.

A source built with ``connection_provider`` calls it before each connection it opens (the
first, and every reconnect after a failure), with the configured ``connection`` string; the
provider returns the string to use, whole, or libpq parameters merged into the configured one
(``{"password": ...}``). So a rotated password or a short-lived token (RDS IAM) is picked up at
the next reconnect. ``connection_provider`` is one of:

* ``{type = env, variable = PGPASSWORD}``: re-reads an environment variable each time;
* ``{type = file, path = /run/secrets/pg}``: re-reads a file each time (trailing newline
  stripped), as secret managers and Kubernetes rotate mounted files;
  both take ``field = password`` (default) or ``field = connection`` (the whole string);
* ``{type = <name>, ...}``: a provider a plugin registered
  (``laredo_register_connection_providers``);
* ``"package.module:function"``: a callable by dotted path (``package.module.function`` too);
* any callable (in code).

What a provider returns is never logged; errors mask passwords. The connections call it
through :func:`laredo_source_pg.catalog.resolve_conninfo`.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Literal

from laredo.errors import ConfigError
from laredo.plugins import registry
from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "ConnectionProvider",
    "EnvProviderOptions",
    "FileProviderOptions",
    "build_provider",
    "check_provider_spec",
    "env_provider",
    "file_provider",
    "import_callable",
]

ConnectionProvider = Callable[[str], str | Mapping[str, Any]]
"""``provider(configured_conninfo) -> conninfo | {libpq parameter: value}``."""


class EnvProviderOptions(BaseModel):
    """``{type = env, variable = NAME, field = password | connection}``"""

    model_config = ConfigDict(extra="forbid", frozen=True)

    variable: str = Field(min_length=1)
    field: Literal["password", "connection"] = "password"


class FileProviderOptions(BaseModel):
    """``{type = file, path = /run/secrets/pg, field = password | connection}``"""

    model_config = ConfigDict(extra="forbid", frozen=True)

    path: str = Field(min_length=1)
    field: Literal["password", "connection"] = "password"


def _result(field: str, value: str) -> str | dict[str, str]:
    return value if field == "connection" else {"password": value}


def env_provider(options: EnvProviderOptions) -> ConnectionProvider:
    """Reads ``options.variable`` at every connect."""

    def provider(_conninfo: str) -> str | dict[str, str]:
        value = os.environ.get(options.variable)
        if not value:
            raise ConfigError(f"connection provider env: {options.variable} is not set")
        return _result(options.field, value)

    return provider


def file_provider(options: FileProviderOptions) -> ConnectionProvider:
    """Reads ``options.path`` at every connect (surrounding whitespace stripped)."""

    def provider(_conninfo: str) -> str | dict[str, str]:
        try:
            value = Path(options.path).read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise ConfigError(
                f"connection provider file: cannot read {options.path}: {exc.strerror or exc}"
            ) from None
        if not value:
            raise ConfigError(f"connection provider file: {options.path} is empty")
        return _result(options.field, value)

    return provider


def import_callable(path: str) -> Callable[..., Any]:
    """The callable at ``package.module:name`` (or ``package.module.name``)."""
    module, sep, attr = path.partition(":")
    if not sep:
        module, _, attr = path.rpartition(".")
    if not module or not attr:
        raise ValueError(f"{path!r} is not a dotted path to a callable ('package.module:function')")
    try:
        obj = getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as exc:
        raise ValueError(f"cannot import {path!r}: {exc}") from None
    if not callable(obj):
        raise ValueError(f"{path!r} is not callable")
    fn: Callable[..., Any] = obj
    return fn


def check_provider_spec(value: Any) -> Any:
    """Validate a ``connection_provider`` value (see the module docstring) without building
    it; ``ValueError`` says what is wrong."""
    if value is None or callable(value):
        return value
    if isinstance(value, str):
        import_callable(value)
        return value
    if isinstance(value, Mapping) and isinstance(value.get("type"), str):
        options = {k: v for k, v in value.items() if k != "type"}
        try:
            registry("connection_provider").validate(value["type"], options, where="")
        except ConfigError as exc:
            raise ValueError("; ".join(exc.problems)) from None
        return dict(value)
    raise ValueError(
        "must be {type = env | file | <plugin>, ...}, a dotted path to a callable, or a callable"
    )


def build_provider(value: Any) -> ConnectionProvider | None:
    """The provider a validated ``connection_provider`` value describes (None: none)."""
    if value is None:
        return None
    if callable(value):
        given: ConnectionProvider = value
        return given
    if isinstance(value, str):
        return import_callable(value)
    options = {k: v for k, v in value.items() if k != "type"}
    built: ConnectionProvider = registry("connection_provider").build(value["type"], **options)
    return built
