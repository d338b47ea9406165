"""Positions of the Kinesis source: the S3 baseline marker plus one sequence number per shard."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from laredo.errors import ConfigError


def _seq_key(seq: str | None) -> int:
    """Kinesis sequence numbers are decimal strings of varying length: compare them as ints.
    A shard without a sequence (nothing read yet) sorts before every sequence."""
    return -1 if seq is None else int(seq)


@dataclass(frozen=True, slots=True)
class KinesisPosition:
    """Where the source is: ``shards`` maps shard id -> last delivered sequence number.

    A shard absent from ``shards`` has had nothing delivered (a stream started from this
    position reads it from the start of its retention, ``TRIM_HORIZON``, or from ``LATEST``
    when so configured). ``baseline`` identifies the S3 object versions the baseline read;
    ``baseline_sequence`` is the producer sequence the baseline includes (records whose
    ``seq`` is at or below it are already in the baseline and are skipped).

    Text form (``str(position)``, ``position_to_string``) is compact, key-sorted JSON, e.g.
    ``{"baseline":"3f2a...","shards":{"shardId-000000000000":"4959..."}}``.
    """

    shards: Mapping[str, str] = field(default_factory=dict)
    baseline: str | None = None
    baseline_sequence: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "shards", dict(self.shards))

    def __hash__(self) -> int:
        return hash((tuple(sorted(self.shards.items())), self.baseline, self.baseline_sequence))

    def sequence(self, shard_id: str) -> str | None:
        return self.shards.get(shard_id)

    def with_shard(self, shard_id: str, sequence: str) -> KinesisPosition:
        shards = dict(self.shards)
        shards[shard_id] = sequence
        return KinesisPosition(shards, self.baseline, self.baseline_sequence)

    def to_string(self) -> str:
        doc: dict[str, Any] = {"shards": dict(sorted(self.shards.items()))}
        if self.baseline is not None:
            doc["baseline"] = self.baseline
        if self.baseline_sequence is not None:
            doc["baseline_sequence"] = self.baseline_sequence
        return json.dumps(doc, sort_keys=True, separators=(",", ":"))

    def __str__(self) -> str:
        return self.to_string()

    @classmethod
    def parse(cls, text: str) -> KinesisPosition:
        try:
            doc = json.loads(text)
            if not isinstance(doc, dict):
                raise ValueError("not a JSON object")
            shards = doc.get("shards") or {}
            if not isinstance(shards, dict):
                raise ValueError("'shards' must be an object")
            for shard, seq in shards.items():
                if not isinstance(seq, str) or not seq.isdigit():
                    raise ValueError(f"shard {shard!r}: sequence {seq!r} is not a decimal string")
            bseq = doc.get("baseline_sequence")
            if bseq is not None and type(bseq) is not int:
                raise ValueError("'baseline_sequence' must be an integer")
            baseline = doc.get("baseline")
            return cls(
                {str(k): v for k, v in shards.items()},
                None if baseline is None else str(baseline),
                bseq,
            )
        except ValueError as exc:
            raise ConfigError(
                f"invalid Kinesis position {text!r}: {exc}; expected "
                '{"shards": {"shardId-...": "<sequence>"}, "baseline": "..."}'
            ) from None


def compare_positions(a: KinesisPosition, b: KinesisPosition) -> int:
    """Compare shard by shard.

    ``-1`` when ``a`` is at or before ``b`` on every shard and before it on one; ``1`` for the
    reverse; ``0`` when every shard is equal. Positions delivered by one source are totally
    ordered this way (each one is its predecessor plus one shard moved forward). Two positions
    that are each ahead on a different shard are not ordered; they compare by how many shards
    each is ahead on, then by their text, so the result is at least deterministic.
    """
    ahead = behind = 0
    for shard in a.shards.keys() | b.shards.keys():
        x = _seq_key(a.shards.get(shard))
        y = _seq_key(b.shards.get(shard))
        if x < y:
            behind += 1
        elif x > y:
            ahead += 1
    if ahead and not behind:
        return 1
    if behind and not ahead:
        return -1
    if not ahead and not behind:
        return 0
    if ahead != behind:
        return 1 if ahead > behind else -1
    sa, sb = a.to_string(), b.to_string()
    return (sa > sb) - (sa < sb)
