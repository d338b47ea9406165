"""The server runtime: engine + gRPC services + health/metrics HTTP + signal handling.

``Runtime`` owns one engine at a time (``RestoreSnapshot`` replaces it with a new one built by
the same factory, started from the chosen snapshot). ``serve(config)`` is what ``laredo serve``
runs: start, wait for SIGTERM/SIGINT, then drain (readiness 503 for ``shutdown.drain``), stop
the listeners, stop the engine (buffers drained, snapshot on shutdown when configured, final
ACK) within ``shutdown.grace_period``, and return 0.
"""

from __future__ import annotations

import contextlib
import json
import logging
import queue
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent import futures
from dataclasses import dataclass
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import grpc
from laredo.observers import NullObserver
from laredo.types import ChangeAction, PipelineState, TableIdentifier

from . import __version__
from .config import Built, ServerConfig, build_engine, mask_text
from .metrics import CONTENT_TYPE, PrometheusObserver

logger = logging.getLogger(__name__)

EngineFactory = Callable[[Sequence[Any], Any], Built]
"""``factory(observers, snapshot_store_override) -> Built``; the override (or None) replaces the
configured snapshot store (used to start from one chosen snapshot)."""


# -- watch hub -----------------------------------------------------------------------------------


class _Watcher:
    def __init__(self, tables: set[str], pids: set[str], size: int) -> None:
        self.tables = tables
        self.pids = pids
        self.queue: queue.Queue[Any] = queue.Queue(maxsize=size)
        self._dropped = 0
        self._lock = threading.Lock()

    def matches(self, pid: str | None, table: str | None) -> bool:
        if self.pids and pid not in self.pids:
            return False
        return not (self.tables and table not in self.tables)

    def offer(self, ev: Any) -> None:
        try:
            self.queue.put_nowait(ev)
        except queue.Full:
            with self._lock:
                self._dropped += 1

    def take_dropped(self) -> int:
        with self._lock:
            n, self._dropped = self._dropped, 0
        return n


