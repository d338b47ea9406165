"""Test and producer helpers for the Kinesis source (used by its tests; handy for yours).

- :func:`write_baseline` uploads a manifest and per-table JSONL baseline objects;
- :func:`put` puts one change record (or raw bytes) on a stream;
- :class:`Collector` is a thread-safe ``ChangeHandler`` that records what it gets;
- :class:`Runner` runs ``source.stream`` in a thread.

Nothing here imports boto3: pass clients in.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from typing import Any

from laredo import serialization
from laredo.testing import wait_until
from laredo.testing.handler import RecordingHandler
from laredo.types import ChangeEvent, ColumnDefinition, SourceConfig, TableIdentifier

from .records import dumps_record
from .source import KinesisSource

USERS = TableIdentifier("public", "users")
ORDERS = TableIdentifier("shop", "orders")

MANIFEST = {
    "tables": {
        "public.users": {
            "columns": [
                {"name": "id", "type": "int8", "primary_key": True, "nullable": False},
                {"name": "name", "type": "text"},
                {"name": "balance", "type": "numeric"},
                {"name": "seen", "type": "timestamptz"},
            ]
        },
        "shop.orders": {
            "columns": [
                {"name": "order_id", "type": "text", "primary_key": True},
                {"name": "user_id", "type": "int8"},
                {"name": "total", "type": "numeric"},
            ]
        },
    }
}


def write_baseline(
    s3: Any,
    bucket: str,
    prefix: str,
    tables: dict[TableIdentifier, list[dict[str, Any]]],
    manifest: dict[str, Any] | None = MANIFEST,
) -> None:
    if manifest is not None:
        s3.put_object(Bucket=bucket, Key=f"{prefix}manifest.json", Body=json.dumps(manifest))
    for table, rows in tables.items():
        body = "".join(serialization.dumps_row(r) + "\n" for r in rows)
        s3.put_object(Bucket=bucket, Key=f"{prefix}{table}.jsonl", Body=body.encode())


def put(kinesis: Any, stream: str, change: Any, key: str) -> tuple[str, str]:
    """Put one record (a change object, a list of them, or raw bytes); returns (shard, seq)."""
    data = change if isinstance(change, bytes) else dumps_record(change)
    resp = kinesis.put_record(StreamName=stream, Data=data, PartitionKey=key)
    return resp["ShardId"], resp["SequenceNumber"]


class Collector(RecordingHandler):
    """A ChangeHandler that records everything it is given (thread-safe); a schema change is
    an error (this source never emits one)."""

    def on_schema_change(self, *args: Any) -> None:  # pragma: no cover - not emitted
        raise AssertionError("unexpected schema change")

    def wait(self, predicate: Callable[[Collector], bool], timeout: float = 15.0) -> None:
        try:
            wait_until(lambda: predicate(self), timeout)
        except AssertionError:
            tail = [
                (str(e.table), e.action.name, e.new_values or e.old_values)
                for e in self.snapshot()[-10:]
            ]
            raise AssertionError(
                f"timed out after {timeout}s; have {len(self.events)} events, last: {tail}"
            ) from None

    def wait_events(self, n: int, timeout: float = 15.0) -> list[ChangeEvent]:
        self.wait(lambda c: len(c.events) >= n, timeout)
        return self.snapshot()


class Runner:
    """Runs ``source.stream`` in a thread; ``stop()`` returns what it raised, if anything."""

    def __init__(self, source: KinesisSource, start: Any, handler: Any) -> None:
        self.source = source
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, args=(start, handler), daemon=True)
        self.thread.start()

    def _run(self, start: Any, handler: Any) -> None:
        try:
            self.source.stream(start, handler)
        except BaseException as exc:
            self.error = exc

    def stop(self, timeout: float = 10.0) -> BaseException | None:
        self.source.stop_stream()
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "stream() did not return after stop_stream()"
        return self.error

    def join(self, timeout: float) -> BaseException | None:
        self.thread.join(timeout)
        assert not self.thread.is_alive(), f"stream() still running after {timeout}s"
        return self.error


def start(
    source: KinesisSource, tables: list[TableIdentifier]
) -> dict[TableIdentifier, list[ColumnDefinition]]:
    return source.init(SourceConfig(tables=tables))
