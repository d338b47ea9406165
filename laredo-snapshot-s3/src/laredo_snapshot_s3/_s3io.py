"""Streaming S3 I/O: a write-only file that uploads in parts, and a readable body wrapper."""

from __future__ import annotations

import io
import logging
from typing import Any

logger = logging.getLogger(__name__)

MIN_PART_SIZE = 5 * 1024 * 1024
"""S3's smallest allowed part (all but the last part of a multipart upload)."""


class S3UploadWriter(io.RawIOBase):
    """A binary file whose bytes go to one S3 object, never held in memory all at once.

    Bytes are buffered up to ``part_size``; when the buffer fills, a multipart upload starts
    (``CreateMultipartUpload``) and each full buffer becomes a part. ``close()`` uploads what is
    left: a single ``PutObject`` when the object never reached ``part_size``, else the last part
    and ``CompleteMultipartUpload``. ``abort()`` (or an exception inside a ``with`` block)
    cancels a started multipart upload so no parts are left behind. Memory use is bounded by
    ``part_size``.
    """

    def __init__(
        self,
        client: Any,
        bucket: str,
        key: str,
        *,
        part_size: int = 8 * 1024 * 1024,
        content_type: str = "application/octet-stream",
        extra_args: dict[str, Any] | None = None,
    ) -> None:
        super().__init__()
        if part_size < MIN_PART_SIZE:
            raise ValueError(f"part_size must be at least {MIN_PART_SIZE} bytes (S3's minimum)")
        self._client = client
        self.bucket = bucket
        self.key = key
        self._part_size = part_size
        self._content_type = content_type
        self._extra = dict(extra_args or {})
        self._buf = bytearray()
        self._upload_id: str | None = None
        self._parts: list[dict[str, Any]] = []
        self.bytes_written = 0
        self._finished = False

    # -- io API -----------------------------------------------------------------------------
    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        if self._finished:
            raise ValueError(f"write to closed S3 upload s3://{self.bucket}/{self.key}")
        view = memoryview(data).cast("B")
        n = len(view)
        self._buf += view
        self.bytes_written += n
        while len(self._buf) >= self._part_size:
            chunk = bytes(self._buf[: self._part_size])
            del self._buf[: self._part_size]
            self._upload_part(chunk)
        return n

    def close(self) -> None:
        if not self._finished and not self.closed:
            self._finish()
        super().close()

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is not None:
            self.abort()
        else:
            self.close()

    # -- upload -----------------------------------------------------------------------------
    @property
    def multipart(self) -> bool:
        return self._upload_id is not None

    def _upload_part(self, chunk: bytes) -> None:
        if self._upload_id is None:
            resp = self._client.create_multipart_upload(
                Bucket=self.bucket, Key=self.key, ContentType=self._content_type, **self._extra
            )
            self._upload_id = resp["UploadId"]
        number = len(self._parts) + 1
        resp = self._client.upload_part(
            Bucket=self.bucket,
            Key=self.key,
            UploadId=self._upload_id,
            PartNumber=number,
            Body=chunk,
        )
        self._parts.append({"PartNumber": number, "ETag": resp["ETag"]})

    def _finish(self) -> None:
        self._finished = True
        try:
            if self._upload_id is None:
                self._client.put_object(
                    Bucket=self.bucket,
                    Key=self.key,
                    Body=bytes(self._buf),
                    ContentType=self._content_type,
                    **self._extra,
                )
            else:
                if self._buf:
                    self._upload_part(bytes(self._buf))
                self._client.complete_multipart_upload(
                    Bucket=self.bucket,
                    Key=self.key,
                    UploadId=self._upload_id,
                    MultipartUpload={"Parts": self._parts},
                )
        except BaseException:
            self._abort_upload()
            raise
        finally:
            self._buf = bytearray()

    def abort(self) -> None:
        """Cancel the upload (nothing becomes visible); idempotent."""
        if not self._finished:
            self._finished = True
            self._buf = bytearray()
            self._abort_upload()
        if not self.closed:
            super().close()

    def _abort_upload(self) -> None:
        if self._upload_id is not None:
            try:
                self._client.abort_multipart_upload(
                    Bucket=self.bucket, Key=self.key, UploadId=self._upload_id
                )
            except Exception:  # best effort: a lifecycle rule cleans up leftovers
                logger.warning(
                    "could not abort multipart upload of s3://%s/%s", self.bucket, self.key
                )
            self._upload_id = None


class S3BodyReader(io.RawIOBase):
    """Adapts a botocore ``StreamingBody`` to a raw binary file (wrap in ``io.BufferedReader``
    to get ``readline`` and line iteration); reads stream from the HTTP response."""

    def __init__(self, body: Any) -> None:
        super().__init__()
        self._body = body

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        data = self._body.read(len(view))
        n = len(data)
        view[:n] = data
        return n

    def close(self) -> None:
        if not self.closed:
            try:
                self._body.close()
            finally:
                super().close()


def open_object(client: Any, bucket: str, key: str, **kwargs: Any) -> io.BufferedReader:
    """GET an object and return a buffered, streaming binary reader over its body."""
    resp = client.get_object(Bucket=bucket, Key=key, **kwargs)
    return io.BufferedReader(S3BodyReader(resp["Body"]), buffer_size=1024 * 1024)
