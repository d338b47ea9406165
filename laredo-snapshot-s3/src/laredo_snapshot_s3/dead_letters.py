"""S3 dead-letter store.

S3 objects cannot be appended to, so every dead letter is its own small JSON object::

    s3://<bucket>/<prefix>/<pipeline id, URL-quoted>/<20-digit ns time>-<seq>-<random>.json

Keys sort in write order (S3 lists keys in lexicographic order), so ``read`` returns the oldest
first and ``read(limit=n)`` the ``n`` oldest. A write is one ``PutObject``: it is durable when
``write`` returns. ``replay`` applies the entries to a target in order and deletes each applied
one (as core's stores do); ``purge`` deletes them all. Values keep their Python types (core's
typed JSON encoding).
"""

from __future__ import annotations

import datetime as dt
import itertools
import logging
import os
import threading
import time
import urllib.parse
from typing import Any

from laredo.contracts import SyncTarget
from laredo.deadletter import DeadLetterError, DeadLetterReplayError, apply_change
from laredo.errors import ConfigError, aws_error_code
from laredo.types import ChangeEvent, DeadLetter, ErrorInfo

from . import _codec
from .store import make_s3_client, normalize_prefix

logger = logging.getLogger(__name__)


def _position_text(change: ChangeEvent) -> str | None:
    pos = change.position
    if pos is None:
        return None
    return pos if isinstance(pos, str) else str(pos)


class S3DeadLetterStore:
    """``DeadLetterStore`` on S3: ``laredo.dead_letter_store("s3", bucket=..., prefix=...)``."""

    def __init__(
        self,
        bucket: str,
        prefix: str = "dead-letters",
        *,
        region: str | None = None,
        endpoint_url: str | None = None,
        profile: str | None = None,
        client: Any = None,
    ) -> None:
        if not bucket:
            raise ConfigError("s3 dead-letter store: 'bucket' is required (the S3 bucket name)")
        self.bucket = bucket
        self.prefix = normalize_prefix(prefix)
        self._client = client or make_s3_client(region, endpoint_url=endpoint_url, profile=profile)
        self._seq = itertools.count()
        self._lock = threading.Lock()
        self._node = os.urandom(4).hex()

    def __repr__(self) -> str:
        return f"S3DeadLetterStore(s3://{self.bucket}/{self.prefix})"

    def _dir(self, pipeline_id: str) -> str:
        if not pipeline_id:
            raise ConfigError("dead letters need a non-empty pipeline id")
        return f"{self.prefix}{urllib.parse.quote(pipeline_id, safe='')}/"

    def _keys(self, pipeline_id: str) -> list[str]:
        keys: list[str] = []
        paginator = self._client.get_paginator("list_objects_v2")
        for page in paginator.paginate(Bucket=self.bucket, Prefix=self._dir(pipeline_id)):
            keys.extend(o["Key"] for o in page.get("Contents", []))
        keys.sort()
        return keys

    def write(
        self,
        pipeline_id: str,
        change: ChangeEvent,
        error: ErrorInfo,
        position: str | None = None,
    ) -> None:
        """Store one entry (one ``PutObject``); durable when this returns.

        ``position`` is the serialised source position (``source.position_to_string``);
        without it a ``str`` position is kept and others become ``str(position)``.
        """
        now = dt.datetime.now(dt.UTC)
        with self._lock:
            seq = next(self._seq)
        key = f"{self._dir(pipeline_id)}{time.time_ns():020d}-{seq:08d}-{self._node}.json"
        text = position if position is not None else _position_text(change)
        try:
            body = _codec.dead_letter_to_json(DeadLetter(pipeline_id, change, error, now, text))
        except TypeError as exc:
            raise DeadLetterError(
                f"cannot write dead letter of pipeline {pipeline_id!r}: {exc}"
            ) from None
        try:
            self._client.put_object(
                Bucket=self.bucket, Key=key, Body=body, ContentType="application/json"
            )
        except Exception as exc:
            raise DeadLetterError(
                f"cannot write dead letter of pipeline {pipeline_id!r} to "
                f"s3://{self.bucket}/{key}: {exc}"
            ) from exc
        logger.debug("dead letter for %s written to s3://%s/%s", pipeline_id, self.bucket, key)

    def _entries(self, pipeline_id: str, limit: int = 0) -> list[tuple[str, DeadLetter]]:
        keys = self._keys(pipeline_id)
        if limit > 0:
            keys = keys[:limit]
        out = []
        for key in keys:
            try:
                data = self._client.get_object(Bucket=self.bucket, Key=key)["Body"].read()
            except Exception as exc:  # deleted by a concurrent purge/replay
                if aws_error_code(exc) in {"NoSuchKey", "404"}:
                    continue
                raise
            try:
                out.append((key, _codec.dead_letter_from_json(data)))
            except (ValueError, KeyError, TypeError) as exc:
                raise DeadLetterError(
                    f"unreadable dead letter s3://{self.bucket}/{key}: {exc}"
                ) from None
        return out

    def read(self, pipeline_id: str, limit: int = 0) -> list[DeadLetter]:
        """Dead letters of a pipeline, oldest first; ``limit > 0`` returns at most that many."""
        return [entry for _, entry in self._entries(pipeline_id, limit)]

    def replay(self, pipeline_id: str, target: SyncTarget) -> int:
        """Apply the pipeline's dead letters to ``target`` in order, deleting each once applied;
        returns how many. If the target rejects one, the applied ones are gone, that one and
        the later ones are kept, and ``DeadLetterReplayError`` says how far it got."""
        entries = self._entries(pipeline_id)
        done: list[str] = []
        failure: Exception | None = None
        for key, entry in entries:
            try:
                apply_change(target, entry.change)
            except Exception as exc:
                failure = exc
                break
            done.append(key)
        self._delete(done)
        if failure is not None:
            raise DeadLetterReplayError(
                pipeline_id,
                len(done),
                f"dead-letter replay of {pipeline_id!r}: {len(done)} of {len(entries)} entries "
                f"replayed, entry {len(done) + 1} failed: {type(failure).__name__}: {failure}; "
                f"it and the later ones are kept",
            ) from failure
        return len(done)

    def _delete(self, keys: list[str]) -> None:
        for i in range(0, len(keys), 1000):
            self._client.delete_objects(
                Bucket=self.bucket,
                Delete={"Objects": [{"Key": k} for k in keys[i : i + 1000]], "Quiet": True},
            )

    def purge(self, pipeline_id: str) -> int:
        """Delete every dead letter of the pipeline; returns how many were deleted."""
        keys = self._keys(pipeline_id)
        self._delete(keys)
        return len(keys)

    def count(self, pipeline_id: str) -> int:
        """Dead letters of the pipeline, by listing their keys (no object is read)."""
        return len(self._keys(pipeline_id))

    def pipelines(self) -> list[str]:
        """Pipeline ids that have dead letters."""
        out = []
        paginator = self._client.get_paginator("list_objects_v2")
        for page in paginator.paginate(Bucket=self.bucket, Prefix=self.prefix, Delimiter="/"):
            for cp in page.get("CommonPrefixes", []):
                out.append(urllib.parse.unquote(cp["Prefix"][len(self.prefix) :].rstrip("/")))
        return sorted(out)