class WatchHub(NullObserver):
    """Observer that feeds WatchStatus streams and keeps the status the OAM service reports."""

    def __init__(self, rt: Runtime) -> None:
        self.rt = rt
        self._watchers: tuple[_Watcher, ...] = ()
        self._lock = threading.Lock()
        self.last_change_at: float | None = None
        self.last_snapshot_id: str | None = None
        self.last_snapshot_at: float | None = None
        self.last_snapshot_error: str | None = None
        self.snapshots_created = 0
        self._service_state: Any = 0
        self._pipe_table: dict[str, str] = {}
        self.restored: dict[str, int] = {}

    def watch(self, tables: set[str], pids: set[str]) -> _Watcher:
        w = _Watcher(tables, pids, self.rt.watch_buffer)
        with self._lock:
            self._watchers = (*self._watchers, w)
        return w

    def unwatch(self, w: _Watcher) -> None:
        with self._lock:
            self._watchers = tuple(x for x in self._watchers if x is not w)

    def _emit(self, pid: str | None, table: str | None, **kw: Any) -> None:
        ws = self._watchers
        if not ws:
            return
        from ._proto.laredo_proto.v1 import oam_pb2 as oam

        ev = oam.StatusEvent(timestamp=int(time.time() * 1000), **kw)
        for w in ws:
            if w.matches(pid, table) if (pid or table) else not (w.pids or w.tables):
                w.offer(ev)

    def _table_of(self, pid: str) -> str | None:
        t = self._pipe_table.get(pid)
        if t is None:
            for cfg in self.rt.engine.pipeline_configs:
                if cfg.pipeline_id() == pid:
                    t = self._pipe_table[pid] = str(cfg.table)
        return t

    def check_service_state(self) -> None:
        from ._proto.laredo_proto.v1 import oam_pb2 as oam

        try:
            new = self.rt.service_state()
        except Exception:
            return
        old = self._service_state
        if new != old:
            self._service_state = new
            self._emit(
                None,
                None,
                service_state_change=oam.ServiceStateChange(old_state=old, new_state=new),
            )

    # events -------------------------------------------------------------------------------
    def on_pipeline_state_changed(
        self, pipeline_id: str, old: PipelineState, new: PipelineState
    ) -> None:
        from ._proto.laredo_proto.v1 import oam_pb2 as oam
        from .services import _PSTATE

        err = ""
        if new is PipelineState.ERROR:
            for p in self.rt.engine.pipelines():
                if p.id == pipeline_id:
                    err = p.error or ""
        self._emit(
            pipeline_id,
            self._table_of(pipeline_id),
            pipeline_state_change=oam.PipelineStateChange(
                pipeline_id=pipeline_id,
                old_state=_PSTATE.get(old, 0),
                new_state=_PSTATE.get(new, 0),
                error=err,
            ),
        )
        self.check_service_state()

    def on_changes_applied(
        self, pipeline_id: str, table: TableIdentifier, count: int, duration: Any
    ) -> None:
        self.last_change_at = time.time()
        if not self._watchers:
            return
        from ._proto.laredo_proto.v1 import oam_pb2 as oam

        self._emit(
            pipeline_id,
            str(table),
            row_change=oam.RowChange(
                pipeline_id=pipeline_id,
                schema=table.schema,
                table=table.table,
                action="BATCH",
                count=count,
            ),
        )

    def on_source_connected(self, source_id: str, source_type: str) -> None:
        self._source_event(source_id, "CONNECTED", source_type)

    def on_source_disconnected(self, source_id: str, reason: str) -> None:
        self._source_event(source_id, "DISCONNECTED", mask_text(reason))

    def on_ack_advanced(self, source_id: str, position: Any) -> None:
        if not self._watchers:
            return
        try:
            text = self.rt.engine.source(source_id).position_to_string(position)
        except Exception:
            text = str(position)
        self._source_event(source_id, "ACK", "", position=str(text))

    def _source_event(self, source_id: str, state: str, reason: str, position: str = "") -> None:
        if not self._watchers:
            return
        from ._proto.laredo_proto.v1 import oam_pb2 as oam

        self._emit(
            None,
            None,
            source_state_change=oam.SourceStateChange(
                source_id=source_id, state=state, reason=reason, position=position
            ),
        )

    def on_snapshot_started(self, snapshot_id: str) -> None:
        self._snap(snapshot_id, "started")

    def on_snapshot_completed(
        self, snapshot_id: str, tables: int, rows: int, size_bytes: int, duration: Any
    ) -> None:
        self.last_snapshot_id = snapshot_id
        self.last_snapshot_at = time.time()
        self.last_snapshot_error = None
        self.snapshots_created += 1
        self._snap(snapshot_id, "completed", rows=rows)

    def on_snapshot_failed(self, snapshot_id: str, error: Any) -> None:
        self.last_snapshot_error = f"{snapshot_id}: {error.message}"
        self._snap(snapshot_id, "failed", message=error.message)

    def on_snapshot_restore_started(self, snapshot_id: str) -> None:
        self._snap(snapshot_id, "restore_started")

    def on_snapshot_restore_completed(self, snapshot_id: str, duration: Any) -> None:
        self.restored[snapshot_id] = self.restored.get(snapshot_id, 0) + 1
        self._snap(snapshot_id, "restore_completed")

    def _snap(self, snapshot_id: str, event: str, message: str = "", rows: int = 0) -> None:
        if not self._watchers:
            return
        from ._proto.laredo_proto.v1 import oam_pb2 as oam

        self._emit(
            None,
            None,
            snapshot_event=oam.SnapshotEvent(
                snapshot_id=snapshot_id, event=event, message=message, rows=rows
            ),
        )


# -- pinned snapshot store (RestoreSnapshot) -----------------------------------------------------


class PinnedSnapshotStore:
    """Wraps a store so the engine's startup restore sees only one chosen snapshot; after that
    snapshot is loaded, the store behaves normally."""

    def __init__(self, store: Any, snapshot_id: str) -> None:
        self._store = store
        self.pinned: str | None = snapshot_id

    def list(self, table: TableIdentifier | None = None) -> list[Any]:
        listed = self._store.list(table)
        if self.pinned is None:
            return list(listed)
        return [d for d in listed if d.snapshot_id == self.pinned]

    def load(self, snapshot_id: str, serializer: Any = None) -> Any:
        out = self._store.load(snapshot_id, serializer)
        if snapshot_id == self.pinned:
            self.pinned = None
        return out

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


