"""Each pipeline and engine setting is declared once (laredo.pipeline_settings,
laredo.engine_settings): the Python API, the configuration models and the config-to-keyword
mappings all agree with the declaration."""

from __future__ import annotations

import dataclasses
import datetime
import enum
import inspect
import typing
from typing import Any

import pydantic
import pytest
from laredo.config import (
    BufferConfig,
    EngineSettings,
    ErrorHandlingConfig,
    SnapshotConfig,
    TableBaselineConfig,
    TableConfig,
    TargetConfig,
    TtlConfig,
    ValidationConfig,
)
from laredo.config.build import Maker, build_pipeline
from laredo.engine import Engine
from laredo.engine_settings import (
    ENGINE_SETTINGS,
    RUNNER_SETTINGS,
    SNAPSHOT_SETTINGS,
    serve_only_keys,
)
from laredo.errors import ConfigError
from laredo.pipeline import Pipeline
from laredo.pipeline_settings import BASELINE_CHUNK_ROWS, BUFFER_SIZE, MAX_RETRIES, SETTINGS
from laredo.testing import RecordingTarget, TestSource

SECTIONS: dict[str, type[pydantic.BaseModel]] = {
    "baseline": TableBaselineConfig,
    "buffer": BufferConfig,
    "error_handling": ErrorHandlingConfig,
    "ttl": TtlConfig,
    "validation": ValidationConfig,
}


@pytest.mark.parametrize("setting", SETTINGS, ids=lambda s: s.keyword)
def test_python_and_config_defaults_and_docs_come_from_the_declaration(setting: Any) -> None:
    field = {f.name: f for f in dataclasses.fields(Pipeline)}[setting.keyword]
    default = field.default
    assert (default.value if isinstance(default, enum.Enum) else default) == setting.default
    model_field = SECTIONS[setting.section].model_fields[setting.key]
    if not model_field.is_required():
        assert model_field.default == setting.default
    assert setting.doc in (model_field.description or "")


@pytest.mark.parametrize(
    ("setting", "bad"),
    [(BUFFER_SIZE, 0), (MAX_RETRIES, -1), (BASELINE_CHUNK_ROWS, 0), (BASELINE_CHUNK_ROWS, 10**8)],
)
def test_bounds_hold_in_both_homes(setting: Any, bad: int) -> None:
    pipe = Pipeline("src", "public.t", RecordingTarget(), **{setting.keyword: bad})
    (problem,) = pipe.problems(0)
    assert problem.startswith(f"pipelines[0].{setting.keyword}: must be")
    with pytest.raises(pydantic.ValidationError, match=setting.key):
        SECTIONS[setting.section](**{setting.key: bad})


def test_every_config_key_reaches_its_pipeline_keyword() -> None:
    given = {
        "buffer_size": 7,
        "buffer_policy": "drop_oldest",
        "error_policy": "stop_all",
        "max_retries": 9,
        "retry_backoff": 0.5,
        "retry_max_backoff": 9.0,
        "ttl_field": "expires",
        "ttl_scan_interval": 30.0,
        "validation_action": "fail",
        "validation_interval": 60.0,
        "baseline_mode": "chunked",
        "baseline_chunk_rows": 500,
    }
    assert set(given) == {s.keyword for s in SETTINGS}
    target: dict[str, Any] = {"type": "memory"}
    table_sections: dict[str, Any] = {}
    for s in SETTINGS:
        home = target if s.target_level else table_sections
        home.setdefault(s.section, {})[s.key] = given[s.keyword]
    table = TableConfig.model_validate(
        {"source": "src", "schema": "public", "table": "t", "targets": [target], **table_sections}
    )
    pipe = build_pipeline(Maker(), table, table.targets[0], "tables.0.targets.0")
    for s in SETTINGS:
        value = getattr(pipe, s.keyword)
        assert (value.value if isinstance(value, enum.Enum) else value) == given[s.keyword], s


def test_a_table_section_applies_to_its_targets_and_the_targets_own_wins() -> None:
    table = TableConfig.model_validate(
        {
            "source": "src",
            "table": "t",
            "ttl": {"field": "table_exp", "check_interval": 60},
            "validation": {"interval": 30, "action": "fail"},
            "targets": [{"type": "memory"}, {"type": "memory", "ttl": {"field": "own_exp"}}],
        }
    )
    first, second = (
        build_pipeline(Maker(), table, tgt, f"tables.0.targets.{j}")
        for j, tgt in enumerate(table.targets)
    )
    assert (first.ttl_field, first.ttl_scan_interval) == ("table_exp", 60.0)
    assert (first.validation_interval, first.validation_action) == (30.0, "fail")
    assert (second.ttl_field, second.ttl_scan_interval) == ("own_exp", None)
    assert (second.validation_interval, second.validation_action) == (30.0, "fail")


def _snapshot_field(setting: Any) -> Any:
    model: Any = SnapshotConfig
    for part in setting.section.split(".")[1:]:
        model = model.model_fields[part].annotation
    return model.model_fields[setting.key]


