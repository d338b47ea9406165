"""laredo.config: the engine sections of a configuration mapping, validated and built."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import laredo
import pytest
from laredo.config import (
    EngineConfig,
    EngineSettings,
    PluginSpec,
    build_engine,
    check_engine_config,
    load_engine_config,
)
from laredo.engine_settings import SNAPSHOT_SETTINGS
from laredo.testing import RecordingTarget, TestSource, columns
from laredo.types import BufferPolicy, ErrorPolicy, ValidationAction
from pydantic import BaseModel, ConfigDict

USERS = laredo.TableIdentifier("public", "users")


class ModelTargetOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")
    key_fields: list[str] = []


class UsersSource(TestSource):
    closed = 0

    def close(self) -> None:
        self.closed += 1
        super().close()


class ConfigPlugin:
    """A ``users`` source and a target whose factory takes its validated options model."""

    def __init__(self) -> None:
        self.sources: list[UsersSource] = []
        self.options: list[ModelTargetOptions] = []

    @laredo.hookimpl
    def laredo_register_sources(self, registry: Any) -> None:
        class Opts(BaseModel):
            model_config = ConfigDict(extra="forbid")
            rows: int = 3
            password: str | None = None

        def make(rows: int = 3, password: str | None = None) -> UsersSource:
            src = UsersSource()
            src.add_table(
                USERS,
                columns("id", "email"),
                [{"id": i, "email": f"u{i}@x"} for i in range(1, rows + 1)],
            )
            self.sources.append(src)
            return src

        registry.add("cfg-test", make, options=Opts)

    @laredo.hookimpl
    def laredo_register_targets(self, registry: Any) -> None:
        def make(options: ModelTargetOptions) -> RecordingTarget:
            self.options.append(options)
            return RecordingTarget(key_fields=options.key_fields or None)

        registry.add("model-recording", make, options=ModelTargetOptions, takes_options=True)


@pytest.fixture
def plugin() -> Iterator[ConfigPlugin]:
    pm = laredo.get_plugin_manager()
    p = ConfigPlugin()
    pm.register(p, name="config-test-plugin")
    yield p
    pm.unregister(p)


def tree(**target: Any) -> dict[str, Any]:
    return {
        "sources": {"src": {"type": "cfg-test", "rows": 4}},
        "tables": [
            {"source": "src", "table": "users", "targets": [{"type": "model-recording", **target}]}
        ],
    }


def test_pipeline_settings_and_plugins_reach_the_engine(
    plugin: ConfigPlugin, tmp_path: Path
) -> None:
    cfg = tree(
        id="u1",
        key_fields=["id"],
        buffer={"max_size": 5, "policy": "drop_oldest"},
        error_handling={"max_retries": 2, "on_persistent_failure": "dead_letter"},
        ttl={"field": "exp", "check_interval": "1m"},
        validation={"interval": "30s", "action": "fail"},
        filters=[{"type": "field-prefix", "field": "email", "prefix": "u"}],
        transforms=[{"type": "drop-fields", "fields": ["x"]}],
    )
    cfg["snapshot"] = {"store": "local", "store_config": {"path": str(tmp_path)}, "schedule": "1h"}
    cfg["dead_letter"] = {"store": "memory"}
    built = build_engine(load_engine_config(cfg))
    (p,) = built.engine.pipeline_configs
    assert (p.id, p.buffer_size, p.buffer_policy) == ("u1", 5, BufferPolicy.DROP_OLDEST)
    assert (p.max_retries, p.error_policy) == (2, ErrorPolicy.DEAD_LETTER)
    assert (p.ttl_field, p.ttl_scan_interval) == ("exp", 60.0)
    assert (p.validation_interval, p.validation_action) == (30.0, ValidationAction.FAIL)
    assert len(p.filters) == 1 and len(p.transforms) == 1
    assert built.engine.snapshot_schedule == 3600.0
    assert built.dead_letter_store is not None and built.snapshot_store is not None
    # the takes_options factory got the validated model, and the engine runs what was built
    assert plugin.options == [ModelTargetOptions(key_fields=["id"])]
    built.engine.start()
    try:
        assert built.engine.await_ready(10)
        assert isinstance(p.target, RecordingTarget) and len(p.target.rows()) == 4
    finally:
        built.engine.stop()


def test_every_snapshot_key_reaches_its_engine_keyword(
    plugin: ConfigPlugin, tmp_path: Path
) -> None:
    """The ``snapshot`` section maps to ``Engine`` keywords by its declarations; the settings
    that need a store fall back to their defaults without one."""
    cfg = tree()
    cfg["snapshot"] = {
        "store": "local",
        "store_config": {"path": str(tmp_path)},
        "schedule": "2h",
        "on_shutdown": True,
        "retention": {"keep_count": 4, "max_age": "1d"},
        "user_meta": {"release": "r7"},
        "on_restore_mismatch": "reject",
    }
    engine = build_engine(load_engine_config(cfg)).engine
    given = {
        "snapshot_schedule": 7200.0,
        "snapshot_retention": 4,
        "snapshot_max_age": 86400.0,
        "snapshot_on_shutdown": True,
        "snapshot_user_meta": {"release": "r7"},
        "snapshot_meta_policy": "reject",
    }
    assert set(given) == {s.keyword for s in SNAPSHOT_SETTINGS}
    assert {k: getattr(engine, k) for k in given} == given

    for key in ("store", "schedule", "on_shutdown"):  # the last two are refused without one
        del cfg["snapshot"][key]
    storeless = build_engine(load_engine_config(cfg)).engine
    for s in SNAPSHOT_SETTINGS:
        expected = "reject" if s.keyword == "snapshot_meta_policy" else s.default
        assert getattr(storeless, s.keyword) == expected, s.keyword


def test_unknown_keys_and_bad_values_are_reported_together_with_key_paths(
    plugin: ConfigPlugin,
) -> None:
    cfg = tree(key_feilds=["id"], buffer={"max_size": -1, "polcy": "block"})
    cfg["sources"]["src"].update(rowz=2, password=["hunter2"])
    cfg["tables"][0]["targets"][0]["ttl"] = {"field": "exp", "check_interval": "soon"}
    cfg["tables"].append({"source": "src", "table": "t", "targets": [{"type": "no-such"}]})
    cfg["grpc"] = {"port": 1}
    with pytest.raises(laredo.ConfigError) as ei:
        load_engine_config(cfg)
    problems = ei.value.problems
    text = "\n".join(problems)
    expected = (
        "grpc: unknown key (allowed here: sources, tables, snapshot, dead_letter)",
        "tables.0.targets.0.buffer.max_size: Input should be greater than 0 (got -1)",
        "tables.0.targets.0.buffer.polcy: unknown key; did you mean 'policy'? (allowed here: "
        "max_size, policy)",
        "tables.0.targets.0.ttl.check_interval: Value error, invalid duration 'soon'",
        "tables.0.targets.0.key_feilds: unknown option",
        "sources.src.rowz: unknown option",
        "sources.src.password: Input should be a valid string",
        "tables.1.targets.0.type: unknown target type 'no-such'",
    )
    for start in expected:
        assert any(p.startswith(start) for p in problems), (start, text)
    assert len(problems) == len(expected), text
    assert "hunter2" not in text  # a secret key's value is never echoed
    assert plugin.sources == []  # nothing was built


def test_references_between_sections_are_checked(plugin: ConfigPlugin) -> None:
    cfg = tree(error_handling={"on_persistent_failure": "dead_letter"})
    cfg["tables"] += [
        {"source": "other", "table": "users", "targets": [{"type": "model-recording"}]},
        {"source": "src", "table": "users", "targets": [{"type": "model-recording"}]},
    ]
    cfg["snapshot"] = {"on_shutdown": True}
    model, problems = check_engine_config(cfg, EngineConfig)
    assert model is not None
    assert [str(p) for p in problems] == [
        "tables.1.source: unknown source 'other' (defined sources: src)",
        "snapshot.store: schedule/on_shutdown need a store "
        "(e.g. store = local, store_config { path = /var/lib/laredo })",
        "tables.0.targets.0.error_handling.on_persistent_failure: dead_letter needs a "
        "dead_letter { store = ... } section",
        "tables.2.targets.0: pipeline id 'src:public.users:model-recording' also used by "
        "tables.0.targets.0: give one of them a distinct `id`",
    ]


def test_cross_section_rules_read_the_same_in_both_front_ends(plugin: ConfigPlugin) -> None:
    """One rule, two wordings: a table's targets report its unknown source once; the Python
    API reports the same four rules in its own keys."""
    cfg = tree(error_handling={"on_persistent_failure": "dead_letter"})
    cfg["tables"][0]["source"] = "other"
    cfg["tables"][0]["targets"].append({"type": "model-recording", "id": "second"})
    model, problems = check_engine_config(cfg, EngineConfig)
    assert model is not None
    assert [str(p) for p in problems][:1] == [
        "tables.0.source: unknown source 'other' (defined sources: src)"
    ]
    assert sum("unknown source" in str(p) for p in problems) == 1
    src = TestSource()
    with pytest.raises(laredo.ConfigError) as ei:
        laredo.Engine(
            sources={"s": src},
            pipelines=[
                laredo.Pipeline("nope", laredo.Table("public", "u"), RecordingTarget()),
                laredo.Pipeline("s", laredo.Table("public", "u"), RecordingTarget(), id="x"),
                laredo.Pipeline(
                    "s",
                    laredo.Table("public", "v"),
                    RecordingTarget(),
                    id="x",
                    error_policy="dead_letter",
                ),
            ],
            snapshot_on_shutdown=True,
        )
    assert ei.value.problems == [
        "pipelines[0].source_id: unknown source 'nope' (sources: s)",
        "snapshot_schedule/snapshot_on_shutdown: need a snapshot_store "
        "(e.g. laredo.snapshot_store('local', path=...))",
        "pipelines[2].error_policy: 'dead_letter' needs a dead_letter_store",
        "pipelines[2]: duplicate pipeline id 'x'; give it a distinct id=",
    ]


class RunnerConfig(EngineConfig):
    """A runner's own section on top of the engine sections."""

    observers: list[PluginSpec] = []
    grace: float = 30.0

    def engine_settings(self) -> EngineSettings:
        specs = tuple((f"observers.{k}", s) for k, s in enumerate(self.observers))
        return EngineSettings(observers=specs, shutdown_timeout=self.grace, lag_interval=2.0)


def test_runner_sections_supply_engine_settings_and_failures_close_sources(
    plugin: ConfigPlugin,
) -> None:
    cfg = tree()
    model, problems = check_engine_config(
        {**cfg, "grace": 3, "observers": [{"type": "null"}]}, RunnerConfig
    )
    assert model is not None and problems == []
    engine = build_engine(model, observers=[laredo.RecordingObserver()]).engine
    assert (engine.shutdown_timeout, engine.lag_interval) == (3.0, 2.0)
    # a plugin that cannot be created: every problem at once, sources already made are closed
    bad = RunnerConfig.model_validate({**cfg, "observers": [{"type": "nope"}]})
    with pytest.raises(laredo.ConfigError) as ei:
        build_engine(bad)
    assert ei.value.problems == [ei.value.problems[0]]
    assert ei.value.problems[0].startswith("observers.0: unknown observer type 'nope'")
    assert plugin.sources[-1].closed == 1
