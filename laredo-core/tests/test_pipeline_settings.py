"""Each pipeline setting is declared once (laredo.pipeline_settings): the Python API, the
configuration models and the config-to-Pipeline mapping all agree with the declaration."""

from __future__ import annotations

import dataclasses
import enum
from typing import Any

import pydantic
import pytest
from laredo.config import (
    BufferConfig,
    ErrorHandlingConfig,
    TableConfig,
    TtlConfig,
    ValidationConfig,
)
from laredo.config.build import Maker, build_pipeline
from laredo.pipeline import Pipeline
from laredo.pipeline_settings import BUFFER_SIZE, MAX_RETRIES, SETTINGS
from laredo.testing import RecordingTarget

SECTIONS: dict[str, type[pydantic.BaseModel]] = {
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


@pytest.mark.parametrize(("setting", "bad"), [(BUFFER_SIZE, 0), (MAX_RETRIES, -1)])
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
    }
    assert set(given) == {s.keyword for s in SETTINGS}
    target: dict[str, Any] = {"type": "memory"}
    for s in SETTINGS:
        target.setdefault(s.section, {})[s.key] = given[s.keyword]
    table = TableConfig.model_validate(
        {"source": "src", "schema": "public", "table": "t", "targets": [target]}
    )
    pipe = build_pipeline(Maker(), table, table.targets[0], "tables.0.targets.0")
    for s in SETTINGS:
        value = getattr(pipe, s.keyword)
        assert (value.value if isinstance(value, enum.Enum) else value) == given[s.keyword], s
