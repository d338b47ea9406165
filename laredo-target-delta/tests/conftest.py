"""Helpers of the laredo-target-delta tests: small Delta archives written by a real target."""

from __future__ import annotations

from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import laredo
import pytest
from laredo.types import ColumnDefinition, Row
from laredo_target_delta import DeltaTarget, DeltaTargetOptions

ITEMS = laredo.Table("public", "items")
COLUMNS = [
    ColumnDefinition("id", "int4", 1, False, True, 1, 23),
    ColumnDefinition("name", "text", 2, True, False, 0, 25),
    ColumnDefinition("price", "numeric(10,2)", 3, True, False, 0, 1700),
    ColumnDefinition("doc", "jsonb", 4, True, False, 0, 3802),
]


def item(i: int, **changes: Any) -> Row:
    row: Row = {"id": i, "name": f"n{i}", "price": Decimal(f"{i}.50"), "doc": {"i": i}}
    row.update(changes)
    return row


class Archive:
    """A ``delta`` target driven by hand: integer positions, one commit per ``commit()``."""

    def __init__(self, uri: str, rows: int = 3, position: int = 10) -> None:
        self.uri = uri
        self.target = DeltaTarget(DeltaTargetOptions(uri=uri, flush_interval=0))
        self.target.on_init(ITEMS, COLUMNS)
        self.position = position
        self.target.on_baseline_rows(ITEMS, [item(i) for i in range(rows)])
        self.target.set_change_position(position)
        self.target.on_baseline_complete(ITEMS)

    def commit(self, *changes: tuple[str, Row]) -> int:
        """Apply ``changes`` (("insert"|"update"|"delete", row)) at the next position and
        commit them; returns that position."""
        self.position += 10
        self.target.set_change_position(self.position)
        for kind, row in changes:
            if kind == "insert":
                self.target.on_insert(ITEMS, row)
            elif kind == "update":
                self.target.on_update(ITEMS, row, None)
            else:
                self.target.on_delete(ITEMS, row)
        self.target.set_change_position(self.position + 1)  # a heartbeat: the commit is whole
        self.target.flush()
        return self.position

    def close(self) -> None:
        self.target.on_close(ITEMS)


@pytest.fixture
def archive(tmp_path: Path) -> Iterator[Archive]:
    a = Archive(str(tmp_path / "items"))
    yield a
    a.close()
