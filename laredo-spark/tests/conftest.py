"""One SparkSession (local[2], a failed task retried once) for the whole test session,
loopback only.

The moto server (with its fake AWS credentials in the environment) starts first, so the
Spark JVM and its Python workers inherit the credentials: executors build their own S3
clients from the AWS chain, as on a cluster.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture(scope="session")
def spark(moto_server: Any) -> Iterator[Any]:
    from laredo_spark import spark_session

    session = spark_session(
        "local[2,2]",
        "laredo-tests",
        conf={"spark.sql.shuffle.partitions": "2", "spark.default.parallelism": "2"},
    )
    try:
        yield session
    finally:
        session.stop()
