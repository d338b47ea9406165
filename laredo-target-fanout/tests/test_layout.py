"""The package's module layout: an import DAG (function-level and ``TYPE_CHECKING`` imports
included), no protobuf or gRPC below the wire and service layers, no private names crossing
modules, no oversized module, no unmarked function-level import."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import laredo_target_fanout

PKG = "laredo_target_fanout"
SRC = Path(laredo_target_fanout.__file__).parent
MODULES = {
    p.stem: p for p in SRC.glob("*.py") if p.stem != "__init__" and not p.stem.endswith("_pb2")
} | {"__init__": SRC / "__init__.py"}

PB_FREE = ["journal", "options", "positions", "rows", "sessions", "snapshots", "target"]
"""The state modules: importable without protobuf or grpc."""


def _imports(name: str) -> list[tuple[str, ast.stmt, bool]]:
    """``(imported module, node, at module level)`` for every intra-package import of
    ``name``, wherever it is (functions, ``TYPE_CHECKING`` blocks)."""
    tree = ast.parse(MODULES[name].read_text())
    top = set(map(id, tree.body))
    for node in tree.body:  # TYPE_CHECKING blocks count as module level
        if isinstance(node, ast.If):
            top |= set(map(id, node.body))
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            if node.module:
                out.append((node.module.split(".")[0], node, id(node) in top))
            else:
                out += [(a.name, node, id(node) in top) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith(PKG + "."):
            out.append((node.module.split(".")[1], node, id(node) in top))
    return out


def _graph() -> dict[str, set[str]]:
    return {m: {dep for dep, _, _ in _imports(m) if dep in MODULES} for m in MODULES}


def test_the_import_graph_is_a_dag() -> None:
    graph = _graph()
    state: dict[str, int] = {}

    def visit(m: str, path: list[str]) -> None:
        if state.get(m) == 2:
            return
        assert state.get(m) != 1, f"import cycle: {' -> '.join([*path, m])}"
        state[m] = 1
        for dep in sorted(graph[m]):
            visit(dep, [*path, m])
        state[m] = 2

    for m in sorted(graph):
        visit(m, [])


def test_only_the_plugin_factory_and_the_package_import_the_service() -> None:
    graph = _graph()
    assert {m for m, deps in graph.items() if "service" in deps} == {"__init__", "_plugin"}
    assert "service" not in graph["target"]


def test_state_modules_import_neither_protobuf_nor_grpc() -> None:
    code = (
        "import sys\n"
        + "".join(f"import {PKG}.{m}\n" for m in PB_FREE)
        + "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('grpc', 'google')"
        f" or m in ('{PKG}._proto', '{PKG}._wire', '{PKG}.service'))\n"
        "print(bad)\n"
        "assert not bad\n"
    )
    done = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def test_no_private_name_crosses_a_module() -> None:
    bad = [
        f"{m}: {a.name} from {dep}"
        for m in MODULES
        for dep, node, _ in _imports(m)
        if isinstance(node, ast.ImportFrom) and node.module
        for a in node.names
        if a.name.startswith("_")
    ]
    assert not bad


def test_no_module_over_800_lines() -> None:
    sizes = {m: len(p.read_text().splitlines()) for m, p in MODULES.items()}
    assert max(sizes.values()) <= 800, sizes


def test_function_level_imports_are_marked_lazy() -> None:
    bad = []
    for m, path in MODULES.items():
        lines = path.read_text().splitlines()
        tree = ast.parse(path.read_text())
        top = set(map(id, tree.body)) | {
            id(n) for b in tree.body if isinstance(b, ast.If) for n in b.body
        }
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Import | ast.ImportFrom)
                and id(node) not in top
                and "noqa: PLC0415 - lazy: " not in lines[node.lineno - 1]
            ):
                bad.append(f"{m}:{node.lineno}")
    assert not bad
