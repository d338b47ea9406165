"""Go Laredo's configuration vocabulary, accepted so that a Go config serves unchanged.

Each Go spelling found is rewritten to ours and leaves one deprecation note naming our
spelling (``LoadedConfig.notes``; logged, and printed by ``laredo config validate``). A Go key
whose behaviour we do not have is a problem naming what to use instead. Nothing is accepted
silently. See ``docs/migrating-from-go.md``.

* Environment overrides in Go's form: the HOCON path upper-cased with ``.`` -> ``_``
  (``LAREDO_SOURCES_PG_CONNECTION``, then the bare ``SOURCES_PG_CONNECTION``), for the keys Go
  reads: ``sources.<id>.{connection,type,slot_mode,slot_name,always_baseline}``,
  ``tables.<i>.targets.<j>.{base_url,auth_header}`` and ``grpc.port`` (when a ``grpc``
  section exists), applied only to sources and targets the files define. They apply before
  ours (``LAREDO_SOURCES__PG__CONNECTION``), which wins when both are set.
* Keys: see :func:`translate_go_keys`: the server's own sections only (source type names, the
  top-level ``fanout { grpc { port } }`` section). A plugin's own deprecated options (the
  fan-out's ``max_clients``, ``client_buffer.max_size``, ``snapshot.retention``; http-sync's
  ``*_ms``) are the plugin's, declared in its options model (:mod:`laredo.deprecation`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

__all__ = ["GO_SOURCE_TYPES", "apply_go_env", "translate_go_keys"]

GO_SOURCE_TYPES = {"pg": "postgresql"}
"""Go source type names we serve under another name."""

_UNSUPPORTED_SOURCES = {
    "archive": "Go Laredo's archive source (snapshots and diffs of laredo-snapshotter) is not "
    "available: archive to Delta Lake with a delta target and read it back with a delta source "
    "(pip install laredo-target-delta; type = delta, uri = ...), or start from a snapshot with "
    "snapshot { store = s3 | local, store_config { ... } }",
}
_UNSUPPORTED_SOURCES["file"] = _UNSUPPORTED_SOURCES["archive"]

_GO_SOURCE_ENV_KEYS = ("connection", "type", "slot_mode", "slot_name", "always_baseline")
_GO_TARGET_ENV_KEYS = ("base_url", "auth_header")
_OURS_SEP = "__"


def _go_env_name(path: str) -> str:
    return path.upper().replace(".", "_")


def _our_env_name(parts: list[str]) -> str:
    return "LAREDO_" + _OURS_SEP.join(re.sub(r"[^A-Z0-9]", "_", p.upper()) for p in parts)


def _lookup(environ: Mapping[str, str], path: str) -> tuple[str, str] | None:
    """Go's order: ``LAREDO_<KEY>``, then ``<KEY>``; an empty value is unset. ``-`` in a name
    may also be written ``_`` (shells cannot export ``-``)."""
    names = [_go_env_name(path)]
    if "-" in names[0]:
        names.append(names[0].replace("-", "_"))
    for name in names:
        for candidate in ("LAREDO_" + name, name):
            value = environ.get(candidate, "")
            if value != "":
                return candidate, value
    return None


def apply_go_env(
    tree: dict[str, Any],
    environ: Mapping[str, str],
    parse: Any,
    notes: list[str],
    applied: list[str],
) -> None:
    """Apply Go's environment overrides to ``tree`` (``parse`` types a value); a note per
    variable used, naming our form."""
    targets: list[tuple[list[str], Mapping[str, Any], tuple[str, ...]]] = []
    sources = tree.get("sources")
    if isinstance(sources, dict):
        for sid, spec in sources.items():
            if isinstance(spec, dict):
                targets.append((["sources", str(sid)], spec, _GO_SOURCE_ENV_KEYS))
    tables = tree.get("tables")
    for i, table in enumerate(tables if isinstance(tables, list) else []):
        tgts = table.get("targets") if isinstance(table, dict) else None
        for j, tgt in enumerate(tgts if isinstance(tgts, list) else []):
            if isinstance(tgt, dict):
                targets.append((["tables", str(i), "targets", str(j)], tgt, _GO_TARGET_ENV_KEYS))
    if isinstance(tree.get("grpc"), dict):
        targets.append((["grpc"], tree["grpc"], ("port",)))
    for base, node, keys in targets:
        for key in keys:
            found = _lookup(environ, ".".join([*base, key]))
            if found is None:
                continue
            name, value = found
            assert isinstance(node, dict)
            node[key] = parse(value)
            path = ".".join([*base, key])
            applied.append(f"{name} -> {path}")
            notes.append(
                f"environment {name}: Go Laredo's override form sets {path}; "
                f"write {_our_env_name([*base, key])}"
            )


def _note(notes: list[str], where: str, go: str, ours: str) -> None:
    notes.append(f"{where}: {go} is Go Laredo's spelling; write {ours}")


def _fanout_section(
    tree: dict[str, Any], notes: list[str], problems: list[str]
) -> tuple[Any, list[dict[str, Any]]] | None:
    section = tree.get("fanout")
    grpc = section.get("grpc") if isinstance(section, dict) else None
    if not isinstance(section, dict) or set(section) != {"grpc"} or not isinstance(grpc, dict):
        return None  # not Go's shape: left to the validation (which says where it goes)
    del tree["fanout"]
    extra = sorted(set(grpc) - {"port"})
    if extra:
        problems.append(
            f"fanout.grpc: {', '.join(extra)}: unknown key(s); the fan-out listener is set on "
            "each replication-fanout target: targets = [ { type = replication-fanout, "
            "grpc { port, host, max_clients, tls } } ]"
        )
    port = grpc.get("port")
    if port is None:
        return None
    found = []
    tables = tree.get("tables")
    for table in tables if isinstance(tables, list) else []:
        for tgt in table.get("targets", []) if isinstance(table, dict) else []:
            if isinstance(tgt, dict) and tgt.get("type") == "replication-fanout":
                found.append(tgt)
    notes.append(
        f"fanout.grpc.port = {port} is Go Laredo's spelling; write "
        f"grpc {{ port = {port} }} in each replication-fanout target"
        + ("" if found else " (there is none: the section is ignored)")
    )
    return port, found


def translate_go_keys(tree: dict[str, Any], notes: list[str], problems: list[str]) -> None:
    """Rewrite Go's keys of the server's sections in ``tree`` to ours (a note each); Go keys we
    cannot honour become problems naming what to use instead."""
    sources = tree.get("sources")
    if isinstance(sources, dict):
        for sid, spec in sources.items():
            if not isinstance(spec, dict) or not isinstance(spec.get("type"), str):
                continue
            go_type = spec["type"]
            if go_type in GO_SOURCE_TYPES:
                spec["type"] = GO_SOURCE_TYPES[go_type]
                _note(notes, f"sources.{sid}", f"type = {go_type}", f"type = {spec['type']}")
            elif go_type in _UNSUPPORTED_SOURCES:
                problems.append(f"sources.{sid}.type = {go_type}: {_UNSUPPORTED_SOURCES[go_type]}")
    fanout = _fanout_section(tree, notes, problems)
    if fanout is not None:
        port, found = fanout
        for tgt in found:
            grpc = tgt.setdefault("grpc", {})
            if isinstance(grpc, dict):
                grpc.setdefault("port", port)
        g = tree.get("grpc")
        if found and isinstance(g, dict) and g.get("port") == port:
            problems.append(
                f"fanout.grpc.port: {port} is also grpc.port; the fan-out listener needs its "
                "own port"
            )
