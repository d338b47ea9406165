"""``PrometheusObserver``: every engine observer event becomes a Prometheus metric.

Labels: ``source``, ``pipeline`` and ``table`` wherever the event concerns them (pipelines are
mapped to their source and table with :meth:`PrometheusObserver.bind`), plus ``action``,
``outcome``, ``result`` or ``policy`` where relevant. :meth:`PrometheusObserver.render` gives the
text exposition format (version 0.0.4) served on ``/metrics``.

Every family is exported from the first scrape (HELP and TYPE), and :meth:`bind` puts the
counters of each pipeline and source at zero, so ``rate()`` and ``increase()`` see a new series'
start and an alert rule never reads an absent name as "no problem".

Why not ``prometheus_client`` (measured with ``timeit``, one run on a loaded 2-core box): a
labelled increment costs the same (1.04 µs per change either way) and rendering 600 series of
one family is ~10x slower (7.4 ms against 0.75 ms per scrape).

The observer is called on engine threads and never blocks: each update is a dictionary write
under one short lock.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

from laredo import events as E
from laredo.events import handles
from laredo.observers import NullObserver
from laredo.types import ChangeAction, PipelineState, TableIdentifier
from pydantic import BaseModel, ConfigDict

__all__ = [
    "CONTENT_TYPE",
    "DEPRECATED_METRICS",
    "MetricSample",
    "PipelineCounts",
    "PrometheusObserver",
    "PrometheusOptions",
    "SampleLike",
]

DEPRECATED_METRICS = {
    "laredo_validation_expected_row_count": "laredo_validation_expected_rows",
    "laredo_validation_target_row_count": "laredo_validation_target_rows",
}
"""Names kept from Go Laredo that promtool's lint rejects (gauges named ``*_count``) -> the
conformant twin exported beside each. ``deprecated_names = False`` drops them."""

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
_BUCKETS = (0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 30.0, 120.0, 600.0)
_STATES = tuple(s.value for s in PipelineState)
_ACTIONS = (*(a.name.lower() for a in ChangeAction), "any")

LabelKey = tuple[tuple[str, str], ...]


class MetricSample(NamedTuple):
    """One sample a scrape-time collector yields (see :meth:`PrometheusObserver.add_collector`)."""

    name: str
    kind: str
    help: str
    labels: LabelKey
    value: float


@dataclass(frozen=True, slots=True)
class PipelineCounts:
    """A pipeline's counters since the server started (every action summed)."""

    changes_applied: int = 0
    change_errors: int = 0
    dead_letters_written: int = 0


SampleLike = tuple[str, str, str, LabelKey, float]
"""A :class:`MetricSample` or a plain tuple of its shape (what a collector may yield)."""


class PrometheusOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")
    per_action: bool = True
    """Count changes per action (one observer call per change); False counts per batch."""
    buffer_depth: bool = False
    """Follow every buffer operation (one call per enqueue/dequeue). The server instead reads
    buffer depths at scrape time."""


def _esc(v: str) -> str:
    return v.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _fmt_labels(labels: LabelKey, extra: str = "") -> str:
    parts = [f'{k}="{_esc(v)}"' for k, v in labels]
    if extra:
        parts.append(extra)
    return "{" + ",".join(parts) + "}" if parts else ""


def _fmt_value(v: float) -> str:
    if isinstance(v, int) or (isinstance(v, float) and v.is_integer() and abs(v) < 1e15):
        return str(int(v))
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    return repr(float(v))


class _Family:
    __slots__ = ("help", "kind", "name", "values")

    def __init__(self, name: str, kind: str, help_: str) -> None:
        self.name = name
        self.kind = kind
        self.help = help_
        self.values: dict[LabelKey, Any] = {}


