"""Repo-wide layout rules (the fan-out package's layout test, made repo-wide): no source module
over 800 lines, no private name imported from another module, function-level imports marked
lazy, and polling in tests only through ``wait_until`` (no inline deadline loops)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = sorted(p for p in ROOT.glob("laredo-*") if (p / "src").is_dir())


def _generated(path: Path) -> bool:
    return path.stem.endswith(("_pb2", "_pb2_grpc")) or "_proto" in path.parts


SOURCES = [p for pkg in PACKAGES for p in sorted((pkg / "src").rglob("*.py")) if not _generated(p)]
TESTS = [
    p
    for d in [ROOT / "tests", *(pkg / "tests" for pkg in PACKAGES)]
    for p in sorted(d.rglob("*.py"))
    if p != Path(__file__).resolve()
]

DEADLINE_LOOP = re.compile(
    r"(deadline|end|until|stop_at)\s*=\s*time\.(monotonic|time|perf_counter)\(\)\s*\+"
    r"|while\b[^\n]*time\.(monotonic|time|perf_counter)\(\)\s*[<>]"
)
RUN_LENGTH = "# a run length, not a wait"
"""The marker of a loop that runs for a time on purpose (a stress run), not one that waits."""


def _rel(p: Path) -> str:
    return str(p.relative_to(ROOT))


def deadline_loops(text: str) -> list[int]:
    """Line numbers of inline deadline loops (a poll that should be ``wait_until``)."""
    return [
        n
        for n, line in enumerate(text.splitlines(), 1)
        if DEADLINE_LOOP.search(line) and RUN_LENGTH not in line
    ]


def test_the_rule_sees_the_usual_shapes() -> None:
    loop = "deadline = time.monotonic() + 10\nwhile time.monotonic() < deadline:\n    pass\n"
    assert deadline_loops(loop) == [1, 2]
    assert deadline_loops("while not done() and time.time() < t0 + 5:\n") == [1]
    assert deadline_loops(f"deadline = time.monotonic() + 2  {RUN_LENGTH}\n") == []
    assert deadline_loops("wait_until(lambda: done(), 10)\n") == []


def test_tests_poll_only_through_wait_until() -> None:
    bad = [f"{_rel(p)}:{n}" for p in TESTS for n in deadline_loops(p.read_text())]
    assert not bad, f"inline deadline loops (use laredo.testing.wait_until): {bad}"


def test_no_source_module_over_800_lines() -> None:
    sizes = {_rel(p): len(p.read_text().splitlines()) for p in SOURCES}
    assert {p: n for p, n in sizes.items() if n > 800} == {}


def _module_level(tree: ast.Module) -> set[int]:
    """Ids of the statements at module level, ``if``/``try`` blocks (``TYPE_CHECKING``,
    optional extras) included."""
    top: set[int] = set()
    todo: list[ast.stmt] = list(tree.body)
    while todo:
        node = todo.pop()
        top.add(id(node))
        if isinstance(node, ast.If | ast.Try):
            todo += [*node.body, *node.orelse]
            if isinstance(node, ast.Try):
                todo += [*node.finalbody, *(s for h in node.handlers for s in h.body)]
    return top


def _ours(node: ast.ImportFrom) -> bool:
    return node.level > 0 or (node.module or "").split(".")[0].startswith("laredo")


def test_no_private_name_crosses_a_module() -> None:
    bad = [
        f"{_rel(p)}:{node.lineno} {a.name} from {node.module}"
        for p in SOURCES
        for node in ast.walk(ast.parse(p.read_text()))
        if isinstance(node, ast.ImportFrom) and node.module and _ours(node)
        for a in node.names
        if a.name.startswith("_") and not a.name.startswith("__")
    ]
    assert not bad


def test_function_level_imports_are_marked() -> None:
    bad = []
    for p in SOURCES:
        text = p.read_text()
        lines = text.splitlines()
        tree = ast.parse(text)
        top = _module_level(tree)
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Import | ast.ImportFrom)
                and id(node) not in top
                and "noqa: PLC0415 - " not in lines[node.lineno - 1]
            ):
                bad.append(f"{_rel(p)}:{node.lineno}")
    assert not bad, f"function-level imports need '# noqa: PLC0415 - lazy: <why>': {bad}"


FREE_PORT_HOME = ROOT / "laredo-core/src/laredo/net.py"
"""The one ``free_port`` (``laredo.net``; ``laredo.testing`` re-exports it)."""


def free_port_copies(path: Path, text: str) -> list[str]:
    """``file:line`` of each function named ``free_port``/``_free_port`` outside its home."""
    if path == FREE_PORT_HOME:
        return []
    return [
        f"{_rel(path)}:{node.lineno}"
        for node in ast.walk(ast.parse(text))
        if isinstance(node, ast.FunctionDef) and node.name.lstrip("_") == "free_port"
    ]


def test_the_free_port_rule_sees_a_copy() -> None:
    copy = "import socket\n\ndef _free_port() -> int:\n    return 0\n"
    assert free_port_copies(ROOT / "tests" / "x.py", copy) == ["tests/x.py:3"]
    assert free_port_copies(FREE_PORT_HOME, FREE_PORT_HOME.read_text()) == []


def test_free_port_has_one_home() -> None:
    files = [*SOURCES, *TESTS, *sorted((ROOT / "benchmarks").rglob("*.py"))]
    bad = [hit for p in files for hit in free_port_copies(p, p.read_text())]
    assert not bad, f"free_port copies (use laredo.net.free_port): {bad}"
