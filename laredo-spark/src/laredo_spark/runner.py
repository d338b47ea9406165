"""``run_spark``: the Spark runner over the configuration format of ``laredo serve``.

The config is a mapping of the engine sections (:mod:`laredo.config`) plus the runner's own
``spark`` section, e.g. the tree a HOCON loader produces::

    {"sources": {"pg": {"type": "postgresql", "connection": "...", "slot_mode": "stateful",
                        "slot_name": "laredo_slot", "publication": {"create": true}}},
     "tables": [{"source": "pg", "schema": "public", "table": "users",
                 "targets": [{"type": "indexed-memory", "lookup_fields": ["email"],
                              "filters": [{"type": "field-equals", "field": "active",
                                           "value": true}],
                              "transforms": [{"type": "drop-fields", "fields": ["pw"]}]}]}],
     "snapshot": {"store": "local", "store_config": {"path": "/data/snapshots"},
                  "serializer": "jsonl"},
     "spark": {"master": "local[*]", "partitions": 8, "conf": {"spark.executor.memory": "4g"}}}

It is validated and built by :mod:`laredo.config`, the same code ``laredo serve`` uses (every
plugin, pipeline ids ``source:schema.table:type``, unknown keys rejected, every problem with
its key path). Without ``snapshot.serializer`` the baseline is written as Parquet (the engine
restores any format; its own snapshots keep its default). Keys this runner cannot honour yet
are rejected by name, never ignored:
``buffer``, ``error_handling``, ``ttl`` and ``validation`` of a table or target, the snapshot
``schedule``, ``on_shutdown``, ``retention`` and ``on_restore_mismatch``, ``dead_letter`` and
the server's sections (``grpc``, ``health``, ``observability``, ``shutdown``). Keep them in the
configuration of ``laredo serve`` (a HOCON ``include`` shares the rest).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from laredo.config import (
    EngineConfig,
    Problem,
    build_engine,
    check_engine_config,
    structure_problems,
)
from laredo.errors import ConfigError
from laredo.pipeline import Pipeline
from pydantic import BaseModel, ConfigDict, Field, field_validator

from ._session import spark_session
from .delta_baseline import DeltaBaselineResult, is_delta_pipeline, spark_delta_baseline
from .pg.baseline import BaselineResult, spark_baseline

logger = logging.getLogger(__name__)

__all__ = ["UNSUPPORTED_KEYS", "Plan", "SparkSection", "build_plan", "flatten_conf", "run_spark"]

UNSUPPORTED_KEYS: dict[str, frozenset[str]] = {
    "": frozenset({"dead_letter", "grpc", "health", "observability", "shutdown"}),
    "snapshot": frozenset({"schedule", "on_shutdown", "retention", "on_restore_mismatch"}),
    "tables": frozenset({"ttl", "validation"}),
    "targets": frozenset({"buffer", "error_handling", "ttl", "validation"}),
}
"""Keys the Spark runner does not honour, by the section holding them (``""``: top level;
``tables``: each table; ``targets``: each target of a table)."""


def flatten_conf(conf: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    """Spark settings as Spark takes them: ``{"spark.executor.memory": "4g"}``.

    HOCON gives ``conf { spark.executor.memory = 4g }`` as nested objects, and a quoted key
    (``"spark.executor.memory" = 4g``) with its quotes kept: both become the dotted key.
    Values become strings (booleans ``true``/``false``)."""
    out: dict[str, str] = {}
    for key, value in conf.items():
        name = str(key)
        if len(name) >= 2 and name[0] == name[-1] == '"':
            name = name[1:-1]
        full = f"{prefix}{name}"
        if isinstance(value, Mapping):
            out.update(flatten_conf(value, f"{full}."))
        elif isinstance(value, bool):
            out[full] = "true" if value else "false"
        elif value is None:
            continue
        else:
            out[full] = str(value)
    return out


class SparkSection(BaseModel):
    """The runner's own ``spark { master, partitions, conf }`` section."""

    model_config = ConfigDict(extra="forbid")

    master: str | None = Field(None, description="master URL (default local[*])")
    partitions: int | None = Field(None, ge=1, description="least ctid slices per table")
    conf: dict[str, str] = Field(default_factory=dict, description="Spark settings")

    @field_validator("conf", mode="before")
    @classmethod
    def _flatten(cls, value: Any) -> Any:
        return flatten_conf(value) if isinstance(value, Mapping) else value


@dataclass
class Plan:
    """What a config describes, built with the installed plugins."""

    sources: dict[str, Any]
    source_configs: dict[str, dict[str, Any]]
    pipelines: list[Pipeline]
    snapshot_store: Any = None
    serializer: Any = None
    spark: dict[str, Any] = field(default_factory=dict)
    user_meta: dict[str, Any] = field(default_factory=dict)
    """``snapshot.user_meta``: written into the snapshot so ``on_restore_mismatch`` passes."""


