"""Plugin registries: one per kind (sources, targets, ...), ``name -> (options model, factory)``.

Plugin authors receive a :class:`Registry` in their ``laredo_register_*`` hooks and call
``registry.add(name, factory, options=Model)``. The registry owns name conflicts (both
distributions are named) and unknown names (installed names and the ``pip install`` hint).
``build`` validates options against the plugin's pydantic model and reports every problem in one
``ConfigError``, never echoing a secret.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pydantic

from .errors import ConfigError, PluginNotFoundError
from .secrets import show_value

__all__ = ["KNOWN_PROVIDERS", "Entry", "Registry", "format_validation_error"]

# Which distribution provides a name we do not have (for "pip install ..." hints).
KNOWN_PROVIDERS: dict[tuple[str, str], str] = {
    ("source", "postgresql"): "laredo-source-pg",
    ("source", "kinesis"): "laredo-source-kinesis",
    ("source", "fanout"): "laredo-target-fanout",
    ("target", "indexed-memory"): "laredo-target-memory",
    ("target", "compiled-memory"): "laredo-target-memory",
    ("target", "replication-fanout"): "laredo-target-fanout",
    ("target", "http-sync"): "laredo-target-http",
    ("snapshot_store", "s3"): "laredo-snapshot-s3",
    ("dead_letter_store", "s3"): "laredo-snapshot-s3",
    ("observer", "prometheus"): "laredo-server",
    ("observer", "opentelemetry"): "laredo-server",
}


@dataclass(frozen=True, slots=True)
class Entry:
    """One registration: ``kind/name -> (options model, factory)`` and who provided it."""

    kind: str
    name: str
    factory: Callable[..., Any]
    options: type[pydantic.BaseModel] | None
    provider: str
    description: str = ""
    takes_options: bool = False


def format_validation_error(exc: pydantic.ValidationError, prefix: str = "") -> list[str]:
    """One line per problem: ``key.path: message (got value)``."""
    out = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"])
        key = f"{prefix}.{loc}" if prefix and loc else (prefix or loc or "<options>")
        msg = err["msg"]
        if err["type"] == "extra_forbidden":
            msg = "unknown option (check the spelling; see the plugin's documented options)"
        elif "input" in err and err["type"] != "missing":
            shown = show_value(key.rsplit(".", 1)[-1], err["input"])
            if shown is not None:
                msg = f"{msg} (got {shown})"
        out.append(f"{key}: {msg}")
    return out


def _check_signature(
    factory: Callable[..., Any], config: dict[str, Any], label: str
) -> dict[str, Any]:
    """For plugins without an options model: reject unknown and missing keyword options."""
    try:
        sig = inspect.signature(factory)
    except (TypeError, ValueError):
        return dict(config)
    params = sig.parameters.values()
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        return dict(config)
    names = {p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    problems = [
        f"{label}: {k}: unknown option (accepted: {', '.join(sorted(names)) or 'none'})"
        for k in config
        if k not in names
    ]
    problems += [
        f"{label}: {p.name}: required option missing"
        for p in params
        if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
        and p.default is inspect.Parameter.empty
        and p.name not in config
    ]
    if problems:
        raise ConfigError(problems)
    return dict(config)


class Registry:
    """Holds one kind of plugin (sources, targets, ...). The registry owns name conflicts."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._entries: dict[str, Entry] = {}
        self.current_provider = "<unknown>"

    def add(
        self,
        name: str,
        factory: Callable[..., Any],
        options: type[pydantic.BaseModel] | None = None,
        description: str = "",
        *,
        takes_options: bool = False,
    ) -> None:
        """Register ``factory`` under ``name``; ``options`` validates keyword config first.

        With ``takes_options=True`` the factory receives the validated model instance
        (``factory(options)``) instead of its fields as keywords, so options are declared once.
        """
        if takes_options and options is None:
            raise ConfigError(f"{self.kind} plugin {name!r}: takes_options=True needs options=")
        existing = self._entries.get(name)
        if existing is not None and existing.factory is not factory:
            raise ConfigError(
                f"{self.kind} plugin name {name!r} is registered twice: by "
                f"{existing.provider} and by {self.current_provider}; uninstall one of them"
            )
        self._entries[name] = Entry(
            self.kind, name, factory, options, self.current_provider, description, takes_options
        )

    def get(self, name: str) -> Entry:
        try:
            return self._entries[name]
        except KeyError:
            installed = ", ".join(sorted(self._entries)) or "none"
            hint = ""
            provider = KNOWN_PROVIDERS.get((self.kind, name))
            if provider:
                hint = f"; it is provided by pip install {provider}"
            raise PluginNotFoundError(
                f"unknown {self.kind.replace('_', ' ')} type {name!r}: installed types are "
                f"{installed}{hint}"
            ) from None

    def names(self) -> list[str]:
        return sorted(self._entries)

    def entries(self) -> list[Entry]:
        return [self._entries[n] for n in sorted(self._entries)]

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def validate(self, name: str, config: dict[str, Any], where: str = "") -> dict[str, Any]:
        """Validate ``config`` against the plugin's model; all problems in one ConfigError."""
        entry = self.get(name)
        if entry.options is None:
            return _check_signature(entry.factory, config, where or f"{self.kind} {name!r}")
        model = self.options_model(name, config, where)
        return {k: getattr(model, k) for k in type(model).model_fields}

    def options_model(self, name: str, config: dict[str, Any], where: str = "") -> Any:
        """The plugin's validated options model (``None`` for a plugin without a model)."""
        entry = self.get(name)
        if entry.options is None:
            return None
        try:
            return entry.options.model_validate(config)
        except pydantic.ValidationError as exc:
            label = where or f"{self.kind} {name!r}"
            raise ConfigError([f"{label}: {p}" for p in format_validation_error(exc)]) from None

    def build(self, name: str, /, **config: Any) -> Any:
        """Validate ``config`` and call the plugin's factory with it."""
        entry = self.get(name)
        if entry.takes_options:
            return entry.factory(self.options_model(name, config))
        kwargs = self.validate(name, config)
        return entry.factory(**kwargs)
