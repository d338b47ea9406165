"""Source positions in the fan-out: the target's ``PositionCodec`` and the cascade source's
integer sequence positions.

The target knows no source's position format. Bound to a pipeline (``bind_pipeline``), it uses
the source's ``position_to_string`` / ``position_from_string`` / ``compare_positions`` from the
engine's ``PipelineContext``. Unbound, it understands integers (and their decimal text) and
otherwise only equality: positions it cannot order are reported as not comparable, so a client
is sent a snapshot rather than resumed at a guessed place.
"""

from __future__ import annotations

import contextlib
from typing import Any, Protocol

from laredo.types import Position

__all__ = [
    "PositionCodec",
    "PositionFunctions",
    "compare_sequences",
    "sequence_from_string",
    "sequence_to_string",
]


class PositionFunctions(Protocol):
    """The source's position functions (a ``laredo.PipelineContext`` or a ``SyncSource``)."""

    def position_to_string(self, position: Position, /) -> str: ...

    def position_from_string(self, text: str, /) -> Position: ...

    def compare_positions(self, a: Position, b: Position, /) -> int: ...


def compare_sequences(a: Any, b: Any) -> int:
    """-1/0/1 for two integer positions."""
    x, y = int(a), int(b)
    return (x > y) - (x < y)


def sequence_to_string(position: Any) -> str:
    return str(int(position))


def sequence_from_string(text: str, what: str = "position") -> int:
    """An integer position from its decimal text; ``ValueError`` naming ``what`` otherwise."""
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"invalid {what} {text!r}: expected an integer") from None


class PositionCodec:
    """Serialises and compares positions: with the source's functions when bound (``source``),
    else integers and plain equality (see the module docstring). Never raises: a position it
    cannot read is None, two it cannot order compare as None."""

    def __init__(self, source: PositionFunctions | None = None) -> None:
        self.source = source

    def to_string(self, position: Position) -> str:
        if position is None:
            return ""
        if self.source is not None:
            with contextlib.suppress(Exception):
                return str(self.source.position_to_string(position))
        return str(position)

    def from_string(self, text: str) -> Position | None:
        if not text:
            return None
        if self.source is not None:
            try:
                return self.source.position_from_string(text)
            except Exception:
                return None
        try:
            return int(text)
        except ValueError:
            return text

    def compare(self, a: Position, b: Position) -> int | None:
        """-1/0/1, or None when the positions cannot be compared."""
        if self.source is not None:
            try:
                return int(self.source.compare_positions(a, b))
            except Exception:
                return None
        if isinstance(a, str):
            a = self.from_string(a)
        if isinstance(b, str):
            b = self.from_string(b)
        if isinstance(a, int) and isinstance(b, int):
            return (a > b) - (a < b)
        if a is not None and a == b:
            return 0
        return None
