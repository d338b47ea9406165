"""The core snapshot-store conformance suite, run against S3 (moto server)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from laredo.testing.snapshot_conformance import SnapshotStoreConformance
from laredo_snapshot_s3 import S3SnapshotStore

pytestmark = pytest.mark.integration


class TestS3SnapshotStoreConformance(SnapshotStoreConformance):
    @pytest.fixture
    def make_store(self, moto_server: Any, s3_bucket: str) -> Callable[[], S3SnapshotStore]:
        return lambda: S3SnapshotStore(
            s3_bucket, prefix="conformance/", endpoint_url=moto_server.endpoint_url
        )
