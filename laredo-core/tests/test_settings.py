"""Section models are generated from their setting declarations (laredo.settings): each field
takes its type, default, bounds and description from one declaration, a deprecated spelling is
accepted with a note, and the TYPE_CHECKING stubs mypy reads cannot drift from the
declarations."""

from __future__ import annotations

import importlib.util
import pickle
import sys
import textwrap
from pathlib import Path
from types import ModuleType

import pydantic
import pytest
from laredo import engine_settings, pipeline_settings
from laredo.deprecation import collect_deprecations
from laredo.settings import (
    Section,
    Setting,
    declared,
    field_problems,
    section_model,
    stub_problems,
)

GENERATED: list[type[Section]] = [
    pipeline_settings.BufferConfig,
    pipeline_settings.ErrorHandlingConfig,
    pipeline_settings.TtlConfig,
    pipeline_settings.ValidationConfig,
    pipeline_settings.TableBaselineConfig,
    pipeline_settings.TargetSections,
    pipeline_settings.TableSections,
    engine_settings.DeadLetterConfig,
    engine_settings.RetentionConfig,
    engine_settings.SnapshotConfig,
]


@pytest.mark.parametrize("module", [pipeline_settings, engine_settings], ids=lambda m: m.__name__)
def test_the_stubs_mypy_reads_match_the_declarations(module: ModuleType) -> None:
    assert stub_problems(module) == []


@pytest.mark.parametrize("model", GENERATED, ids=lambda m: m.__name__)
def test_each_field_is_its_declaration(model: type[Section]) -> None:
    assert declared(model)
    assert field_problems(model) == []


@pytest.mark.parametrize("model", GENERATED, ids=lambda m: m.__name__)
def test_generated_models_pickle_by_their_module_name(model: type[Section]) -> None:
    """Spark ships configuration models to executors: each is found again by its name."""
    data: dict[str, object] = {"field": "x"} if model is pipeline_settings.TtlConfig else {}
    value = model.model_validate(data)
    assert pickle.loads(pickle.dumps(value)) == value


def test_a_field_that_is_not_its_declaration_is_reported() -> None:
    model = section_model(
        "Drifted", (Setting(section="demo", key="x", of_type=int, default=1, doc="x"),), module=""
    )
    model.model_fields["x"].default = 2
    model.model_fields["x"].description = "other"
    assert field_problems(model) == [
        "Drifted.x: default 2, declared 1",
        "Drifted.x: the description does not carry the declared doc",
    ]


def _module(tmp_path: Path, stub: str) -> ModuleType:
    """A module declaring ``x`` (int, required) and ``y`` (str, default) of section ``demo``,
    with ``stub`` as its TYPE_CHECKING stub."""
    name = f"stubdemo_{abs(hash(stub))}"
    path = tmp_path / f"{name}.py"
    path.write_text(
        textwrap.dedent(
            """\
            from __future__ import annotations
            from typing import TYPE_CHECKING
            from laredo.settings import DEFAULT, Section, Setting, section_model

            X = Setting(section="demo", key="x", of_type=int, required=True, doc="x")
            Y = Setting(section="demo", key="y", of_type=str, default="a", doc="y")

            if TYPE_CHECKING:
                class Demo(Section):
            {stub}
            else:
                Demo = section_model("Demo", (X, Y), module=__name__)
            """
        ).format(stub=textwrap.indent(textwrap.dedent(stub), " " * 8))
    )
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def test_a_stub_that_drifts_from_its_declarations_is_reported(tmp_path: Path) -> None:
    good = _module(tmp_path, "x: int\ny: str = DEFAULT\n")
    assert stub_problems(good) == []
    missing = _module(tmp_path, "x: int\n")
    assert stub_problems(missing) == [
        f"{missing.__name__}.Demo: the stub's fields ['x'] are not ['x', 'y']"
    ]
    wrong = _module(tmp_path, "x: str\ny: str\n")
    assert stub_problems(wrong) == [
        f"{wrong.__name__}.Demo.x: the stub says str, the declaration <class 'int'>",
        f"{wrong.__name__}.Demo.y: write `y: str = DEFAULT`: it has a default",
    ]


def _aliased() -> type[Section]:
    return section_model(
        "Aliased",
        (
            Setting(
                section="demo",
                key="grace_period",
                of_type=float,
                default=1.0,
                aliases=("gracePeriod",),
                doc="how long",
            ),
        ),
        module=__name__,
    )


def test_a_deprecated_spelling_is_accepted_with_a_note_naming_the_key() -> None:
    with collect_deprecations() as notes:
        model = _aliased().model_validate({"gracePeriod": 5.0})
    assert model.model_dump() == {"grace_period": 5.0}
    assert notes == ["demo.gracePeriod is a deprecated spelling; write demo.grace_period"]


def test_both_spellings_of_one_setting_are_refused() -> None:
    with pytest.raises(pydantic.ValidationError, match="keep grace_period"):
        _aliased().model_validate({"gracePeriod": 5.0, "grace_period": 2.0})


def test_an_unknown_key_is_still_refused_and_bounds_hold() -> None:
    bounded = section_model(
        "Bounded",
        (Setting(section="demo", key="port", of_type=int, default=1, minimum=0, maximum=9),),
        module=__name__,
    )
    with pytest.raises(pydantic.ValidationError, match="Extra inputs are not permitted"):
        bounded.model_validate({"prot": 2})
    with pytest.raises(pydantic.ValidationError, match="less than or equal to 9"):
        bounded.model_validate({"port": 10})


def test_one_model_holds_one_section() -> None:
    with pytest.raises(ValueError, match="settings of one section only"):
        section_model(
            "Mixed",
            (
                Setting(section="a", key="x", of_type=int),
                Setting(section="b", key="y", of_type=int),
            ),
            module=__name__,
        )
