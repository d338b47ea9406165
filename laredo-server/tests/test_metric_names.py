"""Metric names follow Prometheus's conventions (the lint of ``promtool check metrics``).

A Python re-statement of promtool's name rules checks every metric the server can export and
always runs; when ``promtool`` is installed (Debian package ``prometheus``) it also reads a live
``/metrics`` and must agree. The Go Laredo names that fail the lint are kept, each beside a
conformant twin, until 0.3; ``observability.metrics.deprecated_names = false`` drops them.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import urllib.request
from pathlib import Path

import pytest
from laredo.events import ValidationResult
from laredo.types import TableIdentifier
from laredo_server.config import load_string
from laredo_server.metrics import DEPRECATED_METRICS, PrometheusObserver
from laredo_server.serve import runtime_from_config

from .testkit import Harness

_NON_BASE_UNITS = {
    "milliseconds",
    "microseconds",
    "nanoseconds",
    "minutes",
    "hours",
    "days",
    "weeks",
    "kilobytes",
    "megabytes",
    "gigabytes",
    "bits",
    "percent",
}
_ABBREVIATED = {"s", "ms", "us", "ns", "sec", "min", "b", "kb", "mb", "gb", "tb", "pb"}
_TYPES = {"counter", "gauge", "histogram", "summary", "untyped"}


def lint_name(name: str, kind: str, help_: str) -> list[str]:
    """promtool's name rules (client_golang ``promlint``), as messages."""
    out = []
    tokens = name.split("_")
    if not help_:
        out.append("no help text")
    if not re.fullmatch(r"[a-z_][a-z0-9_]*", name):
        out.append("metric names should be written in 'snake_case' not 'camelCase'")
    if kind == "counter" and not name.endswith("_total"):
        out.append('counter metrics should have "_total" suffix')
    if kind != "counter" and name.endswith("_total"):
        out.append('non-counter metrics should not have "_total" suffix')
    if kind not in ("histogram", "summary"):
        for suffix in ("_count", "_sum", "_bucket"):
            if name.endswith(suffix):
                out.append(
                    f'non-histogram and non-summary metrics should not have "{suffix}" suffix'
                )
    if _NON_BASE_UNITS & set(tokens):
        out.append("use base units (seconds, bytes)")
    if _ABBREVIATED & set(tokens):
        out.append("metric names should not contain abbreviated units")
    if _TYPES & set(tokens[1:]):
        out.append("metric name should not include the metric type")
    return out


def lint_text(text: str) -> dict[str, list[str]]:
    """Problems per metric family of an exposition text."""
    kinds = dict(re.findall(r"^# TYPE (\S+) (\S+)$", text, re.MULTILINE))
    helps = dict(re.findall(r"^# HELP (\S+) (.*)$", text, re.MULTILINE))
    found = {n: lint_name(n, k, helps.get(n, "")) for n, k in kinds.items()}
    return {n: p for n, p in found.items() if p}


def test_every_metric_name_is_conformant_but_the_deprecated_go_names() -> None:
    declared = PrometheusObserver.families()
    problems = {n: lint_name(n, k, h) for n, k, h in declared if lint_name(n, k, h)}
    assert problems.keys() == DEPRECATED_METRICS.keys(), problems
    names = {n for n, _k, _h in declared}
    for old, new in DEPRECATED_METRICS.items():
        assert problems[old] == [
            'non-histogram and non-summary metrics should not have "_count" suffix'
        ]
        assert new in names and not lint_name(new, "gauge", "x")


def test_the_python_lint_catches_what_promtool_catches() -> None:
    assert lint_name("laredo_rows", "counter", "h") == [
        'counter metrics should have "_total" suffix'
    ]
    assert lint_name("laredo_x_total", "gauge", "h") == [
        'non-counter metrics should not have "_total" suffix'
    ]
    assert lint_name("laredo_wait_ms", "gauge", "h") == [
        "metric names should not contain abbreviated units"
    ]
    assert lint_name("laredo_waitTime", "gauge", "") == [
        "no help text",
        "metric names should be written in 'snake_case' not 'camelCase'",
    ]


def scrape(h: Harness) -> str:
    with urllib.request.urlopen(
        f"http://127.0.0.1:{h.rt.listeners.health_port}/metrics", timeout=10
    ) as r:
        text: str = r.read().decode()
        return text


def promtool(text: str) -> tuple[int, str]:
    exe = shutil.which("promtool")
    if exe is None:
        pytest.skip(
            "promtool not installed (Debian: apt-get install prometheus); "
            "test_every_metric_name_is_conformant_but_the_deprecated_go_names covers the names"
        )
    done = subprocess.run(
        [exe, "check", "metrics"],
        input=text,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return done.returncode, done.stdout + done.stderr


def test_live_metrics_pass_the_lint_and_promtool_agrees(tmp_path: Path) -> None:
    h = Harness(tmp_path).start()
    try:
        h.rt.metrics.on_event(
            ValidationResult("users", TableIdentifier("public", "users"), 25, 25, True)
        )
        text = scrape(h)
        assert (
            "laredo_validation_target_rows{" in text
            and "laredo_validation_target_row_count{" in text
        )
        assert lint_text(text).keys() == DEPRECATED_METRICS.keys()
        h.rt.metrics.deprecated_names = False
        clean = scrape(h)
        assert "laredo_validation_target_rows{" in clean and "_row_count" not in clean
        assert lint_text(clean) == {}
        code, out = promtool(text)
        assert sorted(line.split()[0] for line in out.splitlines() if line.strip()) == sorted(
            DEPRECATED_METRICS
        )
        code, out = promtool(clean)
        assert code == 0 and out.strip() == "", out
    finally:
        h.stop()


def test_deprecated_names_follow_the_config(quicktest_plugin: None) -> None:
    text = """
    sources { src { type = quicktest } }
    tables = [ { source = src, table = users, targets = [ { type = indexed-memory } ] } ]
    grpc.port = 0
    health.enabled = false
    """
    for value in (True, False):
        loaded = load_string(
            text + f"observability.metrics.deprecated_names = {str(value).lower()}"
        )
        assert loaded.model is not None
        assert runtime_from_config(loaded.model).metrics.deprecated_names is value
