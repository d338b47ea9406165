"""The guard every conformance suite carries: a plugin's subclass may not delete or silently
override a test of the suite (after langchain's ``test_no_overrides_DO_NOT_OVERRIDE``).

Override a suite test only to mark it as an expected failure, with the reason::

    @pytest.mark.xfail(reason="this store cannot list by table yet")
    def test_list_is_newest_first_and_filters_by_table(self, ...): ...

Capability flags (``supports_restore = False`` and the like) are the way to opt out of what a
plugin does not offer; they skip with a message instead of passing silently.
"""

from __future__ import annotations

from typing import Any

__all__ = ["ConformanceSuite"]


def _xfailed_with_reason(method: Any) -> bool:
    marks = getattr(method, "pytestmark", [])
    return any(m.name == "xfail" and m.kwargs.get("reason") for m in marks)


class ConformanceSuite:
    """Base of Laredo's conformance suites (see the module docstring)."""

    def test_no_overrides_DO_NOT_OVERRIDE(self) -> None:
        cls = type(self)
        suites = [
            c
            for c in cls.__mro__
            if c.__module__.startswith("laredo.testing.") and c is not ConformanceSuite
        ]
        assert suites, f"{cls.__name__} does not derive from a laredo.testing conformance suite"
        suite = suites[0]
        tests = {name for name in dir(suite) if name.startswith("test_")}
        deleted = sorted(name for name in tests if not callable(getattr(cls, name, None)))
        assert not deleted, f"{cls.__name__} deletes suite tests: {', '.join(deleted)}"
        overridden = sorted(
            name
            for name in tests
            if getattr(cls, name) is not getattr(suite, name)
            and not _xfailed_with_reason(getattr(cls, name))
        )
        assert not overridden, (
            f"{cls.__name__} overrides suite tests without @pytest.mark.xfail(reason=...): "
            f"{', '.join(overridden)}"
        )