# -- runtime -------------------------------------------------------------------------------------


@dataclass
class Listeners:
    grpc_port: int | None = None
    health_port: int | None = None


class Runtime:
    """One running server: engine, observers, listeners and admin state."""

    def __init__(
        self,
        factory: EngineFactory,
        *,
        grpc_port: int | None = 0,
        grpc_host: str = "127.0.0.1",
        health_port: int | None = 0,
        health_host: str = "127.0.0.1",
        admin_token: str | None = None,
        protect_reads: bool = False,
        per_action_metrics: bool = True,
        metrics_enabled: bool = True,
        watch_buffer: int = 16_384,
        drain: float = 0.0,
        grace_period: float = 30.0,
        reflection: bool = True,
        tls: Any = None,
        max_workers: int = 16,
        source_types: dict[str, str] | None = None,
    ) -> None:
        self.factory = factory
        self.grpc_port = grpc_port
        self.grpc_host = grpc_host
        self.health_port = health_port
        self.health_host = health_host
        self.admin_token = admin_token
        self.protect_reads = protect_reads
        self.watch_buffer = watch_buffer
        self.drain = drain
        self.grace_period = grace_period
        self.reflection = reflection
        self.tls = tls
        self.max_workers = max_workers
        self.source_types = dict(source_types or {})
        self.version = __version__
        self.stopping = threading.Event()
        self.draining = False
        self.started = False
        self.started_at: float | None = None
        self.replays: dict[str, Any] = {}
        self._reloading = 0
        self._lock = threading.RLock()
        self.hub = WatchHub(self)
        self.metrics = PrometheusObserver(per_action=per_action_metrics)
        self.metrics_enabled = metrics_enabled
        self.metrics.add_collector(self._collect)
        self.built = factory(self._observers(), None)
        self._bind_metrics()
        self.listeners = Listeners()
        self._grpc: grpc.Server | None = None
        self._http: ThreadingHTTPServer | None = None
        self._health_servicer: Any = None
        self._servicers: dict[str, Any] | None = None

    def _observers(self) -> list[Any]:
        return [self.hub, self.metrics] if self.metrics_enabled else [self.hub]

    def _bind_metrics(self) -> None:
        labels = {c.pipeline_id(): (c.source_id, c.table) for c in self.engine.pipeline_configs}
        self.metrics.bind(labels)
        obs = self.engine.observer
        for o in getattr(obs, "observers", [obs]):
            bind = getattr(o, "bind", None)
            if callable(bind) and o is not self.metrics:
                bind(labels)

    def _collect(self) -> Iterator[tuple[str, str, str, Any, float]]:
        for p in self.engine.pipelines():
            labels = (("pipeline", p.id), ("source", p.source_id), ("table", str(p.table)))
            if p.row_count is not None:
                yield (
                    "laredo_pipeline_rows",
                    "gauge",
                    "Rows currently held by the pipeline's target.",
                    labels,
                    p.row_count,
                )
            yield (
                "laredo_pipeline_buffer_depth",
                "gauge",
                "Items waiting in the pipeline buffer.",
                labels,
                p.buffer_depth,
            )
            yield (
                "laredo_pipeline_buffer_capacity",
                "gauge",
                "Capacity of the pipeline buffer.",
                labels,
                p.buffer_capacity,
            )
        yield ("laredo_ready", "gauge", "1 when the server is ready.", (), int(self.is_ready()))

    @property
    def engine(self) -> Any:
        return self.built.engine

    # -- lifecycle ---------------------------------------------------------------------------
    def start(self) -> None:
        self.engine.start()
        self.started_at = time.time()
        self.started = True
        if self.health_port is not None:
            self._start_http()
        if self.grpc_port is not None:
            self._start_grpc()

    def stop(self, grace: float | None = None) -> None:
        """Stop listeners then the engine (drains buffers, shutdown snapshot, final ACK)."""
        grace = self.grace_period if grace is None else grace
        self.stopping.set()
        self.hub.check_service_state()
        for r in list(self.replays.values()):
            with contextlib.suppress(Exception):
                r.stop()
        if self._grpc is not None:
            if self._health_servicer is not None:
                self._health_servicer.enter_graceful_shutdown()
            self._grpc.stop(min(5.0, grace)).wait(min(5.0, grace) + 1)
        try:
            self.engine.stop(timeout=grace)
        except Exception as exc:
            logger.warning("engine stop: %s", exc)
        if self._http is not None:
            self._http.shutdown()
            self._http.server_close()

    def begin_drain(self) -> None:
        self.draining = True

    # -- gRPC --------------------------------------------------------------------------------
    def _start_grpc(self) -> None:
        from grpc_health.v1 import health, health_pb2, health_pb2_grpc

        from ._proto.laredo_proto.v1 import oam_pb2_grpc, query_pb2_grpc
        from .services import OAM_SERVICE, QUERY_SERVICE

        server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=self.max_workers, thread_name_prefix="grpc"),
            options=[("grpc.so_reuseport", 0)],
        )
        impls = self.http_servicers()
        oam_pb2_grpc.add_LaredoOAMServiceServicer_to_server(  # type: ignore[no-untyped-call]
            impls[OAM_SERVICE], server
        )
        query_pb2_grpc.add_LaredoQueryServiceServicer_to_server(  # type: ignore[no-untyped-call]
            impls[QUERY_SERVICE], server
        )
        hs = health.HealthServicer(experimental_non_blocking=True)
        for name in ("", OAM_SERVICE, QUERY_SERVICE):
            hs.set(name, health_pb2.HealthCheckResponse.SERVING)
        health_pb2_grpc.add_HealthServicer_to_server(hs, server)
        self._health_servicer = hs
        names = [OAM_SERVICE, QUERY_SERVICE, health.SERVICE_NAME]
        try:
            from laredo.plugins import get_plugin_manager

            get_plugin_manager().call_services_hook(server)
        except Exception:
            logger.warning("a plugin failed to register gRPC services", exc_info=True)
        if self.reflection:
            from grpc_reflection.v1alpha import reflection

            reflection.enable_server_reflection([*names, reflection.SERVICE_NAME], server)
        addr = f"{self.grpc_host}:{self.grpc_port or 0}"
        if self.tls is not None:
            key = Path(self.tls.key_file).read_bytes()
            cert = Path(self.tls.cert_file).read_bytes()
            ca = Path(self.tls.client_ca_file).read_bytes() if self.tls.client_ca_file else None
            creds = grpc.ssl_server_credentials(
                [(key, cert)], root_certificates=ca, require_client_auth=ca is not None
            )
            port = server.add_secure_port(addr, creds)
        else:
            port = server.add_insecure_port(addr)
        if not port:
            raise OSError(f"cannot listen for gRPC on {addr}")
        server.start()
        self._grpc = server
        self.listeners.grpc_port = port
        logger.info("gRPC listening on %s:%s", self.grpc_host, port)

    def http_servicers(self) -> dict[str, Any]:
        """The service implementations, for the HTTP+JSON (Connect) gateway."""
        if self._servicers is None:
            from .services import OAM_SERVICE, QUERY_SERVICE, OamService, QueryService

            self._servicers = {OAM_SERVICE: OamService(self), QUERY_SERVICE: QueryService(self)}
        return self._servicers

    def check_auth(self, context: grpc.ServicerContext, admin: bool) -> None:
        if self.admin_token and (admin or self.protect_reads):
            from .services import check_token

            check_token(context, self.admin_token)

    # -- HTTP (health + metrics) -------------------------------------------------------------
    def _start_http(self) -> None:
        rt = self

        class Handler(BaseHTTPRequestHandler):
            server_version = "laredo/" + __version__

            def log_message(self, format: str, *args: Any) -> None:
                logger.debug("http: " + format, *args)

            def _send(self, code: int, body: str, ctype: str = "application/json") -> None:
                data = body.encode()
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)

            def do_POST(self) -> None:
                from .httpjson import handle

                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                status, ctype, chunks = handle(
                    rt.http_servicers(), self.path.split("?", 1)[0], dict(self.headers), body
                )
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Connection", "close")
                self.end_headers()
                try:
                    for chunk in chunks:
                        self.wfile.write(chunk)
                        self.wfile.flush()
                except (BrokenPipeError, ConnectionResetError):
                    close = getattr(chunks, "close", None)
                    if callable(close):
                        close()

            def do_HEAD(self) -> None:
                self.do_GET()

            def do_GET(self) -> None:
                path = self.path.split("?", 1)[0].rstrip("/")
                try:
                    if path == "/health/live":
                        ok, reasons = rt.liveness()
                        body: dict[str, Any] = {
                            "status": "ok" if ok else "failed",
                            "reasons": reasons,
                        }
                        self._send(200 if ok else 503, json.dumps(body))
                    elif path == "/health/ready":
                        ok, reasons = rt.readiness()
                        body = {"ready": ok, "reasons": reasons, "pipelines": rt.pipeline_map()}
                        self._send(200 if ok else 503, json.dumps(body))
                    elif path == "/health/startup":
                        ok = rt.started
                        body = {"status": "started" if ok else "starting"}
                        self._send(200 if ok else 503, json.dumps(body))
                    elif path == "/metrics":
                        self._send(200, rt.metrics.render(), CONTENT_TYPE)
                    else:
                        self._send(
                            404,
                            json.dumps(
                                {
                                    "error": "not found",
                                    "paths": [
                                        "/health/live",
                                        "/health/ready",
                                        "/health/startup",
                                        "/metrics",
                                    ],
                                }
                            ),
                        )
                except Exception as exc:  # never kill the probe thread
                    logger.warning("http %s failed: %s", path, exc)
                    self._send(500, json.dumps({"error": str(exc)}))

        httpd = ThreadingHTTPServer((self.health_host, self.health_port or 0), Handler)
        httpd.daemon_threads = True
        self._http = httpd
        self.listeners.health_port = httpd.server_address[1]
        threading.Thread(target=httpd.serve_forever, name="laredo-http", daemon=True).start()
        logger.info("health and metrics on http://%s:%s", self.health_host, httpd.server_address[1])

    # -- state helpers -------------------------------------------------------------------------
    def pipeline_map(self) -> dict[str, Any]:
        out = {}
        for p in self.engine.pipelines():
            out[p.id] = {
                "state": p.state.value,
                "ready": self.engine.is_ready(p.source_id, p.table)
                and p.state in (PipelineState.STREAMING, PipelineState.PAUSED),
                "error": p.error,
                "rows": p.row_count,
            }
        return out

    def readiness(
        self,
        source: str | None = None,
        table: str | None = None,
        pipeline_id: str | None = None,
    ) -> tuple[bool, list[str]]:
        eng = self.engine
        if source and source not in eng.source_ids():
            raise KeyError(f"unknown source {source!r} (sources: {', '.join(eng.source_ids())})")
        tid = TableIdentifier.parse(table) if table else None
        pipes = [
            p
            for p in eng.pipelines()
            if (not source or p.source_id == source)
            and (tid is None or p.table == tid)
            and (not pipeline_id or p.id == pipeline_id)
        ]
        if not pipes:
            what = pipeline_id or table or source
            raise KeyError(f"no pipeline matches {what!r}")
        reasons: list[str] = []
        if self.draining or self.stopping.is_set():
            reasons.append("server is shutting down")
        if not self.started:
            reasons.append("engine not started")
        for p in pipes:
            if p.state is PipelineState.ERROR:
                reasons.append(f"pipeline {p.id}: ERROR: {p.error or 'failed'}")
            elif p.state not in (PipelineState.STREAMING, PipelineState.PAUSED):
                reasons.append(f"pipeline {p.id}: {p.state.value}")
            elif not eng.is_ready(p.source_id, p.table):
                reasons.append(f"pipeline {p.id}: not ready")
        return (not reasons), reasons

    def is_ready(self) -> bool:
        try:
            return self.readiness()[0]
        except Exception:
            return False

    def liveness(self) -> tuple[bool, list[str]]:
        reasons = []
        by_src: dict[str, list[Any]] = {}
        for p in self.engine.pipelines():
            by_src.setdefault(p.source_id, []).append(p)
        for sid, pipes in by_src.items():
            if pipes and all(p.state is PipelineState.ERROR for p in pipes):
                reasons.append(f"source {sid}: every pipeline failed")
        return (not reasons), reasons

    def service_state(self) -> Any:
        from ._proto.laredo_proto.v1 import oam_pb2 as oam

        if self.stopping.is_set():
            return oam.SERVICE_STATE_STOPPING
        states = [p.state for p in self.engine.pipelines()]
        if not self.started or not states:
            return oam.SERVICE_STATE_STARTING
        if any(s is PipelineState.ERROR for s in states):
            return oam.SERVICE_STATE_ERROR
        if self._reloading:
            return oam.SERVICE_STATE_RELOADING
        if any(s is PipelineState.PAUSED for s in states):
            return oam.SERVICE_STATE_PAUSED
        if any(s is PipelineState.BASELINING for s in states):
            return oam.SERVICE_STATE_BASELINING
        if all(s is PipelineState.STREAMING for s in states):
            return oam.SERVICE_STATE_STREAMING
        return oam.SERVICE_STATE_STARTING

    @contextlib.contextmanager
    def reloading(self) -> Iterator[None]:
        with self._lock:
            self._reloading += 1
        self.hub.check_service_state()
        try:
            yield
        finally:
            with self._lock:
                self._reloading -= 1
            self.hub.check_service_state()

    def require_source(self, source_id: str) -> str:
        if not source_id:
            raise ValueError("source_id is required")
        if source_id not in self.engine.source_ids():
            known = ", ".join(self.engine.source_ids())
            raise KeyError(f"unknown source {source_id!r} (sources: {known})")
        return source_id

    def source_of(self, table: TableIdentifier) -> str:
        sids = sorted({c.source_id for c in self.engine.pipeline_configs if c.table_id == table})
        if not sids:
            raise KeyError(f"no pipeline for table {table}")
        if len(sids) > 1:
            raise ValueError(f"table {table} is read from several sources ({sids}): give source_id")
        return str(sids[0])

    def pipeline_config(self, pipeline_id: str) -> Any:
        for c in self.engine.pipeline_configs:
            if c.pipeline_id() == pipeline_id:
                return c
        known = ", ".join(c.pipeline_id() for c in self.engine.pipeline_configs)
        raise KeyError(f"unknown pipeline {pipeline_id!r} (pipelines: {known})")

    def pipeline_target(self, pipeline_id: str) -> Any:
        for c in self.engine.pipeline_configs:
            if c.pipeline_id() == pipeline_id:
                return c.target
        return None

    # -- restore -----------------------------------------------------------------------------
    def restore_snapshot(self, snapshot_id: str, timeout: float | None = None) -> None:
        """Stop the engine (no shutdown snapshot) and start a new one from ``snapshot_id``."""
        with self._lock:
            old = self.built
            store = old.engine.snapshot_store
            if store is None:
                from laredo.errors import EngineStateError

                raise EngineStateError("no snapshot store configured")
            desc = store.describe(snapshot_id)
            problems = []
            for sid in old.engine.source_ids():
                src = old.engine.source(sid)
                if sid not in (desc.source_positions or {}):
                    problems.append(f"snapshot {snapshot_id} has no position for source {sid!r}")
                elif not src.supports_resume():
                    problems.append(
                        f"source {sid!r} cannot resume from a position (use a stateful slot), "
                        "so it could only re-baseline"
                    )
            if problems:
                from laredo.errors import EngineStateError

                raise EngineStateError("cannot restore: " + "; ".join(problems))
            before = self.hub.restored.get(snapshot_id, 0)
            old.engine.snapshot_on_shutdown = False
            old.engine.stop(timeout=self.grace_period)
            real = store._store if isinstance(store, PinnedSnapshotStore) else store
            self.built = self.factory(self._observers(), PinnedSnapshotStore(real, snapshot_id))
            self.hub._pipe_table.clear()
            self._bind_metrics()
            self.engine.start()
        ok = self.engine.await_ready(timeout if timeout is not None else self.grace_period)
        if not ok:
            logger.warning("engine not ready after restoring %s", snapshot_id)
        if self.hub.restored.get(snapshot_id, 0) <= before:
            from laredo.errors import SnapshotError

            raise SnapshotError(
                f"snapshot {snapshot_id} was not usable (older than the position the sources "
                "acknowledged, or unreadable: see the server log); the engine restarted "
                "without it"
            )


