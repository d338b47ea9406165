"""Read-your-writes (``Engine.wait_for``) and hot reload (``add_pipeline``/``remove_pipeline``)
against the programmable test source, with writers running throughout."""

from __future__ import annotations

import asyncio
import itertools
import threading
from collections.abc import Iterator

import laredo
import pytest
from laredo import PipelineState, Table
from laredo.testing import RecordingTarget, TestSource, columns, wait_until

A = Table("public", "a")
B = Table("public", "b")


@pytest.fixture
def source() -> TestSource:
    src = TestSource(supports_resume=False, heartbeat_interval=0.05)
    src.add_table(A, columns("id", "v"), [{"id": i, "v": 0} for i in range(50)])
    src.add_table(B, columns("id", "v"), [{"id": i, "v": 0} for i in range(30)])
    return src


class Writers:
    """Keeps writing to both tables until stopped (inserts, updates, deletes)."""

    def __init__(self, src: TestSource) -> None:
        self.src = src
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self) -> None:
        n = 1000
        while not self.stop.is_set():
            for t in (A, B):
                self.src.insert(t, {"id": n, "v": n})
                self.src.update(t, {"id": n, "v": -n}, {"id": n})
                if n % 3 == 0:
                    self.src.delete(t, {"id": n})
            n += 1
            self.stop.wait(0.001)

    def __enter__(self) -> Writers:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join()


@pytest.fixture
def engine(
    source: TestSource,
) -> Iterator[tuple[laredo.Engine, RecordingTarget, laredo.RecordingObserver]]:
    target = RecordingTarget()
    obs = laredo.RecordingObserver()
    eng = laredo.Engine(
        sources={"s": source}, pipelines=[laredo.Pipeline("s", A, target, id="a")], observer=obs
    )
    eng.start()
    assert eng.await_ready(10)
    yield eng, target, obs
    if eng._lifecycle == "running":
        eng.stop()


def rows(target: RecordingTarget) -> list[dict[str, object]]:
    return sorted(target.rows(), key=lambda r: r["id"])  # type: ignore[arg-type,return-value]


def test_wait_for_sees_every_write(source: TestSource, engine) -> None:  # type: ignore[no-untyped-def]
    eng, target, _ = engine
    for i in range(200):
        pos = source.insert(A, {"id": 10_000 + i, "v": i})
        assert eng.wait_for("s", str(pos), timeout=5)
        assert target.get(10_000 + i) == {"id": 10_000 + i, "v": i}


def test_wait_for_on_an_idle_source_and_its_errors(source: TestSource, engine) -> None:  # type: ignore[no-untyped-def]
    eng, _, _ = engine
    assert eng.wait_for("s", source.position, timeout=2)  # nothing pending: at once
    assert not eng.wait_for("s", source.position + 1000, timeout=0.2)  # not yet written
    with pytest.raises(KeyError, match=r"unknown source 'nope' \(sources: s\)"):
        eng.wait_for("nope", 1)
    with pytest.raises(ValueError, match="cannot read 'x/y' as a position of source 's'"):
        eng.wait_for("s", "x/y")
    assert asyncio.run(eng.await_for("s", source.position, 2))


def test_add_pipeline_baselines_only_the_new_table_and_loses_nothing(
    source: TestSource,
    engine,  # type: ignore[no-untyped-def]
) -> None:
    eng, target_a, obs = engine
    target_b = RecordingTarget()
    with Writers(source):
        wait_until(lambda: source.position > 200)
        eng.add_pipeline(laredo.Pipeline("s", B, target_b, id="b"), timeout=10)
        assert eng.is_ready("s", B)
        wait_until(lambda: source.position > 600)
    end = source.heartbeat()
    assert eng.wait_for("s", end, timeout=10)
    assert rows(target_a) == sorted(source.rows(A), key=lambda r: r["id"])
    assert rows(target_b) == sorted(source.rows(B), key=lambda r: r["id"])
    # nothing applied twice: after the baseline (at positions[0]) only later changes, in order
    ps = target_b.positions
    assert len(ps) > 1 and all(p > ps[0] for p in ps[1:])
    assert all(x <= y for x, y in itertools.pairwise(ps))
    started = [args[0] for args in obs.of("baseline_started")]
    assert started.count("a") == 1 and started.count("b") == 1  # a is not re-baselined
    assert obs.of("pipeline_added") == [("b", "s", B)]
    assert ("add", (B,)) in source.table_set_calls


