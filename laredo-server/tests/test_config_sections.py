"""The server's own sections (grpc, health, observability, shutdown) are generated from their
setting declarations (laredo_server.config.sections), like the engine's: one declaration per
key, stubs for mypy that cannot drift, and an unknown key named with its closest spelling."""

from __future__ import annotations

import pytest
from laredo.config import EngineConfig
from laredo.errors import ConfigError
from laredo.settings import Section, declared, field_problems, generated, stub_problems
from laredo_server.config import ServerConfig, load_string, sections

BASE = """
sources { src { type = quicktest } }
tables = [ { source = src, table = users, targets = [ { type = indexed-memory } ] } ]
"""

SERVER_SECTIONS: list[type[Section]] = generated(sections.__name__)
TOP_LEVEL = [s.key for s in declared(sections.ServerSections)]


@pytest.fixture(autouse=True)
def _plugin(quicktest_plugin: None) -> None:
    """Every test here can use the `quicktest` source type."""


def test_the_stubs_mypy_reads_match_the_declarations() -> None:
    assert stub_problems(sections) == []


@pytest.mark.parametrize("model", SERVER_SECTIONS, ids=lambda m: m.__name__)
def test_each_server_field_is_its_declaration(model: type[Section]) -> None:
    assert declared(model)
    assert field_problems(model) == []


def test_a_file_without_server_sections_gets_the_declared_defaults() -> None:
    model = load_string(BASE, env={}).model
    assert isinstance(model, ServerConfig)
    for section in TOP_LEVEL:
        for s in declared(type(getattr(model, section))):
            assert getattr(getattr(model, section), s.key) == s.default, s.config_key
    assert model.grpc is not None
    assert [getattr(model.grpc, s.key) for s in sections.GRPC_SETTINGS] == [
        s.default for s in sections.GRPC_SETTINGS
    ]


def test_a_misspelt_server_key_is_refused_naming_the_closest_one() -> None:
    with pytest.raises(ConfigError) as ei:
        load_string(BASE + "grpc { prot = 4100 }\nhealth { max_conections = 8 }", env={})
    text = "\n".join(ei.value.problems)
    assert "grpc.prot: unknown key; did you mean 'port'? (allowed here: port, host," in text
    assert "health.max_conections: unknown key; did you mean 'max_connections'?" in text


def test_bounds_of_a_server_setting_hold() -> None:
    with pytest.raises(ConfigError, match=r"grpc.port: Input should be less than or equal to"):
        load_string(BASE + "grpc { port = 70000 }", env={})
    with pytest.raises(ConfigError, match=r"health.history_interval: Input should be greater"):
        load_string(BASE + "health { history_interval = 0 }", env={})


def test_server_config_has_one_field_per_top_level_section_generated() -> None:
    # every generated section is a field of ServerConfig, or held by one that is (tls, metrics)
    own = [k for k in ServerConfig.model_fields if k not in EngineConfig.model_fields]
    assert own == TOP_LEVEL == ["grpc", "health", "observability", "shutdown"]
    top = {type(getattr(ServerConfig.model_construct(), k)) for k in TOP_LEVEL}
    assert top == {
        sections.GrpcConfig,
        sections.HealthConfig,
        sections.ObservabilityConfig,
        sections.ShutdownConfig,
    }
    assert ServerConfig.model_fields["grpc"].annotation == sections.GrpcConfig | None
    assert load_string(BASE + "grpc = null", env={}).model.grpc is None
    with pytest.raises(ConfigError, match="health"):
        load_string(BASE + "health = null", env={})
