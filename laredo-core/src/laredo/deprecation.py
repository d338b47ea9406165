"""Deprecated option spellings: each plugin declares its own, one warning carries them out.

A plugin's options model accepts an old spelling (a ``mode="before"`` validator that moves the
value to the new key) and calls :func:`deprecated_option` with a message naming the spelling to
write. In Python code that is an ordinary :class:`DeprecationWarning`; while a configuration is
validated (:func:`laredo.config.spec_problems` under :func:`collect_deprecations`) each one
becomes a note prefixed with the section's key path, which ``laredo config validate`` prints and
``laredo serve`` logs, once per spelling found. The server's compatibility layer
(``laredo_server.config.gocompat``) handles only the server's own sections.

A target written against the per-change protocol (no ``apply``/``load``) keeps working through
:class:`laredo.base.LegacyDoor`; :func:`deprecated_target` warns once per class.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = [
    "OptionDeprecationWarning",
    "TargetProtocolDeprecationWarning",
    "collect_deprecations",
    "deprecated_option",
    "deprecated_target",
]

_WARNED_TARGETS: set[type] = set()


class OptionDeprecationWarning(DeprecationWarning):
    """An option written in a deprecated spelling; ``str()`` names the spelling to write."""


def deprecated_option(message: str) -> None:
    """Report one deprecated spelling (call it from the options model's validator)."""
    warnings.warn(OptionDeprecationWarning(message), stacklevel=3)


class TargetProtocolDeprecationWarning(DeprecationWarning):
    """A target without ``apply``/``load`` (the per-change protocol): ``str()`` names the class
    and what to implement instead."""


def deprecated_target(cls: type) -> None:
    """Warn (once per class) that the engine reaches ``cls`` through the deprecated
    per-change protocol."""
    if cls in _WARNED_TARGETS:
        return
    _WARNED_TARGETS.add(cls)
    name = f"{cls.__module__}.{cls.__qualname__}"
    warnings.warn(
        TargetProtocolDeprecationWarning(
            f"target {name} has no apply(table, changes, complete) and load(table, rows): the "
            "engine reaches it through the deprecated per-change protocol; implement both, or "
            "subclass laredo.base.RowTarget (row by row) or laredo.base.BufferingTarget "
            "(buffered, durable)"
        ),
        stacklevel=3,
    )


@contextmanager
def collect_deprecations() -> Iterator[list[str]]:
    """Collect the messages of :class:`OptionDeprecationWarning` raised inside the block (each
    once, in order) into the list it yields; other warnings pass on unchanged. Not for
    concurrent use from several threads (``warnings.catch_warnings`` is process-wide)."""
    found: list[str] = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", OptionDeprecationWarning)
        try:
            yield found
        finally:
            others = []
            for w in caught:
                if issubclass(w.category, OptionDeprecationWarning):
                    text = str(w.message)
                    if text not in found:
                        found.append(text)
                else:
                    others.append(w)
    for w in others:
        warnings.warn_explicit(w.message, w.category, w.filename, w.lineno, source=w.source)
