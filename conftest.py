"""Scheduling of the whole suite under ``pytest -n 2 --dist loadgroup`` (the ``tests`` nox
session): the JVM (Spark) tests form one xdist group, so one worker holds the Spark session
instead of each worker starting a JVM; every other test is grouped by its file, exactly as
``--dist loadfile`` schedules it."""

from __future__ import annotations

from pathlib import Path

import pytest

JVM_DIRS = (Path(__file__).parent / "laredo-spark" / "tests",)
"""Tests that start a JVM (a SparkSession or a standalone Spark cluster)."""


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not getattr(config.option, "loadgroup", False):  # set on xdist workers
        return
    for item in items:
        if item.get_closest_marker("xdist_group") is not None:
            continue
        path = item.path
        if any(path.is_relative_to(d) for d in JVM_DIRS):
            group = "jvm"
        else:
            group = str(
                path.relative_to(config.rootpath) if path.is_relative_to(config.rootpath) else path
            )
        item.add_marker(pytest.mark.xdist_group(group))
