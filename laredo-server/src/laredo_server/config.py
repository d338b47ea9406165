"""HOCON configuration: loading, overrides, validation and building an engine from it.

Resolution order (later wins):

1. the main file (``--config FILE`` or ``LAREDO_CONFIG``), with its ``include`` statements;
2. every ``*.conf`` of each conf directory (``--conf-dir``, default ``<config dir>/conf.d``),
   in file-name order;
3. environment overrides ``LAREDO_<PATH>``: the key path upper-cased, levels separated by a
   **double** underscore, list indexes as numbers, ``-`` in names written ``_``:
   ``LAREDO_SOURCES__PG__CONNECTION``, ``LAREDO_GRPC__PORT``,
   ``LAREDO_TABLES__0__TARGETS__0__BASE_URL``. Names without ``__`` (``LAREDO_CONFIG``,
   ``LAREDO_ADDRESS``, ``LAREDO_PLUGINS``, ...) are never config overrides;
4. ``--set key.path=value`` (repeatable), so a command line beats the environment.

Objects merge key by key; any other value replaces. Substitutions (``${...}``, ``${?ENV}``)
resolve inside each file. Override values are typed: ``true``/``false``, integers, floats,
``null``, ``[...]``/``{...}`` (parsed as HOCON); anything else is a string.

Normalisation: HOCON durations (``5s``, ``10 minutes``, which pyhocon turns into
``relativedelta``/``timedelta``) become seconds (a float); in a key ending in ``_ms`` they become
milliseconds. Months and years are rejected (their length varies). Duration keys of the server's
own sections also accept text (``"24h"``, ``"7d"``, ``"500ms"``) and numbers (seconds). Keys
ending in ``_bytes`` accept sizes (``64MB``, ``1GiB``).

Every key is either used or rejected: the server's sections are pydantic models with
``extra="forbid"``; plugin sections (``sources.<id>``, targets, filters, transforms, stores,
observers) are validated by the options model the plugin registered. Every problem is reported
in one :class:`laredo.ConfigError`, each line naming the key path and, where it can be found,
the file and line.
"""

from __future__ import annotations

import contextlib
import copy
import json
import math
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Annotated, Any, Literal

import pydantic
from laredo.errors import ConfigError
from laredo.plugins import registry
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, SecretStr

__all__ = [
    "ENV_PREFIX",
    "LoadedConfig",
    "ServerConfig",
    "build_engine",
    "dump_config",
    "load_config",
    "mask_secrets",
]

ENV_PREFIX = "LAREDO_"
_ENV_SEP = "__"

# -- durations and sizes -------------------------------------------------------------------------

_DUR_UNITS = {
    "ns": 1e-9,
    "us": 1e-6,
    "ms": 0.001,
    "s": 1.0,
    "sec": 1.0,
    "secs": 1.0,
    "second": 1.0,
    "seconds": 1.0,
    "m": 60.0,
    "min": 60.0,
    "mins": 60.0,
    "minute": 60.0,
    "minutes": 60.0,
    "h": 3600.0,
    "hour": 3600.0,
    "hours": 3600.0,
    "d": 86400.0,
    "day": 86400.0,
    "days": 86400.0,
    "w": 604800.0,
    "week": 604800.0,
    "weeks": 604800.0,
}
_DUR_PART = re.compile(r"(\d+(?:\.\d+)?)\s*([a-z]+)")
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?i?b?)\s*$", re.IGNORECASE)
_SIZE_UNITS = {
    "": 1,
    "b": 1,
    "k": 1000,
    "kb": 1000,
    "m": 1000**2,
    "mb": 1000**2,
    "g": 1000**3,
    "gb": 1000**3,
    "t": 1000**4,
    "tb": 1000**4,
    "ki": 1024,
    "kib": 1024,
    "mi": 1024**2,
    "mib": 1024**2,
    "gi": 1024**3,
    "gib": 1024**3,
    "ti": 1024**4,
    "tib": 1024**4,
}


def parse_duration(value: Any) -> float:
    """Seconds from a number (seconds), a ``timedelta`` or text (``"24h"``, ``"1h30m"``,
    ``"500ms"``, ``"10 minutes"``)."""
    if isinstance(value, bool):
        raise ValueError("expected a duration such as '30s', got a boolean")
    if isinstance(value, int | float):
        if not math.isfinite(value) or value < 0:
            raise ValueError(f"a duration must be a non-negative number of seconds, got {value}")
        return float(value)
    if isinstance(value, timedelta):
        return value.total_seconds()
    if _is_relativedelta(value):
        return _relativedelta_seconds(value)
    if isinstance(value, str):
        text = value.strip().lower()
        try:
            return parse_duration(float(text))
        except ValueError:
            pass
        pos = 0
        total = 0.0
        for m in _DUR_PART.finditer(text):
            if text[pos : m.start()].strip():
                break
            unit = _DUR_UNITS.get(m.group(2))
            if unit is None:
                break
            total += float(m.group(1)) * unit
            pos = m.end()
        if text and pos == len(text):
            return total
    raise ValueError(
        f"invalid duration {value!r}: write e.g. '500ms', '30s', '10m', '24h', '7d' or a number "
        "of seconds"
    )


