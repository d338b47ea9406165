from __future__ import annotations

import json
from pathlib import Path

import laredo
import pytest
from laredo.engine_settings import RUNNER_SETTINGS
from laredo.errors import ConfigError
from laredo.registry import Registry
from laredo_server.config import (
    build_engine,
    dump_config,
    load_config,
    load_string,
    parse_duration,
    parse_size,
)
from pydantic import BaseModel, ConfigDict, Field

BASE = """
sources {
  src { type = quicktest }
}
tables = [
  { source = src, schema = public, table = users,
    targets = [ { type = indexed-memory, lookup_fields = [email] } ] }
]
"""


@pytest.fixture(autouse=True)
def _plugin(quicktest_plugin: None) -> None:
    """Every test here can use the `quicktest` source type."""


def write(p: Path, text: str) -> Path:
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(text)
    return p


def test_a_conf_d_file_appends_tables_with_plus_equals(tmp_path: Path) -> None:
    main = write(tmp_path / "laredo.conf", BASE)
    write(
        tmp_path / "conf.d" / "10-orders.conf",
        "# one team's tables, added to the main file's\n"
        "tables += { source = src, table = orders, targets = [ { type = indexed-memory } ] }\n",
    )
    write(tmp_path / "conf.d" / "20-port.conf", "grpc { port = 3000 }")
    loaded = load_config(main, env={})
    assert loaded.model is not None and loaded.model.grpc is not None
    assert [t.table for t in loaded.model.tables] == ["users", "orders"]
    assert loaded.tree["tables"][0]["targets"][0]["lookup_fields"] == ["email"]
    assert loaded.model.grpc.port == 3000
    # a syntax error in such a file points at its own line, not one off
    write(tmp_path / "conf.d" / "30-bad.conf", "\ntables += { source = src, table = \n")
    with pytest.raises(ConfigError) as ei:
        load_config(main, env={})
    assert "30-bad.conf:" in str(ei.value) and "HOCON syntax error" in str(ei.value)


def test_include_conf_d_order_env_and_set_precedence(tmp_path: Path) -> None:
    main = write(tmp_path / "laredo.conf", 'include "grpc.conf"\n' + BASE)
    write(tmp_path / "grpc.conf", "grpc { port = 1000 }\nhealth { port = 9000 }")
    write(tmp_path / "conf.d" / "20-b.conf", "grpc { port = 3000 }")
    write(
        tmp_path / "conf.d" / "10-a.conf",
        'grpc { port = 2000, host = "0.0.0.0", auth { allow_unauthenticated = true } }',
    )
    write(tmp_path / "conf.d" / "ignored.txt", "grpc { port = 9 }")
    # include < conf.d (name order: 20-b wins over 10-a); objects merge (host from 10-a)
    loaded = load_config(main, env={})
    assert loaded.model is not None and loaded.model.grpc is not None
    assert loaded.model.grpc.port == 3000
    assert loaded.model.grpc.host == "0.0.0.0"
    assert loaded.model.health.port == 9000
    # env beats files; LAREDO_ names without "__" are not overrides
    env = {"LAREDO_GRPC__PORT": "4000", "LAREDO_CONFIG": "x", "LAREDO_HEALTH__PORT": ""}
    loaded = load_config(main, env=env)
    assert loaded.model is not None and loaded.model.grpc is not None
    assert loaded.model.grpc.port == 4000
    assert loaded.model.health.port == 9000  # empty value = not set
    # --set beats env
    loaded = load_config(main, env=env, sets=["grpc.port=5000"])
    assert loaded.model is not None and loaded.model.grpc is not None
    assert loaded.model.grpc.port == 5000
    assert loaded.applied_env == ["LAREDO_GRPC__PORT -> grpc.port"]


def test_env_maps_into_lists_and_dashed_names(tmp_path: Path) -> None:
    text = BASE.replace("src {", '"my-src" {').replace("source = src", 'source = "my-src"')
    main = write(tmp_path / "laredo.conf", text)
    env = {
        "LAREDO_SOURCES__MY_SRC__ROWS": "7",
        "LAREDO_TABLES__0__TARGETS__0__LOOKUP_FIELDS": "[id]",
    }
    loaded = load_config(main, env=env, conf_dirs=[])
    assert loaded.tree["sources"]["my-src"]["rows"] == 7
    assert loaded.tree["tables"][0]["targets"][0]["lookup_fields"] == ["id"]


