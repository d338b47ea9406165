"""The durable plan and progress of a resumable (chunked) Spark baseline.

:class:`ChunkRun` is what a driver needs to resume: the slot and its consistent point (the
position the output will carry), the session zone, a fingerprint of the configuration, each
table's chunk plan (:class:`~laredo_spark.pg.chunks.TableChunks`) and, per pipeline record,
the finished chunks with what the sink wrote for each (for snapshot parts: the parts).

:class:`ProgressFiles` keeps it beside the snapshot's staged parts, in the store's staging area
of a fixed id per slot (``spark-resume-<slot>-<hash of the source id>``; never published).
Each save writes a new numbered file (``progress-000007.json``) and only then removes the older
ones, and a load takes the highest-numbered file that parses: a driver killed while writing
leaves the previous record intact, so the record is replaced atomically on every store.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import re
from collections.abc import Mapping
from typing import Any

from laredo.errors import SnapshotError

from .chunks import TableChunks

logger = logging.getLogger(__name__)

__all__ = ["ChunkRun", "ProgressFiles", "resume_id"]

_FILE = re.compile(r"^_spark/progress-(\d{6,})\.json$")


@dataclasses.dataclass(frozen=True)
class ChunkRun:
    """A chunked baseline's plan and progress (see the module docstring). ``done`` maps a
    pipeline record (``pipeline-0000``) to ``{chunk index: sink payload}``."""

    output_id: str
    slot: str
    position: str
    consistent_point: int
    zone: str
    fingerprint: str
    tables: Mapping[str, TableChunks]
    done: Mapping[str, Mapping[int, Any]] = dataclasses.field(default_factory=dict)

    def finished(self, record: str, chunk: int, payload: Any) -> ChunkRun:
        """This run with ``chunk`` of ``record`` finished (``payload``: what was written)."""
        mine = {**self.done.get(record, {}), chunk: payload}
        return dataclasses.replace(self, done={**self.done, record: mine})

    def chunks_done(self) -> int:
        return sum(len(v) for v in self.done.values())

    def to_json(self) -> dict[str, Any]:
        return {
            "version": 1,
            "output_id": self.output_id,
            "slot": self.slot,
            "position": self.position,
            "consistent_point": self.consistent_point,
            "zone": self.zone,
            "fingerprint": self.fingerprint,
            "tables": {k: v.to_json() for k, v in self.tables.items()},
            "done": {r: {str(c): p for c, p in d.items()} for r, d in self.done.items()},
        }

    @staticmethod
    def from_json(data: Mapping[str, Any]) -> ChunkRun:
        if data.get("version") != 1:
            raise ValueError(f"unknown progress version {data.get('version')!r}")
        return ChunkRun(
            output_id=str(data["output_id"]),
            slot=str(data["slot"]),
            position=str(data["position"]),
            consistent_point=int(data["consistent_point"]),
            zone=str(data["zone"]),
            fingerprint=str(data["fingerprint"]),
            tables={k: TableChunks.from_json(v) for k, v in data["tables"].items()},
            done={r: {int(c): p for c, p in d.items()} for r, d in data["done"].items()},
        )


def resume_id(source_id: str, slot: str) -> str:
    """The staging id holding a source's progress (one chunked baseline per slot)."""
    digest = hashlib.sha256(source_id.encode()).hexdigest()[:8]
    return f"spark-resume-{slot}-{digest}"


class ProgressFiles:
    """A :class:`ChunkRun` kept in a ``ManifestSnapshotStore``'s staging area (see the module
    docstring)."""

    def __init__(self, store: Any, source_id: str, slot: str) -> None:
        self.files = store.files
        self.id = resume_id(source_id, slot)

    def _numbers(self) -> list[int]:
        found = []
        for path in self.files.staged_paths(self.id):
            m = _FILE.match(path)
            if m:
                found.append(int(m.group(1)))
        return sorted(found)

    def load(self) -> ChunkRun | None:
        """The last complete record, or ``None`` (no interrupted run)."""
        for n in reversed(self._numbers()):
            path = f"_spark/progress-{n:06d}.json"
            try:
                return ChunkRun.from_json(json.loads(self.files.read_staged(self.id, path)))
            except (ValueError, KeyError, TypeError, SnapshotError) as exc:
                logger.warning("skipping unreadable progress record %s: %s", path, exc)
        return None

    def save(self, run: ChunkRun) -> None:
        """Write ``run`` as the next record, then remove the older ones."""
        older = self._numbers()
        path = f"_spark/progress-{(older[-1] + 1) if older else 1:06d}.json"
        body = json.dumps(run.to_json(), separators=(",", ":")).encode()
        try:
            with self.files.open_write(self.id, path) as out:
                out.write(body)
        except Exception as exc:
            raise SnapshotError(
                f"spark baseline: cannot record its progress in {self.files.where}: {exc}"
            ) from exc
        if older:
            self.files.remove_staged(self.id, [f"_spark/progress-{n:06d}.json" for n in older])

    def clear(self) -> None:
        """Remove every record (the run finished, or is abandoned)."""
        self.files.remove_staged(self.id, None)
