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