@pytest.mark.parametrize("setting", SNAPSHOT_SETTINGS, ids=lambda s: s.keyword)
def test_snapshot_defaults_and_docs_come_from_the_declaration(setting: Any) -> None:
    field = _snapshot_field(setting)
    assert field.get_default(call_default_factory=True) == setting.default
    assert setting.doc in (field.description or "")


@pytest.mark.parametrize("setting", ENGINE_SETTINGS, ids=lambda s: s.keyword)
def test_engine_keyword_defaults_come_from_the_declaration(setting: Any) -> None:
    param = inspect.signature(Engine.__init__).parameters[setting.keyword]
    expected = None if setting.default == {} else setting.default  # user_meta: None is "none"
    assert param.default == expected


@pytest.mark.parametrize("setting", RUNNER_SETTINGS, ids=lambda s: s.keyword)
def test_runner_settings_are_engine_settings_fields(setting: Any) -> None:
    assert getattr(EngineSettings(), setting.keyword) == setting.default


def test_serve_only_keys_follow_the_flags() -> None:
    assert serve_only_keys() == {
        "": frozenset({"dead_letter"}),
        "snapshot": frozenset({"schedule", "on_shutdown", "retention", "on_restore_mismatch"}),
        "tables": frozenset({"ttl", "validation", "baseline"}),
        "targets": frozenset({"buffer", "error_handling", "ttl", "validation"}),
    }
    # user_meta is written by the Spark baseline too: not serve-only
    assert (
        not {s.key for s in SNAPSHOT_SETTINGS if not s.serve_only} & serve_only_keys()["snapshot"]
    )


@pytest.mark.parametrize("setting", [s for s in SETTINGS if s.choices], ids=lambda s: s.keyword)
def test_choice_settings_are_checked_by_pipeline_and_agree_with_the_model(setting: Any) -> None:
    assert setting.choices is not None
    allowed = {e.value for e in setting.choices}
    assert set(typing.get_args(SECTIONS[setting.section].model_fields[setting.key].annotation)) == (
        allowed
    )
    pipe = Pipeline("src", "public.t", RecordingTarget(), **{setting.keyword: "nonsense"})
    (problem,) = pipe.problems(0)
    assert problem.startswith(f"pipelines[0].{setting.keyword}: unknown value 'nonsense'")


@pytest.mark.parametrize("setting", [s for s in SETTINGS if s.duration], ids=lambda s: s.keyword)
def test_duration_settings_are_parsed_by_pipeline(setting: Any) -> None:
    pipe = Pipeline("src", "public.t", RecordingTarget(), **{setting.keyword: "2m"})
    assert pipe.problems(0) == [] and getattr(pipe, setting.keyword) == 120.0
    bad = Pipeline("src", "public.t", RecordingTarget(), **{setting.keyword: "soon"})
    (problem,) = bad.problems(0)
    assert problem.startswith(f"pipelines[0].{setting.keyword}")


@pytest.mark.parametrize("setting", SETTINGS, ids=lambda s: s.keyword)
def test_choices_and_duration_flags_match_the_pipeline_field_types(setting: Any) -> None:
    args = typing.get_args(typing.get_type_hints(Pipeline)[setting.keyword])
    enums = [a for a in args if isinstance(a, type) and issubclass(a, enum.Enum)]
    assert enums == ([setting.choices] if setting.choices else [])
    assert (datetime.timedelta in args) == setting.duration


def test_the_engine_checks_the_meta_policy_against_the_declared_choices() -> None:
    with pytest.raises(ConfigError) as ei:
        Engine(
            {"src": TestSource()},
            [Pipeline("src", "public.t", RecordingTarget())],
            snapshot_meta_policy="maybe",
        )
    assert ei.value.problems == ["snapshot_meta_policy: use 'warn' or 'reject' (got 'maybe')"]


@pytest.mark.parametrize(
    ("model", "level"), [(TargetConfig, "target_level"), (TableConfig, "table_level")]
)
def test_entry_sections_come_from_the_level_flags(model: Any, level: str) -> None:
    """A section at a level is a key of that entry, with no hand-written field."""
    expected = list(dict.fromkeys(s.section for s in SETTINGS if getattr(s, level)))
    assert [k for k in model.model_fields if k in SECTIONS] == expected
    for section in expected:
        field = model.model_fields[section]
        assert SECTIONS[section] in (*typing.get_args(field.annotation), field.annotation)


def test_a_target_section_left_out_is_none_when_the_table_may_give_it() -> None:
    target = TargetConfig.model_validate({"type": "memory"})
    assert target.buffer == BufferConfig() and target.error_handling == ErrorHandlingConfig()
    assert target.ttl is None and target.validation is None


def test_engine_settings_hold_the_runner_settings_by_keyword() -> None:
    fields = [f.name for f in dataclasses.fields(EngineSettings)]
    assert fields == [s.keyword for s in RUNNER_SETTINGS] + ["observers"]
    with pytest.raises(TypeError):
        EngineSettings(1.0)  # type: ignore[call-arg]  # keywords only
