"""laredo.preflight and laredo.config.run_checks: the check registry and hook, the fields a
pipeline reads (traced through transforms), and how checks are run and reported."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import laredo
import pytest
from laredo.config import load_engine_config, run_checks, table_uses
from laredo.preflight import (
    CheckRegistry,
    CheckReport,
    CheckRequest,
    FieldUse,
    Finding,
    Severity,
    TableUse,
    declared_fields,
    missing_field_findings,
)
from laredo.testing import RecordingTarget, TestSource
from pydantic import BaseModel, ConfigDict

USERS = laredo.TableIdentifier("public", "users")


class IndexOpts(BaseModel):
    name: str
    fields: list[str]


class MemLikeOptions(BaseModel):
    """A target options model that declares indexes, as targets do for the Query service."""

    model_config = ConfigDict(extra="forbid")
    lookup_fields: list[str] = []
    indexes: list[IndexOpts] = []


class KeyedOptions(BaseModel):
    """A target options model that declares what it reads itself."""

    model_config = ConfigDict(extra="forbid")
    key: str = "id"

    def fields_read(self) -> list[tuple[str, str]]:
        return [("key", self.key)]


class Upper:
    """A custom transform that says nothing about the fields it maps."""

    def transform(self, table: Any, row: dict[str, Any]) -> dict[str, Any]:
        return {k.upper(): v for k, v in row.items()}


class SrcOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")
    columns: list[str] = ["id", "email", "name", "team"]
    boom: bool = False


class CheckPlugin:
    """A ``cols`` source whose check reports missing fields against ``columns``."""

    def __init__(self) -> None:
        self.requests: list[CheckRequest] = []
        self.threads: set[str] = set()

    @laredo.hookimpl
    def laredo_register_sources(self, registry: Any) -> None:
        registry.add("cols", lambda **kw: TestSource(), options=SrcOptions)

    @laredo.hookimpl
    def laredo_register_targets(self, registry: Any) -> None:
        # in memory (not durable): no finding about the source's resumption
        registry.add("memlike", lambda **kw: RecordingTarget(durable=False), options=MemLikeOptions)
        registry.add("keyed", lambda **kw: RecordingTarget(durable=False), options=KeyedOptions)

    @laredo.hookimpl
    def laredo_register_transforms(self, registry: Any) -> None:
        registry.add("upper", Upper)

    @laredo.hookimpl
    def laredo_register_checks(self, registry: CheckRegistry) -> None:
        registry.add("source", "cols", self.check, description="columns exist")
        registry.add("source", "cols", self.check)  # the same function twice: ignored
        registry.add("target", "keyed", self.target_check)

    def check(self, request: CheckRequest) -> list[Finding]:
        self.requests.append(request)
        self.threads.add(threading.current_thread().name)
        if request.options.boom:
            raise RuntimeError("postgresql://u:hunter2@db/x unreachable")
        out = [Finding.info("SEEN", f"{len(request.tables)} table(s)")]
        for use in request.tables:
            out += missing_field_findings(use, request.options.columns)
        return out

    def target_check(self, request: CheckRequest) -> list[Finding]:
        return [Finding.warning("TARGET_SEEN", request.options.key, "none", where="custom.path")]


@pytest.fixture
def plugin() -> Iterator[CheckPlugin]:
    pm = laredo.get_plugin_manager()
    p = CheckPlugin()
    pm.register(p, name="check-plugin")
    yield p
    pm.unregister(p)


def config(**target: Any) -> Any:
    return load_engine_config(
        {
            "sources": {"s": {"type": "cols"}},
            "tables": [{"source": "s", "table": "users", "targets": [target]}],
        }
    )


def test_registry_validates_kinds_and_ignores_duplicates() -> None:
    reg = CheckRegistry()

    def check(request: CheckRequest) -> list[Finding]:
        return []

    reg.add("source", "x", check)
    reg.add("source", "x", check)
    assert [e.check for e in reg.get("source", "x")] == [check]
    assert reg.get("target", "x") == [] and ("source", "x") in reg
    with pytest.raises(laredo.ConfigError, match="unknown plugin kind"):
        reg.add("sources", "x", check)
    with pytest.raises(laredo.ConfigError, match="not callable"):
        reg.add("source", "y", "nope")  # type: ignore[arg-type]


def test_fields_are_traced_back_through_transforms(plugin: CheckPlugin) -> None:
    model = config(
        type="memlike",
        lookup_fields=["mail"],
        indexes=[{"name": "by_team", "fields": ["squad", "seen"]}],
        filters=[{"type": "field-equals", "field": "name", "value": "a"}],
        transforms=[
            {"type": "rename-fields", "mapping": {"email": "mail", "team": "squad"}},
            {"type": "drop-fields", "fields": ["name"]},
            {"type": "add-timestamp", "field": "seen"},
        ],
        ttl={"field": "seen"},
    )
    (use,) = table_uses(model)
    t = "tables.0.targets.0"
    assert use.table == USERS and use.where == "tables.0"
    assert set(use.fields) == {
        FieldUse("name", f"{t}.filters.0.field"),
        FieldUse("email", f"{t}.transforms.0.mapping.email"),
        FieldUse("team", f"{t}.transforms.0.mapping.team"),
        FieldUse("name", f"{t}.transforms.1.fields.0"),
        FieldUse("email", f"{t}.lookup_fields.0"),  # renamed back to the source's column
        FieldUse("team", f"{t}.indexes.0.fields.0"),
        # 'seen' is written by add-timestamp (index field and TTL): nothing to check
    }
    # after a transform that does not declare its mapping, nothing is guessed
    opaque = config(type="memlike", lookup_fields=["ID"], transforms=[{"type": "upper"}])
    assert table_uses(opaque)[0].fields == ()
    # a lookup field that a transform drops is not a source field any more
    dropped = config(
        type="memlike",
        lookup_fields=["name"],
        transforms=[{"type": "drop-fields", "fields": ["name"]}],
    )
    assert [u.where for u in table_uses(dropped)[0].fields] == [f"{t}.transforms.0.fields.0"]


def test_declared_fields_of_components() -> None:
    assert declared_fields(object()) is None
    assert declared_fields(laredo.FieldRegex("name", "^a")) == [("field", "name")]
    assert declared_fields(KeyedOptions(key="k")) == [("key", "k")]
    opts = MemLikeOptions(lookup_fields=["a"], indexes=[IndexOpts(name="i", fields=["b", "c"])])
    assert declared_fields(opts) == [
        ("lookup_fields.0", "a"),
        ("indexes.0.fields.0", "b"),
        ("indexes.0.fields.1", "c"),
    ]
    rename = laredo.RenameFields({"a": "b", "b": "a", "c": "d"})
    assert [rename.input_field(n) for n in ("a", "b", "d", "c", "z")] == ["b", "a", "c", None, "z"]


def test_run_checks_reports_every_finding_with_its_place(plugin: CheckPlugin) -> None:
    model = config(
        type="keyed", key="emial", filters=[{"type": "field-prefix", "field": "nme", "prefix": "x"}]
    )
    report = run_checks(model, timeout=3)
    assert report.checked == ("sources.s (cols)", "tables.0.targets.0 (keyed)")
    got = [(f.severity, f.code, f.where) for f in report.findings]
    t = "tables.0.targets.0"
    assert got == [
        (Severity.INFO, "SEEN", "sources.s"),  # the runner fills in the plugin's place
        (Severity.ERROR, "COLUMN_NOT_FOUND", f"{t}.filters.0.field"),
        (Severity.ERROR, "COLUMN_NOT_FOUND", f"{t}.key"),
        (Severity.WARNING, "TARGET_SEEN", "custom.path"),
    ]
    by_where = {f.where: f for f in report.findings}
    assert "did you mean 'email'" in by_where[f"{t}.key"].fix
    assert "did you mean 'name'" in by_where[f"{t}.filters.0.field"].fix
    (request,) = plugin.requests
    assert isinstance(request.options, SrcOptions) and request.timeout == 3
    assert not report.ok and not report.passed() and len(report.errors) == 2
    assert report.to_dict()["errors"] == 2 and report.to_dict()["findings"][0]["code"] == "SEEN"
    assert plugin.threads and all(n.startswith("check") for n in plugin.threads)


def test_a_failing_check_is_an_error_finding_with_secrets_masked(plugin: CheckPlugin) -> None:
    model = load_engine_config(
        {
            "sources": {"s": {"type": "cols", "boom": True}},
            "tables": [{"source": "s", "table": "users", "targets": [{"type": "memlike"}]}],
        }
    )
    (f,) = run_checks(model).findings
    assert (f.severity, f.code, f.where) == (Severity.ERROR, "CHECK_FAILED", "sources.s")
    assert "RuntimeError" in f.message and "hunter2" not in f.message


def test_no_checks_no_findings_and_strict_counts_warnings(plugin: CheckPlugin) -> None:
    empty = run_checks(config(type="memlike"), checks=CheckRegistry())
    assert empty.ok and empty.findings == () and empty.checked == ()
    assert plugin.requests == []
    report = CheckReport((Finding.warning("W", "w", "fix"), Finding.info("I", "i")), ("a",))
    assert report.ok and report.passed() and not report.passed(strict=True)


def test_missing_field_findings_without_a_close_match() -> None:
    use = TableUse(USERS, "tables.0", (FieldUse("zzz", "tables.0.targets.0.ttl.field"),))
    (f,) = missing_field_findings(use, ["id"])
    assert f.table == USERS and f.where == "tables.0.targets.0.ttl.field"
    assert "did you mean" not in f.fix and "columns: id" in f.message
