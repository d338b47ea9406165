"""The example target of ``docs/plugin_hooks.md`` ("Writing a target") passes the target
conformance suite: the code is taken from the markdown as it is, so the doc cannot drift."""

from __future__ import annotations

import re
import types
from pathlib import Path

import pytest
from laredo.testing.target_conformance import MakeTarget, TargetConformance

DOC = Path(__file__).resolve().parents[2] / "docs" / "plugin_hooks.md"


def example(name: str) -> str:
    """The fenced Python block after ``<!-- example: NAME -->`` in the doc."""
    m = re.search(
        rf"<!-- example: {re.escape(name)} -->\s*```python\n(.*?)```", DOC.read_text(), re.S
    )
    assert m, f"docs/plugin_hooks.md has no example {name!r}"
    return m.group(1)


def load(name: str) -> types.ModuleType:
    mod = types.ModuleType(name.removesuffix(".py"))
    exec(compile(example(name), f"docs/plugin_hooks.md:{name}", "exec"), mod.__dict__)
    return mod


DICT_TARGET = load("dict_target.py")


def test_the_example_is_short() -> None:
    assert len(example("dict_target.py").splitlines()) <= 70


class TestDocExampleTargetConformance(TargetConformance):
    @pytest.fixture
    def make_target(self) -> MakeTarget:
        return lambda table, columns: DICT_TARGET.DictTarget()


REPO = DOC.parents[1]


def _docs() -> list[Path]:
    skip = {".venv", "node_modules", ".tools", ".git"}
    return [
        p
        for p in REPO.rglob("*.md")
        if not skip & set(p.relative_to(REPO).parts) and p.name != "CHANGELOG.md"
    ]


def test_no_doc_shows_the_old_typed_value_spelling() -> None:
    old = re.compile(r"\{\s*\"\$t\"\s*:")
    found = [str(p.relative_to(REPO)) for p in _docs() if old.search(p.read_text())]
    assert not found, f'the 0.1 spelling {{"$t": ..., "v": ...}} in {found}: use "$type"/"value"'


def test_docs_name_no_password_file_option() -> None:
    """No option ``password_file`` exists: a password comes from ``connection_provider``
    (``file``/``env``) or the environment."""
    found = [str(p.relative_to(REPO)) for p in _docs() if "password_file" in p.read_text()]
    assert not found, found
