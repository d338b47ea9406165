"""laredo-source-kinesis's plugin registration: source ``kinesis`` (alias ``s3-kinesis``).

boto3 is imported when the source connects, not when the plugin is registered.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal

from laredo.hookspecs import hookimpl
from laredo.plugins import Registry
from laredo.preflight import CheckRegistry, CheckRequest, Finding
from laredo.units import Duration
from pydantic import BaseModel, ConfigDict, Field

from .source import KinesisSource


class KinesisSourceOptions(BaseModel):
    """Options of ``laredo.source("kinesis", ...)``; see the package README for details.

    Intervals and backoffs are durations (:mod:`laredo.units`): seconds as a number, or text
    such as ``"200ms"``, ``"10s"``, ``"1m"``."""

    model_config = ConfigDict(extra="forbid")

    stream_name: str = Field(min_length=1, description="Kinesis stream carrying change records")
    baseline_bucket: str = Field(min_length=1, description="S3 bucket holding the baseline")
    baseline_prefix: str = Field("", description="key prefix of the baseline objects")
    manifest_key: str | None = Field(
        None, description="manifest object key (default <prefix>manifest.json, if present)"
    )
    checkpoint_table: str | None = Field(
        None, description="DynamoDB table for checkpoints; enables resume"
    )
    checkpoint_id: str | None = Field(None, description="checkpoint partition (default: stream)")
    create_checkpoint_table: bool = False
    region: str | None = None
    endpoint_url: str | None = Field(None, description="one endpoint for S3, Kinesis, DynamoDB")
    profile: str | None = None
    start_at_latest: bool = Field(
        False, description="shards without a position start at LATEST instead of TRIM_HORIZON"
    )
    unknown_tables: Literal["dead_letter", "ignore"] = "dead_letter"
    dead_letter_pipeline: str | None = None
    batch_size: int = Field(1000, ge=1, le=10000)
    poll_interval: Duration = Field(1.0, gt=0)
    min_fetch_interval: Duration = Field(0.2, ge=0)
    shard_refresh_interval: Duration = Field(10.0, gt=0)
    heartbeat_interval: Duration = Field(1.0, gt=0)
    max_retries: int = Field(10, ge=0)
    backoff_initial: Duration = Field(0.1, gt=0)
    backoff_max: Duration = Field(5.0, gt=0)


@hookimpl
def laredo_register_sources(registry: Registry) -> None:
    desc = "S3 baseline + Kinesis change stream, DynamoDB checkpoints"
    registry.add("kinesis", KinesisSource, options=KinesisSourceOptions, description=desc)
    registry.add("s3-kinesis", KinesisSource, options=KinesisSourceOptions, description=desc)


def _check(request: CheckRequest) -> Iterable[Finding]:
    from .checks import check_source  # noqa: PLC0415 - lazy: boto3 loads only when a check runs

    return check_source(request)


@hookimpl
def laredo_register_checks(registry: CheckRegistry) -> None:
    desc = "the stream, baseline bucket and checkpoint table are reachable (read-only)"
    registry.add("source", "kinesis", _check, description=desc)
    registry.add("source", "s3-kinesis", _check, description=desc)
