"""S3 snapshot store.

Layout (the same as the local store, under a key prefix)::

    s3://<bucket>/<prefix>/<snapshot_id>/<schema>.<table>.<format>   one object per table
    s3://<bucket>/<prefix>/<snapshot_id>/metadata.json               written LAST

Each table object is written by the serializer given to ``save`` straight into a streaming
upload: bytes are buffered up to ``part_size`` (default 8 MiB) and sent as multipart-upload
parts, so a snapshot of any size never sits in memory. ``metadata.json`` is written only after
every table object is complete; ``list``/``describe``/``load`` only see snapshots whose
metadata exists, so a crash or an error mid-save never produces a listed, partial snapshot
(its table objects are deleted on error; after a crash they are orphans that ``list`` ignores).
``delete`` removes ``metadata.json`` first for the same reason.

Credentials come from the usual AWS chain (environment, shared config, instance role);
``endpoint_url`` points at S3-compatible services (MinIO, moto).
"""

from __future__ import annotations

import builtins
import contextlib
import logging
import re
import threading
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import replace
from typing import Any

from laredo.contracts import SnapshotSerializer
from laredo.errors import (
    ConfigError,
    MissingDependencyError,
    SnapshotError,
    SnapshotNotFoundError,
)
from laredo.types import (
    Row,
    SnapshotDescriptor,
    SnapshotMetadata,
    TableIdentifier,
    TableSnapshotInfo,
)

from . import _codec
from ._s3io import MIN_PART_SIZE, S3UploadWriter, open_object

logger = logging.getLogger(__name__)

METADATA_FILE = "metadata.json"
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
        import boto3
        from botocore.config import Config
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
    resp = getattr(exc, "response", None)
    if not isinstance(resp, dict):
        return False
    code = str(resp.get("Error", {}).get("Code", ""))
    return code in {"NoSuchKey", "404", "NotFound"}


def normalize_prefix(prefix: str) -> str:
    """``"a/b/"`` and ``"/a/b"`` -> ``"a/b/"``; ``""`` stays ``""``."""
    p = prefix.strip("/")
    return f"{p}/" if p else ""


def table_file_name(table: TableIdentifier, format_id: str) -> str:
    return f"{table.schema}.{table.table}.{format_id}"