def parse_size(value: Any) -> int:
    """Bytes from an integer or text like ``"64MB"``, ``"1GiB"``, ``"512k"``."""
    if isinstance(value, bool):
        raise ValueError("expected a size such as '64MB', got a boolean")
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str):
        m = _SIZE.match(value)
        if m:
            unit = _SIZE_UNITS.get(m.group(2).lower())
            if unit is not None:
                return int(float(m.group(1)) * unit)
    raise ValueError(f"invalid size {value!r}: write e.g. 1048576, '512KB', '64MB' or '1GiB'")


def _is_relativedelta(value: Any) -> bool:
    return type(value).__name__ == "relativedelta" and hasattr(value, "months")


def _relativedelta_seconds(rd: Any) -> float:
    if rd.years or rd.months:
        raise ValueError(
            "months and years are not a fixed length: write the duration in days (e.g. 30d)"
        )
    return float(
        rd.weeks * 0  # ``weeks`` is derived from ``days`` in dateutil
        + rd.days * 86400
        + rd.hours * 3600
        + rd.minutes * 60
        + rd.seconds
        + rd.microseconds / 1e6
    )


Duration = Annotated[float, BeforeValidator(parse_duration)]
Size = Annotated[int, BeforeValidator(parse_size)]

# -- models of the server's own sections ---------------------------------------------------------


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class BufferConfig(_Model):
    """``buffer { max_size = 10000, policy = block | drop_oldest | error }``"""

    max_size: int = Field(default=10_000, gt=0)
    policy: Literal["block", "drop_oldest", "error"] = "block"


class ErrorHandlingConfig(_Model):
    """``error_handling { max_retries, on_persistent_failure, retry_backoff, ... }``"""

    max_retries: int = Field(default=5, ge=0)
    on_persistent_failure: Literal["isolate", "stop_source", "stop_all", "dead_letter"] = "isolate"
    retry_backoff: Duration = 0.1
    retry_max_backoff: Duration = 5.0


class TtlConfig(_Model):
    """``ttl { field = expires_at, check_interval = 1m, mode = delete }``"""

    field: str = Field(min_length=1)
    check_interval: Duration | None = None
    mode: Literal["delete"] = "delete"
    """Expired rows are deleted from the target (the only mode)."""


class ValidationConfig(_Model):
    """``validation { interval = 5m, action = warn | re_baseline | fail }``"""

    interval: Duration | None = None
    action: Literal["warn", "re_baseline", "fail"] = "warn"


class PluginSpec(BaseModel):
    """``{ type = <plugin name>, ...options of that plugin }``"""

    model_config = ConfigDict(extra="allow")
    type: str = Field(min_length=1)

    def options(self) -> dict[str, Any]:
        return dict(self.model_extra or {})


class TargetConfig(BaseModel):
    """One target of a table: ``type`` + the plugin's options, and the pipeline settings."""

    model_config = ConfigDict(extra="allow")
    type: str = Field(min_length=1)
    id: str | None = None
    buffer: BufferConfig = BufferConfig()
    error_handling: ErrorHandlingConfig = ErrorHandlingConfig()
    filters: list[PluginSpec] = Field(default_factory=list)
    transforms: list[PluginSpec] = Field(default_factory=list)
    ttl: TtlConfig | None = None
    validation: ValidationConfig | None = None

    def options(self) -> dict[str, Any]:
        return dict(self.model_extra or {})


class TableConfig(_Model):
    source: str = Field(min_length=1)
    schema_: str = Field(default="public", alias="schema", min_length=1)
    table: str = Field(min_length=1)
    targets: list[TargetConfig] = Field(min_length=1)
    ttl: TtlConfig | None = None
    validation: ValidationConfig | None = None

    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class RetentionConfig(_Model):
    keep_count: int | None = Field(default=None, ge=1)
    max_age: Duration | None = None


class SnapshotConfig(_Model):
    """``snapshot { store = local, store_config { path = ... }, schedule = 1h, ... }``"""

    enabled: bool = True
    store: str | None = None
    store_config: dict[str, Any] = Field(default_factory=dict)
    serializer: str = "jsonl"
    serializer_config: dict[str, Any] = Field(default_factory=dict)
    schedule: Duration | None = None
    on_shutdown: bool = False
    retention: RetentionConfig = RetentionConfig()
    user_meta: dict[str, Any] = Field(default_factory=dict)
    on_restore_mismatch: Literal["warn", "reject"] = "warn"


