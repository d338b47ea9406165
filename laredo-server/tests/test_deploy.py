"""The alert rules and the Grafana dashboard under ``deploy/``: ``promtool check rules`` is
clean, ``promtool test rules`` passes, every rule carries a runbook line and is unit-tested both
firing and not firing, and every metric they name is one the server exports (the live check on
real PostgreSQL is ``test_status_page_e2e.py``).

promtool comes from Debian's ``prometheus`` package, which ``.ci/run`` installs: without it
these tests skip on a developer machine and fail in CI (``CI`` set).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
RULES = REPO / "deploy" / "prometheus" / "laredo-rules.yml"
RULE_TESTS = REPO / "deploy" / "prometheus" / "laredo-rules.test.yml"
DASHBOARD = REPO / "deploy" / "grafana" / "laredo.json"
_METRIC = re.compile(r"\blaredo_[a-z0-9_]+\b")


def promtool() -> str:
    exe = shutil.which("promtool")
    if exe is None:
        if os.environ.get("CI"):
            pytest.fail("promtool is missing: .ci/run installs Debian's prometheus package")
        pytest.skip("promtool not installed (Debian: apt-get install prometheus)")
    return exe


def rules() -> list[dict[str, Any]]:
    doc = yaml.safe_load(RULES.read_text())
    return [r for g in doc["groups"] for r in g["rules"]]


def rule_metrics() -> set[str]:
    return {m for r in rules() for m in _METRIC.findall(r["expr"])}


def dashboard_metrics() -> set[str]:
    doc = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in doc["panels"] for t in p.get("targets", [])]
    exprs += [v["definition"] for v in doc["templating"]["list"] if "definition" in v]
    return {m for e in exprs for m in _METRIC.findall(e)}


def run(*args: str) -> tuple[int, str]:
    done = subprocess.run(
        [promtool(), *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=RULES.parent,
    )
    return done.returncode, done.stdout + done.stderr


def test_promtool_checks_the_rules_clean() -> None:
    code, out = run("check", "rules", RULES.name)
    assert code == 0, out
    assert f"SUCCESS: {len(rules())} rules found" in out, out


def test_promtool_unit_tests_of_the_rules_pass() -> None:
    code, out = run("test", "rules", RULE_TESTS.name)
    assert code == 0 and "SUCCESS" in out, out


def test_a_broken_rule_fails_its_unit_test(tmp_path: Path) -> None:
    """The unit tests can fail: a rule with the wrong threshold does."""
    shutil.copy(RULE_TESTS, tmp_path / RULE_TESTS.name)
    text = RULES.read_text().replace("> 10737418240", "> 1073741824000")
    (tmp_path / RULES.name).write_text(text)
    done = subprocess.run(
        [promtool(), "test", "rules", RULE_TESTS.name],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=tmp_path,
    )
    assert done.returncode != 0 and "LaredoSlotWalRetainedHigh" in done.stdout + done.stderr


def test_every_rule_has_a_runbook_and_tests_that_fire_and_do_not() -> None:
    names = [r["alert"] for r in rules()]
    assert names == [
        "LaredoPipelineError",
        "LaredoNotReady",
        "LaredoAckLagHigh",
        "LaredoSlotWalRetainedHigh",
        "LaredoSnapshotOverdue",
        "LaredoDeadLettersGrowing",
    ]
    for r in rules():
        assert r["annotations"]["runbook"].strip(), r["alert"]
        assert r["labels"]["severity"] in ("warning", "critical"), r["alert"]
    fires: set[str] = set()
    quiet: set[str] = set()
    for case in yaml.safe_load(RULE_TESTS.read_text())["tests"]:
        for check in case.get("alert_rule_test", []):
            (fires if check["exp_alerts"] else quiet).add(check["alertname"])
    assert fires == set(names) and quiet == set(names)


def test_the_dashboard_is_grafana_json_over_the_rules_metrics() -> None:
    doc = json.loads(DASHBOARD.read_text())
    assert doc["uid"] == "laredo-overview" and doc["panels"]
    ids = [p["id"] for p in doc["panels"]]
    assert len(ids) == len(set(ids))
    for p in doc["panels"]:
        assert p["datasource"]["uid"] == "${datasource}", p["title"]
        assert p["targets"], p["title"]
    # the dashboard shows everything an alert is about
    assert rule_metrics() <= dashboard_metrics()


FRESH_CONFIG = """
sources { src { type = quicktest } }
tables = [ { source = src, table = users, targets = [ { type = indexed-memory } ] } ]
grpc.port = 0
health.port = %d
observability.metrics.deprecated_names = false
"""


def test_a_fresh_server_exports_every_metric_of_the_rules_and_dashboard(
    quicktest_plugin: None,
) -> None:
    """No snapshot store, no dead-letter store, no event yet: every family the rules and the
    dashboard name is exported (HELP and TYPE), the counters of each pipeline and source are
    at zero, and promtool reads the exposition clean."""
    from laredo.testing import free_port
    from laredo_server.config import load_string
    from laredo_server.serve import runtime_from_config

    port = free_port()
    loaded = load_string(FRESH_CONFIG % port)
    assert loaded.model is not None
    rt = runtime_from_config(loaded.model)
    rt.start()
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
            text = r.read().decode()
    finally:
        rt.stop(grace=5)
    typed = set(re.findall(r"^# TYPE (\S+) ", text, re.MULTILINE))
    helped = set(re.findall(r"^# HELP (\S+) ", text, re.MULTILINE))
    wanted = rule_metrics() | dashboard_metrics()
    assert {
        "laredo_snapshot_age_seconds",
        "laredo_snapshot_schedule_seconds",
        "laredo_dead_letter_backlog",
    } <= wanted
    assert not wanted - typed, wanted - typed
    assert not wanted - helped, wanted - helped
    pipe = 'pipeline="src:public.users:indexed-memory",source="src",table="public.users"'
    for sample in (
        f"laredo_dead_letter_backlog{{{pipe}}} 0",
        f"laredo_dead_letters_total{{{pipe}}} 0",
        f'laredo_changes_applied_total{{{pipe},action="insert"}} 0',
        f'laredo_change_errors_total{{{pipe},action="update"}} 0',
        'laredo_source_disconnects_total{source="src"} 0',
        'laredo_snapshots_total{outcome="failed"} 0',
    ):
        assert sample in text.splitlines(), sample
    code, out = _check_metrics(text)
    assert code == 0 and out.strip() == "", out


def _check_metrics(text: str) -> tuple[int, str]:
    done = subprocess.run(
        [promtool(), "check", "metrics"],
        input=text,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return done.returncode, done.stdout + done.stderr
