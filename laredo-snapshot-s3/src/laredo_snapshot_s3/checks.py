"""Preflight checks of the ``s3`` snapshot store and dead-letter store (``laredo check``;
``laredo serve`` at startup): the bucket exists and this identity may list it.

Read-only (``HeadBucket``, ``ListObjectsV2`` of one key); one attempt per call, bounded by the
request's timeout. Codes: ``S3_BUCKET_NOT_FOUND``, ``S3_ACCESS_DENIED``, ``S3_UNREACHABLE``,
``AWS_CREDENTIALS_MISSING``, ``AWS_PROFILE_NOT_FOUND``; info ``S3_BUCKET``.
"""

from __future__ import annotations

from typing import Any

from laredo.errors import aws_error_code
from laredo.preflight import CheckRequest, Finding

__all__ = ["check_bucket"]


def _client(options: Any, timeout: float) -> Any:
    import boto3  # noqa: PLC0415 - lazy: boto3 loads only when a check runs
    from botocore.config import Config  # noqa: PLC0415 - lazy: as above

    session = boto3.session.Session(profile_name=options.profile)
    config = Config(connect_timeout=timeout, read_timeout=timeout, retries={"max_attempts": 1})
    return session.client(
        "s3", region_name=options.region, endpoint_url=options.endpoint_url, config=config
    )


def aws_problem(exc: BaseException, where: str) -> Finding | None:
    """The finding of an error that is not about the bucket itself (credentials, profile,
    endpoint), or None."""
    from botocore import exceptions as bx  # noqa: PLC0415 - lazy: as above

    if isinstance(exc, bx.NoCredentialsError | bx.PartialCredentialsError):
        return Finding.error(
            "AWS_CREDENTIALS_MISSING",
            f"no AWS credentials found: {exc}",
            "set AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, a profile (profile = ...), or run "
            "with an instance or task role",
            where=where,
        )
    if isinstance(exc, bx.ProfileNotFound):
        return Finding.error(
            "AWS_PROFILE_NOT_FOUND",
            str(exc),
            f"correct {where}.profile, or add the profile to ~/.aws/config",
            where=f"{where}.profile",
        )
    if isinstance(exc, bx.EndpointConnectionError | bx.ConnectTimeoutError | bx.ReadTimeoutError):
        return Finding.error(
            "S3_UNREACHABLE",
            f"cannot reach S3: {exc}",
            f"check the network and {where}.endpoint_url / region",
            where=where,
        )
    return None


def check_bucket(request: CheckRequest) -> list[Finding]:
    """The bucket of an ``s3`` snapshot or dead-letter store exists and can be listed."""
    from botocore.exceptions import BotoCoreError, ClientError  # noqa: PLC0415 - lazy: as above

    opts = request.options
    where = request.where
    bucket = opts.bucket
    try:
        s3 = _client(opts, request.timeout)
        s3.head_bucket(Bucket=bucket)
        s3.list_objects_v2(Bucket=bucket, Prefix=opts.prefix or "", MaxKeys=1)
    except ClientError as exc:
        code = aws_error_code(exc)
        if code in ("404", "NoSuchBucket", "NotFound"):
            return [
                Finding.error(
                    "S3_BUCKET_NOT_FOUND",
                    f"S3 bucket {bucket!r} does not exist",
                    f"create it (aws s3 mb s3://{bucket}) or correct {where}.bucket",
                    where=f"{where}.bucket",
                )
            ]
        if code in ("403", "AccessDenied", "AllAccessDisabled"):
            return [
                Finding.error(
                    "S3_ACCESS_DENIED",
                    f"access to S3 bucket {bucket!r} is denied to this identity",
                    f"allow s3:ListBucket, s3:GetObject, s3:PutObject and s3:DeleteObject on "
                    f"arn:aws:s3:::{bucket} and arn:aws:s3:::{bucket}/*",
                    where=f"{where}.bucket",
                )
            ]
        return [
            Finding.error(
                "S3_ERROR", f"S3 bucket {bucket!r}: {exc}", "see the message", where=where
            )
        ]
    except BotoCoreError as exc:
        found = aws_problem(exc, where)
        if found is None:
            raise
        return [found]
    return [Finding.info("S3_BUCKET", f"S3 bucket {bucket!r} is reachable", where=where)]
