"""S3 snapshot store.

Layout v2 (the same as the local store's, see :mod:`laredo.snapshots.manifest`), under a key
prefix::

    s3://<bucket>/<prefix>/<snapshot_id>/<schema>.<table>/<part>.<format>   parts of each table
    s3://<bucket>/<prefix>/<snapshot_id>/metadata.json                       written LAST

Each part is written by its serializer straight into a streaming upload: bytes are buffered up
to ``part_size`` (default 8 MiB) and sent as multipart-upload parts, so a snapshot of any size
never sits in memory; its size and SHA-256 go to the manifest. ``metadata.json`` is written only
after every part is complete; ``list``/``describe``/``load`` only see snapshots whose metadata
exists, so a crash or an error mid-save never produces a listed, partial snapshot (staged parts
are deleted on error or by the committing writer; after a crash they are orphans that ``list``
ignores). Many writers (Spark tasks on executors) may write parts of one snapshot; one commits.
Checksums are verified while each part streams (a mismatch fails at the part's end); layout-1
snapshots (one ``<schema>.<table>.<format>`` object per table) still load. ``delete`` removes
``metadata.json`` first for the same reason.

Credentials come from the usual AWS chain (environment, shared config, instance role);
``endpoint_url`` points at S3-compatible services (MinIO, moto). A store pickles (Spark ships it
to the executors that write parts) as its settings: bucket, prefix, region, endpoint URL,
profile and part size; the copy makes its own client from the AWS chain where it is unpickled
(a ``client=`` given to the original is not pickled, its region and endpoint URL are kept).
"""

from __future__ import annotations

import builtins
import contextlib
import logging
import re
import threading
from collections.abc import Iterator, Sequence
from typing import IO, Any

from laredo.errors import (
    ConfigError,
    MissingDependencyError,
    SnapshotError,
    SnapshotNotFoundError,
    aws_error_code,
)
from laredo.snapshots.layout import METADATA, ManifestSnapshotStore
from laredo.snapshots.manifest import check_part_path
from laredo.types import TableIdentifier

from ._s3io import MIN_PART_SIZE, S3UploadWriter, open_object

logger = logging.getLogger(__name__)

_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:=+-]{0,199}$")


def make_s3_client(
    region: str | None = None,
    *,
    endpoint_url: str | None = None,
    profile: str | None = None,
    max_pool_connections: int = 10,
) -> Any:
    """A boto3 client for S3 (imported lazily; credentials from the AWS chain)."""
    return make_client(
        "s3",
        region,
        endpoint_url=endpoint_url,
        profile=profile,
        max_pool_connections=max_pool_connections,
    )


_SESSIONS: dict[str | None, Any] = {}
_SESSION_LOCK = threading.Lock()


def make_client(
    service: str,
    region: str | None = None,
    *,
    endpoint_url: str | None = None,
    profile: str | None = None,
    max_pool_connections: int = 10,
    read_timeout: float = 60.0,
) -> Any:
    """A boto3 client (imported lazily; credentials from the AWS chain).

    Clients come from one cached boto3 session per profile, so service models are loaded
    once per process (a fresh session re-reads them: ~0.1-0.3 s per client).
    """
    try:
        import boto3  # noqa: PLC0415 - lazy: boto3 costs ~0.5 s to import; first use only
        from botocore.config import Config  # noqa: PLC0415 - lazy: as boto3
    except ImportError as exc:
        raise MissingDependencyError("boto3", f"AWS {service}") from exc
    config = Config(
        retries={"mode": "standard", "max_attempts": 8},
        max_pool_connections=max_pool_connections,
        connect_timeout=10,
        read_timeout=read_timeout,
    )
    with _SESSION_LOCK:  # boto3 sessions are not thread-safe while creating clients
        session = _SESSIONS.get(profile)
        if session is None:
            session = boto3.session.Session(profile_name=profile)
            _SESSIONS[profile] = session
        return session.client(service, region_name=region, endpoint_url=endpoint_url, config=config)


def _is_not_found(exc: BaseException) -> bool:
    return aws_error_code(exc) in {"NoSuchKey", "404", "NotFound"}


