"""Engine observers: ``NullObserver`` (the base every observer subclasses), the composite,
logging and recording observers, and the adapter for deprecated method-per-event observers.

The contract is :class:`laredo.contracts.Observer`: one method, ``on_event(ev)``, receiving the
values of :mod:`laredo.events`. Observers are called synchronously from engine threads and must
not block. A composite logs and otherwise ignores an observer that raises: observability never
breaks the data path. Per-change events reach only observers that list them in ``opted_in``.

Deprecated (removed in 0.3): observers written against the ``on_xxx(...)`` methods (one per
event) or the former ``handle_event(name, *args)`` keep working. A ``NullObserver`` subclass
that defines such methods, or any object that has them and no ``on_event``, is called through
:func:`legacy_dispatch` with each event's leading fields; a ``DeprecationWarning`` is issued
once per class.
"""

from __future__ import annotations

import logging
import threading
import warnings
from collections.abc import Callable, Iterable
from dataclasses import fields
from typing import Any, cast

from .contracts import Observer, ObserverLike
from .events import (
    BaselineRowLoaded,
    BufferDepthChanged,
    ChangeApplied,
    ChangeReceived,
    Event,
    Handlers,
    receives,
)

logger = logging.getLogger(__name__)

__all__ = [
    "LEGACY_REMOVAL",
    "CompositeObserver",
    "LegacyObserver",
    "LoggingObserver",
    "NullObserver",
    "RecordingObserver",
    "as_observer",
    "composite",
    "legacy_dispatch",
]

LEGACY_REMOVAL = "0.3"
"""The release that drops method-per-event (``on_xxx``) observers."""

_PER_CHANGE: tuple[type[Event], ...] = (
    ChangeReceived,
    ChangeApplied,
    BufferDepthChanged,
    BaselineRowLoaded,
)
_warned: set[type] = set()
_warn_lock = threading.Lock()


def _legacy_methods(cls: type) -> frozenset[str]:
    """``on_xxx`` methods a class defines (``on_event`` and ``NullObserver``'s own excluded)."""
    names: set[str] = set()
    for klass in cls.__mro__:
        if klass in (NullObserver, object):
            continue
        names.update(
            n
            for n, v in vars(klass).items()
            if ((n.startswith("on_") and n != "on_event") or n == "handle_event") and callable(v)
        )
    return frozenset(names)


def _warn_once(cls: type) -> None:
    if cls in _warned:
        return
    with _warn_lock:
        if cls in _warned:
            return
        _warned.add(cls)
    warnings.warn(
        f"{cls.__qualname__} implements engine events as on_xxx(...) methods; implement "
        f"on_event(ev) with the values of laredo.events instead (the on_xxx observer methods "
        f"are removed in {LEGACY_REMOVAL})",
        DeprecationWarning,
        stacklevel=4,
    )


def legacy_dispatch(target: object, ev: Event) -> None:
    """Call ``target``'s deprecated ``on_xxx`` method for ``ev`` (if it has one) with the
    event's leading fields, as the method-per-event contract did; warns once per class."""
    name = ev.legacy[0]
    fn = getattr(target, name, None) if name else None
    if fn is not None:
        _warn_once(type(target))
        fn(*ev.legacy_args())
    elif name and callable(every := getattr(target, "handle_event", None)):
        _warn_once(type(target))
        every(name, *ev.legacy_args())  # the former NullObserver's one method for all events


def _legacy_opt_ins(methods: frozenset[str]) -> frozenset[type[Event]]:
    every = "handle_event" in methods
    return frozenset(k for k in _PER_CHANGE if every or k.legacy[0] in methods)


def _marked(cls: type) -> dict[str, Callable[[Any, Any], None]]:
    found: dict[str, Callable[[Any, Any], None]] = {}
    for klass in reversed(cls.__mro__):
        for fn in vars(klass).values():
            for name in getattr(fn, "__laredo_handles__", ()):
                found[name] = fn
    return found


class NullObserver:
    """Does nothing. Subclass it and either mark methods with ``@laredo.events.handles(Kind)``
    (each receives the events of that class, or of a subclass) or override :meth:`on_event`;
    read the fields you need by name. List the per-change event classes you want in
    ``opted_in``.

    A subclass that still defines ``on_xxx`` methods (deprecated) receives each event there.
    """

    opted_in: Iterable[type[Event]] = ()
    """Per-change event classes (``Event.opt_in``) this observer wants."""
    _handlers: Handlers[Callable[[Any, Any], None]] = Handlers({})

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls._handlers = Handlers(_marked(cls))
        legacy = _legacy_methods(cls)
        cls._legacy = legacy
        if legacy and "opted_in" not in vars(cls):
            cls.opted_in = _legacy_opt_ins(legacy) | frozenset(
                k for b in cls.__mro__[1:] for k in getattr(b, "opted_in", ())
            )

    _legacy: frozenset[str] = frozenset()

    def on_event(self, ev: Event) -> None:
        h = self._handlers[type(ev)]
        if h is not None:
            h(self, ev)
        elif self._legacy:
            legacy_dispatch(self, ev)