def test_every_error_reported_together_with_paths_and_lines(tmp_path: Path) -> None:
    main = write(
        tmp_path / "laredo.conf",
        """
sources {
  src { type = quicktest, rowz = 5 }
}
tables = [
  { source = src, schema = public, table = users,
    targets = [ { type = indexed-memory, lookup_feilds = [email],
                  buffer { max_size = -1, policy = blok } } ] }
  { source = nope, table = t, targets = [ { type = no-such-target } ] }
]
grpc { port = "abc", bogus = 1 }
fanout { port = 4002 }
""",
    )
    with pytest.raises(ConfigError) as ei:
        load_config(main, env={}, conf_dirs=[])
    problems = ei.value.problems
    text = "\n".join(problems)
    assert any(p.startswith("grpc.port:") for p in problems), text
    assert any(p.startswith("grpc.bogus: unknown key") and "laredo.conf:11" in p for p in problems)
    assert any(p.startswith("tables.0.targets.0.buffer.max_size:") for p in problems), text
    assert any(p.startswith("tables.0.targets.0.buffer.policy:") for p in problems), text
    assert any(
        p.startswith("tables.0.targets.0.lookup_feilds: unknown option") and "laredo.conf:7" in p
        for p in problems
    ), text
    assert any(p.startswith("sources.src.rowz: unknown option") and ":3" in p for p in problems)
    assert any("no-such-target" in p and "installed types" in p for p in problems), text
    assert any(p.startswith("fanout: unknown section") for p in problems), text
    assert len(problems) >= 8


def test_unknown_source_reference_and_duplicate_pipelines(tmp_path: Path) -> None:
    text = """
sources { src { type = quicktest } }
tables = [
  { source = src, table = users, targets = [ { type = indexed-memory } ] }
  { source = other, table = users, targets = [ { type = indexed-memory } ] }
  { source = src, table = users, targets = [ { type = indexed-memory } ] }
]
"""
    main = write(tmp_path / "laredo.conf", text)
    with pytest.raises(ConfigError) as ei:
        load_config(main, env={}, conf_dirs=[])
    text = "\n".join(ei.value.problems)
    assert "tables.1.source: unknown source 'other'" in text
    assert "pipeline id 'src:public.users:indexed-memory' also used" in text


def test_syntax_error_has_file_and_line(tmp_path: Path) -> None:
    main = write(tmp_path / "laredo.conf", "sources {\n  a = [1, 2\n}\n")
    with pytest.raises(ConfigError) as ei:
        load_config(main, env={}, conf_dirs=[])
    assert "laredo.conf:" in ei.value.problems[0]
    assert "HOCON syntax error" in ei.value.problems[0]


def test_durations_and_sizes_are_normalised(tmp_path: Path) -> None:
    loaded = load_string(
        BASE
        + f"""
snapshot {{ store = local, store_config {{ path = "{tmp_path}" }}, schedule = 10 minutes,
           retention {{ max_age = "7d" }} }}
observability {{ lag_interval = 500ms }}
shutdown {{ grace_period = 5s, drain = 1 }}
""",
        env={},
    )
    m = loaded.model
    assert m is not None and m.snapshot is not None
    assert m.snapshot.schedule == 600.0
    assert m.snapshot.retention.max_age == 7 * 86400.0
    assert m.observability.lag_interval == 0.5
    assert m.shutdown.grace_period == 5.0 and m.shutdown.drain == 1.0
    assert loaded.tree["snapshot"]["schedule"] == 600.0  # relativedelta normalised in the tree
    assert parse_duration("1h30m") == 5400.0
    assert parse_size("64MB") == 64_000_000 and parse_size("1GiB") == 1024**3
    with pytest.raises(ConfigError) as ei:
        load_string(BASE + "shutdown { grace_period = 2 months }", env={})
    assert "months and years" in str(ei.value)
    # a HOCON duration is seconds whatever the key is called (no special `_ms` rule)
    t = load_string(BASE + "x_ms = 2s", env={}, validate=False).tree
    assert t["x_ms"] == 2.0


def test_runner_sections_reach_their_engine_keywords() -> None:
    """``shutdown.grace_period`` and ``observability.lag_interval`` map to ``Engine`` keywords
    by their declarations (laredo.engine_settings); absent, the declared defaults apply."""
    loaded = load_string(
        BASE + "observability { lag_interval = 2s }\nshutdown { grace_period = 7s }", env={}
    )
    assert loaded.model is not None
    engine = build_engine(loaded.model).engine
    assert (engine.shutdown_timeout, engine.lag_interval) == (7.0, 2.0)
    plain = load_string(BASE, env={}).model
    assert plain is not None
    engine = build_engine(plain).engine
    assert [getattr(engine, s.keyword) for s in RUNNER_SETTINGS] == [
        s.default for s in RUNNER_SETTINGS
    ]


