"""DynamoDB checkpoints of the Kinesis source (one item per shard).

Table key schema: partition key ``checkpoint_id`` (string), sort key ``shard_id`` (string).
``create_checkpoint_table=True`` creates it (on-demand billing) when missing. Items:

- ``{checkpoint_id, shard_id: "shardId-...", sequence_number: "<seq>", updated_at}``: the last
  acknowledged record of that shard; a restart resumes right AFTER it;
- ``{checkpoint_id, shard_id: "#baseline", baseline, baseline_sequence}``: which S3 baseline the
  checkpoints continue.

``checkpoint_id`` defaults to the stream name; give each independent consumer of one stream its
own id. An acknowledgement writes only the shards whose sequence moved forward ("ACK per
shard"); a sequence never moves backwards.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
import time
from typing import Any

from laredo.errors import ConfigError, SourceError, aws_error_code

from .position import KinesisPosition

logger = logging.getLogger(__name__)

BASELINE_ITEM = "#baseline"


class DynamoCheckpoints:
    def __init__(self, client: Any, table: str, checkpoint_id: str) -> None:
        self.client = client
        self.table = table
        self.checkpoint_id = checkpoint_id
        self._written: dict[str, str] = {}
        self._baseline_written: tuple[str | None, int | None] | None = None
        self._lock = threading.Lock()

    def ensure_table(self, create: bool, timeout: float = 60.0) -> None:
        try:
            desc = self.client.describe_table(TableName=self.table)["Table"]
        except Exception as exc:
            if aws_error_code(exc) != "ResourceNotFoundException":
                raise SourceError(f"DynamoDB checkpoint table {self.table!r}: {exc}") from exc
            if not create:
                raise ConfigError(
                    f"DynamoDB checkpoint table {self.table!r} does not exist: create it with "
                    f"partition key 'checkpoint_id' (S) and sort key 'shard_id' (S), or set "
                    f"create_checkpoint_table=true"
                ) from None
            self._create()
            desc = self.client.describe_table(TableName=self.table)["Table"]
        keys = {k["AttributeName"]: k["KeyType"] for k in desc.get("KeySchema", [])}
        if keys != {"checkpoint_id": "HASH", "shard_id": "RANGE"}:
            raise ConfigError(
                f"DynamoDB checkpoint table {self.table!r} has key schema {keys}; it needs "
                f"partition key 'checkpoint_id' and sort key 'shard_id' (use another table)"
            )
        deadline = time.monotonic() + timeout
        while desc.get("TableStatus") not in (None, "ACTIVE"):
            if time.monotonic() > deadline:
                raise SourceError(f"DynamoDB table {self.table!r} is not ACTIVE after {timeout}s")
            time.sleep(0.2)
            desc = self.client.describe_table(TableName=self.table)["Table"]

    def _create(self) -> None:
        try:
            self.client.create_table(
                TableName=self.table,
                KeySchema=[
                    {"AttributeName": "checkpoint_id", "KeyType": "HASH"},
                    {"AttributeName": "shard_id", "KeyType": "RANGE"},
                ],
                AttributeDefinitions=[
                    {"AttributeName": "checkpoint_id", "AttributeType": "S"},
                    {"AttributeName": "shard_id", "AttributeType": "S"},
                ],
                BillingMode="PAY_PER_REQUEST",
            )
            logger.info("created DynamoDB checkpoint table %s", self.table)
        except Exception as exc:
            if aws_error_code(exc) != "ResourceInUseException":  # created concurrently: fine
                raise SourceError(f"creating DynamoDB table {self.table!r}: {exc}") from exc

    def load(self) -> KinesisPosition | None:
        items: list[dict[str, Any]] = []
        kwargs: dict[str, Any] = {
            "TableName": self.table,
            "KeyConditionExpression": "checkpoint_id = :c",
            "ExpressionAttributeValues": {":c": {"S": self.checkpoint_id}},
            "ConsistentRead": True,
        }
        while True:
            resp = self.client.query(**kwargs)
            items.extend(resp.get("Items", []))
            if "LastEvaluatedKey" not in resp:
                break
            kwargs["ExclusiveStartKey"] = resp["LastEvaluatedKey"]
        if not items:
            return None
        shards: dict[str, str] = {}
        baseline: str | None = None
        bseq: int | None = None
        for item in items:
            sid = item["shard_id"]["S"]
            if sid == BASELINE_ITEM:
                baseline = item.get("baseline", {}).get("S")
                if "baseline_sequence" in item:
                    bseq = int(item["baseline_sequence"]["N"])
            elif "sequence_number" in item:
                shards[sid] = item["sequence_number"]["S"]
        with self._lock:
            self._written = dict(shards)
            self._baseline_written = (baseline, bseq)
        return KinesisPosition(shards, baseline, bseq)

    def save(self, position: KinesisPosition) -> int:
        """Write the shards that moved forward (and the baseline marker when it changed);
        returns how many items were written."""
        now = dt.datetime.now(dt.UTC).isoformat()
        with self._lock:
            puts: list[dict[str, Any]] = []
            changed: dict[str, str] = {}
            for sid, seq in position.shards.items():
                old = self._written.get(sid)
                if old is None or int(seq) > int(old):
                    changed[sid] = seq
                    puts.append(
                        {
                            "checkpoint_id": {"S": self.checkpoint_id},
                            "shard_id": {"S": sid},
                            "sequence_number": {"S": seq},
                            "updated_at": {"S": now},
                        }
                    )
            base = (position.baseline, position.baseline_sequence)
            if base not in (self._baseline_written, (None, None)):
                item: dict[str, Any] = {
                    "checkpoint_id": {"S": self.checkpoint_id},
                    "shard_id": {"S": BASELINE_ITEM},
                    "updated_at": {"S": now},
                }
                if position.baseline is not None:
                    item["baseline"] = {"S": position.baseline}
                if position.baseline_sequence is not None:
                    item["baseline_sequence"] = {"N": str(position.baseline_sequence)}
                puts.append(item)
            if not puts:
                return 0
            self._batch_put(puts)
            self._written.update(changed)
            self._baseline_written = base
            return len(puts)

    def _batch_put(self, items: list[dict[str, Any]]) -> None:
        for i in range(0, len(items), 25):
            requests: list[dict[str, Any]] = [
                {"PutRequest": {"Item": it}} for it in items[i : i + 25]
            ]
            delay = 0.05
            for _attempt in range(10):
                resp = self.client.batch_write_item(RequestItems={self.table: requests})
                requests = resp.get("UnprocessedItems", {}).get(self.table, [])
                if not requests:
                    break
                time.sleep(delay)
                delay = min(delay * 2, 2.0)
            else:
                raise SourceError(
                    f"DynamoDB kept {len(requests)} checkpoint writes unprocessed (throttled)"
                )

    def clear(self) -> int:
        """Delete every checkpoint item of this checkpoint id; returns how many."""
        pos = self.load()
        sids = [] if pos is None else [*pos.shards, BASELINE_ITEM]
        for sid in sids:
            self.client.delete_item(
                TableName=self.table,
                Key={"checkpoint_id": {"S": self.checkpoint_id}, "shard_id": {"S": sid}},
            )
        with self._lock:
            self._written = {}
            self._baseline_written = None
        return len(sids)
