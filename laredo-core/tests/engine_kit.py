"""What the engine tests share: two tables with a few rows, and an engine started on them."""

from __future__ import annotations

from decimal import Decimal

import laredo
from laredo import Table
from laredo.testing import TestSource, columns

USERS = Table("public", "users")
ORDERS = Table("public", "orders")


def make_source(**kw: object) -> TestSource:
    src = TestSource(**kw)  # type: ignore[arg-type]
    src.add_table(
        USERS,
        columns("id", "name", "email"),
        [
            {"id": 1, "name": "alice", "email": "a@x"},
            {"id": 2, "name": "bob", "email": "b@x"},
        ],
    )
    src.add_table(
        ORDERS,
        columns("id", "user_id", "total"),
        [{"id": 10, "user_id": 1, "total": Decimal("9.50")}],
    )
    return src


def run(src, pipelines, **kw):  # type: ignore[no-untyped-def]
    eng = laredo.Engine(sources={"s": src}, pipelines=pipelines, **kw)
    eng.start()
    return eng
