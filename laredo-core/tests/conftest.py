"""Fixtures the engine tests share: two tables with a few rows, an engine started on them,
and a recording observer."""

from __future__ import annotations

from collections.abc import Callable
from decimal import Decimal
from typing import Any

import laredo
import pytest
from laredo import Table
from laredo.testing import TestSource, columns

USERS = Table("public", "users")
ORDERS = Table("public", "orders")


def _make_source(**kw: Any) -> TestSource:
    src = TestSource(**kw)
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


def _run(src: TestSource, pipelines: list[laredo.Pipeline], **kw: Any) -> laredo.Engine:
    eng = laredo.Engine(sources={"s": src}, pipelines=pipelines, **kw)
    eng.start()
    return eng


@pytest.fixture
def make_source() -> Callable[..., TestSource]:
    """A test source named ``s`` holding public.users (2 rows) and public.orders (1 row)."""
    return _make_source


@pytest.fixture
def run() -> Callable[..., laredo.Engine]:
    """Start an engine over one source named ``s``."""
    return _run


@pytest.fixture
def obs() -> laredo.RecordingObserver:
    return laredo.RecordingObserver()
