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


def test_the_example_observer_counts_through_a_running_engine() -> None:
    """``docs/plugin_hooks.md`` ("Writing an observer"): its observer gets the per-change event
    it opted in to and nothing warns (it is written against the values, not ``on_xxx``)."""
    import warnings

    import laredo
    from laredo.testing import TestSource, columns, wait_until

    counter = load("applied_counter.py").AppliedCounter()
    table = laredo.Table("public", "t")
    src = TestSource()
    src.add_table(table, columns("id"), [])
    eng = laredo.Engine(
        sources={"s": src},
        pipelines=[laredo.Pipeline("s", table, laredo.target("indexed-memory"))],
        observers=[counter, laredo.RecordingObserver()],
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        eng.start()
        try:
            assert eng.await_ready(10)
            src.insert(table, {"id": 1})
            src.insert(table, {"id": 2})
            wait_until(lambda: counter.applied == 2, 10, "two changes counted")
        finally:
            eng.stop()
    assert counter.errors == 0


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
