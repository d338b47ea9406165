"""The composition root: builds a runtime with its front ends from a config, and runs it.

``serve(config)`` is what ``laredo serve`` runs: run the preflight checks (logged, see
:mod:`.startup`), start, log where everything listens and the command to try next, wait for
SIGTERM/SIGINT, then drain
(readiness 503 for ``shutdown.drain``; a second signal skips the rest of it), stop the
listeners, stop the engine (buffers drained, snapshot on shutdown when configured, final ACK)
within ``shutdown.grace_period``, and return 0 (1 when the server could not start).

This is the only module that knows every other; nothing in the package imports it except
the command line.
"""

from __future__ import annotations

import contextlib
import json
import logging
import signal
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from types import FrameType
from typing import Any

from laredo.errors import ConfigError

from .config import (
    Built,
    ServerConfig,
    TlsConfig,
    build_engine,
    claimed_open_warnings,
    cleartext_token_warnings,
    listener_problems,
    open_listener_warnings,
    reads_protected,
)
from .config.sections import (
    GRPC_MAX_WORKERS,
    GRPC_REFLECTION,
    HEALTH_CONNECT,
    HEALTH_HISTORY_INTERVAL,
    HEALTH_STATUS_PAGE,
)
from .grpc_server import GrpcFrontend
from .http_server import HttpFrontend, HttpLimits
from .reload import ConfigReloader
from .runtime import EngineFactory, ServerRuntime
from .services import make_servicers
from .startup import listening_line, log_preflight

logger = logging.getLogger(__name__)

__all__ = ["attach_frontends", "runtime_from_config", "serve"]

_SETTLE = 2.0
"""Seconds the startup summary waits for the first baselines before it is logged anyway."""


def attach_frontends(
    rt: ServerRuntime,
    *,
    grpc_port: int | None = 0,
    grpc_host: str = "127.0.0.1",
    health_port: int | None = 0,
    health_host: str = "127.0.0.1",
    reflection: bool = GRPC_REFLECTION.default,
    tls: TlsConfig | None = None,
    max_workers: int = GRPC_MAX_WORKERS.default,
    connect: bool = HEALTH_CONNECT.default,
    health_tls: TlsConfig | None = None,
    http_limits: HttpLimits | None = None,
    status_page: bool = HEALTH_STATUS_PAGE.default,
    history_interval: float = HEALTH_HISTORY_INTERVAL.default,
) -> ServerRuntime:
    """Give ``rt`` its HTTP (health, metrics, with ``status_page`` the status page, with
    ``connect`` the Connect gateway) and gRPC front ends, sharing one set of servicers; a port
    of None leaves that front end out. Returns ``rt``."""
    servicers = make_servicers(rt)
    if health_port is not None:
        rt.add_frontend(
            HttpFrontend(
                rt,
                servicers,
                host=health_host,
                port=health_port,
                connect=connect,
                tls=health_tls,
                limits=http_limits,
                status_page=status_page,
                history_interval=history_interval,
            )
        )
    if grpc_port is not None:
        rt.add_frontend(
            GrpcFrontend(
                rt,
                servicers,
                host=grpc_host,
                port=grpc_port,
                reflection=reflection,
                tls=tls,
                max_workers=max_workers,
            )
        )
    return rt


def runtime_from_config(
    model: ServerConfig, load: Callable[[], ServerConfig] | None = None
) -> ServerRuntime:
    """The runtime and front ends a validated config describes (nothing started yet).

    With ``load`` (re-reads the configuration as at start), the runtime can reload its
    configuration (``SIGHUP``, ``ReloadConfig``); engines it rebuilds later (a snapshot
    restore) use the configuration running then. ``ConfigError`` when a listener would serve
    RPCs unprotected (:func:`laredo_server.config.listener_problems`)."""
    problems = listener_problems(model)
    if problems:
        raise ConfigError(problems)
    reloader: ConfigReloader | None = None

    def factory(observers: Sequence[Any], store_override: Any) -> Built:
        current = reloader.model if reloader is not None else model
        built = build_engine(current, observers)
        if store_override is not None:
            built.engine.snapshot_store = store_override
            built.snapshot_store = store_override
        return built

    g = model.grpc
    engine_factory: EngineFactory = factory
    rt = ServerRuntime(
        engine_factory,
        admin_token=model.admin_token(),
        protect_reads=reads_protected(model),
        read_token=model.read_token(),
        per_action_metrics=model.observability.metrics.per_action,
        metrics_enabled=model.observability.metrics.enabled,
        watch_buffer=g.watch_buffer if g is not None else 16_384,
        drain=model.shutdown.drain,
        grace_period=model.shutdown.grace_period,
        source_types={sid: s.type for sid, s in model.sources.items()},
        max_streams=g.max_streams if g is not None else 8,
    )
    rt.security_warnings = open_listener_warnings(model) + claimed_open_warnings(model)
    rt.metrics.deprecated_names = model.observability.metrics.deprecated_names
    if load is not None:
        reloader = ConfigReloader(rt, model, load, timeout=model.shutdown.grace_period)
        rt.reloader = reloader
    return attach_frontends(
        rt,
        grpc_port=g.port if g is not None and model.grpc_enabled else None,
        grpc_host=g.host if g is not None else "127.0.0.1",
        health_port=model.health.port if model.health.enabled else None,
        health_host=model.health.host,
        reflection=g.reflection if g is not None else True,
        tls=g.tls if g is not None else None,
        max_workers=g.max_workers if g is not None else 16,
        connect=model.health.connect,
        health_tls=model.health.tls,
        status_page=model.health.status_page,
        history_interval=model.health.history_interval,
        http_limits=HttpLimits(
            max_body=model.health.max_body,
            max_connections=model.health.max_connections,
            timeout=model.health.timeout,
            allowed_hosts=tuple(model.health.allowed_hosts),
        ),
    )