def normalize_prefix(prefix: str) -> str:
    """``"a/b/"`` and ``"/a/b"`` -> ``"a/b/"``; ``""`` stays ``""``."""
    p = prefix.strip("/")
    return f"{p}/" if p else ""


def table_file_name(table: TableIdentifier, format_id: str) -> str:
    return f"{table.schema}.{table.table}.{format_id}"


class S3Files:
    """The :class:`~laredo.snapshots.layout.SnapshotFiles` backend of an S3 prefix."""

    verify_before_read = False  # reading twice would double the transfer: verify while reading

    def __init__(self, client: Any, bucket: str, prefix: str, part_size: int) -> None:
        self.client = client
        self.bucket = bucket
        self.prefix = prefix
        self.part_size = part_size
        self.where = f"s3://{bucket}/{prefix}"

    def _key(self, snapshot_id: str, path: str) -> str:
        return f"{self.prefix}{snapshot_id}/{path}"

    @contextlib.contextmanager
    def open_write(self, snapshot_id: str, path: str) -> Iterator[IO[bytes]]:
        writer = S3UploadWriter(
            self.client, self.bucket, self._key(snapshot_id, path), part_size=self.part_size
        )
        try:
            yield writer  # type: ignore[misc]
        except BaseException:
            writer.abort()
            raise
        writer.close()

    def _head_size(self, key: str) -> int | None:
        try:
            resp = self.client.head_object(Bucket=self.bucket, Key=key)
        except Exception as exc:
            if _is_not_found(exc):
                return None
            raise SnapshotError(f"s3://{self.bucket}/{key}: {exc}") from exc
        return int(resp["ContentLength"])

    def staged_size(self, snapshot_id: str, path: str) -> int | None:
        return self._head_size(self._key(snapshot_id, path))

    def _keys(self, snapshot_id: str) -> builtins.list[str]:
        keys: builtins.list[str] = []
        paginator = self.client.get_paginator("list_objects_v2")
        for page in paginator.paginate(Bucket=self.bucket, Prefix=self._key(snapshot_id, "")):
            keys.extend(o["Key"] for o in page.get("Contents", []))
        return keys

    def staged_paths(self, snapshot_id: str) -> builtins.list[str]:
        base = len(self._key(snapshot_id, ""))
        return sorted(k[base:] for k in self._keys(snapshot_id) if not k.endswith(METADATA))

    def read_staged(self, snapshot_id: str, path: str) -> bytes:
        key = self._key(snapshot_id, path)
        try:
            data: bytes = self.client.get_object(Bucket=self.bucket, Key=key)["Body"].read()
        except Exception as exc:
            raise SnapshotError(f"reading s3://{self.bucket}/{key}: {exc}") from exc
        return data

    def remove_staged(self, snapshot_id: str, paths: Sequence[str] | None = None) -> None:
        if paths is None:
            keys = [k for k in self._keys(snapshot_id) if not k.endswith(f"/{METADATA}")]
        else:
            keys = [self._key(snapshot_id, p) for p in paths]
        self._delete_keys(keys)

    def publish(self, snapshot_id: str, metadata: bytes) -> None:
        self.client.put_object(
            Bucket=self.bucket,
            Key=self._key(snapshot_id, METADATA),
            Body=metadata,
            ContentType="application/json",
        )

    def exists(self, snapshot_id: str) -> bool:
        return self._head_size(self._key(snapshot_id, METADATA)) is not None

    def read_metadata(self, snapshot_id: str) -> bytes:
        try:
            resp = self.client.get_object(Bucket=self.bucket, Key=self._key(snapshot_id, METADATA))
        except Exception as exc:
            if _is_not_found(exc):
                raise SnapshotNotFoundError(snapshot_id, self.where) from None
            raise SnapshotError(f"reading snapshot {snapshot_id!r} metadata: {exc}") from exc
        data: bytes = resp["Body"].read()
        return data

    def _part_key(self, snapshot_id: str, path: str) -> str:
        """The key of a committed part; ``SnapshotError`` when ``path`` would leave the
        snapshot's prefix (``..``, absolute, backslash)."""
        try:
            return self._key(snapshot_id, check_part_path(path))
        except ValueError as exc:
            raise SnapshotError(f"{self.where}{snapshot_id}/: {exc}") from None

    def open_read(self, snapshot_id: str, path: str) -> IO[bytes]:
        key = self._part_key(snapshot_id, path)
        try:
            return open_object(self.client, self.bucket, key)
        except Exception as exc:
            raise SnapshotError(f"reading s3://{self.bucket}/{key}: {exc}") from exc

    def size(self, snapshot_id: str, path: str) -> int | None:
        return self._head_size(self._part_key(snapshot_id, path))

    def snapshot_ids(self) -> builtins.list[str]:
        ids = []
        paginator = self.client.get_paginator("list_objects_v2")
        for page in paginator.paginate(Bucket=self.bucket, Prefix=self.prefix, Delimiter="/"):
            for cp in page.get("CommonPrefixes", []):
                ids.append(cp["Prefix"][len(self.prefix) :].rstrip("/"))
        return ids

    def delete(self, snapshot_id: str) -> None:
        """``metadata.json`` first (the snapshot stops being listed), then its parts."""
        self.client.delete_object(Bucket=self.bucket, Key=self._key(snapshot_id, METADATA))
        self._delete_keys(self._keys(snapshot_id))

    def layout1_name(self, table: TableIdentifier, format_id: str) -> str:
        return table_file_name(table, format_id)

    def _delete_keys(self, keys: builtins.list[str]) -> None:
        for i in range(0, len(keys), 1000):
            batch = keys[i : i + 1000]
            try:
                self.client.delete_objects(
                    Bucket=self.bucket,
                    Delete={"Objects": [{"Key": k} for k in batch], "Quiet": True},
                )
            except Exception as exc:
                logger.warning(
                    "could not delete %d objects in s3://%s: %s", len(batch), self.bucket, exc
                )


