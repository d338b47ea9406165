"""Observer events as values: a later version of an event (one more field) breaks no observer;
per-change values reach only the observers that opt in; observers written against the
deprecated ``on_xxx`` methods keep working through one adapter that warns once."""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable
from dataclasses import field, make_dataclass
from datetime import timedelta
from typing import Any

import laredo
import pytest
from laredo import events as E
from laredo.engine.context import ObserverWants
from laredo.observers import LEGACY_REMOVAL, composite
from laredo.testing import TestSource, wait_until

from .conftest import USERS

# "ChangesApplied" as a later release would ship it: the same name, one more field at the end
ChangesAppliedV2: Any = make_dataclass(
    "ChangesApplied",
    [("rows_bytes", int, field(default=0))],
    bases=(E.ChangesApplied,),
    frozen=True,
    slots=True,
)


class LegacyBatches(laredo.NullObserver):
    """Written against the deprecated method-per-event contract."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    def on_changes_applied(
        self, pipeline_id: str, table: Any, count: int, duration: timedelta
    ) -> None:
        self.calls.append((pipeline_id, table, count, duration))


class DuckLegacy:
    """No base class, no ``on_event``: only deprecated ``on_xxx`` methods."""

    def __init__(self) -> None:
        self.applied: list[Any] = []
        self.batches = 0

    def on_change_applied(self, pipeline_id: str, table: Any, action: Any, duration: Any) -> None:
        self.applied.append(action)

    def on_changes_applied(self, pipeline_id: str, table: Any, count: int, duration: Any) -> None:
        self.batches += 1


class Marked(laredo.NullObserver):
    def __init__(self) -> None:
        self.counts: list[int] = []

    @E.handles(E.ChangesApplied)
    def _applied(self, ev: E.ChangesApplied) -> None:
        self.counts.append(ev.count)


def test_a_later_version_of_an_event_breaks_no_observer(caplog: pytest.LogCaptureFixture) -> None:
    later = ChangesAppliedV2("p", USERS, 3, timedelta(0), rows_bytes=10)
    rec, legacy, duck, marked = laredo.RecordingObserver(), LegacyBatches(), DuckLegacy(), Marked()
    log = laredo.LoggingObserver(logging.getLogger("test.events"))
    stream = laredo.CompositeObserver(rec, legacy, duck, marked, log)
    with caplog.at_level(logging.DEBUG, "test.events"), warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        stream.on_event(later)
    # the deprecated methods get the fields they were written for, not the new one
    assert legacy.calls == [("p", USERS, 3, timedelta(0))] and duck.batches == 1
    assert rec.of("changes_applied") == [("p", USERS, 3, timedelta(0))]
    assert rec.values(E.ChangesApplied) == [later]
    assert marked.counts == [3]  # the handler of the base class receives the new version
    # a subclass under another name reaches the handler of its base too
    BigBatch: Any = make_dataclass("BigBatch", [], bases=(E.ChangesApplied,), frozen=True)
    marked.on_event(BigBatch("p", USERS, 7, timedelta(0)))
    assert marked.counts == [3, 7]
    assert "rows_bytes=10" in caplog.text


def _engine(observer: object) -> tuple[TestSource, laredo.Engine]:
    src = TestSource()
    src.add_table(USERS, laredo.testing.columns("id", "name"), [{"id": 1, "name": "a"}])
    eng = laredo.Engine(
        sources={"s": src},
        pipelines=[laredo.Pipeline("s", USERS, laredo.target("indexed-memory"))],
        observers=[observer],
    )
    eng.start()
    assert eng.await_ready(10)
    return src, eng


def _stream_two(src: TestSource, eng: laredo.Engine, done: Callable[[], bool]) -> None:
    try:
        src.insert(USERS, {"id": 2, "name": "b"})
        src.update(USERS, {"id": 1, "name": "a2"})
        wait_until(done, 10, "the two changes reach the observer")
    finally:
        eng.stop()


class Kinds(laredo.NullObserver):
    def __init__(self, opted_in: tuple[type[E.Event], ...] = ()) -> None:
        self.opted_in = opted_in
        self.kinds: list[str] = []

    def on_event(self, ev: E.Event) -> None:
        self.kinds.append(type(ev).__name__)


@pytest.mark.parametrize("opt_in", [False, True])
def test_per_change_values_reach_only_observers_that_opt_in(opt_in: bool) -> None:
    obs = Kinds((E.ChangeApplied, E.ChangeReceived) if opt_in else ())
    assert ObserverWants.of(composite([obs])).applied is opt_in
    src, eng = _engine(obs)
    _stream_two(src, eng, lambda: obs.kinds.count("ChangesApplied") >= 2)
    assert obs.kinds.count("ChangeApplied") == (2 if opt_in else 0)
    assert obs.kinds.count("ChangeReceived") == (2 if opt_in else 0)
    assert "BufferDepthChanged" not in obs.kinds  # never opted in


def test_an_on_xxx_observer_works_through_the_adapter_and_is_warned_once() -> None:
    class FreshDuck(DuckLegacy):  # a class not warned about yet (the warning is once per class)
        pass

    duck = FreshDuck()
    with pytest.warns(DeprecationWarning) as got:
        src, eng = _engine(duck)
        _stream_two(src, eng, lambda: duck.batches >= 2 and len(duck.applied) == 2)
    mine = [w for w in got if "FreshDuck" in str(w.message)]
    assert len(mine) == 1 and f"removed in {LEGACY_REMOVAL}" in str(mine[0].message)
    # it implements on_change_applied, so the engine emitted the per-change event to it
    assert duck.applied == [laredo.ChangeAction.INSERT, laredo.ChangeAction.UPDATE]


def test_a_null_observer_subclass_with_on_xxx_methods_still_receives_them() -> None:
    class FreshBatches(LegacyBatches):
        pass

    legacy = FreshBatches()
    assert not E.receives(legacy, E.ChangeApplied)  # it did not implement the per-change one
    with pytest.warns(DeprecationWarning, match="FreshBatches"):
        src, eng = _engine(legacy)
        _stream_two(src, eng, lambda: sum(c[2] for c in legacy.calls) >= 2)
    assert all(c[0].startswith("s:public.users") and c[1] == USERS for c in legacy.calls)


def test_the_logging_observer_asks_for_per_change_events_only_when_it_logs_them() -> None:
    quiet, chatty = logging.getLogger("test.events.quiet"), logging.getLogger("test.events.chatty")
    quiet.setLevel(logging.INFO)
    chatty.setLevel(logging.DEBUG)
    assert not E.receives(laredo.LoggingObserver(quiet), E.ChangeApplied)
    assert E.receives(laredo.LoggingObserver(chatty), E.ChangeApplied)
    assert E.receives(laredo.LoggingObserver(quiet), E.ChangesApplied)  # not opt-in: always


def test_events_are_frozen_values_built_with_their_dataclass_signature() -> None:
    """The fast ``__init__`` of a slotted event keeps the dataclass contract: positional or
    keyword fields, defaults of a later field, a clear error for a missing one, frozen."""
    import dataclasses

    ev = E.ChangeError("p", USERS, laredo.ChangeAction.UPDATE, laredo.ErrorInfo("x"))
    assert ev == E.ChangeError(
        pipeline_id="p", table=USERS, action=laredo.ChangeAction.UPDATE, error=laredo.ErrorInfo("x")
    )
    assert [f.name for f in dataclasses.fields(ev)] == ["pipeline_id", "table", "action", "error"]
    with pytest.raises(dataclasses.FrozenInstanceError):
        ev.pipeline_id = "q"  # type: ignore[misc]
    with pytest.raises(TypeError, match="missing 1 required positional argument: 'error'"):
        E.ChangeError("p", USERS, laredo.ChangeAction.UPDATE)  # type: ignore[call-arg]
    assert ChangesAppliedV2("p", USERS, 1, timedelta(0)).rows_bytes == 0
    assert not hasattr(ev, "__dict__")  # slotted


def test_a_former_handle_event_observer_still_sees_every_event() -> None:
    class Every(laredo.NullObserver):
        def __init__(self) -> None:
            self.names: list[str] = []

        def handle_event(self, name: str, *args: Any) -> None:
            self.names.append(name)

    every = Every()
    assert E.receives(every, E.ChangeApplied)  # it handled every event, per-change ones too
    with pytest.warns(DeprecationWarning, match="Every"):
        src, eng = _engine(every)
        _stream_two(src, eng, lambda: every.names.count("on_change_applied") == 2)
    assert "on_source_connected" in every.names and "on_changes_applied" in every.names


def test_the_adapter_keeps_the_wrapped_objects_other_attributes() -> None:
    """A plugin's own hooks on a wrapped ``on_xxx`` observer stay reachable (Spark's
    ``on_spark_partition_done``, the server's ``bind``)."""
    from laredo.observers import LegacyObserver, as_observer

    duck = DuckLegacy()
    wrapped = as_observer(duck)
    assert isinstance(wrapped, LegacyObserver) and wrapped.inner is duck
    assert wrapped.batches == 0 and wrapped.on_changes_applied == duck.on_changes_applied
    with pytest.raises(AttributeError):
        _ = wrapped.no_such_hook


def test_the_observer_parameters_are_typed_to_take_the_deprecated_dialect() -> None:
    """mypy accepts an ``on_xxx``-only observer where the adapter wraps one at run time."""
    import typing
    from collections.abc import Iterable, Sequence

    from laredo.config.build import build_engine
    from laredo.contracts import DeprecatedObserver, ObserverLike
    from laredo.observers import CompositeObserver, as_observer, composite

    assert DeprecatedObserver in typing.get_args(ObserverLike)
    engine = typing.get_type_hints(laredo.Engine.__init__)
    assert engine["observers"] == Iterable[ObserverLike]
    assert engine["observer"] == ObserverLike | None
    assert typing.get_type_hints(build_engine)["observers"] == Sequence[ObserverLike]
    assert typing.get_type_hints(as_observer)["observer"] == ObserverLike
    assert typing.get_type_hints(CompositeObserver.add)["observer"] == ObserverLike
    assert typing.get_type_hints(composite)["observers"] == Iterable[ObserverLike | None]