def test_free_form_maps_keep_the_text_written() -> None:
    """HOCON reads ``768m`` and ``30s`` as durations: duration options get seconds, free-form
    maps (HTTP ``headers``) the text as written."""
    pytest.importorskip("laredo_target_http")
    loaded = load_string(
        BASE.replace(
            "type = indexed-memory, lookup_fields = [email]",
            'type = http-sync, base_url = "http://127.0.0.1:9/sync", timeout = 30s, '
            "headers { X-Wait = 30s, X-Memory = 768m, X-Size = 4g, X-Count = 5, X-On = true, "
            "X-Long = 10 minutes }",
        ),
        env={},
    )
    assert loaded.model is not None
    assert loaded.tree["tables"][0]["targets"][0]["timeout"] == 30.0
    opts = build_engine(loaded.model).engine.pipeline_configs[0].target.options
    assert opts.timeout == 30.0
    assert opts.headers == {
        "X-Wait": "30s",
        "X-Memory": "768m",
        "X-Size": "4g",
        "X-Count": "5",
        "X-On": "true",
        "X-Long": "10 minutes",
    }


def test_a_runner_section_is_validated_and_left_alone(tmp_path: Path) -> None:
    """One file for every runner: ``laredo serve`` accepts the Spark runner's ``spark``
    section, checks it with the model laredo-spark registered, and does not use it."""
    pytest.importorskip("laredo_spark")
    conf = BASE + 'spark { master = "spark://m:7077", partitions = 4, conf { a.b = 768m } }'
    loaded = load_string(conf, env={})
    assert loaded.model is not None
    held = loaded.model.plugin_section("spark")
    assert held is not None and (held["master"], held["partitions"]) == ("spark://m:7077", 4)
    with pytest.raises(ConfigError) as ei:
        load_string(BASE + "spark { partitons = 4, partitions = 0 }", env={})
    assert [p.split(" [")[0] for p in ei.value.problems] == [
        "spark.partitions: Input should be greater than or equal to 1 (got 0)",
        "spark.partitons: unknown key; did you mean 'partitions'? (allowed here: master, "
        "partitions, conf)",
    ]


class _AcmeSection(BaseModel):
    model_config = ConfigDict(extra="forbid")
    level: int = Field(ge=1)


class _AcmePlugin:
    @laredo.hookimpl
    def laredo_register_config_sections(self, registry: Registry) -> None:
        registry.add("acme", _AcmeSection, options=_AcmeSection, description="a test runner")


def test_a_plugin_section_registers_through_the_hook_alone() -> None:
    """A section is known to ``laredo serve`` only through ``laredo_register_config_sections``:
    without its plugin it is an unknown key, with it it is checked by the plugin's model and
    held for the runner that reads it."""
    conf = BASE + "acme { level = 3 }"
    with pytest.raises(ConfigError) as ei:
        load_string(conf, env={})
    assert any(p.startswith("acme: unknown key") for p in ei.value.problems), ei.value.problems
    pm = laredo.get_plugin_manager()
    plugin = _AcmePlugin()
    pm.register(plugin, name="acme-section-plugin")
    try:
        loaded = load_string(conf, env={})
        assert loaded.model is not None and loaded.model.plugin_section("acme") == {"level": 3}
        with pytest.raises(ConfigError) as ei:
            load_string(BASE + "acme { level = 0 }", env={})
        assert [p.split(" [")[0] for p in ei.value.problems] == [
            "acme.level: Input should be greater than or equal to 1 (got 0)"
        ]
    finally:
        pm.unregister(plugin)


