"""Hypothesis strategies the fuzz tests share (on ``sys.path`` through pytest's ``pythonpath``
setting, since the suite imports test modules by path): JSON values with the hostile strings
stores see, and a document with a few of its values replaced or removed."""

from __future__ import annotations

import copy
from collections.abc import Iterator, Sequence
from typing import Any

from hypothesis import strategies as st


def json_values(hostile: Sequence[str]) -> Any:
    """Small JSON values: scalars, the ``hostile`` strings, and lists/objects of them."""
    return st.recursive(
        st.none()
        | st.booleans()
        | st.integers()
        | st.floats()
        | st.text(max_size=10)
        | st.sampled_from(list(hostile)),
        lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=8), c, max_size=3),
        max_leaves=10,
    )


def _paths(node: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    yield prefix
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _paths(v, (*prefix, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _paths(v, (*prefix, i))


@st.composite
def mutated(draw: Any, doc: Any, values: Any) -> Any:
    """``doc`` (a real record, parsed JSON) with 1-4 of its values replaced by ``values`` or
    removed."""
    doc = copy.deepcopy(doc)
    for _ in range(draw(st.integers(1, 4))):
        paths = [p for p in _paths(doc) if p]
        if not paths:
            break
        path = draw(st.sampled_from(paths))
        parent = doc
        for k in path[:-1]:
            parent = parent[k]
        if isinstance(parent, dict) and draw(st.booleans()):
            del parent[path[-1]]
        else:
            parent[path[-1]] = draw(values)
    return doc