class PrometheusObserver(NullObserver):
    """Engine events as metrics. ``per_action=False`` counts changes per batch (the engine
    builds no per-change events for it); ``buffer_depth`` follows every buffer operation."""

    def __init__(self, per_action: bool = True, buffer_depth: bool = False) -> None:
        self.per_action = per_action
        self.buffer_depth = buffer_depth
        wanted: list[type[E.Event]] = [E.BaselineRowLoaded]
        if per_action:
            wanted += [E.ChangeReceived, E.ChangeApplied]
        if buffer_depth:
            wanted.append(E.BufferDepthChanged)
        self.opted_in = frozenset(wanted)
        self._lock = threading.Lock()
        self._families: dict[str, _Family] = {}
        self._pipes: dict[str, LabelKey] = {}
        self._collectors: list[Callable[[], Iterable[SampleLike]]] = []
        self._started = time.time()
        self.deprecated_names = True
        """Also export the names of :data:`DEPRECATED_METRICS` (server config:
        ``observability.metrics.deprecated_names``)."""
        for name, kind, help_ in _DEFS:
            self._families[name] = _Family(name, kind, help_)

    # -- wiring -------------------------------------------------------------------------------
    def bind(self, pipelines: Mapping[str, tuple[str, TableIdentifier | str]]) -> None:
        """Map pipeline ids to ``(source_id, table)`` so pipeline metrics carry those labels,
        and export the counters of each pipeline and source at zero until their first event
        (a rate or an increase over a new series needs its zero)."""
        for pid, (source, table) in pipelines.items():
            self._pipes[pid] = (("pipeline", pid), ("source", source), ("table", str(table)))
        with self._lock:
            for pid, (source, table) in pipelines.items():
                self._zero_pipeline(self._pipes[pid])
                self._zero_source((("source", source),), str(table))
            for name, key in _GLOBAL_ZEROS:
                self._families[name].values.setdefault(key, 0)

    def _zero_pipeline(self, labels: LabelKey) -> None:
        actions = ("insert", "update", "delete") if self.per_action else ("any",)
        fams = self._families
        for action in actions:
            for name in _PER_ACTION_ZEROS:
                if self.per_action or name == "laredo_changes_applied_total":
                    fams[name].values.setdefault((*labels, ("action", action)), 0)
        for name in _PER_PIPELINE_ZEROS:
            fams[name].values.setdefault(labels, 0)
        for result in ("match", "mismatch"):
            fams["laredo_validation_runs_total"].values.setdefault((*labels, ("result", result)), 0)

    def _zero_source(self, labels: LabelKey, table: str) -> None:
        for name in _PER_SOURCE_ZEROS:
            self._families[name].values.setdefault(labels, 0)
        self._families["laredo_schema_changes_total"].values.setdefault(
            (*labels, ("table", table)), 0
        )

    def add_collector(self, fn: Callable[[], Iterable[SampleLike]]) -> None:
        """``fn()`` yields :class:`MetricSample` values (or plain 5-tuples) at every render."""
        self._collectors.append(fn)

    def _p(self, pipeline_id: str, table: TableIdentifier | None = None) -> LabelKey:
        labels = self._pipes.get(pipeline_id)
        if labels is None:
            labels = (("pipeline", pipeline_id), ("source", ""), ("table", str(table or "")))
            if table is not None:
                self._pipes[pipeline_id] = labels
        return labels

    # -- primitives ---------------------------------------------------------------------------
    def _inc(self, name: str, labels: LabelKey, by: float = 1.0) -> None:
        with self._lock:
            vals = self._families[name].values
            vals[labels] = vals.get(labels, 0) + by

    def _set(self, name: str, labels: LabelKey, value: float) -> None:
        with self._lock:
            self._families[name].values[labels] = value

    def _observe(self, name: str, labels: LabelKey, value: float) -> None:
        with self._lock:
            vals = self._families[name].values
            h = vals.get(labels)
            if h is None:
                h = vals[labels] = [[0] * len(_BUCKETS), 0.0, 0]
            for i, b in enumerate(_BUCKETS):
                if value <= b:
                    h[0][i] += 1
            h[1] += value
            h[2] += 1

    def value(self, name: str, **labels: str) -> float | None:
        """The current value of a counter or gauge sample (tests, the quickstart dashboard);
        labels not given match anything, and matching samples are summed."""
        with self._lock:
            fam = self._families.get(name)
            if fam is None:
                return None
            total = None
            for key, v in fam.values.items():
                d = dict(key)
                if all(d.get(k) == x for k, x in labels.items()) and not isinstance(v, list):
                    total = (total or 0) + v
            return total

    def pipeline_total(self, name: str, pipeline_id: str) -> int:
        """A pipeline counter summed over its actions, by direct lookups (the status reads it
        per pipeline; :meth:`value` scans the family)."""
        labels = self._pipes.get(pipeline_id)
        if labels is None:
            return 0
        with self._lock:
            vals = self._families[name].values
            total = vals.get(labels, 0)
            for action in _ACTIONS:
                total += vals.get((*labels, ("action", action)), 0)
        return int(total)

    def pipeline_counts(self, pipeline_id: str) -> PipelineCounts:
        """The pipeline's applied changes, failed attempts and dead letters written (what the
        status reports: these counters are their one count)."""
        return PipelineCounts(
            self.pipeline_total("laredo_changes_applied_total", pipeline_id),
            self.pipeline_total("laredo_change_errors_total", pipeline_id),
            self.pipeline_total("laredo_dead_letters_total", pipeline_id),
        )

    @staticmethod
    def families() -> list[tuple[str, str, str]]:
        """``(name, type, help)`` of every metric the observer can export."""
        return list(_DEFS)

    # -- rendering ----------------------------------------------------------------------------
    def render(self) -> str:
        lines: list[str] = []
        with self._lock:
            fams = [(f.name, f.kind, f.help, dict(f.values)) for f in self._families.values()]
        extra: dict[str, tuple[str, str, dict[LabelKey, Any]]] = {}
        for fn in self._collectors:
            try:
                for name, kind, help_, labels, value in fn():
                    extra.setdefault(name, (kind, help_, {}))[2][labels] = value
            except Exception:  # a failing collector must not break /metrics
                continue
        index = {f[0]: f for f in fams}
        for n, (k, h, v) in extra.items():
            if n in index:
                index[n][3].update(v)  # scrape-time values win over event-driven ones
            else:
                fams.append((n, k, h, v))
        fams.append(
            (
                "laredo_process_start_time_seconds",
                "gauge",
                "Start time of the process since the Unix epoch.",
                {(): self._started},
            )
        )
        for name, kind, help_, values in fams:
            if not self.deprecated_names and name in DEPRECATED_METRICS:
                continue
            lines.append(f"# HELP {name} {help_}")
            lines.append(f"# TYPE {name} {kind}")
            for labels, v in sorted(values.items()):
                if kind == "histogram":
                    counts, total, n = v
                    for b, c in zip(_BUCKETS, counts, strict=True):
                        le = 'le="' + str(b) + '"'
                        lines.append(f"{name}_bucket{_fmt_labels(labels, le)} {c}")
                    inf = 'le="+Inf"'
                    lines.append(f"{name}_bucket{_fmt_labels(labels, inf)} {n}")
                    lines.append(f"{name}_sum{_fmt_labels(labels)} {_fmt_value(total)}")
                    lines.append(f"{name}_count{_fmt_labels(labels)} {n}")
                else:
                    lines.append(f"{name}{_fmt_labels(labels)} {_fmt_value(v)}")
        return "\n".join(lines) + "\n"

    # -- events: lifecycle ---------------------------------------------------------------------
    @handles(E.SourceConnected)
    def _source_connected(self, ev: E.SourceConnected) -> None:
        self._set("laredo_source_connected", (("source", ev.source_id),), 1)
        self._inc("laredo_source_connects_total", (("source", ev.source_id),))

    @handles(E.SourceDisconnected)
    def _source_disconnected(self, ev: E.SourceDisconnected) -> None:
        self._set("laredo_source_connected", (("source", ev.source_id),), 0)
        self._inc("laredo_source_disconnects_total", (("source", ev.source_id),))

    @handles(E.PipelineStateChanged)
    def _pipeline_state_changed(self, ev: E.PipelineStateChanged) -> None:
        base = self._p(ev.pipeline_id)
        with self._lock:
            vals = self._families["laredo_pipeline_state"].values
            for s in _STATES:
                vals[(*base, ("state", s))] = 1 if s == ev.new.value else 0

    @handles(E.PipelineAdded)
    def _pipeline_added(self, ev: E.PipelineAdded) -> None:
        self._pipes[ev.pipeline_id] = (
            ("pipeline", ev.pipeline_id),
            ("source", ev.source_id),
            ("table", str(ev.table)),
        )
        self._inc(
            "laredo_pipeline_membership_changes_total",
            (("source", ev.source_id), ("change", "added")),
        )

    @handles(E.PipelineRemoved)
    def _pipeline_removed(self, ev: E.PipelineRemoved) -> None:
        self._inc(
            "laredo_pipeline_membership_changes_total",
            (("source", ev.source_id), ("change", "removed")),
        )
        with self._lock:
            vals = self._families["laredo_pipeline_state"].values
            for key in [k for k in vals if k[0] == ("pipeline", ev.pipeline_id)]:
                del vals[key]

    # -- baseline ------------------------------------------------------------------------------
    @handles(E.BaselineStarted)
    def _baseline_started(self, ev: E.BaselineStarted) -> None:
        labels = self._p(ev.pipeline_id, ev.table)
        self._inc("laredo_baselines_started_total", labels)
        self._set("laredo_baseline_rows_loaded", labels, 0)

    @handles(E.BaselineRowLoaded)
    def _baseline_row_loaded(self, ev: E.BaselineRowLoaded) -> None:
        self._set("laredo_baseline_rows_loaded", self._p(ev.pipeline_id, ev.table), ev.row_count)

    @handles(E.BaselineCompleted)
    def _baseline_completed(self, ev: E.BaselineCompleted) -> None:
        labels = self._p(ev.pipeline_id, ev.table)
        self._set("laredo_baseline_rows_loaded", labels, ev.total_rows)
        self._inc("laredo_baseline_rows_total", labels, ev.total_rows)
        self._set("laredo_baseline_duration_seconds", labels, ev.duration.total_seconds())

    @handles(E.RebaselineTriggered)
    def _rebaseline_triggered(self, ev: E.RebaselineTriggered) -> None:
        self._inc("laredo_source_rebaseline_total", (("source", ev.source_id),))

    # -- streaming -----------------------------------------------------------------------------
    @handles(E.ChangeReceived)
    def _change_received(self, ev: E.ChangeReceived) -> None:
        self._inc(
            "laredo_changes_received_total",
            (*self._p(ev.pipeline_id, ev.table), ("action", ev.action.name.lower())),
        )

    @handles(E.ChangeApplied)
    def _change_applied(self, ev: E.ChangeApplied) -> None:
        self._inc(
            "laredo_changes_applied_total",
            (*self._p(ev.pipeline_id, ev.table), ("action", ev.action.name.lower())),
        )

    @handles(E.ChangesApplied)
    def _changes_applied(self, ev: E.ChangesApplied) -> None:
        labels = self._p(ev.pipeline_id, ev.table)
        self._inc("laredo_change_batches_applied_total", labels)
        self._observe("laredo_change_apply_duration_seconds", labels, ev.duration.total_seconds())
        self._set("laredo_last_change_applied_timestamp_seconds", labels, time.time())
        if not self.per_action:
            self._inc("laredo_changes_applied_total", (*labels, ("action", "any")), ev.count)

    @handles(E.ChangeError)
    def _change_error(self, ev: E.ChangeError) -> None:
        self._inc(
            "laredo_change_errors_total",
            (*self._p(ev.pipeline_id, ev.table), ("action", ev.action.name.lower())),
        )

    @handles(E.AckAdvanced)
    def _ack_advanced(self, ev: E.AckAdvanced) -> None:
        labels = (("source", ev.source_id),)
        self._inc("laredo_ack_advanced_total", labels)
        self._set("laredo_last_ack_timestamp_seconds", labels, time.time())

    @handles(E.BufferDepthChanged)
    def _buffer_depth_changed(self, ev: E.BufferDepthChanged) -> None:
        labels = self._p(ev.pipeline_id)
        with self._lock:
            self._families["laredo_pipeline_buffer_depth"].values[labels] = ev.depth
            self._families["laredo_pipeline_buffer_capacity"].values[labels] = ev.capacity

    @handles(E.BufferPolicyTriggered)
    def _buffer_policy_triggered(self, ev: E.BufferPolicyTriggered) -> None:
        policy = str(getattr(ev.policy, "value", ev.policy))
        self._inc(
            "laredo_buffer_policy_triggered_total", (*self._p(ev.pipeline_id), ("policy", policy))
        )

    # -- snapshots -----------------------------------------------------------------------------
    @handles(E.SnapshotStarted)
    def _snapshot_started(self, ev: E.SnapshotStarted) -> None:
        self._inc("laredo_snapshots_started_total", ())

    @handles(E.SnapshotCompleted)
    def _snapshot_completed(self, ev: E.SnapshotCompleted) -> None:
        self._inc("laredo_snapshots_total", (("outcome", "created"),))
        self._observe("laredo_snapshot_duration_seconds", (), ev.duration.total_seconds())
        self._set("laredo_snapshot_last_rows", (), ev.rows)
        self._set("laredo_snapshot_last_size_bytes", (), ev.size_bytes)
        self._set("laredo_snapshot_last_success_timestamp_seconds", (), time.time())

    @handles(E.SnapshotFailed)
    def _snapshot_failed(self, ev: E.SnapshotFailed) -> None:
        self._inc("laredo_snapshots_total", (("outcome", "failed"),))

    @handles(E.SnapshotRestoreStarted)
    def _snapshot_restore_started(self, ev: E.SnapshotRestoreStarted) -> None:
        self._inc("laredo_snapshot_restores_total", (("outcome", "started"),))

    @handles(E.SnapshotRestoreCompleted)
    def _snapshot_restore_completed(self, ev: E.SnapshotRestoreCompleted) -> None:
        self._inc("laredo_snapshot_restores_total", (("outcome", "completed"),))
        self._set("laredo_snapshot_restore_duration_seconds", (), ev.duration.total_seconds())

    # -- schema, lag ---------------------------------------------------------------------------
    @handles(E.SchemaChanged)
    def _schema_changed(self, ev: E.SchemaChanged) -> None:
        self._inc(
            "laredo_schema_changes_total", (("source", ev.source_id), ("table", str(ev.table)))
        )

    @handles(E.LagUpdated)
    def _lag_updated(self, ev: E.LagUpdated) -> None:
        labels = (("source", ev.source_id),)
        with self._lock:
            self._families["laredo_source_lag_bytes"].values[labels] = ev.lag_bytes
            if ev.lag_time is not None:
                self._families["laredo_source_lag_seconds"].values[labels] = (
                    ev.lag_time.total_seconds()
                )

    # -- dead letters, ttl, validation ---------------------------------------------------------
    @handles(E.DeadLetterWritten)
    def _dead_letter_written(self, ev: E.DeadLetterWritten) -> None:
        self._inc("laredo_dead_letters_total", self._p(ev.pipeline_id, ev.change.table))

    @handles(E.RowExpired)
    def _row_expired(self, ev: E.RowExpired) -> None:
        self._inc("laredo_rows_expired_total", self._p(ev.pipeline_id, ev.table))

    @handles(E.ValidationResult)
    def _validation_result(self, ev: E.ValidationResult) -> None:
        labels = self._p(ev.pipeline_id, ev.table)
        self._inc(
            "laredo_validation_runs_total",
            (*labels, ("result", "match" if ev.match else "mismatch")),
        )
        with self._lock:
            for name, value in (
                ("laredo_validation_expected_rows", ev.source_count),
                ("laredo_validation_target_rows", ev.target_count),
                ("laredo_validation_expected_row_count", ev.source_count),
                ("laredo_validation_target_row_count", ev.target_count),
            ):
                self._families[name].values[labels] = value

    # -- fan-out (laredo_target_fanout.events, by name: the server does not import fan-out) ----
    @handles("FanoutClientConnected")
    def _fanout_client_connected(self, ev: Any) -> None:
        labels = self._p(ev.pipeline_id)
        self._inc(
            "laredo_fanout_client_connects_total",
            (*labels, ("mode", str(getattr(ev.mode, "value", ev.mode)))),
        )
        self._inc("laredo_fanout_clients_connected", labels)

    @handles("FanoutClientDisconnected")
    def _fanout_client_disconnected(self, ev: Any) -> None:
        labels = self._p(ev.pipeline_id)
        self._inc("laredo_fanout_client_disconnects_total", labels)
        self._inc("laredo_fanout_clients_connected", labels, -1)

    @handles("FanoutClientCaughtUp")
    def _fanout_client_caught_up(self, ev: Any) -> None:
        self._inc("laredo_fanout_client_caught_up_total", self._p(ev.pipeline_id))

    @handles("FanoutClientBackpressure")
    def _fanout_client_backpressure(self, ev: Any) -> None:
        self._inc("laredo_fanout_client_backpressure_total", self._p(ev.pipeline_id))

    @handles("FanoutSnapshotCreated")
    def _fanout_snapshot_created(self, ev: Any) -> None:
        labels = self._p(ev.pipeline_id)
        self._inc("laredo_fanout_snapshots_total", labels)
        self._set("laredo_fanout_snapshot_rows", labels, ev.rows)

    @handles("FanoutJournalPruned")
    def _fanout_journal_pruned(self, ev: Any) -> None:
        labels = self._p(ev.pipeline_id)
        self._inc("laredo_fanout_journal_pruned_total", labels, ev.pruned)
        self._set("laredo_fanout_journal_oldest_sequence", labels, ev.oldest_seq)