class DeadLetterConfig(_Model):
    """``dead_letter { store = memory | local | s3, store_config { ... } }``"""

    store: str = "memory"
    store_config: dict[str, Any] = Field(default_factory=dict)


class TlsConfig(_Model):
    cert_file: str
    key_file: str
    client_ca_file: str | None = None
    """When set, clients must present a certificate signed by this CA (mutual TLS)."""


class AuthConfig(_Model):
    token: SecretStr | None = None
    token_file: str | None = None
    """Read the token from this file (stripped) instead of writing it in the config."""
    protect_reads: bool = False
    """Also require the token for read-only RPCs (status, queries, lists)."""


class GrpcConfig(_Model):
    port: int = Field(ge=0, le=65535)
    host: str = "127.0.0.1"
    tls: TlsConfig | None = None
    auth: AuthConfig = AuthConfig()
    reflection: bool = True
    max_workers: int = Field(default=16, ge=1)
    watch_buffer: int = Field(default=16_384, ge=16)
    """Events buffered per WatchStatus/Subscribe stream before the client is told it lost some."""


class HealthConfig(_Model):
    enabled: bool = True
    port: int = Field(default=8080, ge=0, le=65535)
    host: str = "127.0.0.1"


class MetricsConfig(_Model):
    enabled: bool = True
    per_action: bool = True
    """Count applied changes per action (insert/update/delete/truncate); costs one observer
    call per change. False: counts per batch only."""


class ObservabilityConfig(_Model):
    log_format: Literal["json", "console"] = "console"
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    metrics: MetricsConfig = MetricsConfig()
    lag_interval: Duration = 10.0
    observers: list[PluginSpec] = Field(default_factory=list)
    """Extra observer plugins, e.g. ``[{type = logging}]``."""


class ShutdownConfig(_Model):
    grace_period: Duration = 30.0
    """Longest time ``stop`` may take (drain buffers, shutdown snapshot, close)."""
    drain: Duration = 0.0
    """Before stopping, report not-ready for this long so load balancers move away."""


class ServerConfig(_Model):
    """The whole configuration file."""

    sources: dict[str, PluginSpec] = Field(min_length=1)
    tables: list[TableConfig] = Field(min_length=1)
    snapshot: SnapshotConfig | None = None
    dead_letter: DeadLetterConfig | None = None
    grpc: GrpcConfig | None = None
    health: HealthConfig = HealthConfig()
    observability: ObservabilityConfig = ObservabilityConfig()
    shutdown: ShutdownConfig = ShutdownConfig()

    def admin_token(self) -> str | None:
        if self.grpc is None:
            return None
        auth = self.grpc.auth
        if auth.token is not None:
            return auth.token.get_secret_value()
        if auth.token_file:
            return Path(auth.token_file).read_text().strip()
        return None


_TOP_HINTS = {
    "fanout": "the fan-out replication listener is set on each replication-fanout target: "
    "targets = [ { type = replication-fanout, grpc { port = 4002 } } ]",
    "metrics": "metrics are served on the health port: use observability.metrics",
    "logging": "use observability.log_format / observability.log_level",
    "dead_letters": "the section is called dead_letter",
}

# -- loading -------------------------------------------------------------------------------------


_COMMENT = re.compile(r"(^|\s)(#|//).*$")


@dataclass
class LoadedConfig:
    """The merged, overridden, normalised tree plus where its files came from."""

    tree: dict[str, Any]
    files: list[Path] = field(default_factory=list)
    applied_env: list[str] = field(default_factory=list)
    applied_sets: list[str] = field(default_factory=list)
    _texts: dict[Path, list[str]] = field(default_factory=dict)
    model: ServerConfig | None = None

    def locate(self, path: Sequence[Any]) -> str:
        """Best-effort ``file:line`` of a key path (pyhocon keeps no positions)."""
        names = [str(p) for p in path if not isinstance(p, int) and not str(p).isdigit()]
        if not names:
            return ""
        leaf = names[-1]
        pat = re.compile(r'(^|[{,\s])"?' + re.escape(leaf) + r'"?\s*[=:{]')
        hits: list[tuple[Path, int]] = []
        for f, lines in self._texts.items():
            for i, line in enumerate(lines, 1):
                if pat.search(_COMMENT.sub("", line)):
                    hits.append((f, i))
        if not hits:
            return ""
        if len(hits) > 1 and len(names) > 1:
            parent = names[-2]
            ppat = re.compile(r'(^|[{,\s])"?' + re.escape(parent) + r'"?\s*[=:{]')
            narrowed = []
            for f, i in hits:
                before = self._texts[f][:i]
                if any(ppat.search(_COMMENT.sub("", x)) for x in before):
                    narrowed.append((f, i))
            hits = narrowed or hits
        f, i = hits[0]
        more = f" (+{len(hits) - 1} more)" if len(hits) > 1 else ""
        return f"{f}:{i}{more}"


