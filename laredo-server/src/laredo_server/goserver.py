"""``laredo-server``: Go Laredo's server command line, so deployments written for the Go
binary (container commands, probes, scripts) run unchanged.

    laredo-server validate [--config P] [--conf-dir D] [--set k=v]  "config is valid", or exit 1
    laredo-server config [--config P] [--conf-dir D]    the merged config as JSON, secrets masked
    laredo-server version                               "laredo-server <version>"
    laredo-server healthcheck [--port 8080]             exit 0 when /health/ready answers 200
    laredo-server [--config P] [--conf-dir D] [--init-dir D] [--health-port N]
                  [--log-level debug|info|warn|error] [--drain-grace 10s] [--set k=v ...]

``--config`` falls back to ``LAREDO_CONFIG``. Flags take one or two dashes and ``=`` or a space
(Go's ``flag`` package). Running maps the flags onto the configuration: ``--health-port`` is
``health.port``, ``--log-level`` is ``observability.log_level``, ``--drain-grace`` is
``shutdown.drain``; ``--init-dir`` is read before the conf dir. Logs are JSON (Go's format)
unless the configuration sets ``observability.log_format``. Deprecation notes (Go spellings in
the configuration) go to stderr, or to the log when serving. ``laredo serve`` is the same server
with our CLI.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from . import __version__

__all__ = ["main"]

logger = logging.getLogger("laredo_server.config")

_LONG = ("config", "conf-dir", "init-dir", "health-port", "log-level", "drain-grace", "set", "port")
_GO_LEVELS = {
    "debug": "debug",
    "info": "info",
    "warn": "warning",
    "warning": "warning",
    "error": "error",
}


def _go_flags(args: Sequence[str]) -> list[str]:
    """``-config x`` / ``-config=x`` (Go's single dash) as ``--config``."""
    out = []
    for a in args:
        name = a[1:].split("=", 1)[0]
        out.append("-" + a if a.startswith("-") and not a.startswith("--") and name in _LONG else a)
    return out


def _parser(prog: str, *, serve: bool = False, conf: bool = True) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=prog, allow_abbrev=False)
    if conf:
        p.add_argument("--config", default=os.environ.get("LAREDO_CONFIG"), help="HOCON file")
        p.add_argument("--conf-dir", help="directory of *.conf merged after the file")
        p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    if serve:
        p.add_argument("--init-dir", help="directory of *.conf read before --conf-dir")
        p.add_argument("--health-port", type=int, help="health.port (default 8080)")
        p.add_argument("--log-level", choices=sorted(_GO_LEVELS), help="observability.log_level")
        p.add_argument("--drain-grace", help="shutdown.drain, e.g. 10s (default 0: off)")
    return p


def _load(ns: argparse.Namespace, extra_sets: Sequence[str] = ()) -> Any:
    """The loaded configuration; exit 1 (Go's code) listing every problem."""
    from laredo.errors import ConfigError  # noqa: PLC0415 - lazy: `import laredo` costs ~0.3 s (pydantic)

    from .config import load_config  # noqa: PLC0415 - lazy: pydantic and the engine

    if not ns.config:
        print("error: --config is required (or set LAREDO_CONFIG)", file=sys.stderr)
        raise SystemExit(1)
    dirs: list[str] = []
    if getattr(ns, "init_dir", None):
        dirs.append(ns.init_dir)
    dirs.append(ns.conf_dir or str(Path(ns.config).parent / "conf.d"))
    try:
        return load_config(ns.config, conf_dirs=dirs, sets=[*ns.set, *extra_sets], log_notes=False)
    except ConfigError as exc:
        for note in getattr(exc, "__notes__", []):
            print(f"deprecated: {note}", file=sys.stderr)
        print(f"invalid configuration ({ns.config}):", file=sys.stderr)
        for problem in exc.problems:
            print(f"  - {problem}", file=sys.stderr)
        raise SystemExit(1) from None


def _validate(args: list[str]) -> int:
    loaded = _load(_parser("laredo-server validate").parse_args(args))
    for note in loaded.notes:
        print(f"deprecated: {note}", file=sys.stderr)
    print("config is valid")
    return 0


def _config(args: list[str]) -> int:
    from .config import dump_config  # noqa: PLC0415 - lazy: pyhocon and pydantic

    loaded = _load(_parser("laredo-server config").parse_args(args))
    for note in loaded.notes:
        print(f"deprecated: {note}", file=sys.stderr)
    print(dump_config(loaded, "json"))
    return 0


def _healthcheck(args: list[str]) -> int:
    p = _parser("laredo-server healthcheck", conf=False)
    p.add_argument("--port", type=int, default=8080, help="the health port (default 8080)")
    ns = p.parse_args(args)
    url = f"http://localhost:{ns.port}/health/ready"
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            ok = r.status == 200
    except urllib.error.HTTPError as exc:
        ok = False
        print(f"not ready: {url} answered {exc.code}", file=sys.stderr)
    except OSError as exc:
        print(f"unhealthy: {url}: {exc}", file=sys.stderr)
        return 1
    return 0 if ok else 1


def _serve(args: list[str]) -> int:
    from .logs import setup_logging  # noqa: PLC0415 - lazy: imports laredo (~0.3 s)
    from .serve import serve  # noqa: PLC0415 - lazy: the server stack (grpc, protobuf, engine)

    ns = _parser("laredo-server", serve=True).parse_args(args)
    sets = []
    if ns.health_port is not None:
        sets.append(f"health.port={ns.health_port}")
    if ns.log_level is not None:
        sets.append(f"observability.log_level={_GO_LEVELS[ns.log_level]}")
    if ns.drain_grace is not None:
        sets.append(f"shutdown.drain={json.dumps(ns.drain_grace)}")
    loaded = _load(ns, sets)
    obs = loaded.tree.get("observability")
    fmt = obs.get("log_format") if isinstance(obs, dict) else None
    setup_logging(fmt or "json", loaded.model.observability.log_level)
    for note in loaded.notes:
        logger.warning("deprecated: %s", note)
    return serve(loaded.model)


def main(argv: list[str] | None = None) -> int:
    """The ``laredo-server`` console script; returns the exit code."""
    args = _go_flags(sys.argv[1:] if argv is None else argv)
    command = args[0] if args else ""
    try:
        if command == "version":
            print(f"laredo-server {__version__}")
            return 0
        if command == "validate":
            return _validate(args[1:])
        if command == "config":
            return _config(args[1:])
        if command == "healthcheck":
            return _healthcheck(args[1:])
        return _serve(args)
    except SystemExit as exc:
        return int(exc.code or 0) if not isinstance(exc.code, str) else 1