def serve(
    model: ServerConfig,
    *,
    ready_file: str | None = None,
    on_started: Callable[[ServerRuntime], None] | None = None,
    stop_event: threading.Event | None = None,
    checks: bool = True,
    load: Callable[[], ServerConfig] | None = None,
) -> int:
    """Run until SIGTERM/SIGINT (or ``stop_event``); returns the exit code (0 on a clean stop).

    ``ready_file`` receives ``{"grpc_port", "health_port"}`` once serving; ``on_started`` is
    called with the started runtime. Signal handlers are installed only on the main thread.
    ``checks``: run and log the preflight checks before starting (the server starts anyway).
    ``load``: re-reads the configuration; ``SIGHUP`` then reloads it (see
    :mod:`laredo_server.reload`).
    """
    try:
        rt = runtime_from_config(model, load)
    except ConfigError as exc:
        logger.error("server refused to start: %s", exc)
        return 1
    for warning in open_listener_warnings(model):  # a target's listener logs its own
        logger.warning("%s", warning)
    for warning in cleartext_token_warnings(model):
        logger.warning("%s", warning)
    if checks:
        log_preflight(model)
    stop = stop_event or threading.Event()
    signals = {"n": 0}

    def handle(signum: int, _frame: FrameType | None) -> None:
        signals["n"] += 1
        logger.info("received %s; shutting down", signal.Signals(signum).name)
        if signals["n"] > 1:
            rt.drain = 0.0  # a second signal skips the drain wait
        stop.set()

    def reload_on_hup(_signum: int, _frame: FrameType | None) -> None:
        logger.info("received SIGHUP; reloading the configuration")
        if isinstance(rt.reloader, ConfigReloader):
            rt.reloader.reload_in_background()

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, handle)
        signal.signal(signal.SIGINT, handle)
        if load is not None:
            signal.signal(signal.SIGHUP, reload_on_hup)
    try:
        rt.start()
    except OSError as exc:  # a port in use, an address that cannot be bound
        logger.error("server failed to start: %s", exc)
        with contextlib.suppress(Exception):
            rt.stop(grace=5)
        return 1
    except Exception:
        logger.exception("server failed to start")
        with contextlib.suppress(Exception):
            rt.stop(grace=5)
        return 1
    if ready_file:
        # atomically: a watcher that sees the file never reads it half-written
        ready = Path(ready_file)
        tmp = ready.with_name(f".{ready.name}.tmp")
        tmp.write_text(
            json.dumps(
                {"grpc_port": rt.listeners.grpc_port, "health_port": rt.listeners.health_port}
            )
        )
        tmp.replace(ready)
    if on_started is not None:
        on_started(rt)
    # the last startup line: after the first baselines when they are quick, so that it is
    # also the last line a person sees before trying the command it names
    with contextlib.suppress(Exception):
        rt.engine.await_ready(_SETTLE)
    states = [p.state for p in rt.engine.pipelines()]
    logger.info("%s", listening_line(model, rt.listeners, states))
    while not stop.wait(0.2):
        pass
    rt.begin_drain()
    if rt.drain > 0:
        logger.info("draining for %.1fs (readiness reports 503)", rt.drain)
        end = time.monotonic() + rt.drain
        while time.monotonic() < end and rt.drain > 0:
            time.sleep(0.05)
    started = time.monotonic()
    rt.stop()
    logger.info("stopped in %.2fs", time.monotonic() - started)
    return 0