def _plain(value: Any, path: str, problems: list[str]) -> Any:
    """pyhocon tree -> plain dict/list; durations normalised."""
    from pyhocon import ConfigTree
    from pyhocon.config_tree import NoneValue

    if isinstance(value, ConfigTree | dict):
        return {
            str(k): _plain(v, f"{path}.{k}" if path else str(k), problems) for k, v in value.items()
        }
    if isinstance(value, list):
        return [_plain(v, f"{path}.{i}", problems) for i, v in enumerate(value)]
    if isinstance(value, NoneValue) or value is None:
        return None
    if isinstance(value, timedelta) or _is_relativedelta(value):
        try:
            seconds = parse_duration(value)
        except ValueError as exc:
            problems.append(f"{path}: {exc}")
            return None
        return seconds * 1000.0 if path.endswith("_ms") else seconds
    return value


def _merge(base: dict[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    for k, v in over.items():
        if isinstance(v, Mapping) and isinstance(base.get(k), dict):
            _merge(base[k], v)
        else:
            base[k] = copy.deepcopy(v) if isinstance(v, dict | list) else v
    return base


def _parse_file(path: Path, problems: list[str]) -> dict[str, Any] | None:
    from pyhocon import ConfigFactory

    try:
        tree = ConfigFactory.parse_file(str(path), required=True)
    except FileNotFoundError:
        problems.append(f"{path}: file not found")
        return None
    except Exception as exc:  # pyparsing errors carry line and column
        line = getattr(exc, "lineno", None)
        col = getattr(exc, "col", None)
        where = f"{path}:{line}:{col}" if line else str(path)
        msg = str(getattr(exc, "msg", "")) or str(exc)
        problems.append(f"{where}: HOCON syntax error: {msg}")
        return None
    result = _plain(tree, "", problems)
    assert isinstance(result, dict)
    return result


_INCLUDE = re.compile(r'^\s*include\s+(?:required\()?(?:file\()?"([^"]+)"', re.MULTILINE)


def _collect_texts(path: Path, texts: dict[Path, list[str]]) -> None:
    if path in texts or not path.is_file():
        return
    text = path.read_text(encoding="utf-8", errors="replace")
    texts[path] = text.splitlines()
    for m in _INCLUDE.finditer(text):
        inc = Path(m.group(1))
        _collect_texts(inc if inc.is_absolute() else path.parent / inc, texts)


def parse_value(text: str) -> Any:
    """Type an override value: booleans, null, numbers, HOCON ``[...]``/``{...}``, else text."""
    t = text.strip()
    low = t.lower()
    if low in ("true", "yes", "on"):
        return True
    if low in ("false", "no", "off"):
        return False
    if low == "null":
        return None
    if re.fullmatch(r"[+-]?\d+", t):
        return int(t)
    if re.fullmatch(r"[+-]?(\d+\.\d*|\.\d+|\d+)([eE][+-]?\d+)?", t):
        return float(t)
    if t[:1] in "[{":
        from pyhocon import ConfigFactory

        try:
            problems: list[str] = []
            parsed = _plain(ConfigFactory.parse_string(f"v = {t}")["v"], "v", problems)
            if not problems:
                return parsed
        except Exception:
            pass
    if len(t) >= 2 and t[0] == t[-1] == '"':
        try:
            return json.loads(t)
        except ValueError:
            pass
    return text


def _split_path(path: str) -> list[str]:
    parts = []
    for m in re.finditer(r'"([^"]*)"|([^.]+)', path):
        parts.append(m.group(1) if m.group(1) is not None else m.group(2))
    return parts


def _set_path(tree: dict[str, Any], parts: Sequence[str], value: Any, label: str) -> str | None:
    """Set ``value`` at ``parts``; returns a problem or None. Lists are indexed by number."""
    node: Any = tree
    for i, part in enumerate(parts):
        last = i == len(parts) - 1
        if isinstance(node, list):
            if not part.isdigit():
                return f"{label}: {'.'.join(parts[:i])} is a list: use a number, not {part!r}"
            idx = int(part)
            if idx > len(node):
                return (
                    f"{label}: index {idx} is past the end of {'.'.join(parts[:i])} "
                    f"(it has {len(node)} entries)"
                )
            if last:
                if idx == len(node):
                    node.append(value)
                else:
                    node[idx] = value
                return None
            if idx == len(node):
                node.append({})
            if not isinstance(node[idx], dict | list):
                node[idx] = {}
            node = node[idx]
        elif isinstance(node, dict):
            if last:
                node[part] = value
                return None
            nxt = node.get(part)
            if not isinstance(nxt, dict | list):
                nxt = node[part] = {}
            node = nxt
        else:  # pragma: no cover - guarded above
            return f"{label}: cannot descend into a value at {'.'.join(parts[:i])}"
    return None


def _env_norm(name: str) -> str:
    return re.sub(r"[^A-Z0-9]", "_", name.upper())


def _env_parts(tree: dict[str, Any], segs: list[str]) -> list[str]:
    """Map env name segments to existing keys (case-insensitive, '-' written '_')."""
    out: list[str] = []
    node: Any = tree
    for seg in segs:
        key = seg.lower()
        if isinstance(node, dict):
            for k in node:
                if _env_norm(k) == seg:
                    key = k
                    break
            node = node.get(key)
        elif isinstance(node, list) and seg.isdigit() and int(seg) < len(node):
            node = node[int(seg)]
        else:
            node = None
        out.append(key)
    return out


def load_config(
    path: str | os.PathLike[str],
    *,
    conf_dirs: Iterable[str | os.PathLike[str]] | None = None,
    sets: Iterable[str] = (),
    env: Mapping[str, str] | None = None,
    validate: bool = True,
) -> LoadedConfig:
    """Load, merge, override and (by default) validate a configuration.

    ``conf_dirs`` defaults to ``<dir of path>/conf.d``. Raises ``ConfigError`` with every
    problem found (syntax, unknown keys, wrong types, unknown plugins, plugin options).
    """
    problems: list[str] = []
    main = Path(path)
    loaded = LoadedConfig(tree={})
    if not main.is_file():
        raise ConfigError(f"{main}: config file not found (give --config FILE or LAREDO_CONFIG)")
    dirs = [Path(d) for d in conf_dirs] if conf_dirs is not None else [main.parent / "conf.d"]
    files = [main]
    for d in dirs:
        if d.is_dir():
            files.extend(sorted(p for p in d.iterdir() if p.suffix == ".conf" and p.is_file()))
        elif conf_dirs is not None and d.exists():
            problems.append(f"{d}: conf dir is not a directory")
    for f in files:
        _collect_texts(f, loaded._texts)
        parsed = _parse_file(f, problems)
        if parsed is not None:
            _merge(loaded.tree, parsed)
    loaded.files = files
    environ = os.environ if env is None else env
    for name in sorted(environ):
        if not name.startswith(ENV_PREFIX) or _ENV_SEP not in name:
            continue
        value = environ[name]
        if value == "":
            continue
        segs = [s for s in name[len(ENV_PREFIX) :].split(_ENV_SEP)]
        if any(not s for s in segs):
            problems.append(
                f"environment {name}: empty path segment (use single '__' between keys)"
            )
            continue
        parts = _env_parts(loaded.tree, segs)
        problem = _set_path(loaded.tree, parts, parse_value(value), f"environment {name}")
        if problem:
            problems.append(problem)
        else:
            loaded.applied_env.append(f"{name} -> {'.'.join(parts)}")
    for item in sets:
        key, eq, value = item.partition("=")
        if not eq or not key.strip():
            problems.append(f"--set {item!r}: write --set key.path=value")
            continue
        parts = _split_path(key.strip())
        problem = _set_path(loaded.tree, parts, parse_value(value), f"--set {key.strip()}")
        if problem:
            problems.append(problem)
        else:
            loaded.applied_sets.append(".".join(parts))
    if problems:
        raise ConfigError(problems)
    if validate:
        loaded.model = validate_tree(loaded)
    return loaded


def load_string(text: str, **kw: Any) -> LoadedConfig:
    """Load from HOCON text (tests, tools): written to a temporary file first."""
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "laredo.conf"
        p.write_text(text)
        kw.setdefault("conf_dirs", [])
        return load_config(p, **kw)


# -- validation ----------------------------------------------------------------------------------


def _with_loc(loaded: LoadedConfig, path: Sequence[Any], message: str) -> str:
    key = ".".join(str(p) for p in path)
    where = loaded.locate(path)
    return f"{key}: {message}" + (f" [{where}]" if where else "")


def _plugin_problems(
    loaded: LoadedConfig,
    *,
    kind: str,
    name: str,
    options: dict[str, Any],
    path: list[Any],
    type_path: list[Any] | None = None,
) -> list[str]:
    try:
        registry(kind).validate(name, options, where="\x00")
    except ConfigError as exc:
        out = []
        for p in exc.problems:
            text = p[len("\x00: ") :] if p.startswith("\x00: ") else p.replace("\x00", "")
            if p.startswith("\x00: "):
                key, _, msg = text.partition(": ")
                out.append(_with_loc(loaded, [*path, *key.split(".")], msg))
            else:
                out.append(_with_loc(loaded, type_path or [*path, "type"], text))
        return out
    return []


_PIPELINE_KEYS = frozenset(TargetConfig.model_fields)


def _raw_plugin_problems(loaded: LoadedConfig) -> list[str]:
    tree = loaded.tree
    out: list[str] = []

    def check(
        kind: str,
        spec: Any,
        path: list[Any],
        skip: frozenset[str] = frozenset(),
        type_path: list[Any] | None = None,
    ) -> None:
        if not isinstance(spec, dict) or not isinstance(spec.get("type"), str):
            return
        opts = {k: v for k, v in spec.items() if k != "type" and k not in skip}
        out.extend(
            _plugin_problems(
                loaded, kind=kind, name=spec["type"], options=opts, path=path, type_path=type_path
            )
        )

    sources = tree.get("sources")
    if isinstance(sources, dict):
        for sid, spec in sources.items():
            check("source", spec, ["sources", sid])
    tables = tree.get("tables")
    for i, t in enumerate(tables if isinstance(tables, list) else []):
        targets = t.get("targets") if isinstance(t, dict) else None
        for j, tgt in enumerate(targets if isinstance(targets, list) else []):
            base = ["tables", i, "targets", j]
            check("target", tgt, base, _PIPELINE_KEYS)
            if not isinstance(tgt, dict):
                continue
            for kind in ("filter", "transform"):
                specs = tgt.get(f"{kind}s")
                for k, spec in enumerate(specs if isinstance(specs, list) else []):
                    check(kind, spec, [*base, f"{kind}s", k])
    snap = tree.get("snapshot")
    if isinstance(snap, dict) and snap.get("enabled", True) is not False:
        if isinstance(snap.get("store"), str):
            cfg = snap.get("store_config", {})
            check(
                "snapshot_store",
                {**(cfg if isinstance(cfg, dict) else {}), "type": snap["store"]},
                ["snapshot", "store_config"],
                type_path=["snapshot", "store"],
            )
        ser = snap.get("serializer", "jsonl")
        if isinstance(ser, str):
            cfg = snap.get("serializer_config", {})
            check(
                "serializer",
                {**(cfg if isinstance(cfg, dict) else {}), "type": ser},
                ["snapshot", "serializer_config"],
                type_path=["snapshot", "serializer"],
            )
    dl = tree.get("dead_letter")
    if isinstance(dl, dict):
        cfg = dl.get("store_config", {})
        check(
            "dead_letter_store",
            {**(cfg if isinstance(cfg, dict) else {}), "type": dl.get("store", "memory")},
            ["dead_letter", "store_config"],
            type_path=["dead_letter", "store"],
        )
    obs = tree.get("observability")
    specs = obs.get("observers") if isinstance(obs, dict) else None
    for k, spec in enumerate(specs if isinstance(specs, list) else []):
        check("observer", spec, ["observability", "observers", k])
    return out


def validate_tree(loaded: LoadedConfig) -> ServerConfig:
    """Validate the merged tree; every problem (structure, plugins, references) together."""
    tree = loaded.tree
    problems: list[str] = []
    for key in tree:
        if key in _TOP_HINTS and key not in ServerConfig.model_fields:
            problems.append(_with_loc(loaded, [key], f"unknown section: {_TOP_HINTS[key]}"))
    model: ServerConfig | None = None
    try:
        model = ServerConfig.model_validate(tree)
    except pydantic.ValidationError as exc:
        for err in exc.errors():
            loc = list(err["loc"])
            if loc and loc[0] in _TOP_HINTS and err["type"] == "extra_forbidden":
                continue
            msg = str(err["msg"])
            key = ".".join(str(x) for x in loc)
            if err["type"] not in ("missing", "extra_forbidden") and not _SECRET_KEY.search(key):
                shown = repr(err.get("input"))
                msg += f" (got {shown[:57] + '...' if len(shown) > 60 else shown})"
            if err["type"] == "extra_forbidden":
                allowed = _allowed_keys(loc)
                msg = "unknown key" + (f" (allowed here: {allowed})" if allowed else "")
            problems.append(_with_loc(loaded, loc, msg))
    # plugin-owned sections, checked on the raw tree so they are reported with the rest
    problems += _raw_plugin_problems(loaded)
    if model is None:
        raise ConfigError(problems)
    for i, t in enumerate(model.tables):
        if t.source not in model.sources:
            known = ", ".join(sorted(model.sources))
            problems.append(
                _with_loc(
                    loaded,
                    ["tables", i, "source"],
                    f"unknown source {t.source!r} (defined sources: {known})",
                )
            )
    snap = model.snapshot
    if (
        snap is not None
        and snap.enabled
        and snap.store is None
        and (snap.schedule or snap.on_shutdown)
    ):
        problems.append(
            _with_loc(
                loaded,
                ["snapshot", "store"],
                "schedule/on_shutdown need a store "
                "(e.g. store = local, store_config { path = /var/lib/laredo })",
            )
        )
    if model.dead_letter is None:
        for i, t in enumerate(model.tables):
            for j, tgt in enumerate(t.targets):
                if tgt.error_handling.on_persistent_failure == "dead_letter":
                    problems.append(
                        _with_loc(
                            loaded,
                            ["tables", i, "targets", j, "error_handling", "on_persistent_failure"],
                            "dead_letter needs a dead_letter { store = ... } section",
                        )
                    )
    ids: dict[str, str] = {}
    for i, t in enumerate(model.tables):
        for j, tgt in enumerate(t.targets):
            pid = pipeline_id(t, tgt)
            where = f"tables.{i}.targets.{j}"
            if pid in ids:
                problems.append(
                    f"{where}: pipeline id {pid!r} also used by {ids[pid]}: give one of them "
                    "a distinct `id`"
                )
            ids[pid] = where
    if model.grpc is not None:
        a = model.grpc.auth
        if a.token is not None and a.token_file:
            problems.append("grpc.auth: give token or token_file, not both")
        if a.token_file and not Path(a.token_file).is_file():
            problems.append(f"grpc.auth.token_file: {a.token_file}: file not found")
        if a.protect_reads and a.token is None and not a.token_file:
            problems.append("grpc.auth.protect_reads: needs grpc.auth.token or token_file")
        tls = model.grpc.tls
        if tls is not None:
            for name in ("cert_file", "key_file", "client_ca_file"):
                p = getattr(tls, name)
                if p and not Path(p).is_file():
                    problems.append(f"grpc.tls.{name}: {p}: file not found")
        if model.health.enabled and model.grpc.port and model.grpc.port == model.health.port:
            problems.append("grpc.port: same port as health.port; use two ports")
    if problems:
        raise ConfigError(problems)
    return model


def _allowed_keys(loc: Sequence[Any]) -> str:
    """The keys a model accepts at the parent of ``loc`` (for 'unknown key' hints)."""
    model: Any = ServerConfig
    for part in loc[:-1]:
        if isinstance(part, int) or model is None:
            continue
        fields = getattr(model, "model_fields", None)
        if fields is None:
            return ""
        f = fields.get(part) or next((x for x in fields.values() if x.alias == part), None)
        if f is None:
            # dict values (sources.<id>) keep the same model for the next level
            continue
        model = _inner_model(f.annotation)
    fields = getattr(model, "model_fields", None)
    if not fields:
        return ""
    return ", ".join(f.alias or n for n, f in fields.items())


def _inner_model(ann: Any) -> Any:
    import typing

    if isinstance(ann, type) and issubclass(ann, BaseModel):
        return ann
    for a in typing.get_args(ann):
        m = _inner_model(a)
        if m is not None:
            return m
    return None


# -- secrets -------------------------------------------------------------------------------------

_SECRET_KEY = re.compile(
    r"(password|passwd|secret|token|auth_header|authorization|api_key|access_key|credentials|"
    r"private_key)",
    re.IGNORECASE,
)
_URI_PASSWORD = re.compile(r"([a-zA-Z][a-zA-Z0-9+.-]*://[^:/?#@\s]*:)([^@/?#\s]*)@")
_KV_PASSWORD = re.compile(r"(\bpassword\s*=\s*)('(?:[^'\\]|\\.)*'|[^\s&]+)", re.IGNORECASE)

MASK = "***"


def mask_text(text: str) -> str:
    """Passwords in connection strings and URLs replaced by ``***``."""
    text = _URI_PASSWORD.sub(lambda m: f"{m.group(1)}{MASK}@", text)
    return _KV_PASSWORD.sub(lambda m: f"{m.group(1)}{MASK}", text)


def mask_secrets(value: Any, key: str = "") -> Any:
    """A copy of a config tree safe to print: secret-named keys become ``***``, passwords in
    connection strings and URLs are masked."""
    if isinstance(value, dict):
        return {k: mask_secrets(v, str(k)) for k, v in value.items()}
    if isinstance(value, list):
        return [mask_secrets(v, key) for v in value]
    if key and _SECRET_KEY.search(key) and value is not None and not isinstance(value, bool):
        return MASK
    if isinstance(value, SecretStr):
        return MASK
    if isinstance(value, str):
        return mask_text(value)
    return value


def dump_config(loaded: LoadedConfig, fmt: str = "hocon") -> str:
    """The merged configuration with secrets masked, as HOCON (default) or JSON."""
    masked = mask_secrets(loaded.tree)
    if fmt == "json":
        return json.dumps(masked, indent=2, default=str)
    from pyhocon import ConfigFactory, HOCONConverter

    return str(HOCONConverter.to_hocon(ConfigFactory.from_dict(masked)))


# -- building the engine -------------------------------------------------------------------------


def pipeline_id(table: TableConfig, target: TargetConfig) -> str:
    return target.id or f"{table.source}:{table.schema_}.{table.table}:{target.type}"


@dataclass
class Built:
    engine: Any
    snapshot_store: Any = None
    snapshot_serializer: Any = None
    dead_letter_store: Any = None


def build_engine(model: ServerConfig, observers: Sequence[Any] = ()) -> Built:
    """Construct sources, targets, stores and the ``laredo.Engine`` a config describes."""
    import laredo

    problems: list[str] = []

    def make(kind: str, name: str, options: dict[str, Any], where: str) -> Any:
        try:
            entry = registry(kind).get(name)
            kwargs = registry(kind).validate(name, options, where=where)
            return entry.factory(**kwargs)
        except ConfigError as exc:
            problems.extend(exc.problems)
        except Exception as exc:
            problems.append(f"{where}: cannot create {kind.replace('_', ' ')} {name!r}: {exc}")
        return None

    sources = {
        sid: make("source", spec.type, spec.options(), f"sources.{sid}")
        for sid, spec in model.sources.items()
    }
    store = serializer = None
    snap = model.snapshot
    if snap is not None and snap.enabled and snap.store:
        store = make("snapshot_store", snap.store, snap.store_config, "snapshot.store_config")
        serializer = make(
            "serializer", snap.serializer, snap.serializer_config, "snapshot.serializer_config"
        )
    dls = None
    if model.dead_letter is not None:
        dls = make(
            "dead_letter_store",
            model.dead_letter.store,
            model.dead_letter.store_config,
            "dead_letter.store_config",
        )
    pipelines = []
    for i, t in enumerate(model.tables):
        table = laredo.TableIdentifier(t.schema_, t.table)
        for j, tgt in enumerate(t.targets):
            where = f"tables.{i}.targets.{j}"
            target = make("target", tgt.type, tgt.options(), where)
            filters = [
                make("filter", f.type, f.options(), f"{where}.filters.{k}")
                for k, f in enumerate(tgt.filters)
            ]
            transforms = [
                make("transform", f.type, f.options(), f"{where}.transforms.{k}")
                for k, f in enumerate(tgt.transforms)
            ]
            ttl = tgt.ttl or t.ttl
            val = tgt.validation or t.validation
            eh = tgt.error_handling
            pipelines.append(
                laredo.Pipeline(
                    t.source,
                    table,
                    target,
                    filters=filters,
                    transforms=transforms,
                    buffer_size=tgt.buffer.max_size,
                    buffer_policy=tgt.buffer.policy,
                    error_policy=eh.on_persistent_failure,
                    max_retries=eh.max_retries,
                    retry_backoff=eh.retry_backoff,
                    retry_max_backoff=eh.retry_max_backoff,
                    ttl_field=ttl.field if ttl else None,
                    ttl_scan_interval=ttl.check_interval if ttl else None,
                    validation_action=val.action if val else "warn",
                    validation_interval=val.interval if val else None,
                    id=pipeline_id(t, tgt),
                    target_type=tgt.type,
                )
            )
    obs = list(observers)
    for k, spec in enumerate(model.observability.observers):
        obs.append(make("observer", spec.type, spec.options(), f"observability.observers.{k}"))
    if problems:
        for s in sources.values():
            close = getattr(s, "close", None)
            if callable(close):
                with contextlib.suppress(Exception):
                    close()
        raise ConfigError(problems)
    engine = laredo.Engine(
        sources=sources,
        pipelines=pipelines,
        snapshot_store=store,
        snapshot_serializer=serializer,
        snapshot_schedule=snap.schedule if snap and store else None,
        snapshot_retention=snap.retention.keep_count if snap and store else None,
        snapshot_max_age=snap.retention.max_age if snap and store else None,
        snapshot_on_shutdown=bool(snap and store and snap.on_shutdown),
        snapshot_user_meta=snap.user_meta if snap and store else None,
        snapshot_meta_policy=snap.on_restore_mismatch if snap else "warn",
        dead_letter_store=dls,
        observers=obs,
        shutdown_timeout=model.shutdown.grace_period,
        lag_interval=model.observability.lag_interval,
    )
    return Built(engine, store, serializer, dls)
