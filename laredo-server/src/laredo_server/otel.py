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
from typing import Any

from laredo import events as E
from laredo.errors import MissingDependencyError
from laredo.events import handles
from laredo.observers import NullObserver
from laredo.types import TableIdentifier
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
        self.opted_in = frozenset({E.ChangeReceived, E.ChangeApplied} if per_action else ())
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
    @handles(E.SourceConnected)
    def _source_connected(self, ev: E.SourceConnected) -> None:
        self._c["connections"].add(1, {"source": ev.source_id, "event": "connected"})

    @handles(E.SourceDisconnected)
    def _source_disconnected(self, ev: E.SourceDisconnected) -> None:
        self._c["connections"].add(1, {"source": ev.source_id, "event": "disconnected"})

    @handles(E.PipelineStateChanged)
    def _pipeline_state_changed(self, ev: E.PipelineStateChanged) -> None:
        self._c["states"].add(1, self._p(ev.pipeline_id, state=ev.new.value))

    @handles(E.PipelineAdded)
    def _pipeline_added(self, ev: E.PipelineAdded) -> None:
        self._c["membership"].add(1, {"source": ev.source_id, "change": "added"})

    @handles(E.PipelineRemoved)
    def _pipeline_removed(self, ev: E.PipelineRemoved) -> None:
        self._c["membership"].add(1, {"source": ev.source_id, "change": "removed"})

    @handles(E.BaselineStarted)
    def _baseline_started(self, ev: E.BaselineStarted) -> None:
        self._c["baseline_started"].add(1, self._p(ev.pipeline_id, ev.table))

    @handles(E.BaselineCompleted)
    def _baseline_completed(self, ev: E.BaselineCompleted) -> None:
        attrs = self._p(ev.pipeline_id, ev.table)
        self._c["baseline_rows"].add(ev.total_rows, attrs)
        self._baseline.record(ev.duration.total_seconds(), attrs)

    @handles(E.RebaselineTriggered)
    def _rebaseline_triggered(self, ev: E.RebaselineTriggered) -> None:
        self._c["rebaseline"].add(1, {"source": ev.source_id})

    @handles(E.ChangeReceived)
    def _change_received(self, ev: E.ChangeReceived) -> None:
        self._c["received"].add(1, self._p(ev.pipeline_id, ev.table, action=ev.action.name.lower()))

    @handles(E.ChangeApplied)
    def _change_applied(self, ev: E.ChangeApplied) -> None:
        self._c["applied"].add(1, self._p(ev.pipeline_id, ev.table, action=ev.action.name.lower()))

    @handles(E.ChangesApplied)
    def _changes_applied(self, ev: E.ChangesApplied) -> None:
        attrs = self._p(ev.pipeline_id, ev.table)
        self._c["batches"].add(1, attrs)
        self._apply.record(ev.duration.total_seconds(), attrs)
        if not self.per_action:
            self._c["applied"].add(ev.count, self._p(ev.pipeline_id, ev.table, action="any"))

    @handles(E.ChangeError)
    def _change_error(self, ev: E.ChangeError) -> None:
        self._c["errors"].add(1, self._p(ev.pipeline_id, ev.table, action=ev.action.name.lower()))

    @handles(E.AckAdvanced)
    def _ack_advanced(self, ev: E.AckAdvanced) -> None:
        self._c["acks"].add(1, {"source": ev.source_id})

    @handles(E.BufferPolicyTriggered)
    def _buffer_policy_triggered(self, ev: E.BufferPolicyTriggered) -> None:
        policy = str(getattr(ev.policy, "value", ev.policy))
        self._c["policy"].add(1, self._p(ev.pipeline_id, policy=policy))

    @handles(E.SnapshotCompleted)
    def _snapshot_completed(self, ev: E.SnapshotCompleted) -> None:
        self._c["snapshots"].add(1, {"outcome": "created"})
        self._snapshot.record(ev.duration.total_seconds())

    @handles(E.SnapshotFailed)
    def _snapshot_failed(self, ev: E.SnapshotFailed) -> None:
        self._c["snapshots"].add(1, {"outcome": "failed"})

    @handles(E.SnapshotRestoreCompleted)
    def _snapshot_restore_completed(self, ev: E.SnapshotRestoreCompleted) -> None:
        self._c["restores"].add(1, {"outcome": "completed"})

    @handles(E.SchemaChanged)
    def _schema_changed(self, ev: E.SchemaChanged) -> None:
        self._c["schema"].add(1, {"source": ev.source_id, "table": str(ev.table)})

    @handles(E.LagUpdated)
    def _lag_updated(self, ev: E.LagUpdated) -> None:
        with self._lock:
            self._lag_bytes[ev.source_id] = ev.lag_bytes
            if ev.lag_time is not None:
                self._lag_seconds[ev.source_id] = ev.lag_time.total_seconds()

    @handles(E.DeadLetterWritten)
    def _dead_letter_written(self, ev: E.DeadLetterWritten) -> None:
        self._c["dead"].add(1, self._p(ev.pipeline_id, ev.change.table))

    @handles(E.RowExpired)
    def _row_expired(self, ev: E.RowExpired) -> None:
        self._c["expired"].add(1, self._p(ev.pipeline_id, ev.table))

    @handles(E.ValidationResult)
    def _validation_result(self, ev: E.ValidationResult) -> None:
        result = "match" if ev.match else "mismatch"
        self._c["validation"].add(1, self._p(ev.pipeline_id, ev.table, result=result))

    # fan-out events (laredo_target_fanout.events), by name: the server does not import fan-out
    @handles("FanoutClientConnected")
    def _fanout_client_connected(self, ev: Any) -> None:
        self._c["fanout"].add(1, self._p(ev.pipeline_id, event="client_connected"))

    @handles("FanoutClientDisconnected")
    def _fanout_client_disconnected(self, ev: Any) -> None:
        self._c["fanout"].add(1, self._p(ev.pipeline_id, event="client_disconnected"))

    @handles("FanoutSnapshotCreated")
    def _fanout_snapshot_created(self, ev: Any) -> None:
        self._c["fanout"].add(1, self._p(ev.pipeline_id, event="snapshot_created"))

    @handles("FanoutJournalPruned")
    def _fanout_journal_pruned(self, ev: Any) -> None:
        self._c["fanout"].add(ev.pruned, self._p(ev.pipeline_id, event="journal_pruned"))
