"""``run_spark``: the Spark runner over the same configuration as ``laredo serve``.

The config is the dict the HOCON loader produces (``laredo_server.config``)::

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

With ``laredo-server`` installed the whole tree is validated and built by its loader (every
plugin, pipeline ids ``source:schema.table:type``, unknown keys rejected); without it a minimal
builder reads ``sources``, ``tables`` (targets with filters/transforms) and ``snapshot``.
``spark`` is the runner's own section (``laredo serve`` ignores it only if its loader allows
it: pass it separately as ``spark_options`` otherwise).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from laredo.errors import ConfigError
from laredo.pipeline import Pipeline
from laredo.types import TableIdentifier

from ._session import spark_session
from .pg import BaselineResult, spark_baseline

logger = logging.getLogger(__name__)

__all__ = ["Plan", "build_plan", "run_spark"]


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


def _minimal_build(tree: Mapping[str, Any]) -> Plan:
    import laredo

    problems: list[str] = []
    sources: dict[str, Any] = {}
    cfgs: dict[str, dict[str, Any]] = {}
    for sid, spec in dict(tree.get("sources") or {}).items():
        spec = dict(spec)
        kind = spec.pop("type", None)
        if not kind:
            problems.append(f"sources.{sid}.type: missing")
            continue
        cfgs[sid] = {"type": kind, **spec}
        try:
            sources[sid] = laredo.source(kind, **spec)
        except ConfigError as exc:
            problems.extend(exc.problems)
    pipelines: list[Pipeline] = []
    for i, t in enumerate(tree.get("tables") or []):
        t = dict(t)
        table = TableIdentifier(t.get("schema", "public"), t["table"])
        for j, tgt in enumerate(t.get("targets") or []):
            tgt = dict(tgt)
            where = f"tables.{i}.targets.{j}"
            ttype = tgt.pop("type")
            pid = tgt.pop("id", None) or f"{t['source']}:{table}:{ttype}"
            filters = [dict(f) for f in tgt.pop("filters", [])]
            transforms = [dict(x) for x in tgt.pop("transforms", [])]
            for key in ("buffer", "error_handling", "ttl", "validation"):
                tgt.pop(key, None)
            try:
                target = laredo.target(ttype, **tgt)
            except ConfigError as exc:
                problems.extend(f"{where}: {p}" for p in exc.problems)
                continue
            pipelines.append(
                Pipeline(
                    t["source"],
                    table,
                    target,
                    filters=[laredo.filter(f.pop("type"), **f) for f in filters],
                    transforms=[laredo.transform(x.pop("type"), **x) for x in transforms],
                    id=pid,
                    target_type=ttype,
                )
            )
    if problems:
        raise ConfigError(problems)
    store = serializer = None
    snap = tree.get("snapshot") or {}
    if snap.get("store"):
        store = laredo.snapshot_store(snap["store"], **dict(snap.get("store_config") or {}))
        serializer = laredo.serializer(
            snap.get("serializer", "jsonl"), **dict(snap.get("serializer_config") or {})
        )
    return Plan(sources, cfgs, pipelines, store, serializer)


def build_plan(config: Mapping[str, Any]) -> Plan:
    """Build sources, pipelines and the snapshot store from a config dict."""
    tree = {k: v for k, v in config.items() if k != "spark"}
    spark_opts = dict(config.get("spark") or {})
    cfgs = {sid: dict(s) for sid, s in dict(tree.get("sources") or {}).items()}
    try:
        from laredo_server.config import ServerConfig, build_engine
    except ImportError:
        plan = _minimal_build(tree)
    else:
        import pydantic

        try:
            model = ServerConfig.model_validate(tree)
        except pydantic.ValidationError as exc:
            raise ConfigError([str(e["msg"]) + f" at {e['loc']}" for e in exc.errors()]) from None
        built = build_engine(model)
        eng = built.engine
        plan = Plan(
            dict(eng.sources),
            cfgs,
            list(eng.pipeline_configs),
            built.snapshot_store,
            built.snapshot_serializer,
        )
    plan.source_configs = cfgs
    plan.spark = spark_opts
    plan.user_meta = dict((tree.get("snapshot") or {}).get("user_meta") or {})
    return plan


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
) -> list[BaselineResult]:
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
    if plan.snapshot_store is None:
        raise ConfigError(
            "run_spark: no snapshot store: configure snapshot { store = local, store_config "
            "{ path = ... } } so the baseline has somewhere to go"
        )
    opts = {**plan.spark, **dict(spark_options or {})}
    session = spark or spark_session(
        master or opts.get("master", "local[*]"), "laredo-spark", opts.get("conf")
    )
    parts = partitions or opts.get("partitions")
    results = []
    for sid, src in plan.sources.items():
        pipes = [p for p in plan.pipelines if p.source_id == sid]
        if not pipes:
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
