"""The ``s3`` stores' preflight checks against moto: a reachable bucket, a missing one, an
unreachable endpoint; registered for both store kinds through the plugin hook."""

from __future__ import annotations

from typing import Any

import laredo
import pytest
from laredo.preflight import CheckRequest, Severity
from laredo_snapshot_s3._plugin import S3DeadLetterStoreOptions, S3SnapshotStoreOptions
from laredo_snapshot_s3.checks import check_bucket

pytestmark = pytest.mark.integration


def request(options: Any, kind: str = "snapshot_store") -> CheckRequest:
    return CheckRequest(kind, "s3", "snapshot.store_config", options, timeout=2)


def test_bucket_checks(moto_server: Any, s3_bucket: str) -> None:
    ok = S3SnapshotStoreOptions(bucket=s3_bucket, endpoint_url=moto_server.endpoint_url)
    (found,) = check_bucket(request(ok))
    assert (found.severity, found.code) == (Severity.INFO, "S3_BUCKET")

    missing = S3DeadLetterStoreOptions(
        bucket=f"{s3_bucket}-nope", endpoint_url=moto_server.endpoint_url
    )
    (found,) = check_bucket(request(missing, "dead_letter_store"))
    assert (found.severity, found.code) == (Severity.ERROR, "S3_BUCKET_NOT_FOUND")
    assert found.where == "snapshot.store_config.bucket" and "aws s3 mb" in found.fix

    down = S3SnapshotStoreOptions(bucket=s3_bucket, endpoint_url="http://127.0.0.1:1")
    (found,) = check_bucket(request(down))
    assert (found.severity, found.code) == (Severity.ERROR, "S3_UNREACHABLE")


def test_checks_are_registered_for_both_store_kinds() -> None:
    checks = laredo.get_plugin_manager().checks()
    for kind in ("snapshot_store", "dead_letter_store"):
        (entry,) = checks.get(kind, "s3")
        assert "laredo-snapshot-s3" in entry.provider
