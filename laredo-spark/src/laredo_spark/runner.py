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

It is validated by the loader of ``laredo serve`` when laredo-server is installed
(``laredo-spark[cli]``: the server's own models, so the file ``laredo serve`` accepts is
accepted here, key for key) and built by :mod:`laredo.config` (every plugin, pipeline ids
``source:schema.table:type``, unknown keys rejected, every problem with its key path). Without
laredo-server only the engine sections and ``spark`` are known. Sections and keys only the
serving process uses (the server's ``grpc``, ``health``, ``observability``, ``shutdown``, and
the streaming phase's ``buffer``, ``error_handling``, ``ttl``, ``validation``, the snapshot
``schedule``, ``on_shutdown``, ``retention``, ``on_restore_mismatch``, ``dead_letter``) are
validated as usual and left to ``laredo serve``: one INFO line names them. Without
``snapshot.serializer`` the baseline is written as Parquet (the engine restores any format; its
own snapshots keep its default).
"""

from __future__ import annotations

import dataclasses
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
from laredo.engine_settings import serve_only_keys as engine_serve_only_keys
from laredo.errors import ConfigError
from laredo.pipeline import Pipeline
from laredo.plugins import registry

from ._session import spark_session
from .delta_baseline import DeltaBaselineResult, is_delta_pipeline, spark_delta_baseline
from .pg.baseline import BaselineResult, spark_baseline
from .section import SparkSection, flatten_conf

logger = logging.getLogger(__name__)

__all__ = ["SERVE_ONLY_KEYS", "Plan", "SparkSection", "build_plan", "flatten_conf", "run_spark"]

SERVE_ONLY_KEYS: dict[str, frozenset[str]] = engine_serve_only_keys()
"""Keys of the engine sections only the streaming phase (``laredo serve``) uses, by the section
holding them (``""``: top level; ``tables``: each table; ``targets``: each target), from the
``serve_only`` flags of :mod:`laredo.engine_settings` and :mod:`laredo.pipeline_settings`. The
server's own sections are every top-level section of its model that the engine's lacks."""


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


def serve_only_keys(tree: Mapping[str, Any], server_sections: frozenset[str]) -> list[str]:
    """Key paths of ``tree`` that only ``laredo serve`` uses (:data:`SERVE_ONLY_KEYS` and the
    server's sections), in file order."""
    found: list[str] = []

    def scan(section: Any, kind: str, path: str) -> None:
        if isinstance(section, Mapping):
            found.extend(f"{path}{k}" for k in section if k in SERVE_ONLY_KEYS[kind])

    found.extend(k for k in tree if k in server_sections)
    scan(tree, "", "")
    scan(tree.get("snapshot"), "snapshot", "snapshot.")
    tables = tree.get("tables")
    for i, t in enumerate(tables if isinstance(tables, list) else []):
        scan(t, "tables", f"tables.{i}.")
        targets = t.get("targets") if isinstance(t, Mapping) else None
        for j, x in enumerate(targets if isinstance(targets, list) else []):
            scan(x, "targets", f"tables.{i}.targets.{j}.")
    return found


def _validate(
    tree: Mapping[str, Any], loaded: Any
) -> tuple[EngineConfig | None, list[str], frozenset[str]]:
    """The file validated as ``laredo serve`` validates it (laredo-server's own loader and
    models, when installed), its problems, and the server's section names."""
    try:
        from laredo_server.config import (  # noqa: PLC0415 - lazy: optional (laredo-spark[cli])
            LoadedConfig,
            ServerConfig,
            validate_tree,
        )
    except ImportError:
        engine_tree = {k: v for k, v in tree.items() if k != "spark"}
        model, found = check_engine_config(engine_tree, EngineConfig)
        return model, [str(p) for p in found], frozenset()
    sections = frozenset(ServerConfig.model_fields) - set(EngineConfig.model_fields)
    if not isinstance(loaded, LoadedConfig):
        loaded = LoadedConfig(tree=dict(tree))
    if "spark" not in registry("config_section").names():  # plugins not loaded: checked here
        loaded = dataclasses.replace(
            loaded, tree={k: v for k, v in loaded.tree.items() if k != "spark"}
        )
    try:
        return validate_tree(loaded), [], sections
    except ConfigError as exc:
        return None, list(exc.problems), sections


def _serializer_given(tree: Mapping[str, Any]) -> bool:
    snap = tree.get("snapshot")
    return isinstance(snap, Mapping) and snap.get("serializer") is not None


def build_plan(config: Mapping[str, Any], *, loaded: Any = None) -> Plan:
    """Validate ``config`` as ``laredo serve`` does, plus its ``spark`` section, and build its
    sources, pipelines and snapshot store (only what the baseline uses: no dead-letter store,
    no observers).

    Raises ``ConfigError`` listing every problem: unknown keys, bad values and plugin options.
    ``loaded`` (laredo-server's ``LoadedConfig`` of the file) adds ``file:line`` to them. Keys
    only ``laredo serve`` uses are logged at INFO, once.
    """
    tree = dict(config)
    model, problems, server_sections = _validate(tree, loaded)
    spark, found = structure_problems(SparkSection, tree.get("spark") or {})
    if not (server_sections and "spark" in registry("config_section").names()):
        # the server's validation did not check it already (its registered section)
        problems += [str(Problem(("spark", *p.path), p.message)) for p in found]
    if problems or model is None or spark is None:
        raise ConfigError(problems or ["invalid configuration"])
    left = serve_only_keys(tree, server_sections)
    if left:
        logger.info(
            "left to laredo serve (the Spark baseline does not use them): %s", ", ".join(left)
        )
    engine_only = EngineConfig.model_construct(
        **{k: getattr(model, k) for k in EngineConfig.model_fields if k != "dead_letter"}
    )
    built = build_engine(engine_only)
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
    loaded: Any = None,
    pipelines: Sequence[Pipeline] | None = None,
    sources: Mapping[str, Any] | None = None,
    snapshot_store: Any = None,
    serializer: Any = None,
    spark: Any = None,
    master: str | None = None,
    partitions: int | None = None,
    spark_options: Mapping[str, Any] | None = None,
    chunk_rows: int | None = None,
) -> list[BaselineResult | DeltaBaselineResult]:
    """Run the parallel baseline of every PostgreSQL source in ``config`` (or in the given
    ``sources``/``pipelines``) on Spark and write one snapshot per source.

    Start ``laredo serve`` (or a ``laredo.Engine``) on the same config afterwards: it restores
    the snapshots and streams on from each slot's consistent point. ``loaded`` is
    laredo-server's ``LoadedConfig`` of the file ``config`` came from (problems then name
    ``file:line``). For streaming on Spark use
    ``spark.readStream.format("laredo")`` with :func:`laredo_spark.stream_options` and the
    sinks in :mod:`laredo_spark.stream`. ``chunk_rows`` overrides every source's
    ``baseline`` mode: ``N`` reads resumable key-range chunks of ``N`` rows, ``0`` one pass.
    """
    if chunk_rows is not None and (type(chunk_rows) is not int or chunk_rows < 0):
        raise ConfigError(
            f"run_spark: chunk_rows must be an integer >= 0 (got {chunk_rows!r}; 0: one pass)"
        )
    if config is not None:
        plan = build_plan(config, loaded=loaded)
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
                spark_delta_baseline(
                    session, src, pipes, source_id=sid, partitions=parts, chunk_rows=chunk_rows
                )
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
                chunk_rows=chunk_rows,
            )
        )
    return results
