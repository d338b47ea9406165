"""Shared helpers of the laredo-server tests (imported by conftest.py and the tests)."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path
from typing import Any

import grpc
import laredo
from laredo.testing import TestSource, columns, wait_until
from laredo_server.config import Built
from laredo_server.runtime import ServerRuntime
from laredo_server.serve import attach_frontends
from laredo_target_memory import IndexedTarget

USERS = laredo.Table("public", "users")
ORDERS = laredo.Table("public", "orders")


wait_for = wait_until  # the one polling helper, under the name these tests use


def make_source() -> TestSource:
    src = TestSource(supports_resume=True)
    src.add_table(
        USERS,
        columns("id", "name", "email", "team", types={"id": "int4", "team": "int4"}),
        [{"id": i, "name": f"user{i}", "email": f"u{i}@x", "team": i % 3} for i in range(1, 26)],
    )
    src.add_table(
        ORDERS,
        columns(
            "region", "id", "total", pk=("region", "id"), types={"id": "int8", "total": "numeric"}
        ),
        [
            {"region": "eu", "id": 1, "total": Decimal("9.50")},
            {"region": "us", "id": 1, "total": Decimal("1.25")},
        ],
    )
    return src


class Harness:
    def __init__(self, tmp: Path, token: str | None = None, **rt_kw: Any) -> None:
        self.source = make_source()
        self.tmp = tmp
        self.builds = 0

        def factory(observers: Any, store_override: Any) -> Built:
            self.builds += 1
            store = store_override or laredo.snapshot_store("local", path=str(tmp / "snaps"))
            dls = laredo.dead_letter_store("memory") if self.builds == 1 else self.dls
            self.dls = dls
            users = IndexedTarget(
                lookup_fields=["email"],
                indexes=[laredo.Index("by_team", ["team"])],
            )
            orders = IndexedTarget()
            eng = laredo.Engine(
                sources={"src": self.source},
                pipelines=[
                    laredo.Pipeline("src", USERS, users, id="users"),
                    laredo.Pipeline("src", ORDERS, orders, id="orders"),
                ],
                snapshot_store=store,
                dead_letter_store=dls,
                observers=list(observers),
            )
            return Built(eng, store, None, dls)

        self.rt = attach_frontends(ServerRuntime(factory, admin_token=token, **rt_kw))

    def start(self) -> Harness:
        self.rt.start()
        assert self.rt.engine.await_ready(10)
        self.channel = grpc.insecure_channel(f"127.0.0.1:{self.rt.listeners.grpc_port}")
        return self

    def stop(self) -> None:
        self.channel.close()
        if not self.rt.stopping.is_set():
            self.rt.stop(grace=10)


class QuickTestPlugin:
    """Registers a `quicktest` source for config tests (a TestSource with a users table)."""

    @laredo.hookimpl
    def laredo_register_sources(self, registry: Any) -> None:
        from pydantic import BaseModel, ConfigDict

        class Opts(BaseModel):
            model_config = ConfigDict(extra="forbid")
            rows: int = 3
            password: str | None = None

        def make(rows: int = 3, password: str | None = None) -> TestSource:
            s = TestSource()
            s.add_table(
                laredo.Table("public", "users"),
                columns("id", "email"),
                [{"id": i, "email": f"u{i}@x"} for i in range(1, rows + 1)],
            )
            return s

        registry.add("quicktest", make, options=Opts)
