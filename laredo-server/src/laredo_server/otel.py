"""``OpenTelemetryObserver``: engine events as OpenTelemetry metrics (optional extra).

    pip install 'laredo-server[otel]'        # opentelemetry-api; configure an SDK + exporter

In HOCON: ``observability { observers = [ { type = opentelemetry } ] }``. Instruments are created
on the global meter provider (or the one given), meter name ``laredo``; attributes ``source``,
``pipeline``, ``table`` (+ ``action``, ``outcome``, ``result``, ``state``, ``policy``). Without an
SDK configured the API is a no-op, so the observer costs almost nothing.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from datetime import timedelta
from typing import Any

from laredo.errors import MissingDependencyError
from laredo.observers import NullObserver
from laredo.types import ChangeAction, ChangeEvent, ErrorInfo, PipelineState, TableIdentifier
from pydantic import BaseModel, ConfigDict

__all__ = ["OpenTelemetryObserver", "OpenTelemetryOptions"]


class OpenTelemetryOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")
    per_action: bool = True
    """Count every change by action (one observer call per change); False counts batches."""
    meter_name: str = "laredo"


_COUNTERS = {
    "received": ("laredo.changes.received", "Changes taken from pipeline buffers."),
    "applied": ("laredo.changes.applied", "Changes applied to targets."),
    "batches": ("laredo.change.batches", "Batches of changes applied."),
    "errors": ("laredo.change.errors", "Failed attempts to apply a change."),
    "dead": ("laredo.dead_letters", "Changes written to the dead-letter store."),
    "expired": ("laredo.rows.expired", "Rows removed by TTL."),
    "rebaseline": ("laredo.source.rebaseline", "Re-baselines triggered by a source."),
    "connections": ("laredo.source.connections", "Source connects and disconnects."),
    "acks": ("laredo.source.acks", "Times a source acknowledgement moved forward."),
    "states": ("laredo.pipeline.state_changes", "Pipeline state transitions."),
    "membership": ("laredo.pipeline.membership_changes", "Pipelines added to or removed."),
    "baseline_started": ("laredo.baselines", "Baselines started."),
    "baseline_rows": ("laredo.baseline.rows", "Rows loaded by completed baselines."),
    "policy": ("laredo.buffer.policy_triggered", "Buffer-full policy activations."),
    "snapshots": ("laredo.snapshots", "Snapshots by outcome."),
    "restores": ("laredo.snapshot.restores", "Snapshot restores by outcome."),
    "schema": ("laredo.schema_changes", "Schema changes seen."),
    "validation": ("laredo.validation.runs", "Row-count validations by result."),
    "fanout": ("laredo.fanout.events", "Fan-out client and journal events."),
}


class OpenTelemetryObserver(NullObserver):
    """Engine events as OpenTelemetry counters, histograms and observable gauges."""

    def __new__(
        cls, per_action: bool = True, meter_name: str = "laredo", meter_provider: Any = None
    ) -> OpenTelemetryObserver:
        kind = cls
        if cls is OpenTelemetryObserver and not per_action:
            kind = _BatchOpenTelemetryObserver
        return super().__new__(kind)

    def __init__(
        self, per_action: bool = True, meter_name: str = "laredo", meter_provider: Any = None
    ) -> None:
        try:
            from opentelemetry import metrics  # noqa: PLC0415 - lazy: optional [otel] extra
        except ImportError as exc:
            raise MissingDependencyError(
                "'laredo-server[otel]'", "the OpenTelemetry observer"
            ) from exc
        provider = meter_provider or metrics.get_meter_provider()
        meter = provider.get_meter(meter_name)
        self.per_action = per_action
        self._c = {k: meter.create_counter(n, description=d) for k, (n, d) in _COUNTERS.items()}
        self._apply = meter.create_histogram(
            "laredo.change.apply.duration", unit="s", description="Time to apply one batch."
        )
        self._baseline = meter.create_histogram(
            "laredo.baseline.duration", unit="s", description="Baseline duration."
        )
        self._snapshot = meter.create_histogram(
            "laredo.snapshot.duration", unit="s", description="Snapshot duration."
        )
        self._lock = threading.Lock()
        self._lag_bytes: dict[str, int] = {}
        self._lag_seconds: dict[str, float] = {}
        self._pipes: dict[str, dict[str, str]] = {}
        meter.create_observable_gauge(
            "laredo.source.lag.bytes",
            callbacks=[self._observe_lag_bytes],
            unit="By",
            description="Source replication lag in bytes.",
        )
        meter.create_observable_gauge(
            "laredo.source.lag.seconds",
            callbacks=[self._observe_lag_seconds],
            unit="s",
            description="Source replication lag in seconds.",
        )

    # -- wiring -------------------------------------------------------------------------------
    def bind(self, pipelines: Mapping[str, tuple[str, TableIdentifier | str]]) -> None:
        for pid, (source, table) in pipelines.items():
            self._pipes[pid] = {"pipeline": pid, "source": source, "table": str(table)}

    def _p(self, pid: str, table: TableIdentifier | None = None, **extra: str) -> dict[str, str]:
        base = self._pipes.get(pid)
        if base is None:
            base = {"pipeline": pid, "table": str(table or "")}
            if table is not None:
                self._pipes[pid] = base
        return {**base, **extra} if extra else base

    def _observe_lag_bytes(self, _options: Any) -> Iterable[Any]:
        from opentelemetry.metrics import Observation  # noqa: PLC0415 - lazy: optional extra

        with self._lock:
            items = list(self._lag_bytes.items())
        return [Observation(v, {"source": s}) for s, v in items]

    def _observe_lag_seconds(self, _options: Any) -> Iterable[Any]:
        from opentelemetry.metrics import Observation  # noqa: PLC0415 - lazy: optional extra

        with self._lock:
            items = list(self._lag_seconds.items())
        return [Observation(v, {"source": s}) for s, v in items]

    # -- events -------------------------------------------------------------------------------
    def on_source_connected(self, source_id: str, source_type: str) -> None:
        self._c["connections"].add(1, {"source": source_id, "event": "connected"})

    def on_source_disconnected(self, source_id: str, reason: str) -> None:
        self._c["connections"].add(1, {"source": source_id, "event": "disconnected"})

    def on_pipeline_state_changed(
        self, pipeline_id: str, old: PipelineState, new: PipelineState
    ) -> None:
        self._c["states"].add(1, self._p(pipeline_id, state=new.value))

    def on_pipeline_added(self, pipeline_id: str, source_id: str, table: TableIdentifier) -> None:
        self._c["membership"].add(1, {"source": source_id, "change": "added"})

    def on_pipeline_removed(self, pipeline_id: str, source_id: str, reason: str) -> None:
        self._c["membership"].add(1, {"source": source_id, "change": "removed"})

    def on_baseline_started(self, pipeline_id: str, table: TableIdentifier) -> None:
        self._c["baseline_started"].add(1, self._p(pipeline_id, table))

    def on_baseline_completed(
        self, pipeline_id: str, table: TableIdentifier, total_rows: int, duration: timedelta
    ) -> None:
        attrs = self._p(pipeline_id, table)
        self._c["baseline_rows"].add(total_rows, attrs)
        self._baseline.record(duration.total_seconds(), attrs)

    def on_rebaseline_triggered(self, source_id: str) -> None:
        self._c["rebaseline"].add(1, {"source": source_id})

    def on_change_received(
        self, pipeline_id: str, table: TableIdentifier, action: ChangeAction, position: Any
    ) -> None:
        self._c["received"].add(1, self._p(pipeline_id, table, action=action.name.lower()))

    def on_change_applied(
        self, pipeline_id: str, table: TableIdentifier, action: ChangeAction, duration: timedelta
    ) -> None:
        self._c["applied"].add(1, self._p(pipeline_id, table, action=action.name.lower()))

    def on_changes_applied(
        self, pipeline_id: str, table: TableIdentifier, count: int, duration: timedelta
    ) -> None:
        attrs = self._p(pipeline_id, table)
        self._c["batches"].add(1, attrs)
        self._apply.record(duration.total_seconds(), attrs)

    def on_change_error(
        self, pipeline_id: str, table: TableIdentifier, action: ChangeAction, error: ErrorInfo
    ) -> None:
        self._c["errors"].add(1, self._p(pipeline_id, table, action=action.name.lower()))

    def on_ack_advanced(self, source_id: str, position: Any) -> None:
        self._c["acks"].add(1, {"source": source_id})

    def on_buffer_policy_triggered(self, pipeline_id: str, policy: str) -> None:
        self._c["policy"].add(1, self._p(pipeline_id, policy=str(getattr(policy, "value", policy))))

    def on_snapshot_completed(
        self, snapshot_id: str, tables: int, rows: int, size_bytes: int, duration: timedelta
    ) -> None:
        self._c["snapshots"].add(1, {"outcome": "created"})
        self._snapshot.record(duration.total_seconds())

    def on_snapshot_failed(self, snapshot_id: str, error: ErrorInfo) -> None:
        self._c["snapshots"].add(1, {"outcome": "failed"})

    def on_snapshot_restore_completed(self, snapshot_id: str, duration: timedelta) -> None:
        self._c["restores"].add(1, {"outcome": "completed"})

    def on_schema_change(self, source_id: str, table: TableIdentifier, event: Any) -> None:
        self._c["schema"].add(1, {"source": source_id, "table": str(table)})

    def on_lag_updated(self, source_id: str, lag_bytes: int, lag_time: timedelta | None) -> None:
        with self._lock:
            self._lag_bytes[source_id] = lag_bytes
            if lag_time is not None:
                self._lag_seconds[source_id] = lag_time.total_seconds()

    def on_dead_letter_written(
        self, pipeline_id: str, change: ChangeEvent, error: ErrorInfo
    ) -> None:
        self._c["dead"].add(1, self._p(pipeline_id, change.table))

    def on_row_expired(self, pipeline_id: str, table: TableIdentifier, key: str) -> None:
        self._c["expired"].add(1, self._p(pipeline_id, table))

    def on_validation_result(
        self,
        pipeline_id: str,
        table: TableIdentifier,
        source_count: int,
        target_count: int,
        match: bool,
    ) -> None:
        self._c["validation"].add(
            1, self._p(pipeline_id, table, result="match" if match else "mismatch")
        )

    def on_fanout_client_connected(self, pipeline_id: str, client_id: str, mode: Any) -> None:
        self._c["fanout"].add(1, self._p(pipeline_id, event="client_connected"))

    def on_fanout_client_disconnected(self, pipeline_id: str, client_id: str, reason: str) -> None:
        self._c["fanout"].add(1, self._p(pipeline_id, event="client_disconnected"))

    def on_fanout_snapshot_created(
        self, pipeline_id: str, snapshot_id: str, seq: int, rows: int
    ) -> None:
        self._c["fanout"].add(1, self._p(pipeline_id, event="snapshot_created"))

    def on_fanout_journal_pruned(self, pipeline_id: str, pruned: int, oldest_seq: int) -> None:
        self._c["fanout"].add(pruned, self._p(pipeline_id, event="journal_pruned"))


class _BatchOpenTelemetryObserver(OpenTelemetryObserver):
    """``per_action=False``: no per-change calls; applied changes counted per batch."""

    on_change_received = NullObserver.on_change_received
    on_change_applied = NullObserver.on_change_applied

    def on_changes_applied(
        self, pipeline_id: str, table: TableIdentifier, count: int, duration: timedelta
    ) -> None:
        super().on_changes_applied(pipeline_id, table, count, duration)
        self._c["applied"].add(count, self._p(pipeline_id, table, action="any"))
