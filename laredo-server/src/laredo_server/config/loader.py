"""HOCON loading: the main file and its includes, conf directories, environment overrides and
``--set``, merged into one plain tree (see the package docstring for the order)."""

from __future__ import annotations

import copy
import json
import logging
import os
import re
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

from laredo.errors import ConfigError
from laredo.secrets import is_secret_key
from laredo.units import WrittenDuration, parse_duration

from .gocompat import apply_go_env, translate_go_keys
from .loaded import LoadedConfig
from .validate import validate_tree

logger = logging.getLogger(__name__)

__all__ = ["ENV_PREFIX", "load_config", "load_string", "parse_value", "plain_tree"]

ENV_PREFIX = "LAREDO_"
_ENV_SEP = "__"
_INCLUDE = re.compile(r'^\s*include\s+(?:required\()?(?:file\()?"([^"]+)"', re.MULTILINE)
_NETWORK_INCLUDE = re.compile(r"^\s*include\s+(?:required\(\s*)?(url|classpath)\(", re.MULTILINE)


_PERIOD_TEXT = re.compile(r"\s*(\d+ *[A-Za-z]+)")


class _TimedeltaText(timedelta):
    """A pyhocon ``timedelta`` (milliseconds) that remembers its text (``hocon_text``)."""

    hocon_text: str


def _keep_period_text() -> None:
    """Make pyhocon's durations carry the text they were written as (``hocon_text``).

    pyhocon parses an unquoted ``768m`` or ``30s`` as a duration and keeps no text; free-form
    maps (``spark.conf``, HTTP ``headers``) need the text. Its parse action is wrapped once per
    process (idempotent); the values it produces are unchanged otherwise."""
    from pyhocon import period_parser  # noqa: PLC0415 - lazy: pyhocon takes ~0.4 s

    original = period_parser.convert_period
    if getattr(original, "laredo_keeps_text", False):
        return

    def convert_period(s: str, loc: int, tokens: Any) -> Any:
        value = original(tokens)
        m = _PERIOD_TEXT.match(s, loc)
        text = m.group(1) if m else f"{tokens.value}{tokens.unit}"
        if isinstance(value, timedelta):
            value = _TimedeltaText(seconds=value.total_seconds())
        value.hocon_text = text
        return value

    convert_period.laredo_keeps_text = True  # type: ignore[attr-defined]
    period_parser.convert_period = convert_period


def _is_duration(value: Any) -> bool:
    """pyhocon writes ``5s``/``10 minutes`` as a ``timedelta`` or a dateutil ``relativedelta``."""
    return isinstance(value, timedelta) or type(value).__name__ == "relativedelta"


