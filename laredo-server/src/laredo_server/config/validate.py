"""Validation of a loaded configuration: the engine sections through :mod:`laredo.config`,
the server's own sections here, every problem in one ``ConfigError`` with ``file:line``."""

from __future__ import annotations

from laredo.config import (
    Problem,
    plugin_problems,
    reference_problems,
    spec_problems,
    structure_problems,
)
from laredo.deprecation import collect_deprecations
from laredo.errors import ConfigError
from laredo.plugins import registry

from .listeners import listener_problems
from .loaded import LoadedConfig
from .models import ServerConfig

__all__ = ["TOP_LEVEL_HINTS", "validate_tree"]

TOP_LEVEL_HINTS = {
    "fanout": "the fan-out replication listener is set on each replication-fanout target: "
    "targets = [ { type = replication-fanout, grpc { port = 4002 } } ]",
    "metrics": "metrics are served on the health port: use observability.metrics",
    "logging": "use observability.log_format / observability.log_level",
    "dead_letters": "the section is called dead_letter",
}
"""Sections people write by mistake, with what to write instead."""


def _observer_problems(loaded: LoadedConfig) -> list[Problem]:
    obs = loaded.tree.get("observability")
    specs = obs.get("observers") if isinstance(obs, dict) else None
    out: list[Problem] = []
    for k, spec in enumerate(specs if isinstance(specs, list) else []):
        out += spec_problems(
            "observer", spec, ("observability", "observers", k), notes=loaded.notes
        )
    return out


def _server_problems(model: ServerConfig) -> list[str]:
    out = listener_problems(model)
    g = model.grpc
    if g is not None and model.health.enabled and g.port and g.port == model.health.port:
        out.append(
            f"grpc.port: same port as health.port ({model.health.port}; grpc.port "
            "defaults to 4001); use two ports, or grpc.port = 0 to turn gRPC off"
        )
    return out


def _section_problems(loaded: LoadedConfig, owned: list[str]) -> list[Problem]:
    """Sections a plugin registered (``spark`` by laredo-spark), checked with its model. A
    section of a plugin that is not installed is an unknown key, like any other."""
    sections = registry("config_section")
    out: list[Problem] = []
    for name in owned:
        model = sections.get(name).options
        value = loaded.tree[name]
        if not isinstance(value, dict):
            out.append(
                Problem((name,), f"must be a section ({{ ... }}), got {type(value).__name__}")
            )
        elif model is not None:
            _, found = structure_problems(model, value)
            out += [Problem((name, *p.path), p.message) for p in found]
    return out


def validate_tree(loaded: LoadedConfig) -> ServerConfig:
    """Validate the merged tree; every problem (structure, plugins, references) together.
    Deprecated spellings a plugin accepts are added to ``loaded.notes``."""
    tree = loaded.tree

    def located(problems: list[Problem]) -> list[str]:
        return [loaded.with_location(p.path, p.message) if p.path else p.message for p in problems]

    hinted = [k for k in tree if k in TOP_LEVEL_HINTS and k not in ServerConfig.model_fields]
    problems = [loaded.with_location([k], f"unknown section: {TOP_LEVEL_HINTS[k]}") for k in hinted]
    plugin_sections = registry("config_section").names()
    owned = [k for k in tree if k in plugin_sections and k not in ServerConfig.model_fields]
    with collect_deprecations() as spellings:  # declared deprecated spellings (aliases)
        model, found = structure_problems(
            ServerConfig, {k: v for k, v in tree.items() if k not in hinted and k not in owned}
        )
    loaded.notes += spellings
    # plugin-owned sections, checked on the raw tree so they are reported with the rest
    problems += located(
        found
        + plugin_problems(tree, loaded.notes)
        + _observer_problems(loaded)
        + _section_problems(loaded, owned)
    )
    if model is None:
        raise ConfigError(problems)
    problems += located(reference_problems(model))
    problems += _server_problems(model)
    if problems:
        raise ConfigError(problems)
    return model.with_plugin_sections({k: tree[k] for k in owned})
