"""Plugin registries and the typed facade over pluggy.

The ``laredo`` entry-point group is loaded lazily, once, on first use; ``check_pending()``
then rejects misspelled hooks. Set ``LAREDO_DISABLE_PLUGIN_AUTOLOAD=1`` to skip entry points,
and ``LAREDO_PLUGINS=a,b`` to load named entry points or modules explicitly.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import logging
import os
import threading
from typing import Any, cast

import pluggy

from . import hookspecs
from .contracts import (
    DeadLetterStore,
    EngineObserver,
    PipelineFilter,
    PipelineTransform,
    SnapshotSerializer,
    SnapshotStore,
    SyncSource,
    SyncTarget,
)
from .errors import ConfigError
from .preflight import CheckRegistry
from .registry import KNOWN_PROVIDERS, Entry, Registry, format_validation_error

logger = logging.getLogger(__name__)

__all__ = [
    "GROUP",
    "KINDS",
    "KNOWN_PROVIDERS",
    "CheckRegistry",
    "Entry",
    "PluginManager",
    "Registry",
    "check_registry",
    "compiler",
    "dead_letter_store",
    "filter",
    "format_validation_error",
    "get_plugin_manager",
    "observer",
    "registry",
    "reset_plugin_manager",
    "serializer",
    "snapshot_store",
    "source",
    "target",
    "transform",
]

GROUP = "laredo"
KINDS: dict[str, str] = {
    "source": "laredo_register_sources",
    "target": "laredo_register_targets",
    "filter": "laredo_register_filters",
    "transform": "laredo_register_transforms",
    "compiler": "laredo_register_compilers",
    "snapshot_store": "laredo_register_snapshot_stores",
    "serializer": "laredo_register_serializers",
    "dead_letter_store": "laredo_register_dead_letter_stores",
    "observer": "laredo_register_observers",
    "connection_provider": "laredo_register_connection_providers",
    "config_section": "laredo_register_config_sections",
}


class PluginManager:
    """Typed facade over ``pluggy.PluginManager``; engine code never calls ``pm.hook`` directly."""

    def __init__(self, autoload: bool | None = None) -> None:
        self._pm = pluggy.PluginManager("laredo")
        self._pm.add_hookspecs(hookspecs)
        self._autoload = autoload
        self._loaded = False
        self._lock = threading.RLock()
        self._registries: dict[str, Registry] | None = None
        self._checks: CheckRegistry | None = None
        self._providers: dict[int, str] = {}

    # -- loading --------------------------------------------------------------------------
    def load(self) -> None:
        with self._lock:
            if self._loaded:
                return
            autoload = self._autoload
            if autoload is None:
                autoload = not os.environ.get("LAREDO_DISABLE_PLUGIN_AUTOLOAD")
            eps = importlib.metadata.entry_points(group=GROUP)
            if autoload:
                for ep in eps:
                    self._load_entry_point(ep)
            wanted = os.environ.get("LAREDO_PLUGINS", "").split(",")
            for name in [w.strip() for w in wanted if w.strip()]:
                match = [ep for ep in eps if ep.name == name]
                if match:
                    self._load_entry_point(match[0])
                else:
                    try:
                        module = importlib.import_module(name)
                    except ImportError as exc:
                        raise ConfigError(
                            f"LAREDO_PLUGINS names {name!r}, which is neither an installed "
                            f"'laredo' entry point nor an importable module: {exc}"
                        ) from exc
                    self.register(module, provider=name)
            self._pm.check_pending()
            self._loaded = True

    def _load_entry_point(self, ep: importlib.metadata.EntryPoint) -> None:
        if self._pm.get_plugin(f"ep:{ep.name}") is not None:
            return
        try:
            plugin = ep.load()
        except Exception as exc:
            dist = ep.dist.name if ep.dist else "?"
            raise ConfigError(
                f"laredo plugin {ep.name!r} from {dist} failed to import: {exc}; "
                f"reinstall it or set LAREDO_DISABLE_PLUGIN_AUTOLOAD=1"
            ) from exc
        dist = f"{ep.dist.name} {ep.dist.version}" if ep.dist else ep.value
        self.register(plugin, name=f"ep:{ep.name}", provider=dist)

    def register(self, plugin: Any, name: str | None = None, provider: str | None = None) -> None:
        """Register a plugin object or module in-process (tests, applications)."""
        with self._lock:
            if self._pm.is_registered(plugin):
                return
            self._pm.register(plugin, name=name)
            self._providers[id(plugin)] = provider or str(getattr(plugin, "__name__", repr(plugin)))
            self._pm.check_pending()
            self._registries = None  # rebuild on next use
            self._checks = None

    def unregister(self, plugin: Any) -> None:
        with self._lock:
            self._pm.unregister(plugin)
            self._registries = None
            self._checks = None

    # -- registries -----------------------------------------------------------------------
    def registry(self, kind: str) -> Registry:
        self.load()
        with self._lock:
            if self._registries is None:
                self._registries = self._collect()
            return self._registries[kind]

    def _collect(self) -> dict[str, Registry]:
        regs = {kind: Registry(kind) for kind in KINDS}
        for kind, hook_name in KINDS.items():
            caller = getattr(self._pm.hook, hook_name)
            # Oldest registration first, so conflicts name the earlier provider first.
            for impl in reversed(caller.get_hookimpls()):
                regs[kind].current_provider = self._providers.get(id(impl.plugin), impl.plugin_name)
                impl.function(registry=regs[kind])
        return regs

    def checks(self) -> CheckRegistry:
        """The preflight checks every plugin registered (``laredo_register_checks``)."""
        self.load()
        with self._lock:
            if self._checks is None:
                checks = CheckRegistry()
                caller = self._pm.hook.laredo_register_checks
                for impl in reversed(caller.get_hookimpls()):
                    checks.current_provider = self._providers.get(id(impl.plugin), impl.plugin_name)
                    impl.function(registry=checks)
                self._checks = checks
            return self._checks

    def call_cli_hook(self, app: Any) -> None:
        self.load()
        self._pm.hook.laredo_register_cli_commands(app=app)

    def call_services_hook(self, server: Any) -> None:
        self.load()
        self._pm.hook.laredo_register_services(server=server)

    def list_plugins(self) -> list[dict[str, Any]]:
        """Installed plugins: name, provider (distribution and version), hooks implemented."""
        self.load()
        out = []
        for name, plugin in self._pm.list_name_plugin():
            hooks = [h.name for h in self._pm.get_hookcallers(plugin) or []]
            out.append(
                {"name": name, "provider": self._providers.get(id(plugin), name), "hooks": hooks}
            )
        return out


_manager: PluginManager | None = None
_manager_lock = threading.Lock()


def get_plugin_manager() -> PluginManager:
    """The process-wide plugin manager (created and loaded lazily, once)."""
    global _manager
    with _manager_lock:
        if _manager is None:
            _manager = PluginManager()
        return _manager


def reset_plugin_manager() -> None:
    """Forget the loaded plugins (tests; after installing a plugin at run time)."""
    global _manager
    with _manager_lock:
        _manager = None


def registry(kind: str) -> Registry:
    return get_plugin_manager().registry(kind)


def check_registry() -> CheckRegistry:
    """The preflight checks of the installed plugins (see :mod:`laredo.preflight`)."""
    return get_plugin_manager().checks()


def source(name: str, /, **config: Any) -> SyncSource:
    """Build a source by plugin type name, e.g. ``laredo.source("postgresql", connection=...)``."""
    return cast(SyncSource, registry("source").build(name, **config))


def target(name: str, /, **config: Any) -> SyncTarget:
    """Build a target by plugin type name, e.g. ``laredo.target("indexed-memory", ...)``."""
    return cast(SyncTarget, registry("target").build(name, **config))


def snapshot_store(name: str, /, **config: Any) -> SnapshotStore:
    """Build a snapshot store by plugin type name, e.g. ``snapshot_store("local", path=...)``."""
    return cast(SnapshotStore, registry("snapshot_store").build(name, **config))


def serializer(name: str, /, **config: Any) -> SnapshotSerializer:
    """Build a snapshot serializer by plugin type name (``jsonl``, ``parquet``)."""
    return cast(SnapshotSerializer, registry("serializer").build(name, **config))


def dead_letter_store(name: str, /, **config: Any) -> DeadLetterStore:
    """Build a dead-letter store by plugin type name (``memory``, ``local``, ``s3``)."""
    return cast(DeadLetterStore, registry("dead_letter_store").build(name, **config))


def observer(name: str, /, **config: Any) -> EngineObserver:
    """Build an engine observer by plugin type name (``logging``, ...)."""
    return cast(EngineObserver, registry("observer").build(name, **config))


def filter(name: str, /, **config: Any) -> PipelineFilter:
    """Build a filter by plugin type name (``field-equals``, ...)."""
    return cast(PipelineFilter, registry("filter").build(name, **config))


def transform(name: str, /, **config: Any) -> PipelineTransform:
    """Build a transform by plugin type name (``drop-fields``, ...)."""
    return cast(PipelineTransform, registry("transform").build(name, **config))


def compiler(name: str, /, **config: Any) -> Any:
    return registry("compiler").build(name, **config)
