"""S3 dead-letter store.

S3 objects cannot be appended to, so every dead letter is its own small JSON object::

    s3://<bucket>/<prefix>/<pipeline id, URL-quoted>/<20-digit ns time>-<seq>-<random>.json

Keys sort in write order (S3 lists keys in lexicographic order), so ``read`` returns the oldest
first and ``read(limit=n)`` the ``n`` oldest. A write is one ``PutObject``: it is durable when
``write`` returns. ``replay`` applies the entries to a target in order and keeps them (``purge``
removes them). Values keep their Python types (typed JSON encoding).
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
from laredo.errors import ConfigError
from laredo.types import ChangeAction, ChangeEvent, DeadLetter, ErrorInfo

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

    def write(self, pipeline_id: str, change: ChangeEvent, error: ErrorInfo) -> None:
        now = dt.datetime.now(dt.UTC)
        with self._lock:
            seq = next(self._seq)
        key = f"{self._dir(pipeline_id)}{time.time_ns():020d}-{seq:08d}-{self._node}.json"
        entry = DeadLetter(pipeline_id, change, error, now, _position_text(change))
        body = _codec.dead_letter_to_json(entry)
        self._client.put_object(
            Bucket=self.bucket, Key=key, Body=body, ContentType="application/json"
        )
        logger.debug("dead letter for %s written to s3://%s/%s", pipeline_id, self.bucket, key)

    def read(self, pipeline_id: str, limit: int = 0) -> list[DeadLetter]:
        """Dead letters of a pipeline, oldest first; ``limit > 0`` returns at most that many."""
        keys = self._keys(pipeline_id)
        if limit > 0:
            keys = keys[:limit]
        out = []
        for key in keys:
            try:
                data = self._client.get_object(Bucket=self.bucket, Key=key)["Body"].read()
            except Exception as exc:  # deleted by a concurrent purge
                if getattr(exc, "response", {}).get("Error", {}).get("Code") in {
                    "NoSuchKey",
                    "404",
                }:
                    continue
                raise
            out.append(_codec.dead_letter_from_json(data))
        return out

    def replay(self, pipeline_id: str, target: SyncTarget) -> int:
        """Apply every dead letter of the pipeline to ``target`` in order; returns the count.
        Entries are kept: call ``purge`` once the replay is known good."""
        count = 0
        for letter in self.read(pipeline_id):
            c = letter.change
            if c.action == ChangeAction.INSERT and c.new_values is not None:
                target.on_insert(c.table, c.new_values)
            elif c.action == ChangeAction.UPDATE and c.new_values is not None:
                target.on_update(c.table, c.new_values, c.old_values)
            elif c.action == ChangeAction.DELETE and c.old_values is not None:
                target.on_delete(c.table, c.old_values)
            elif c.action == ChangeAction.TRUNCATE:
                target.on_truncate(c.table)
            else:
                logger.warning("dead letter of %s has nothing to replay: %s", pipeline_id, c)
                continue
            count += 1
        return count

    def purge(self, pipeline_id: str) -> int:
        """Delete every dead letter of the pipeline; returns how many were deleted."""
        keys = self._keys(pipeline_id)
        for i in range(0, len(keys), 1000):
            self._client.delete_objects(
                Bucket=self.bucket,
                Delete={"Objects": [{"Key": k} for k in keys[i : i + 1000]], "Quiet": True},
            )
        return len(keys)

    def pipelines(self) -> list[str]:
        """Pipeline ids that have dead letters."""
        out = []
        paginator = self._client.get_paginator("list_objects_v2")
        for page in paginator.paginate(Bucket=self.bucket, Prefix=self.prefix, Delimiter="/"):
            for cp in page.get("CommonPrefixes", []):
                out.append(urllib.parse.unquote(cp["Prefix"][len(self.prefix) :].rstrip("/")))
        return sorted(out)
