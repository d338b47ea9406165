"""laredo.config.reload: a new configuration applied to a running engine, only what changed,
with writers on every table throughout."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import laredo
import pytest
from laredo.config import apply_reload, build_engine, load_engine_config, plan_reload
from laredo.testing import RecordingTarget, TestSource, columns, wait_until
from pydantic import BaseModel, ConfigDict

A = laredo.TableIdentifier("public", "a")
B = laredo.TableIdentifier("public", "b")


class ShopTarget(RecordingTarget):
    """A recording target that can refuse its init or every baseline row (the faults a
    reload must survive: a target that rejects the table, one that breaks mid-baseline)."""

    def __init__(self, fail: str = "") -> None:
        super().__init__()
        self.fail = fail
        self.inits = 0
        if fail == "baseline":
            self.fail_when = lambda method, _row: method == "on_baseline_row"

    def on_init(self, table: laredo.TableIdentifier, columns: Any) -> None:
        self.inits += 1
        if self.fail == "init":
            raise laredo.ConfigError(f"table {table}: this target refuses it")
        super().on_init(table, columns)


class Shop:
    """One shared test database behind every ``shop`` source built from a config."""

    def __init__(self) -> None:
        self.db = TestSource(supports_resume=False, heartbeat_interval=0.05)
        self.db.add_table(A, columns("id", "v"), [{"id": i, "v": 0} for i in range(40)])
        self.db.add_table(B, columns("id", "v"), [{"id": i, "v": 0} for i in range(30)])
        self.targets: dict[str, list[RecordingTarget]] = {}
        self.sources: list[TestSource] = []

    @laredo.hookimpl
    def laredo_register_sources(self, registry: Any) -> None:
        class Opts(BaseModel):
            model_config = ConfigDict(extra="forbid")
            label: str = ""

        def make(label: str = "") -> TestSource:
            self.sources.append(self.db)
            return self.db

        registry.add("shop", make, options=Opts)

    @laredo.hookimpl
    def laredo_register_targets(self, registry: Any) -> None:
        class Opts(BaseModel):
            model_config = ConfigDict(extra="forbid")
            name: str
            tag: str = ""
            fail: str = ""  # "init": on_init refuses; "baseline": every baseline row fails

        def make(name: str, tag: str = "", fail: str = "") -> RecordingTarget:
            if name == "boom":
                raise RuntimeError("cannot reach the target")
            t = ShopTarget(fail)
            self.targets.setdefault(name, []).append(t)
            return t

        registry.add("rec", make, options=Opts)


@pytest.fixture
def shop() -> Iterator[Shop]:
    pm = laredo.get_plugin_manager()
    plugin = Shop()
    pm.register(plugin, name="reload-test-shop")
    yield plugin
    pm.unregister(plugin)


def config(*tables: tuple[laredo.TableIdentifier, dict[str, Any]], label: str = "") -> Any:
    return load_engine_config(
        {
            "sources": {"s": {"type": "shop", "label": label}},
            "tables": [
                {"source": "s", "schema": t.schema, "table": t.table, "targets": [target]}
                for t, target in tables
            ],
        }
    )


def rows(t: RecordingTarget) -> list[Any]:
    return sorted(t.rows(), key=lambda r: r["id"])


class Writers:
    def __init__(self, src: TestSource) -> None:
        self.src, self.stop = src, threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self) -> None:
        n = 1000
        while not self.stop.is_set():
            for t in (A, B):
                self.src.insert(t, {"id": n, "v": n})
                if n % 2:
                    self.src.update(t, {"id": n, "v": -n}, {"id": n})
            n += 1
            self.stop.wait(0.001)

    def __enter__(self) -> Writers:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join()


def test_plan_reports_only_what_changed(shop: Shop) -> None:
    old = config((A, {"type": "rec", "name": "a"}))
    assert plan_reload(old, old).empty
    new = config((A, {"type": "rec", "name": "a"}), (B, {"type": "rec", "name": "b"}))
    plan = plan_reload(old, new)
    assert [(c.kind, c.id) for c in plan.changes] == [("pipeline_added", "s:public.b:rec")]
    assert plan.kept == ("s:public.a:rec",) and plan.remove_pipelines == ()
    changed = config((A, {"type": "rec", "name": "a", "buffer": {"max_size": 5}}))
    plan = plan_reload(old, changed)
    assert [(c.kind, c.detail) for c in plan.changes] == [
        ("pipeline_changed", "changed: target.buffer")
    ]
    moved = config((A, {"type": "rec", "name": "a"}), label="v2")
    plan = plan_reload(old, moved)
    assert [c.kind for c in plan.changes] == ["source_restarted"]
    assert plan.remove_sources == ("s",) and plan.add_pipelines == ("s:public.a:rec",)
    snap = load_engine_config({**old.model_dump(by_alias=True), "dead_letter": {"store": "memory"}})
    assert [(c.kind, c.id) for c in plan_reload(old, snap).changes] == [
        ("needs_restart", "dead_letter")
    ]


def test_reload_adds_b_without_rebaselining_a_then_removes_a(shop: Shop) -> None:
    old = config((A, {"type": "rec", "name": "a"}))
    obs = laredo.RecordingObserver()
    engine = build_engine(old, [obs]).engine
    engine.start()
    try:
        assert engine.await_ready(10)
        with Writers(shop.db):
            assert wait_until(lambda: shop.db.position > 100)
            new = config((A, {"type": "rec", "name": "a"}), (B, {"type": "rec", "name": "b"}))
            applied = apply_reload(engine, new, plan_reload(old, new), timeout=10)
            assert [c.kind for c in applied] == ["pipeline_added"]
            assert wait_until(lambda: shop.db.position > 400)
            final = config((B, {"type": "rec", "name": "b"}))
            applied = apply_reload(engine, final, plan_reload(new, final), timeout=10)
            assert [c.kind for c in applied] == ["pipeline_removed"]
            assert wait_until(lambda: shop.db.position > 700)
        end = shop.db.heartbeat()
        assert engine.wait_for("s", end, timeout=10)
        [a], [b] = shop.targets["a"], shop.targets["b"]
        assert rows(b) == sorted(shop.db.rows(B), key=lambda r: r["id"])
        assert a.closed and len(rows(a)) > 40  # it kept every change until it was removed
        started = [args[0] for args in obs.of("baseline_started")]
        assert started.count("s:public.a:rec") == 1 and started.count("s:public.b:rec") == 1
    finally:
        engine.stop()


def test_a_changed_pipeline_is_rebuilt_alone_and_bad_configs_change_nothing(shop: Shop) -> None:
    old = config((A, {"type": "rec", "name": "a"}), (B, {"type": "rec", "name": "b"}))
    engine = build_engine(old).engine
    engine.start()
    try:
        assert engine.await_ready(10)
        new = config((A, {"type": "rec", "name": "a2"}), (B, {"type": "rec", "name": "b"}))
        applied = apply_reload(engine, new, plan_reload(old, new), timeout=10)
        assert [(c.kind, c.id) for c in applied] == [("pipeline_changed", "s:public.a:rec")]
        assert len(shop.targets["b"]) == 1 and shop.targets["a"][0].closed  # b untouched
        assert rows(shop.targets["a2"][0]) == sorted(shop.db.rows(A), key=lambda r: r["id"])
        broken = config(
            (A, {"type": "rec", "name": "a2"}),
            (B, {"type": "rec", "name": "boom", "tag": "x"}),
        )
        with pytest.raises(laredo.ConfigError, match="cannot reach the target"):
            apply_reload(engine, broken, plan_reload(new, broken), timeout=10)
        assert sorted(p.id for p in engine.pipelines()) == ["s:public.a:rec", "s:public.b:rec"]
        assert not shop.targets["b"][0].closed
    finally:
        engine.stop()


class Running:
    """An engine built from ``config`` on the shop, started and ready."""

    def __init__(self, cfg: Any) -> None:
        self.cfg = cfg
        self.engine = build_engine(cfg).engine
        self.engine.start()
        assert self.engine.await_ready(10)

    def ids(self) -> list[str]:
        return sorted(p.id for p in self.engine.pipelines())

    def reload(self, new: Any) -> tuple[Any, ...]:
        return apply_reload(self.engine, new, plan_reload(self.cfg, new), timeout=10, old=self.cfg)


def _refused(shop: Shop, run: Running, new: Any, *causes: str) -> None:
    """The reload is refused naming every cause, and what runs is untouched."""
    before = (run.ids(), len(shop.db.table_set_calls), {k: len(v) for k, v in shop.targets.items()})
    with pytest.raises(laredo.ConfigError) as err:
        run.reload(new)
    for cause in causes:
        assert any(cause in p for p in err.value.problems), (cause, err.value.problems)
    assert run.ids() == before[0]
    assert len(shop.db.table_set_calls) == before[1]  # the source was not asked to change
    assert not any(t.closed for t in shop.targets["a"] + shop.targets.get("b", []))
    assert all(p.state is laredo.PipelineState.STREAMING for p in run.engine.pipelines())


A_REC = (A, {"type": "rec", "name": "a"})
B_REC = (B, {"type": "rec", "name": "b"})
C = laredo.TableIdentifier("public", "c")


def test_a_reload_with_any_bad_part_changes_nothing(shop: Shop) -> None:
    run = Running(config(A_REC, B_REC))
    try:
        bad_field = {"type": "rec", "name": "a2", "filters": [{"type": "field-equals",
                     "field": "vv", "value": 1}]}  # fmt: skip
        # change target options: a filter on a column the table lacks (the closest one named)
        _refused(shop, run, config((A, bad_field), B_REC), "'vv' is not a column", "'v'?")
        # add: a missing table, together with a good change of a (not applied either)
        _refused(
            shop,
            run,
            config((A, {"type": "rec", "name": "a2"}), B_REC, (C, {"type": "rec", "name": "c"})),
            "public.c",
        )
        # remove b while adding a pipeline whose target refuses the table: b keeps running
        refuses = {"type": "rec", "name": "c2", "id": "a-copy", "fail": "init"}
        _refused(shop, run, config(A_REC, (A, refuses)), "this target refuses it")
        assert shop.targets["c2"][0].inits == 1 and shop.targets["c2"][0].closed
        # every cause at once: two bad pipelines, both named
        _refused(shop, run, config((A, bad_field), (B, {**refuses, "id": "b2"})), "'vv'", "refuses")
        # a bad type: the plugin does not exist (the configuration itself is refused)
        with pytest.raises(laredo.ConfigError, match="recx"):
            config(A_REC, (B, {"type": "recx", "name": "b"}))
        assert run.ids() == ["s:public.a:rec", "s:public.b:rec"]
        # and a good reload still applies
        assert [c.kind for c in run.reload(config(A_REC))] == ["pipeline_removed"]
    finally:
        run.engine.stop()


def test_a_reload_that_fails_after_teardown_is_undone(shop: Shop) -> None:
    run = Running(config(A_REC, B_REC))
    try:
        with Writers(shop.db):
            assert wait_until(lambda: shop.db.position > 100)
            broken = {"type": "rec", "name": "a2", "fail": "baseline",
                      "error_handling": {"max_retries": 0}}  # fmt: skip
            with pytest.raises(laredo.ConfigError, match="undone") as err:
                run.reload(config((A, broken), (B, {"type": "rec", "name": "b"})))
            assert "on_baseline_row" in str(err.value) or "baseline" in str(err.value)
            assert run.ids() == ["s:public.a:rec", "s:public.b:rec"]
            assert wait_until(lambda: shop.db.position > 300)
        end = shop.db.heartbeat()
        assert run.engine.wait_for("s", end, timeout=10)
        # a runs again from the old configuration (a fresh target, baselined); b untouched
        a_now = shop.targets["a"][-1]
        assert len(shop.targets["a"]) == 2 and shop.targets["a"][0].closed
        assert rows(a_now) == sorted(shop.db.rows(A), key=lambda r: r["id"])
        assert len(shop.targets["b"]) == 1 and not shop.targets["b"][0].closed
        assert rows(shop.targets["b"][0]) == sorted(shop.db.rows(B), key=lambda r: r["id"])
    finally:
        run.engine.stop()
