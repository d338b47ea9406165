"""The preflight check of the ``kinesis`` source (``laredo check``; ``laredo serve`` at
startup): the stream exists and is active, the baseline bucket (and a configured manifest) can
be read, the checkpoint table exists or will be created.

Read-only (``DescribeStreamSummary``, ``HeadBucket``, ``ListObjectsV2``, ``HeadObject``,
``DescribeTable``); one attempt per call, bounded by the request's timeout. Codes:
``KINESIS_STREAM_NOT_FOUND``, ``KINESIS_STREAM_NOT_ACTIVE``, ``S3_BUCKET_NOT_FOUND``,
``S3_MANIFEST_NOT_FOUND``, ``DYNAMODB_TABLE_NOT_FOUND``, ``AWS_ACCESS_DENIED``,
``AWS_UNREACHABLE``, ``AWS_CREDENTIALS_MISSING``, ``AWS_PROFILE_NOT_FOUND``; infos
``KINESIS_STREAM``, ``DYNAMODB_TABLE_WILL_BE_CREATED``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from laredo.errors import aws_error_code
from laredo.preflight import CheckRequest, Finding

__all__ = ["check_source"]

_NOT_FOUND = ("404", "NoSuchBucket", "NotFound", "NoSuchKey", "ResourceNotFoundException")
_DENIED = ("403", "AccessDenied", "AccessDeniedException", "UnrecognizedClientException")


class _Aws:
    """boto3 clients for one check, and the findings of calls that fail."""

    def __init__(self, options: Any, where: str, timeout: float) -> None:
        import boto3  # noqa: PLC0415 - lazy: boto3 loads only when a check runs
        from botocore.config import Config  # noqa: PLC0415 - lazy: as above

        self.where = where
        self.options = options
        self.fatal: Finding | None = None
        self._config = Config(
            connect_timeout=timeout, read_timeout=timeout, retries={"max_attempts": 1}
        )
        self._session = boto3.session.Session(profile_name=options.profile)

    def client(self, service: str) -> Any:
        return self._session.client(
            service,
            region_name=self.options.region,
            endpoint_url=self.options.endpoint_url,
            config=self._config,
        )

    def call(
        self,
        what: str,
        fn: Callable[[], Any],
        not_found: Callable[[], Finding],
        denied_actions: str,
    ) -> tuple[Any, Finding | None]:
        """``fn()`` and None, or None and the finding of its failure (``self.fatal`` is set
        when the failure is not about this resource: credentials, profile, endpoint)."""
        from botocore import exceptions as bx  # noqa: PLC0415 - lazy: as above

        try:
            return fn(), None
        except bx.ClientError as exc:
            code = aws_error_code(exc)
            if code in _NOT_FOUND:
                return None, not_found()
            if code in _DENIED:
                return None, Finding.error(
                    "AWS_ACCESS_DENIED",
                    f"{what}: access denied to this identity ({code})",
                    f"allow {denied_actions}",
                    where=self.where,
                )
            return None, Finding.error("AWS_ERROR", f"{what}: {exc}", "see the message")
        except (bx.NoCredentialsError, bx.PartialCredentialsError) as exc:
            self.fatal = Finding.error(
                "AWS_CREDENTIALS_MISSING",
                f"no AWS credentials found: {exc}",
                "set AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, a profile (profile = ...), or "
                "run with an instance or task role",
                where=self.where,
            )
        except (bx.EndpointConnectionError, bx.ConnectTimeoutError, bx.ReadTimeoutError) as exc:
            self.fatal = Finding.error(
                "AWS_UNREACHABLE",
                f"{what}: cannot reach AWS: {exc}",
                f"check the network and {self.where}.endpoint_url / region",
                where=self.where,
            )
        return None, self.fatal


def check_source(request: CheckRequest) -> list[Finding]:
    """The findings of the ``kinesis`` source at ``request.where`` (see the module doc)."""
    from botocore.exceptions import ProfileNotFound  # noqa: PLC0415 - lazy: as above

    opts = request.options
    where = request.where
    try:
        aws = _Aws(opts, where, request.timeout)
    except ProfileNotFound as exc:
        return [
            Finding.error(
                "AWS_PROFILE_NOT_FOUND",
                str(exc),
                f"correct {where}.profile, or add the profile to ~/.aws/config",
                where=f"{where}.profile",
            )
        ]
    out: list[Finding] = []
    stream = opts.stream_name
    kinesis = aws.client("kinesis")
    summary, problem = aws.call(
        f"Kinesis stream {stream!r}",
        lambda: kinesis.describe_stream_summary(StreamName=stream)["StreamDescriptionSummary"],
        lambda: Finding.error(
            "KINESIS_STREAM_NOT_FOUND",
            f"Kinesis stream {stream!r} does not exist",
            f"create it (aws kinesis create-stream --stream-name {stream} --shard-count 1) or "
            f"correct {where}.stream_name",
            where=f"{where}.stream_name",
        ),
        "kinesis:DescribeStreamSummary, ListShards, GetShardIterator and GetRecords",
    )
    if aws.fatal is not None:
        return [aws.fatal]
    if problem is not None:
        out.append(problem)
    elif summary.get("StreamStatus") not in ("ACTIVE", "UPDATING"):
        out.append(
            Finding.warning(
                "KINESIS_STREAM_NOT_ACTIVE",
                f"Kinesis stream {stream!r} is {summary.get('StreamStatus')}",
                "wait until it is ACTIVE",
                where=f"{where}.stream_name",
            )
        )
    else:
        shards = summary.get("OpenShardCount", "?")
        out.append(Finding.info("KINESIS_STREAM", f"stream {stream!r}: {shards} open shard(s)"))
    s3 = aws.client("s3")
    bucket = opts.baseline_bucket
    _, problem = aws.call(
        f"S3 bucket {bucket!r}",
        lambda: s3.list_objects_v2(Bucket=bucket, Prefix=opts.baseline_prefix, MaxKeys=1),
        lambda: Finding.error(
            "S3_BUCKET_NOT_FOUND",
            f"baseline bucket {bucket!r} does not exist",
            f"create it or correct {where}.baseline_bucket",
            where=f"{where}.baseline_bucket",
        ),
        f"s3:ListBucket and s3:GetObject on arn:aws:s3:::{bucket}",
    )
    if problem is not None:
        out.append(problem)
    elif opts.manifest_key:
        key = opts.manifest_key
        _, problem = aws.call(
            f"manifest s3://{bucket}/{key}",
            lambda: s3.head_object(Bucket=bucket, Key=key),
            lambda: Finding.error(
                "S3_MANIFEST_NOT_FOUND",
                f"manifest s3://{bucket}/{key} does not exist",
                f"write the manifest, or correct {where}.manifest_key (unset: "
                f"<prefix>manifest.json when present)",
                where=f"{where}.manifest_key",
            ),
            f"s3:GetObject on arn:aws:s3:::{bucket}/*",
        )
        if problem is not None:
            out.append(problem)
    table = opts.checkpoint_table
    if table:
        ddb = aws.client("dynamodb")
        missing = Finding.error(
            "DYNAMODB_TABLE_NOT_FOUND",
            f"checkpoint table {table!r} does not exist",
            f"set {where}.create_checkpoint_table = true, or create it (hash key checkpoint_id, "
            "range key shard_id, both strings)",
            where=f"{where}.checkpoint_table",
        )
        if opts.create_checkpoint_table:
            missing = Finding.info(
                "DYNAMODB_TABLE_WILL_BE_CREATED",
                f"checkpoint table {table!r} does not exist: the source creates it",
                where=f"{where}.checkpoint_table",
            )
        _, problem = aws.call(
            f"DynamoDB table {table!r}",
            lambda: ddb.describe_table(TableName=table),
            lambda: missing,
            f"dynamodb:DescribeTable, GetItem, Query, BatchWriteItem on table {table}",
        )
        if problem is not None:
            out.append(problem)
    return out
