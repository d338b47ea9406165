"""Value tuples into a row store: a tuple layout's key getter, a chunk stored in one call.

Used by ``IndexedTarget``'s batch paths (``RowBatch`` baselines, ``ChangeBatch`` streams), which
store packed rows without building row dicts.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from operator import itemgetter
from typing import Any

from ._base import RowStore
from .compact import CompactStore

__all__ = ["put_all", "tuple_key_getter"]


@functools.lru_cache(maxsize=256)
def tuple_key_getter(
    names: tuple[str, ...], fields: tuple[str, ...]
) -> tuple[frozenset[int], Callable[[Sequence[Any]], Any]] | None:
    """``(positions, values -> key)`` of the key ``fields`` in tuples of ``names`` order (the
    raw value for a one-field key, a tuple for a composite key, as ``key_getter`` gives for
    rows); None when a field is not among ``names``."""
    try:
        at = [names.index(f) for f in fields]
    except ValueError:
        return None
    return frozenset(at), itemgetter(*at)


def put_all(
    store: RowStore, keys: list[Any], values: list[Any], check_hashable: Callable[[Any], None]
) -> None:
    """``store[keys[j]] = values[j]`` for each ``j``, in order, in one call (``dict.update`` or
    :meth:`~.compact.CompactStore.put_batch`). On an unhashable key the rows are stored one by
    one up to it and ``check_hashable`` raises the error that names it."""
    try:
        if isinstance(store, CompactStore):
            store.put_batch(keys, values)
        else:
            store.update(zip(keys, values, strict=True))  # type: ignore[attr-defined]
    except TypeError:
        for key, value in zip(keys, values, strict=True):
            try:
                store[key] = value
            except TypeError:
                check_hashable(key)
                raise
