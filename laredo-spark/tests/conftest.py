"""One SparkSession (local[2]) for the whole test session, loopback only."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    from laredo_spark import spark_session

    session = spark_session(
        "local[2]",
        "laredo-tests",
        conf={"spark.sql.shuffle.partitions": "2", "spark.default.parallelism": "2"},
    )
    try:
        yield session
    finally:
        session.stop()