class S3SnapshotStore(ManifestSnapshotStore):
    """``SnapshotStore`` on S3 (see the module docstring for layout and guarantees).

    ``laredo.snapshot_store("s3", bucket="b", prefix="snapshots", region="eu-west-1")``.
    Pass ``client=`` to reuse a configured boto3 S3 client (then ``region``/``endpoint_url``
    are ignored).
    """

    def __init__(
        self,
        bucket: str,
        prefix: str = "",
        *,
        region: str | None = None,
        endpoint_url: str | None = None,
        profile: str | None = None,
        part_size: int = 8 * 1024 * 1024,
        client: Any = None,
    ) -> None:
        problems = []
        if not bucket:
            problems.append("s3 snapshot store: 'bucket' is required (the S3 bucket name)")
        if part_size < MIN_PART_SIZE:
            problems.append(
                f"s3 snapshot store: part_size {part_size} is below S3's minimum "
                f"{MIN_PART_SIZE} (5 MiB)"
            )
        if problems:
            raise ConfigError(problems)
        self.bucket = bucket
        self.prefix = normalize_prefix(prefix)
        self.part_size = part_size
        if client is not None:
            meta = getattr(client, "meta", None)
            region = region or getattr(meta, "region_name", None)
            endpoint_url = endpoint_url or getattr(meta, "endpoint_url", None)
        self.settings: dict[str, Any] = {
            "bucket": bucket,
            "prefix": self.prefix,
            "region": region,
            "endpoint_url": endpoint_url,
            "profile": profile,
            "part_size": part_size,
        }
        self._client = client or make_s3_client(region, endpoint_url=endpoint_url, profile=profile)
        super().__init__(S3Files(self._client, bucket, self.prefix, part_size))

    def __repr__(self) -> str:
        return f"S3SnapshotStore(s3://{self.bucket}/{self.prefix})"

    def __reduce__(self) -> tuple[Any, tuple[dict[str, Any]]]:
        return (store_from_settings, (dict(self.settings),))


def store_from_settings(settings: dict[str, Any]) -> S3SnapshotStore:
    """An :class:`S3SnapshotStore` from its ``settings`` (how a pickled store is rebuilt)."""
    return S3SnapshotStore(**settings)