def _unsupported(tree: Mapping[str, Any]) -> tuple[list[str], dict[str, Any]]:
    """Problems naming every key the runner cannot honour, and ``tree`` without them (so the
    rest is validated without reporting those keys twice)."""
    problems: list[str] = []

    def strip(section: Any, kind: str, path: str) -> Any:
        if not isinstance(section, Mapping):
            return section
        out = {}
        for key, value in section.items():
            if key in UNSUPPORTED_KEYS[kind]:
                problems.append(
                    f"not supported by the Spark runner: {path}{key}; remove it or run locally"
                )
            else:
                out[key] = value
        return out

    rest = strip(tree, "", "")
    if "snapshot" in rest:
        rest["snapshot"] = strip(rest["snapshot"], "snapshot", "snapshot.")
    tables = rest.get("tables")
    if isinstance(tables, list):
        rest["tables"] = tables = [strip(t, "tables", f"tables.{i}.") for i, t in enumerate(tables)]
        for i, t in enumerate(tables):
            targets = t.get("targets") if isinstance(t, Mapping) else None
            if isinstance(targets, list):
                t["targets"] = [
                    strip(x, "targets", f"tables.{i}.targets.{j}.") for j, x in enumerate(targets)
                ]
    return problems, rest


def _serializer_given(tree: Mapping[str, Any]) -> bool:
    snap = tree.get("snapshot")
    return isinstance(snap, Mapping) and snap.get("serializer") is not None


def build_plan(config: Mapping[str, Any]) -> Plan:
    """Validate ``config`` and build its sources, pipelines and snapshot store.

    Raises ``ConfigError`` listing every problem: keys the Spark runner does not honour
    (:data:`UNSUPPORTED_KEYS`), unknown keys, bad values and plugin options.
    """
    tree = {k: v for k, v in config.items() if k != "spark"}
    problems, rest = _unsupported(tree)
    spark, found = structure_problems(SparkSection, config.get("spark") or {})
    problems += [str(Problem(("spark", *p.path), p.message)) for p in found]
    model, found = check_engine_config(rest, EngineConfig)
    problems += [str(p) for p in found]
    if problems or model is None or spark is None:
        raise ConfigError(problems or ["invalid configuration"])
    built = build_engine(model)
    engine = built.engine
    return Plan(
        sources=dict(engine.sources),
        source_configs={sid: {"type": s.type, **s.options()} for sid, s in model.sources.items()},
        pipelines=list(engine.pipeline_configs),
        snapshot_store=built.snapshot_store,
        # no serializer configured: the Spark runner's own default (Parquet), not the engine's
        serializer=built.snapshot_serializer if _serializer_given(tree) else None,
        spark=spark.model_dump(exclude_defaults=True),
        user_meta=dict(model.snapshot.user_meta) if model.snapshot else {},
    )


def run_spark(
    config: Mapping[str, Any] | None = None,
    *,
    pipelines: Sequence[Pipeline] | None = None,
    sources: Mapping[str, Any] | None = None,
    snapshot_store: Any = None,
    serializer: Any = None,
    spark: Any = None,
    master: str | None = None,
    partitions: int | None = None,
    spark_options: Mapping[str, Any] | None = None,
) -> list[BaselineResult | DeltaBaselineResult]:
    """Run the parallel baseline of every PostgreSQL source in ``config`` (or in the given
    ``sources``/``pipelines``) on Spark and write one snapshot per source.

    Start ``laredo serve`` (or a ``laredo.Engine``) on the same config afterwards: it restores
    the snapshots and streams on from each slot's consistent point. For streaming on Spark use
    ``spark.readStream.format("laredo")`` with :func:`laredo_spark.stream_options` and the
    sinks in :mod:`laredo_spark.stream`.
    """
    if config is not None:
        plan = build_plan(config)
    else:
        if not pipelines or not sources:
            raise ConfigError("run_spark: give a config dict, or sources and pipelines")
        plan = Plan(dict(sources), {}, list(pipelines))
    if snapshot_store is not None:
        plan.snapshot_store = snapshot_store
    if serializer is not None:
        plan.serializer = serializer
    if plan.snapshot_store is None and not all(is_delta_pipeline(p) for p in plan.pipelines):
        raise ConfigError(
            "run_spark: no snapshot store: configure snapshot { store = local, store_config "
            "{ path = ... } } so the baseline has somewhere to go"
        )
    opts = {**plan.spark, **dict(spark_options or {})}
    session = spark or spark_session(
        master or opts.get("master", "local[*]"), "laredo-spark", opts.get("conf")
    )
    parts = partitions or opts.get("partitions")
    results: list[BaselineResult | DeltaBaselineResult] = []
    for sid, src in plan.sources.items():
        pipes = [p for p in plan.pipelines if p.source_id == sid]
        if not pipes:
            continue
        if any(is_delta_pipeline(p) for p in pipes):  # executors write the Delta version
            results.append(
                spark_delta_baseline(session, src, pipes, source_id=sid, partitions=parts)
            )
            continue
        results.append(
            spark_baseline(
                session,
                src,
                pipes,
                snapshot_store=plan.snapshot_store,
                serializer=plan.serializer,
                source_id=sid,
                partitions=parts,
                user_meta=plan.user_meta,
            )
        )
    return results