_PER_ACTION_ZEROS = (
    "laredo_changes_received_total",
    "laredo_changes_applied_total",
    "laredo_change_errors_total",
)
_PER_PIPELINE_ZEROS = (
    "laredo_change_batches_applied_total",
    "laredo_dead_letters_total",
    "laredo_rows_expired_total",
    "laredo_baselines_started_total",
    "laredo_baseline_rows_total",
)
_PER_SOURCE_ZEROS = (
    "laredo_source_connected",  # 0 until the source reports its connection
    "laredo_source_connects_total",
    "laredo_source_disconnects_total",
    "laredo_ack_advanced_total",
    "laredo_source_rebaseline_total",
)
_GLOBAL_ZEROS: tuple[tuple[str, LabelKey], ...] = (
    ("laredo_snapshots_started_total", ()),
    ("laredo_snapshots_total", (("outcome", "created"),)),
    ("laredo_snapshots_total", (("outcome", "failed"),)),
    ("laredo_snapshot_restores_total", (("outcome", "started"),)),
    ("laredo_snapshot_restores_total", (("outcome", "completed"),)),
)

_DEFS: tuple[tuple[str, str, str], ...] = (
    ("laredo_source_connected", "gauge", "1 while the source is connected."),
    ("laredo_source_connects_total", "counter", "Source connections."),
    ("laredo_source_disconnects_total", "counter", "Source disconnections."),
    ("laredo_pipeline_state", "gauge", "1 for the pipeline's current state."),
    (
        "laredo_pipeline_membership_changes_total",
        "counter",
        "Pipelines added to or removed from the running engine.",
    ),
    ("laredo_baselines_started_total", "counter", "Baselines started."),
    ("laredo_baseline_rows_loaded", "gauge", "Rows loaded by the current or last baseline."),
    ("laredo_baseline_rows_total", "counter", "Rows loaded by completed baselines."),
    ("laredo_baseline_duration_seconds", "gauge", "Duration of the last baseline."),
    ("laredo_source_rebaseline_total", "counter", "Re-baselines triggered by the source."),
    ("laredo_changes_received_total", "counter", "Changes taken from the buffer."),
    ("laredo_changes_applied_total", "counter", "Changes applied to the target."),
    ("laredo_change_batches_applied_total", "counter", "Batches of changes applied."),
    ("laredo_change_apply_duration_seconds", "histogram", "Time to apply one batch."),
    ("laredo_last_change_applied_timestamp_seconds", "gauge", "When a change was last applied."),
    ("laredo_change_errors_total", "counter", "Failed attempts to apply a change."),
    ("laredo_ack_advanced_total", "counter", "Times the source acknowledgement moved forward."),
    ("laredo_last_ack_timestamp_seconds", "gauge", "When the source ACK last moved."),
    ("laredo_pipeline_buffer_depth", "gauge", "Items waiting in the pipeline buffer."),
    ("laredo_pipeline_buffer_capacity", "gauge", "Capacity of the pipeline buffer."),
    ("laredo_buffer_policy_triggered_total", "counter", "Buffer-full policy activations."),
    ("laredo_snapshots_started_total", "counter", "Snapshots started."),
    ("laredo_snapshots_total", "counter", "Snapshots by outcome (created, failed)."),
    ("laredo_snapshot_duration_seconds", "histogram", "Time to take a snapshot."),
    ("laredo_snapshot_last_rows", "gauge", "Rows in the last snapshot."),
    ("laredo_snapshot_last_size_bytes", "gauge", "Size of the last snapshot."),
    ("laredo_snapshot_last_success_timestamp_seconds", "gauge", "When the last snapshot ended."),
    ("laredo_snapshot_restores_total", "counter", "Snapshot restores (started, completed)."),
    ("laredo_snapshot_restore_duration_seconds", "gauge", "Duration of the last restore."),
    ("laredo_schema_changes_total", "counter", "Schema changes seen."),
    ("laredo_source_lag_bytes", "gauge", "Source replication lag in bytes."),
    ("laredo_source_lag_seconds", "gauge", "Source replication lag in seconds."),
    ("laredo_dead_letters_total", "counter", "Changes written to the dead-letter store."),
    ("laredo_rows_expired_total", "counter", "Rows removed by TTL."),
    ("laredo_validation_runs_total", "counter", "Row-count validations by result."),
    ("laredo_validation_expected_rows", "gauge", "Rows the source holds at validation."),
    ("laredo_validation_target_rows", "gauge", "Rows the target holds at validation."),
    (
        "laredo_validation_expected_row_count",
        "gauge",
        "Deprecated Go Laredo name of laredo_validation_expected_rows (a gauge named *_count "
        "fails promtool's lint); removed in 0.3.",
    ),
    (
        "laredo_validation_target_row_count",
        "gauge",
        "Deprecated Go Laredo name of laredo_validation_target_rows (a gauge named *_count "
        "fails promtool's lint); removed in 0.3.",
    ),
    ("laredo_fanout_client_connects_total", "counter", "Fan-out client connections."),
    ("laredo_fanout_clients_connected", "gauge", "Connected fan-out clients."),
    ("laredo_fanout_client_disconnects_total", "counter", "Fan-out client disconnections."),
    ("laredo_fanout_client_caught_up_total", "counter", "Fan-out clients that caught up."),
    ("laredo_fanout_client_backpressure_total", "counter", "Fan-out client backpressure."),
    ("laredo_fanout_snapshots_total", "counter", "Fan-out snapshots created."),
    ("laredo_fanout_snapshot_rows", "gauge", "Rows in the last fan-out snapshot."),
    ("laredo_fanout_journal_pruned_total", "counter", "Fan-out journal entries pruned."),
    ("laredo_fanout_journal_oldest_sequence", "gauge", "Oldest fan-out journal sequence."),
    # read at scrape time by the server's collectors (runtime, scrape_metrics)
    ("laredo_ready", "gauge", "1 when the server is ready."),
    ("laredo_pipeline_rows", "gauge", "Rows currently held by the pipeline's target."),
    (
        "laredo_source_wal_retained_bytes",
        "gauge",
        "WAL the source's replication slot holds back on the database server.",
    ),
    (
        "laredo_snapshot_age_seconds",
        "gauge",
        "Seconds since the last complete snapshot (since the server started when none).",
    ),
    (
        "laredo_snapshot_schedule_seconds",
        "gauge",
        "The configured interval between scheduled snapshots.",
    ),
    ("laredo_dead_letter_backlog", "gauge", "Dead letters stored and not yet replayed or purged."),
)
