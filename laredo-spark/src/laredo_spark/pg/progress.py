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

A record is read back from a store, so it is trusted for nothing: its size is checked before it
is read (:data:`MAX_RUN_RECORD`), its nesting is bounded by the JSON parser's recursion limit,
every value's type is checked, and a damaged record is skipped with a WARNING naming the file
(the older record, or a fresh run, takes its place: always correct, the slot is re-created),
never quoted.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import re
from collections.abc import Mapping, Sequence
from typing import Any

from laredo.errors import ConfigError, SnapshotError

from .chunks import TableChunks

logger = logging.getLogger(__name__)

__all__ = [
    "MAX_RUN_RECORD",
    "ChunkRun",
    "ProgressFiles",
    "decode_run",
    "encode_run",
    "resume_id",
]

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

    def misfit(self, tables: Sequence[str]) -> str | None:
        """Why the finished chunks do not fit the plan of the pipelines' ``tables`` (pipeline
        ``i`` is record ``pipeline-000i``; a record read back from a store may be damaged), or
        ``None``."""
        records = {f"pipeline-{i:04d}": t for i, t in enumerate(tables)}
        for record, chunks in self.done.items():
            plan = self.tables.get(records.get(record, ""))
            if plan is None or any(c >= plan.count for c in chunks):
                return f"its finished chunks of {record} do not fit its plan (a damaged record)"
        return None

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
    def from_json(data: Any) -> ChunkRun:
        """The run :meth:`to_json` wrote; ``ValueError`` naming what is malformed (it is read
        back from a store: every value's type is checked, no value is quoted)."""
        if not isinstance(data, dict) or data.get("version") != 1:
            raise ValueError("not a version-1 run record")
        tables, done = data["tables"], data["done"]
        if not isinstance(tables, dict) or not isinstance(done, dict):
            raise ValueError("malformed run record: tables or done is not an object")
        return ChunkRun(
            output_id=_text(data["output_id"], "output_id"),
            slot=_text(data["slot"], "slot"),
            position=_text(data["position"], "position"),
            consistent_point=_count(data["consistent_point"], "consistent_point"),
            zone=_text(data["zone"], "zone"),
            fingerprint=_text(data["fingerprint"], "fingerprint"),
            tables={_text(k, "a table name"): TableChunks.from_json(v) for k, v in tables.items()},
            done={_text(r, "a record name"): _chunks(d) for r, d in done.items()},
        )


def _text(value: Any, what: str) -> str:
    if not isinstance(value, str) or len(value) > _MAX_NAME:
        raise ValueError(f"malformed run record: {what} is not a string of at most {_MAX_NAME}")
    return value


def _count(value: Any, what: str) -> int:
    if type(value) is not int or value < 0:
        raise ValueError(f"malformed run record: {what} is not a non-negative integer")
    return value


def _chunks(done: Any) -> dict[int, Any]:
    """A record's ``{chunk index: payload}`` (indexes as JSON object keys: digits)."""
    if not isinstance(done, dict) or not all(
        isinstance(c, str) and c.isdigit() and len(c) <= _MAX_DIGITS for c in done
    ):
        raise ValueError("malformed run record: finished chunks are not {index: output}")
    return {int(c): p for c, p in done.items()}


MAX_RUN_RECORD = 32 << 20
"""The largest run record (bytes of JSON: the plan and each finished chunk's output) a run
writes or reads back. A record over it read back from a store is damaged and never parsed; a
run whose record would grow over it is refused with the fix (fewer, larger chunks). 32 MiB
holds a 1B-row table at the default ``chunk_rows`` (100 000 chunks) with room to spare."""
_MAX_NAME = 4096
_MAX_DIGITS = 9


def encode_run(run: ChunkRun, where: str) -> bytes:
    """``run``'s record; ``ConfigError`` when it is over :data:`MAX_RUN_RECORD` (nothing is
    written: the fix is ``chunk_rows``)."""
    body = json.dumps(run.to_json(), separators=(",", ":")).encode()
    if len(body) > MAX_RUN_RECORD:
        total = sum(t.count for t in run.tables.values())
        raise ConfigError(
            f"{where}: the run's record of {len(body)} bytes ({total} chunks) is over the "
            f"{MAX_RUN_RECORD} a resumable baseline records: raise baseline.chunk_rows on the "
            "source (or --chunk-rows) so the tables take fewer chunks"
        )
    return body


def decode_run(record: bytes | str, where: str) -> ChunkRun:
    """The run a record read back from a store holds; ``SnapshotError`` naming ``where`` when
    it is over :data:`MAX_RUN_RECORD`, not JSON, nested deeper than the parser's recursion
    limit or malformed (the message never quotes the record)."""
    if len(record) > MAX_RUN_RECORD:
        raise SnapshotError(
            f"{where}: run record of {len(record)} bytes is over the {MAX_RUN_RECORD} a run "
            "writes: it is damaged"
        )
    try:
        return ChunkRun.from_json(json.loads(record))
    except RecursionError:
        raise SnapshotError(f"{where}: run record nested too deep: it is damaged") from None
    except (ValueError, KeyError, TypeError) as exc:
        why = f"missing {exc}" if isinstance(exc, KeyError) else str(exc)
        raise SnapshotError(f"{where}: unreadable run record ({why[:200]})") from None


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

    def _where(self, path: str) -> str:
        return f"progress record {path} of {self.id} in {self.files.where}"

    def load(self) -> ChunkRun | None:
        """The last complete record, or ``None`` (no interrupted run). A damaged one (torn,
        over :data:`MAX_RUN_RECORD`: never read; malformed) is skipped with a WARNING: the
        older record, or a fresh run, takes its place."""
        for n in reversed(self._numbers()):
            path = f"_spark/progress-{n:06d}.json"
            try:
                size = self.files.staged_size(self.id, path)
                if size is None:
                    continue
                if size > MAX_RUN_RECORD:
                    raise SnapshotError(
                        f"{self._where(path)}: {size} bytes on the store, over the "
                        f"{MAX_RUN_RECORD} a run writes: not read, it is damaged"
                    )
                return decode_run(self.files.read_staged(self.id, path), self._where(path))
            except SnapshotError as exc:
                logger.warning("skipping an unreadable run record: %s", exc)
        return None

    def save(self, run: ChunkRun) -> None:
        """Write ``run`` as the next record, then remove the older ones."""
        older = self._numbers()
        path = f"_spark/progress-{(older[-1] + 1) if older else 1:06d}.json"
        body = encode_run(run, f"spark baseline: {self._where(path)}")
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
