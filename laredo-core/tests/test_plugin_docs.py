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