class LegacyObserver(NullObserver):
    """Wraps an object written against the deprecated ``on_xxx`` methods (no ``on_event``)."""

    def __init__(self, inner: object) -> None:
        self.inner = inner
        methods = frozenset(
            n
            for n in dir(inner)
            if (n.startswith("on_") or n == "handle_event") and callable(getattr(inner, n, None))
        )
        self.opted_in = _legacy_opt_ins(methods)

    def on_event(self, ev: Event) -> None:
        legacy_dispatch(self.inner, ev)

    def __getattr__(self, name: str) -> Any:
        """Other attributes are the inner object's (``bind``, a plugin's own hooks)."""
        if name == "inner":
            raise AttributeError(name)
        return getattr(self.inner, name)

    def __repr__(self) -> str:
        return f"LegacyObserver({self.inner!r})"


def as_observer(observer: ObserverLike) -> Observer:
    """``observer`` itself when it has ``on_event``, else (a
    :data:`~laredo.contracts.DeprecatedObserver`) wrapped in :class:`LegacyObserver`."""
    if callable(getattr(observer, "on_event", None)):
        return cast(Observer, observer)
    return LegacyObserver(observer)


class CompositeObserver(NullObserver):
    """Fans every event out to its observers in order; ``None`` entries are dropped. An
    opt-in event goes only to the observers that opted in (the route of each event class is
    worked out once)."""

    def __init__(self, *observers: ObserverLike | None) -> None:
        flat: list[ObserverLike] = []
        for o in observers:
            if o is None:
                continue
            if isinstance(o, list | tuple):
                flat.extend(x for x in o if x is not None)
            else:
                flat.append(o)
        self.observers: list[Observer] = [as_observer(o) for o in flat]
        self._changed()

    def add(self, observer: ObserverLike) -> None:
        self.observers.append(as_observer(observer))
        self._changed()

    def _changed(self) -> None:
        self.opted_in = frozenset(k for o in self.observers for k in getattr(o, "opted_in", ()))
        self._routes: dict[type, tuple[Observer, ...]] = {}

    def _route(self, kind: type[Event]) -> tuple[Observer, ...]:
        route = self._routes[kind] = tuple(o for o in self.observers if receives(o, kind))
        return route

    def on_event(self, ev: Event) -> None:
        kind = type(ev)
        route = self._routes.get(kind)
        for o in self._route(kind) if route is None else route:
            try:
                o.on_event(ev)
            except Exception:
                logger.exception("observer %r failed in %s", o, kind.__name__)


class LoggingObserver(NullObserver):
    """Logs lifecycle events at INFO and frequent ones (changes, acks, lag, buffer, TTL,
    progress) at DEBUG."""

    _debug = frozenset(
        {
            "BaselineRowLoaded",
            "ChangeReceived",
            "ChangeApplied",
            "ChangesApplied",
            "AckAdvanced",
            "BufferDepthChanged",
            "LagUpdated",
            "RowExpired",
            "FanoutClientCaughtUp",
            "FanoutClientBackpressure",
            "FanoutSnapshotCreated",
            "FanoutJournalPruned",
        }
    )

    def __init__(self, log: logging.Logger | None = None) -> None:
        self.log = log or logging.getLogger("laredo.events")
        # per-change events only when they would be logged (checked once, at construction)
        self.opted_in = _PER_CHANGE if self.log.isEnabledFor(logging.DEBUG) else ()

    def on_event(self, ev: Event) -> None:
        name = type(ev).__name__
        level = logging.DEBUG if name in self._debug else logging.INFO
        if self.log.isEnabledFor(level):
            self.log.log(
                level,
                "%s %s",
                name,
                " ".join(f"{f.name}={getattr(ev, f.name)}" for f in fields(ev)),
            )


class RecordingObserver(NullObserver):
    """Records every event (per-change ones too); thread-safe. For tests and debugging.
    ``values()`` gives the events; ``of(name)`` the leading fields of the events whose
    ``on_xxx`` name (with or without ``on_``) or class name is ``name``."""

    opted_in = _PER_CHANGE

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._values: list[Event] = []
        self._cond = threading.Condition(self._lock)

    def on_event(self, ev: Event) -> None:
        with self._cond:
            self._values.append(ev)
            self._cond.notify_all()

    def values(self, kind: type[Event] = Event) -> list[Event]:
        with self._lock:
            return [v for v in self._values if isinstance(v, kind)]

    @property
    def events(self) -> list[tuple[str, tuple[Any, ...]]]:
        """``(on_xxx name, leading fields)`` of every event, in order."""
        return [(v.legacy[0] or type(v).__name__, v.legacy_args()) for v in self.values()]

    def names(self) -> list[str]:
        return [n for n, _ in self.events]

    @staticmethod
    def _is(v: Event, name: str) -> bool:
        return type(v).__name__ == name or v.legacy[0] in (name, "on_" + name)

    def of(self, name: str) -> list[tuple[Any, ...]]:
        return [v.legacy_args() for v in self.values() if self._is(v, name)]

    def count(self, name: str) -> int:
        return len(self.of(name))

    def wait_for(self, name: str, count: int = 1, timeout: float = 10.0) -> bool:
        with self._cond:
            return self._cond.wait_for(
                lambda: sum(1 for v in self._values if self._is(v, name)) >= count, timeout
            )

    def clear(self) -> None:
        with self._lock:
            self._values.clear()


def composite(observers: Iterable[ObserverLike | None]) -> Observer:
    """One observer for many (``NullObserver`` for none; the observer itself for one)."""
    obs = [o for o in observers if o is not None]
    if not obs:
        return NullObserver()
    if len(obs) == 1 and isinstance(obs[0], NullObserver):
        return obs[0]
    return CompositeObserver(*obs)
