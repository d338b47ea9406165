from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import sys
from collections.abc import Iterator

import laredo
import pydantic
import pytest
from laredo.plugins import PluginManager, reset_plugin_manager
from laredo.testing import RecordingTarget, wait_until

HERE = pathlib.Path(__file__).parent
REPO = HERE.parent.parent


def test_import_laredo_pulls_in_no_driver_or_sdk() -> None:
    code = (
        "import sys, laredo, laredo.engine, laredo.testing; laredo.get_plugin_manager().load();"
        "mods = ('psycopg', 'boto3', 'botocore', 'grpc', 'pyspark', 'pyarrow');"
        "bad = [m for m in mods if m in sys.modules];"
        "print(','.join(bad))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_first_party_plugins_register_through_entry_points() -> None:
    pm = PluginManager()
    providers = {p["provider"].split()[0] for p in pm.list_plugins()}
    assert "laredo-core" in providers and "laredo-target-memory" in providers
    assert {"field-equals", "field-prefix", "field-regex"} <= set(pm.registry("filter").names())
    assert {"drop-fields", "rename-fields", "add-timestamp"} <= set(
        pm.registry("transform").names()
    )
    assert "local" in pm.registry("snapshot_store").names()
    assert {"jsonl"} <= set(pm.registry("serializer").names())
    assert {"memory", "local"} <= set(pm.registry("dead_letter_store").names())
    assert "indexed-memory" in pm.registry("target").names()


def test_unknown_name_lists_installed_and_hints_package() -> None:
    with pytest.raises(laredo.PluginNotFoundError) as ei:
        laredo.target("http-syncc")
    assert "indexed-memory" in str(ei.value)
    bare = PluginManager(autoload=False)  # as if laredo-server were not installed
    with pytest.raises(laredo.PluginNotFoundError) as ei2:
        bare.registry("observer").get("prometheus")
    assert "pip install laredo-server" in str(ei2.value)


def test_invalid_options_list_every_problem() -> None:
    with pytest.raises(laredo.ConfigError) as ei:
        laredo.filter("field-equals", fieldd="x", value=1, extra=2)
    text = str(ei.value)
    assert "fieldd" in text and "extra" in text and "field:" in text  # unknown x2 + missing


def test_duplicate_names_fail_naming_both_providers() -> None:
    class A:
        @laredo.hookimpl
        def laredo_register_sources(self, registry):  # type: ignore[no-untyped-def]
            registry.add("dup", lambda: 1)

    class B:
        @laredo.hookimpl
        def laredo_register_sources(self, registry):  # type: ignore[no-untyped-def]
            registry.add("dup", lambda: 2)

    pm = PluginManager(autoload=False)
    pm.register(A(), provider="dist-a 1.0")
    pm.register(B(), provider="dist-b 2.0")
    with pytest.raises(laredo.ConfigError) as ei:
        pm.registry("source")
    assert "dist-a 1.0" in str(ei.value) and "dist-b 2.0" in str(ei.value)


def test_misspelled_hook_is_rejected() -> None:
    class Bad:
        @laredo.hookimpl
        def laredo_register_sorces(self, registry):  # type: ignore[no-untyped-def]
            pass

    pm = PluginManager(autoload=False)
    with pytest.raises(Exception, match="laredo_register_sorces"):
        pm.register(Bad())


def test_disable_autoload_and_explicit_plugins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LAREDO_DISABLE_PLUGIN_AUTOLOAD", "1")
    pm = PluginManager()
    assert pm.registry("target").names() == []
    monkeypatch.setenv("LAREDO_PLUGINS", "memory,laredo._plugin")
    pm2 = PluginManager()
    assert "indexed-memory" in pm2.registry("target").names()
    assert "field-equals" in pm2.registry("filter").names()
    monkeypatch.setenv("LAREDO_PLUGINS", "no_such_module_xyz")
    with pytest.raises(laredo.ConfigError, match="no_such_module_xyz"):
        PluginManager().load()


def test_registry_validates_with_model_then_calls_factory() -> None:
    class Opts(pydantic.BaseModel):
        model_config = pydantic.ConfigDict(extra="forbid")
        n: int
        name: str = "x"

    seen = {}

    class Plug:
        @laredo.hookimpl
        def laredo_register_targets(self, registry):  # type: ignore[no-untyped-def]
            registry.add("thing", lambda **kw: seen.update(kw) or "built", options=Opts)

    pm = PluginManager(autoload=False)
    pm.register(Plug())
    assert pm.registry("target").build("thing", n="3") == "built"
    assert seen == {"n": 3, "name": "x"}


@pytest.fixture
def csv_plugin_installed() -> Iterator[None]:
    """A real install of a throwaway third-party plugin package into this environment."""
    src = HERE / "fixtures" / "laredo-source-csv"
    uv = shutil.which("uv", path=str(pathlib.Path(sys.executable).parent)) or shutil.which("uv")
    if uv:
        cmd = [uv, "pip", "install", "--python", sys.executable, "--no-deps", "-q", str(src)]
    else:
        cmd = [sys.executable, "-m", "pip", "install", "--no-deps", "-q", str(src)]
    subprocess.run(cmd, check=True, capture_output=True)
    reset_plugin_manager()
    import importlib

    importlib.invalidate_caches()
    try:
        yield
    finally:
        if uv:
            subprocess.run(
                [uv, "pip", "uninstall", "--python", sys.executable, "-q", "laredo-source-csv"],
                check=False,
                capture_output=True,
            )
        else:
            subprocess.run(
                [sys.executable, "-m", "pip", "uninstall", "-y", "-q", "laredo-source-csv"],
                check=False,
                capture_output=True,
            )
        reset_plugin_manager()


def test_third_party_plugin_installed_with_pip_builds_by_name(
    csv_plugin_installed: None, tmp_path: pathlib.Path
) -> None:
    (tmp_path / "public.users.csv").write_text("id,name\n1,alice\n2,bob\n")
    (tmp_path / "changes.log").write_text("")  # the guide's source tails from the end
    with pytest.raises(laredo.ConfigError, match="directory"):
        laredo.source("csv")
    src = laredo.source("csv", directory=str(tmp_path), poll_interval=0.01)
    assert type(src).__module__ == "laredo_source_csv"
    t = RecordingTarget()
    eng = laredo.Engine(sources={"csv": src}, pipelines=[laredo.Pipeline("csv", "public.users", t)])
    eng.start()
    assert eng.await_ready(10)
    assert {r["name"] for r in t.rows()} == {"alice", "bob"}
    with open(tmp_path / "changes.log", "a") as f:
        f.write("public.users,id=3,name=carol\n")
    wait_until(lambda: t.get("3") is not None, 10, "the appended row", interval=0.01)
    assert t.get("3") == {"id": "3", "name": "carol"}
    eng.stop()
    listed = {p["name"]: p for p in laredo.get_plugin_manager().list_plugins()}
    assert "laredo-source-csv 0.0.1" in listed["ep:csv"]["provider"]


def test_every_hook_is_documented() -> None:
    from laredo import hookspecs

    doc = (REPO / "docs" / "plugin_hooks.md").read_text()
    hooks = [n for n in dir(hookspecs) if n.startswith("laredo_")]
    assert hooks
    missing = [h for h in hooks if f"`{h}" not in doc]
    assert not missing, f"undocumented hooks in docs/plugin_hooks.md: {missing}"


def test_errors_pickle() -> None:
    import pickle

    for exc in (
        laredo.ConfigError(["a", "b"]),
        laredo.MissingDependencyError("pyarrow", "parquet"),
        laredo.SourceError("x"),
        laredo.ReBaselineRequired("y"),
    ):
        back = pickle.loads(pickle.dumps(exc))
        assert type(back) is type(exc) and str(back) == str(exc)
    assert "pip install pyarrow" in str(laredo.MissingDependencyError("pyarrow"))
    assert os.environ.get("LAREDO_NOT_SET") is None