def test_remove_pipeline_drains_closes_and_leaves_the_rest_in_sync(
    source: TestSource,
    engine,  # type: ignore[no-untyped-def]
) -> None:
    eng, target_a, obs = engine
    target_b = RecordingTarget()
    eng.add_pipeline(laredo.Pipeline("s", B, target_b, id="b"), timeout=10)
    with Writers(source):
        wait_until(lambda: source.position > 200)
        eng.remove_pipeline("a", timeout=10)
        wait_until(lambda: source.position > 500)
    assert target_a.closed and [p.id for p in eng.pipelines()] == ["b"]
    end = source.heartbeat()
    assert eng.wait_for("s", end, timeout=10)
    assert rows(target_b) == sorted(source.rows(B), key=lambda r: r["id"])
    assert obs.of("pipeline_removed") == [("a", "s", "removed")]
    assert ("remove", (A,)) in source.table_set_calls
    assert any(
        new is PipelineState.STOPPED
        for pid, _, new in obs.of("pipeline_state_changed")
        if pid == "a"
    )


def test_bad_additions_and_removals_disturb_nothing(source: TestSource, engine) -> None:  # type: ignore[no-untyped-def]
    eng, target_a, _ = engine
    with pytest.raises(laredo.ConfigError, match="pipeline 'a' already exists"):
        eng.add_pipeline(laredo.Pipeline("s", B, RecordingTarget(), id="a"))
    with pytest.raises(laredo.ConfigError, match="unknown source 'zz'"):
        eng.add_pipeline(laredo.Pipeline("zz", B, RecordingTarget()))
    with pytest.raises(laredo.ConfigError, match=r"TABLE_NOT_FOUND|not found"):
        eng.add_pipeline(laredo.Pipeline("s", Table("public", "missing"), RecordingTarget()))
    with pytest.raises(KeyError, match=r"unknown pipeline 'nope' \(pipelines: a\)"):
        eng.remove_pipeline("nope")
    pos = source.insert(A, {"id": 77_777, "v": 1})
    assert eng.wait_for("s", pos, timeout=5) and target_a.get(77_777) is not None
    assert [p.id for p in eng.pipelines()] == ["a"]


def test_add_pipeline_with_a_new_source(engine) -> None:  # type: ignore[no-untyped-def]
    eng, _, _ = engine
    other = TestSource()
    other.add_table(B, columns("id", "v"), [{"id": 1, "v": 1}])
    target = RecordingTarget()
    eng.add_pipeline(laredo.Pipeline("t", B, target, id="tb"), source=other, timeout=10)
    assert target.rows() == [{"id": 1, "v": 1}]
    other.insert(B, {"id": 2, "v": 2})
    assert wait_until(lambda: target.get(2) is not None)
    eng.remove_pipeline("tb")
    assert "t" not in eng.source_ids()


def test_async_wrappers(source: TestSource, engine) -> None:  # type: ignore[no-untyped-def]
    eng, _, _ = engine
    target = RecordingTarget()

    async def main() -> None:
        await eng.aadd_pipeline(laredo.Pipeline("s", B, target, id="b"), None, 10)
        await eng.aremove_pipeline("b", 10)

    asyncio.run(main())
    assert target.closed and len(target.rows()) == 30


def test_snapshots_after_an_add_hold_the_new_table_and_a_restart_restores_both(
    tmp_path,  # type: ignore[no-untyped-def]
) -> None:
    src = TestSource(supports_resume=True, heartbeat_interval=0.05)
    src.add_table(A, columns("id", "v"), [{"id": i, "v": 0} for i in range(20)])
    src.add_table(B, columns("id", "v"), [{"id": i, "v": 1} for i in range(10)])
    store = laredo.snapshot_store("local", path=str(tmp_path), fsync=False)
    eng = laredo.Engine(
        sources={"s": src},
        pipelines=[laredo.Pipeline("s", A, RecordingTarget(durable=False), id="a")],
        snapshot_store=store,
    )
    eng.start()
    assert eng.await_ready(10)
    eng.add_pipeline(laredo.Pipeline("s", B, RecordingTarget(durable=False), id="b"), timeout=10)
    src.insert(B, {"id": 99, "v": 9})
    assert eng.wait_for("s", src.position, timeout=5)
    snap = eng.create_snapshot()
    eng.stop()
    assert {t.pipeline_id for t in store.describe(snap).tables} == {"a", "b"}
    obs = laredo.RecordingObserver()
    ta, tb = RecordingTarget(durable=False), RecordingTarget(durable=False)
    eng2 = laredo.Engine(
        sources={"s": src},
        pipelines=[laredo.Pipeline("s", A, ta, id="a"), laredo.Pipeline("s", B, tb, id="b")],
        snapshot_store=store,
        observer=obs,
    )
    eng2.start()
    try:
        assert eng2.await_ready(10)
        assert obs.count("baseline_started") == 0 and obs.count("snapshot_restore_completed") == 1
        assert len(ta.rows()) == 20 and len(tb.rows()) == 11
    finally:
        eng2.stop()
