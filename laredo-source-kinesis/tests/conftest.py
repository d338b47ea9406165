"""Fixtures for the Kinesis source tests (moto server fixtures come from ``laredo_moto``)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from laredo_source_kinesis import KinesisSource
from laredo_source_kinesis.testing import Runner

FAST = {
    "poll_interval": 0.02,
    "min_fetch_interval": 0.0,
    "shard_refresh_interval": 0.1,
    "heartbeat_interval": 0.1,
    "backoff_initial": 0.01,
    "backoff_max": 0.05,
}


@pytest.fixture
def make_source(moto_server: Any, s3_bucket: str) -> Iterator[Callable[..., KinesisSource]]:
    made: list[KinesisSource] = []

    def make(stream: str, **kwargs: Any) -> KinesisSource:
        opts: dict[str, Any] = {
            "baseline_bucket": s3_bucket,
            "baseline_prefix": "baseline/",
            "endpoint_url": moto_server.endpoint_url,
            **FAST,
        }
        opts.update(kwargs)
        src = KinesisSource(stream, **opts)
        made.append(src)
        return src

    yield make
    for src in made:
        src.close()


@pytest.fixture
def runners() -> Iterator[list[Runner]]:
    started: list[Runner] = []
    yield started
    for r in started:
        r.source.stop_stream()
        r.thread.join(10)