class S3SnapshotStore:
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
        self._client = client or make_s3_client(region, endpoint_url=endpoint_url, profile=profile)

    def __repr__(self) -> str:
        return f"S3SnapshotStore({self._where})"

    @property
    def _where(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}"

    # -- keys -------------------------------------------------------------------------------
    def _dir(self, snapshot_id: str) -> str:
        return f"{self.prefix}{snapshot_id}/"

    def _meta_key(self, snapshot_id: str) -> str:
        return f"{self._dir(snapshot_id)}{METADATA_FILE}"

    @staticmethod
    def _check_id(snapshot_id: str) -> None:
        if not _ID_RE.match(snapshot_id or ""):
            raise ConfigError(
                f"invalid snapshot id {snapshot_id!r}: use letters, digits and . _ : = + - "
                f"(no '/'), at most 200 characters"
            )

    # -- metadata ---------------------------------------------------------------------------
    def _read_metadata(self, snapshot_id: str) -> tuple[SnapshotMetadata, dict[str, Any]]:
        try:
            resp = self._client.get_object(Bucket=self.bucket, Key=self._meta_key(snapshot_id))
        except Exception as exc:
            if _is_not_found(exc):
                raise SnapshotNotFoundError(snapshot_id, self._where) from None
            raise SnapshotError(f"reading snapshot {snapshot_id!r} metadata: {exc}") from exc
        data = resp["Body"].read()
        try:
            meta, files = _codec.metadata_from_json(data)
        except Exception as exc:
            raise SnapshotError(
                f"snapshot {snapshot_id!r}: unreadable {METADATA_FILE}: {exc}"
            ) from exc
        return meta, {"_meta_size": len(data), **files}

    @staticmethod
    def _size(files: Mapping[str, Any]) -> int:
        total = int(files.get("_meta_size", 0))
        for name, entry in files.items():
            if name != "_meta_size" and isinstance(entry, dict):
                total += int(entry.get("size", 0))
        return total

    # -- SnapshotStore ----------------------------------------------------------------------
    def save(
        self,
        snapshot_id: str,
        metadata: SnapshotMetadata,
        tables: Mapping[TableIdentifier, Iterable[Row]],
        serializer: SnapshotSerializer,
    ) -> SnapshotDescriptor:
        """Write every table (streaming, multipart when large), then ``metadata.json``."""
        self._check_id(snapshot_id)
        if self._exists(snapshot_id):
            raise SnapshotError(
                f"snapshot {snapshot_id!r} already exists in s3://{self.bucket}/{self.prefix}; "
                f"delete it first or use another id"
            )
        fmt = serializer.format_id()
        infos = {t.table: t for t in metadata.tables}
        written: list[str] = []
        files: dict[str, Any] = {}
        new_infos: list[TableSnapshotInfo] = []
        try:
            for table, rows in tables.items():
                info = infos.get(table) or TableSnapshotInfo(table=table, row_count=0)
                name = table_file_name(table, fmt)
                key = f"{self._dir(snapshot_id)}{name}"
                writer = S3UploadWriter(self._client, self.bucket, key, part_size=self.part_size)
                try:
                    count = serializer.write(info, rows, writer)  # type: ignore[arg-type]
                except BaseException:
                    writer.abort()
                    raise
                writer.close()
                written.append(key)
                files[str(table)] = {"file": name, "size": writer.bytes_written}
                new_infos.append(replace(info, row_count=int(count)))
            for info in metadata.tables:
                if info.table not in tables:
                    new_infos.append(info)
            final = replace(metadata, snapshot_id=snapshot_id, format=fmt, tables=tuple(new_infos))
            body = _codec.metadata_to_json(final, files)
            self._client.put_object(
                Bucket=self.bucket,
                Key=self._meta_key(snapshot_id),
                Body=body,
                ContentType="application/json",
            )
        except BaseException as exc:
            self._delete_keys(written)
            if isinstance(exc, SnapshotError | KeyboardInterrupt | SystemExit):
                raise
            if isinstance(exc, Exception):
                raise SnapshotError(f"saving snapshot {snapshot_id!r} to S3: {exc}") from exc
            raise
        files["_meta_size"] = len(body)
        logger.info("saved snapshot %s to s3://%s/%s", snapshot_id, self.bucket, self.prefix)
        return _codec.descriptor_of(final, self._size(files))

    def load(
        self, snapshot_id: str, serializer: SnapshotSerializer
    ) -> tuple[SnapshotMetadata, dict[TableIdentifier, Iterator[Row]]]:
        """Metadata plus one lazy row iterator per table; each streams its object on first use."""
        meta, files = self._read_metadata(snapshot_id)
        if meta.format != serializer.format_id():
            raise SnapshotError(
                f"snapshot {snapshot_id!r} was written as {meta.format!r}; load it with the "
                f"{meta.format!r} serializer, not {serializer.format_id()!r}"
            )
        out: dict[TableIdentifier, Iterator[Row]] = {}
        for info in meta.tables:
            entry = files.get(str(info.table))
            name = (
                entry["file"]
                if isinstance(entry, dict)
                else table_file_name(info.table, meta.format)
            )
            out[info.table] = self._rows(f"{self._dir(snapshot_id)}{name}", serializer)
        return meta, out

    def _rows(self, key: str, serializer: SnapshotSerializer) -> Iterator[Row]:
        try:
            reader = open_object(self._client, self.bucket, key)
        except Exception as exc:
            raise SnapshotError(f"reading s3://{self.bucket}/{key}: {exc}") from exc
        with reader:
            _, rows = serializer.read(reader)
            yield from rows

    def describe(self, snapshot_id: str) -> SnapshotDescriptor:
        meta, files = self._read_metadata(snapshot_id)
        return _codec.descriptor_of(meta, self._size(files))

    def _exists(self, snapshot_id: str) -> bool:
        try:
            self._client.head_object(Bucket=self.bucket, Key=self._meta_key(snapshot_id))
        except Exception as exc:
            if _is_not_found(exc):
                return False
            raise SnapshotError(f"checking snapshot {snapshot_id!r}: {exc}") from exc
        return True

    def _snapshot_ids(self) -> builtins.list[str]:
        ids = []
        paginator = self._client.get_paginator("list_objects_v2")
        for page in paginator.paginate(Bucket=self.bucket, Prefix=self.prefix, Delimiter="/"):
            for cp in page.get("CommonPrefixes", []):
                ids.append(cp["Prefix"][len(self.prefix) :].rstrip("/"))
        return ids

    def list(self, table: TableIdentifier | None = None) -> list[SnapshotDescriptor]:
        """Complete snapshots, newest first; ``table`` keeps those containing that table.
        Snapshots whose metadata is missing (incomplete) or unreadable are skipped."""
        out = []
        for sid in self._snapshot_ids():
            try:
                meta, files = self._read_metadata(sid)
            except SnapshotNotFoundError:
                continue
            except SnapshotError as exc:
                logger.warning("skipping snapshot %s: %s", sid, exc)
                continue
            if table is not None and all(t.table != table for t in meta.tables):
                continue
            out.append(_codec.descriptor_of(meta, self._size(files)))
        out.sort(key=lambda d: (d.created_at, d.snapshot_id), reverse=True)
        return out

    def delete(self, snapshot_id: str) -> None:
        """Delete a snapshot: ``metadata.json`` first (it stops being listed), then its tables."""
        self._check_id(snapshot_id)
        if not self._exists(snapshot_id):
            raise SnapshotNotFoundError(snapshot_id, self._where)
        self._client.delete_object(Bucket=self.bucket, Key=self._meta_key(snapshot_id))
        keys: builtins.list[str] = []
        paginator = self._client.get_paginator("list_objects_v2")
        for page in paginator.paginate(Bucket=self.bucket, Prefix=self._dir(snapshot_id)):
            keys.extend(o["Key"] for o in page.get("Contents", []))
        self._delete_keys(keys)

    def prune(self, keep: int, table: TableIdentifier | None = None) -> builtins.list[str]:
        """Delete all but the ``keep`` newest snapshots (of ``table`` if given); return ids."""
        if keep < 0:
            raise ConfigError(f"prune keep must be >= 0 (got {keep})")
        doomed = [d.snapshot_id for d in self.list(table)[keep:]]
        for sid in doomed:
            with contextlib.suppress(SnapshotNotFoundError):
                self.delete(sid)
        return doomed

    def _delete_keys(self, keys: builtins.list[str]) -> None:
        for i in range(0, len(keys), 1000):
            batch = keys[i : i + 1000]
            try:
                self._client.delete_objects(
                    Bucket=self.bucket,
                    Delete={"Objects": [{"Key": k} for k in batch], "Quiet": True},
                )
            except Exception as exc:
                logger.warning(
                    "could not delete %d objects in s3://%s: %s", len(batch), self.bucket, exc
                )
