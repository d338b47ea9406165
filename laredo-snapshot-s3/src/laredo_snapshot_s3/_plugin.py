"""laredo-snapshot-s3's plugin registration: snapshot store ``s3`` and dead-letter store ``s3``.

boto3 is imported when a store connects, not when the plugin is registered.
"""

from __future__ import annotations

from collections.abc import Iterable

from laredo.hookspecs import hookimpl
from laredo.plugins import Registry
from laredo.preflight import CheckRegistry, CheckRequest, Finding
from laredo.units import Size
from pydantic import BaseModel, ConfigDict, Field

from .dead_letters import S3DeadLetterStore
from .store import S3SnapshotStore


class S3SnapshotStoreOptions(BaseModel):
    """Options of ``laredo.snapshot_store("s3", ...)`` (credentials: the AWS chain)."""

    model_config = ConfigDict(extra="forbid")

    bucket: str = Field(min_length=1, description="S3 bucket holding the snapshots")
    prefix: str = Field("", description="key prefix, e.g. 'laredo/snapshots'")
    region: str | None = Field(None, description="AWS region (default: the AWS chain's)")
    endpoint_url: str | None = Field(None, description="S3-compatible endpoint (MinIO, moto)")
    profile: str | None = Field(None, description="AWS shared-config profile name")
    part_size: Size = Field(
        8 * 1024 * 1024,
        ge=5 * 1024 * 1024,
        description="multipart part size: bytes, or a size such as '8MiB' or '16MB'",
    )


class S3DeadLetterStoreOptions(BaseModel):
    """Options of ``laredo.dead_letter_store("s3", ...)``."""

    model_config = ConfigDict(extra="forbid")

    bucket: str = Field(min_length=1)
    prefix: str = "dead-letters"
    region: str | None = None
    endpoint_url: str | None = None
    profile: str | None = None


@hookimpl
def laredo_register_snapshot_stores(registry: Registry) -> None:
    registry.add(
        "s3",
        S3SnapshotStore,
        options=S3SnapshotStoreOptions,
        description="snapshots in S3 (streaming multipart upload, metadata written last)",
    )


@hookimpl
def laredo_register_dead_letter_stores(registry: Registry) -> None:
    registry.add(
        "s3",
        S3DeadLetterStore,
        options=S3DeadLetterStoreOptions,
        description="one S3 object per dead letter",
    )


def _check_bucket(request: CheckRequest) -> Iterable[Finding]:
    from .checks import check_bucket  # noqa: PLC0415 - lazy: boto3 loads only when a check runs

    return check_bucket(request)


@hookimpl
def laredo_register_checks(registry: CheckRegistry) -> None:
    desc = "the bucket exists and can be listed (read-only)"
    registry.add("snapshot_store", "s3", _check_bucket, description=desc)
    registry.add("dead_letter_store", "s3", _check_bucket, description=desc)
