"""``RowView``: a read-only row over a packed stored row, built in the time of a tuple index.

``IndexedTarget.get()``/``lookup()``/``lookup_all()`` (packed and compact storage) return these
instead of copying the row into a dict. Guarantees:

* A view is a snapshot: stored rows are never changed in place (an update stores a new packed
  row), so a view keeps showing the row as it was when it was read, whatever happens later.
* Values are unpacked on first access (the whole packed row is loaded once, then each column is
  converted when read): the same values and types as the row dict (``==`` a dict of the same
  items), so ``view["price"]`` is the ``Decimal`` the source gave. Nested values kept by
  reference (JSON ``dict``/``list``) are shared, as for dict rows: treat them as read-only.
* Read-only: item assignment raises ``TypeError``. ``dict(view)`` or :meth:`RowView.copy` gives a
  new dict the caller owns; pickling a view pickles that dict.

Thread-safety: views may be read from any thread (they hold no lock and share nothing mutable).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

__all__ = ["FieldGetter", "Loader", "RowView", "ViewLayout"]

FieldGetter = Callable[[tuple[Any, ...], Any], Any]
"""``(unpacked tuple, packed row) -> value`` of one column."""

ViewLayout = tuple[tuple[str, ...], dict[str, FieldGetter], Callable[..., dict[str, Any]]]
"""What a view needs of its row's layout: (column names, getter per column, whole-row decoder)."""

Loader = Callable[[Any], tuple[tuple[Any, ...], ViewLayout]]
"""``packed -> (unpacked tuple, layout)``: the codec's :meth:`~.codec.RowCodec.load`."""


class RowView(Mapping[str, Any]):
    """A read-only mapping over one packed row (see the module docstring)."""

    __slots__ = ("_layout", "_load", "_packed", "_t")

    def __init__(self, load: Loader, packed: Any) -> None:
        self._load = load
        self._packed = packed
        self._t: tuple[Any, ...] | None = None
        self._layout: ViewLayout | None = None

    def _open(self) -> ViewLayout:
        self._t, layout = self._load(self._packed)
        self._layout = layout
        return layout

    def __getitem__(self, name: str) -> Any:
        layout = self._layout or self._open()
        return layout[1][name](self._t, self._packed)  # type: ignore[arg-type]

    def get(self, name: str, default: Any = None) -> Any:
        layout = self._layout or self._open()
        getter = layout[1].get(name)
        return default if getter is None else getter(self._t, self._packed)  # type: ignore[arg-type]

    def __contains__(self, name: object) -> bool:
        layout = self._layout or self._open()
        return name in layout[1]

    def __iter__(self) -> Iterator[str]:
        return iter((self._layout or self._open())[0])

    def __len__(self) -> int:
        return len((self._layout or self._open())[0])

    def copy(self) -> dict[str, Any]:
        """A new dict of the row (the caller owns it)."""
        layout = self._layout or self._open()
        return layout[2](self._t, self._packed)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, RowView):
            return self.copy() == other.copy()
        if isinstance(other, dict):
            return self.copy() == other
        if isinstance(other, Mapping):
            return self.copy() == dict(other.items())
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __or__(self, other: Mapping[str, Any]) -> dict[str, Any]:
        return {**self.copy(), **other}

    def __ror__(self, other: Mapping[str, Any]) -> dict[str, Any]:
        return {**other, **self.copy()}

    def __repr__(self) -> str:
        return repr(self.copy())

    def __reduce__(self) -> tuple[Any, ...]:
        return (dict, (self.copy(),))
