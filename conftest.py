"""Scheduling of the whole suite under ``pytest -n 2 --dist loadgroup`` (the ``tests`` nox
session): the JVM (Spark) tests form one xdist group, so one worker holds the Spark session
instead of each worker starting a JVM; every other test is grouped by its file, exactly as
``--dist loadfile`` schedules it."""

from __future__ import annotations

from pathlib import Path

import pytest

JVM_DIRS = (Path(__file__).parent / "laredo-spark" / "tests",)
"""Tests that start a JVM (a SparkSession or a standalone Spark cluster)."""


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("dist", "no") != "loadgroup":
        return
    for item in items:
        if item.get_closest_marker("xdist_group") is not None:
            continue
        path = item.path
        jvm = any(path.is_relative_to(d) for d in JVM_DIRS)
        item.add_marker(pytest.mark.xdist_group("jvm" if jvm else str(path)))
