"""The ``kinesis`` source's preflight check against moto: stream, baseline bucket, manifest and
checkpoint table, each missing in turn; an unreachable endpoint is one finding."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import laredo
import pytest
from laredo.preflight import CheckRequest, Severity
from laredo_source_kinesis._plugin import KinesisSourceOptions
from laredo_source_kinesis.checks import check_source

pytestmark = pytest.mark.integration


def findings(**options: Any) -> set[tuple[Severity, str, str]]:
    opts = KinesisSourceOptions(**options)
    found = check_source(CheckRequest("source", "kinesis", "sources.k", opts, timeout=2))
    assert all(f.fix for f in found if f.severity is Severity.ERROR)
    return {(f.severity, f.code, f.where) for f in found}


def test_kinesis_checks(
    moto_server: Any,
    s3_bucket: str,
    make_kinesis_stream: Callable[..., str],
    dynamodb_table_name: str,
) -> None:
    stream = make_kinesis_stream(shards=2)
    base = {"endpoint_url": moto_server.endpoint_url, "baseline_bucket": s3_bucket}
    assert findings(stream_name=stream, **base) == {(Severity.INFO, "KINESIS_STREAM", "")}
    E = Severity.ERROR
    assert findings(
        stream_name=f"{stream}-x",
        endpoint_url=moto_server.endpoint_url,
        baseline_bucket=f"{s3_bucket}-x",
        checkpoint_table=dynamodb_table_name,
    ) == {
        (E, "KINESIS_STREAM_NOT_FOUND", "sources.k.stream_name"),
        (E, "S3_BUCKET_NOT_FOUND", "sources.k.baseline_bucket"),
        (E, "DYNAMODB_TABLE_NOT_FOUND", "sources.k.checkpoint_table"),
    }
    assert findings(
        stream_name=stream,
        manifest_key="nope/manifest.json",
        checkpoint_table=dynamodb_table_name,
        create_checkpoint_table=True,
        **base,
    ) == {
        (Severity.INFO, "KINESIS_STREAM", ""),
        (E, "S3_MANIFEST_NOT_FOUND", "sources.k.manifest_key"),
        (Severity.INFO, "DYNAMODB_TABLE_WILL_BE_CREATED", "sources.k.checkpoint_table"),
    }
    assert findings(
        stream_name=stream, baseline_bucket=s3_bucket, endpoint_url="http://127.0.0.1:1"
    ) == {(E, "AWS_UNREACHABLE", "sources.k")}


def test_registered_for_both_names() -> None:
    checks = laredo.get_plugin_manager().checks()
    assert len(checks.get("source", "kinesis")) == len(checks.get("source", "s3-kinesis")) == 1