# -- building from config ------------------------------------------------------------------------


def runtime_from_config(model: ServerConfig) -> Runtime:
    def factory(observers: Sequence[Any], store_override: Any) -> Built:
        built = build_engine(model, observers)
        if store_override is not None:
            built.engine.snapshot_store = store_override
            built.snapshot_store = store_override
        return built

    g = model.grpc
    return Runtime(
        factory,
        grpc_port=g.port if g is not None else None,
        grpc_host=g.host if g is not None else "127.0.0.1",
        health_port=model.health.port if model.health.enabled else None,
        health_host=model.health.host,
        admin_token=model.admin_token(),
        protect_reads=bool(g and g.auth.protect_reads),
        per_action_metrics=model.observability.metrics.per_action,
        metrics_enabled=model.observability.metrics.enabled,
        watch_buffer=g.watch_buffer if g is not None else 16_384,
        drain=model.shutdown.drain,
        grace_period=model.shutdown.grace_period,
        reflection=g.reflection if g is not None else True,
        tls=g.tls if g is not None else None,
        max_workers=g.max_workers if g is not None else 16,
        source_types={sid: s.type for sid, s in model.sources.items()},
    )


# -- logging -------------------------------------------------------------------------------------


class JsonFormatter(logging.Formatter):
    _STD = frozenset(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {"message", "asctime"}

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": mask_text(record.getMessage()),
        }
        for k, v in vars(record).items():
            if k not in self._STD and not k.startswith("_"):
                out[k] = v if isinstance(v, int | float | bool | type(None)) else mask_text(str(v))
        if record.exc_info:
            out["exc"] = mask_text(self.formatException(record.exc_info))
        return json.dumps(out)


class MaskingFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return mask_text(super().format(record))


def setup_logging(fmt: str = "console", level: str = "info") -> None:
    handler = logging.StreamHandler(sys.stderr)
    if fmt == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(MaskingFormatter("%(asctime)s %(levelname)-7s %(name)s: %(message)s"))
    root = logging.getLogger()
    for h in list(root.handlers):
        root.removeHandler(h)
    root.addHandler(handler)
    root.setLevel(level.upper())


# -- serve ---------------------------------------------------------------------------------------


def serve(
    model: ServerConfig,
    *,
    ready_file: str | None = None,
    on_started: Callable[[Runtime], None] | None = None,
    stop_event: threading.Event | None = None,
) -> int:
    """Run until SIGTERM/SIGINT (or ``stop_event``); returns the exit code (0 on a clean stop)."""
    rt = runtime_from_config(model)
    stop = stop_event or threading.Event()
    signals = {"n": 0}

    def handle(signum: int, _frame: Any) -> None:
        signals["n"] += 1
        logger.info("received %s; shutting down", signal.Signals(signum).name)
        if signals["n"] > 1:
            rt.drain = 0.0  # a second signal skips the drain wait
        stop.set()

    in_main = threading.current_thread() is threading.main_thread()
    if in_main:
        signal.signal(signal.SIGTERM, handle)
        signal.signal(signal.SIGINT, handle)
    try:
        rt.start()
    except Exception:
        logger.exception("server failed to start")
        with contextlib.suppress(Exception):
            rt.stop(grace=5)
        return 1
    if ready_file:
        Path(ready_file).write_text(
            json.dumps(
                {"grpc_port": rt.listeners.grpc_port, "health_port": rt.listeners.health_port}
            )
        )
    if on_started is not None:
        on_started(rt)
    logger.info(
        "laredo %s serving %d pipeline(s); gRPC %s, health %s",
        __version__,
        len(rt.engine.pipeline_configs),
        rt.listeners.grpc_port or "off",
        rt.listeners.health_port or "off",
    )
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


__all__ = [
    "ChangeAction",
    "PinnedSnapshotStore",
    "Runtime",
    "WatchHub",
    "runtime_from_config",
    "serve",
    "setup_logging",
]