def test_http_target_durations_and_deprecated_ms_spelling() -> None:
    pytest.importorskip("laredo_target_http")
    from laredo.deprecation import OptionDeprecationWarning

    def conf(options: str) -> str:
        return BASE.replace(
            "type = indexed-memory, lookup_fields = [email]",
            f'type = http-sync, base_url = "http://127.0.0.1:9/sync", {options}',
        )

    loaded = load_string(conf("timeout = 2500ms, retry_backoff = 50ms"), env={})
    assert loaded.model is not None
    opts = build_engine(loaded.model).engine.pipeline_configs[0].target.options
    assert (opts.timeout, opts.retry_backoff) == (2.5, 0.05)
    # the 0.1 spelling: integer milliseconds, one deprecation note naming the new key
    text = conf("timeout_ms = 2500, retry_after_max_ms = 1000")
    loaded = load_string(text, env={}, log_notes=False)
    assert loaded.model is not None
    with pytest.warns(OptionDeprecationWarning) as warned:  # in Python: a DeprecationWarning
        opts = build_engine(loaded.model).engine.pipeline_configs[0].target.options
    assert len(warned) == 2 and "write timeout = 2.5s" in str(warned[0].message)
    assert (opts.timeout, opts.retry_after_max) == (2.5, 1.0)
    notes = [n for n in loaded.notes if "deprecated" in n]
    assert len(notes) == 2, notes
    assert notes[0].startswith("tables.0.targets.0: http-sync target: option timeout_ms")
    assert "write timeout = 2.5s" in notes[0]
    # a HOCON duration in an *_ms key would be ambiguous; both spellings together are an error
    with pytest.raises(ConfigError) as ei:
        load_string(conf("timeout_ms = 2s, retry_backoff_ms = 10, retry_backoff = 1s"), env={})
    problems = ei.value.problems
    assert problems[0].startswith("tables.0.targets.0.timeout_ms: Value error, expected integer")
    assert problems[1].startswith(
        "tables.0.targets.0.retry_backoff_ms: Value error, give retry_backoff or the deprecated "
        "retry_backoff_ms, not both (got 10)"
    )


def test_dump_masks_secrets(tmp_path: Path) -> None:
    text = (
        BASE.replace("type = quicktest", 'type = quicktest, password = "hunter2"')
        + 'grpc { port = 4001, auth { token = "s3cret-token" } }\n'
    )
    main = write(tmp_path / "laredo.conf", text)
    loaded = load_config(
        main,
        env={"LAREDO_SOURCES__SRC__PASSWORD": "env-pass"},
        sets=['extra_url="postgres://bob:pw123@db/x"'],
        conf_dirs=[],
        validate=False,
    )
    for fmt in ("hocon", "json"):
        out = dump_config(loaded, fmt)
        assert "hunter2" not in out and "env-pass" not in out
        assert "s3cret-token" not in out and "pw123" not in out
        assert "***" in out
    data = json.loads(dump_config(loaded, "json"))
    assert data["extra_url"] == "postgres://bob:***@db/x"
    assert data["grpc"]["port"] == 4001


def test_config_builds_an_engine_that_runs(tmp_path: Path) -> None:
    loaded = load_string(
        BASE.replace("type = quicktest", "type = quicktest, rows = 4")
        + f"""
snapshot {{ store = local, store_config {{ path = "{tmp_path}" }}, on_shutdown = true,
           retention {{ keep_count = 2 }} }}
dead_letter {{ store = memory }}
""",
        env={},
    )
    assert loaded.model is not None
    built = build_engine(loaded.model)
    eng = built.engine
    assert eng.snapshot_on_shutdown and eng.snapshot_retention == 2
    assert eng.dead_letter_store is not None
    p = eng.pipeline_configs[0]
    assert p.pipeline_id() == "src:public.users:indexed-memory"
    eng.start()
    try:
        assert eng.await_ready(10)
        target = eng.get_target("src", "public.users")
        assert target.count() == 4 and target.lookup("u2@x") == {"id": 2, "email": "u2@x"}
    finally:
        eng.stop()
    assert built.snapshot_store.list()  # snapshot on shutdown happened


def test_pipeline_options_map_to_engine(tmp_path: Path) -> None:
    loaded = load_string(
        BASE.replace(
            "lookup_fields = [email] }",
            """lookup_fields = [email], id = u1,
               buffer { max_size = 5, policy = drop_oldest },
               error_handling { max_retries = 2, on_persistent_failure = stop_source,
                                retry_backoff = 10ms },
               filters = [ { type = field-prefix, field = email, prefix = u } ],
               transforms = [ { type = drop-fields, fields = [x] } ],
               ttl { field = exp, check_interval = 1m },
               validation { interval = 30s, action = fail } }""",
        ),
        env={},
    )
    assert loaded.model is not None
    p = build_engine(loaded.model).engine.pipeline_configs[0]
    assert (p.id, p.buffer_size, p.max_retries) == ("u1", 5, 2)
    assert str(p.buffer_policy) in ("drop_oldest", "BufferPolicy.DROP_OLDEST")
    assert p.retry_backoff == 0.01 and p.ttl_field == "exp" and p.ttl_scan_interval == 60.0
    assert p.validation_interval == 30.0 and len(p.filters) == 1 and len(p.transforms) == 1


def test_dead_letter_policy_needs_a_store() -> None:
    with pytest.raises(ConfigError) as ei:
        load_string(
            BASE.replace(
                "lookup_fields = [email] }",
                "lookup_fields = [email], error_handling { on_persistent_failure = dead_letter } }",
            ),
            env={},
        )
    assert "dead_letter needs a dead_letter" in str(ei.value)