def plain_tree(value: Any, path: str, problems: list[str]) -> Any:
    """A pyhocon tree as plain dicts and lists. HOCON durations become seconds: a
    :class:`~laredo.units.WrittenDuration` (a float) that keeps the text written (``768m``)
    for free-form maps."""
    from pyhocon import ConfigTree  # noqa: PLC0415 - lazy: pyhocon takes ~0.4 s
    from pyhocon.config_tree import NoneValue  # noqa: PLC0415 - lazy: pyhocon takes ~0.4 s

    if isinstance(value, ConfigTree | dict):
        return {
            str(k): plain_tree(v, f"{path}.{k}" if path else str(k), problems)
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [plain_tree(v, f"{path}.{i}", problems) for i, v in enumerate(value)]
    if isinstance(value, NoneValue) or value is None:
        return None
    if _is_duration(value):
        try:
            seconds = parse_duration(value)
        except ConfigError as exc:
            problems.append(f"{path}: {exc}")
            return None
        text = getattr(value, "hocon_text", None)
        return WrittenDuration(seconds, text) if text else seconds
    return value


def _merge(base: dict[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    for k, v in over.items():
        if isinstance(v, Mapping) and isinstance(base.get(k), dict):
            _merge(base[k], v)
        else:
            base[k] = copy.deepcopy(v) if isinstance(v, dict | list) else v
    return base


_REFERS_BACK = re.compile(r"\+=|\$\{")
_APPEND_OBJECT = re.compile(r"\+=\s*\{")


def _wrap_object_appends(text: str) -> str:
    """``key += { ... }`` -> ``key += [{ ... }]``: HOCON appends the object to the array
    (``key = ${?key} [{...}]``); pyhocon instead replaces the array with the object."""
    out: list[str] = []
    pos = 0
    for m in _APPEND_OBJECT.finditer(text):
        if m.start() < pos:
            continue
        start = m.end() - 1  # the "{"
        depth, i, quote = 0, start, False
        while i < len(text):
            c = text[i]
            if quote:
                if c == "\\":
                    i += 1
                elif c == '"':
                    quote = False
            elif c == '"':
                quote = True
            elif c == "{":
                depth += 1
            elif c == "}":
                depth -= 1
                if depth == 0:
                    break
            i += 1
        if depth:
            break  # unbalanced: the parser reports it
        out += [text[pos:start], "[", text[start : i + 1], "]"]
        pos = i + 1
    out.append(text[pos:])
    return "".join(out)


def _parse_file(
    path: Path, problems: list[str], base: dict[str, Any] | None = None
) -> dict[str, Any] | None:
    """The plain tree of one file. With ``base`` (the files read before it), the file is read
    on top of it, so ``tables += {...}`` and ``${...}`` in a ``conf.d`` file see the earlier
    files' values; the result is then the merged tree."""
    from pyhocon import ConfigFactory  # noqa: PLC0415 - lazy: pyhocon takes ~0.4 s

    _keep_period_text()
    fetched = _network_includes(path, set())
    if fetched:
        problems.extend(fetched)
        return None
    shifted = False
    try:
        text = path.read_text(encoding="utf-8")
        if base is None and "+=" not in text:
            tree = ConfigFactory.parse_file(str(path), required=True)
        else:  # the earlier files' keys as one line of JSON (valid HOCON), then this file
            head = ", ".join(
                f"{json.dumps(k)}: {json.dumps(v, default=str)}" for k, v in (base or {}).items()
            )
            shifted = True
            text = head + "\n" + _wrap_object_appends(text)
            tree = ConfigFactory.parse_string(text, str(path.parent))
    except FileNotFoundError:
        problems.append(f"{path}: file not found")
        return None
    except Exception as exc:  # pyparsing errors carry line and column
        line = getattr(exc, "lineno", None)
        if line and shifted:
            line -= 1  # the JSON line in front
        col = getattr(exc, "col", None)
        where = f"{path}:{line}:{col}" if line else str(path)
        msg = str(getattr(exc, "msg", "")) or str(exc)
        problems.append(f"{where}: HOCON syntax error: {msg}")
        return None
    result = plain_tree(tree, "", problems)
    assert isinstance(result, dict)
    return result


def _network_includes(path: Path, seen: set[Path]) -> list[str]:
    """``include url(...)`` / ``classpath(...)`` in ``path`` or a file it includes: refused,
    so loading (and every reload) never fetches configuration over the network."""
    if path in seen or not path.is_file():
        return []
    seen.add(path)
    text = path.read_text(encoding="utf-8", errors="replace")
    out = [
        f"{path}:{text.count(chr(10), 0, m.start()) + 1}: include {m.group(1)}(...) is not "
        "allowed (configuration is never fetched over the network or the classpath); copy "
        'the file next to this one and write include "FILE"'
        for m in _NETWORK_INCLUDE.finditer(text)
    ]
    for m in _INCLUDE.finditer(text):
        inc = Path(m.group(1))
        out += _network_includes(inc if inc.is_absolute() else path.parent / inc, seen)
    return out


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
        from pyhocon import ConfigFactory  # noqa: PLC0415 - lazy: pyhocon takes ~0.4 s

        _keep_period_text()
        try:
            problems: list[str] = []
            parsed = plain_tree(ConfigFactory.parse_string(f"v = {t}")["v"], "v", problems)
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


def _apply_env(loaded: LoadedConfig, environ: Mapping[str, str], problems: list[str]) -> None:
    for name in sorted(environ):
        if not name.startswith(ENV_PREFIX) or _ENV_SEP not in name:
            continue
        value = environ[name]
        if value == "":
            continue
        segs = name[len(ENV_PREFIX) :].split(_ENV_SEP)
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


def _apply_sets(loaded: LoadedConfig, sets: Iterable[str], problems: list[str]) -> None:
    for item in sets:
        key, eq, value = item.partition("=")
        if not eq or not key.strip():
            problems.append(f"--set {item!r}: write --set key.path=value")
            continue
        parts = _split_path(key.strip())
        if is_secret_key(parts[-1]):
            problems.append(
                f"--set {key.strip()}: a secret on the command line shows in ps and shell "
                f"history; put it in the file (a *_file key such as {parts[-1]}_file where "
                "there is one) or the environment (LAREDO_<PATH>)"
            )
            continue
        problem = _set_path(loaded.tree, parts, parse_value(value), f"--set {key.strip()}")
        if problem:
            problems.append(problem)
        else:
            loaded.applied_sets.append(".".join(parts))


def load_config(
    path: str | os.PathLike[str],
    *,
    conf_dirs: Iterable[str | os.PathLike[str]] | None = None,
    sets: Iterable[str] = (),
    env: Mapping[str, str] | None = None,
    validate: bool = True,
    log_notes: bool = True,
) -> LoadedConfig:
    """Load, merge, override and (by default) validate a configuration.

    ``conf_dirs`` defaults to ``<dir of path>/conf.d``. Raises ``ConfigError`` with every
    problem found (syntax, unknown keys, wrong types, unknown plugins, plugin options).
    Go Laredo spellings of the server's sections are translated (:mod:`.gocompat`), a
    plugin's own deprecated spellings by the plugin (:mod:`laredo.deprecation`, reported while
    validating); their notes are in ``notes`` and logged as warnings unless ``log_notes`` is
    False (the CLI shows them itself).
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
    for i, f in enumerate(files):
        _collect_texts(f, loaded.texts)
        base = (
            loaded.tree if i and _REFERS_BACK.search("\n".join(loaded.texts.get(f, []))) else None
        )
        parsed = _parse_file(f, problems, base)
        if parsed is not None and base is not None:
            loaded.tree = parsed
        elif parsed is not None:
            _merge(loaded.tree, parsed)
    loaded.files = files
    environ = os.environ if env is None else env
    apply_go_env(loaded.tree, environ, parse_value, loaded.notes, loaded.applied_env)
    _apply_env(loaded, environ, problems)
    _apply_sets(loaded, sets, problems)
    translate_go_keys(loaded.tree, loaded.notes, problems)
    try:
        if problems:
            raise ConfigError(problems)
        if validate:
            loaded.model = validate_tree(loaded)  # adds the plugins' deprecation notes
    except ConfigError as exc:
        for note in loaded.notes:  # shown with the problems (``exc.__notes__``)
            exc.add_note(note)
        raise
    finally:
        if log_notes:
            for note in loaded.notes:
                logger.warning("deprecated: %s", note)
    return loaded


def load_string(text: str, **kw: Any) -> LoadedConfig:
    """Load from HOCON text (tests, tools): written to a temporary file first."""
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "laredo.conf"
        p.write_text(text)
        kw.setdefault("conf_dirs", [])
        return load_config(p, **kw)
