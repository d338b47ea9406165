"""The engine's ownership rule: a pipeline worker owns its lifecycle, its buffer, its thread and
its target. No other engine module reaches through a worker (or a reader) into them; each asks
the object for what it needs (``drain``, ``hold``, ``enqueue_item``, ``init_target``, ...)."""

from __future__ import annotations

import ast
from pathlib import Path

import laredo.engine

ENGINE = Path(laredo.engine.__file__).parent
OWNER = "pipeline_worker.py"


def _parents(tree: ast.AST) -> dict[int, ast.AST]:
    return {id(child): node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}


def _used(node: ast.Attribute, parent: ast.AST | None) -> bool:
    """Is ``x.target`` used (called into, tested, passed on or kept), not only handed out?"""
    if isinstance(parent, ast.Attribute | ast.Call):
        return True  # x.target.method(...), isinstance(x.target, ...), f(x.target)
    return isinstance(parent, ast.Assign | ast.AnnAssign | ast.NamedExpr) and (parent.value is node)


def reach_throughs(text: str) -> list[str]:
    """``line: expression`` of every reach-through in a module's source."""
    tree = ast.parse(text)
    parents = _parents(tree)
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute) or node.attr not in {"buffer", "thread", "target"}:
            continue
        if isinstance(node.value, ast.Name) and node.value.id == "self":
            continue  # an object's own field
        if node.attr == "target" and not _used(node, parents.get(id(node))):
            continue  # handed out as is (Engine.targets)
        found.append((node.lineno, ast.unparse(node)))
    return [f"{line}: {expr}" for line, expr in sorted(found)]


def test_the_rule_sees_the_usual_shapes() -> None:
    bad = (
        "p.buffer.put(x)\nw.thread.join(1)\nif isinstance(p.target, T): pass\n"
        "t = worker.target\np.target.on_close(table)\nf(p.target)\n"
    )
    assert [r.split(":")[0] for r in reach_throughs(bad)] == ["1", "2", "3", "4", "5", "6"]
    fine = "self.buffer.put(x)\nself.thread.join(1)\nout = [p.target for p in ps]\n"
    assert reach_throughs(fine) == []


def test_no_engine_module_reaches_into_a_worker() -> None:
    modules = sorted(p for p in ENGINE.glob("*.py") if p.name != OWNER)
    assert len(modules) > 10, modules
    bad = {p.name: r for p in modules if (r := reach_throughs(p.read_text()))}
    assert bad == {}, (
        f"ask the worker (or reader) instead of reaching into its buffer, thread or target: {bad}"
    )
