"""A file-driven ``laredo.testing.TestSource`` for Spark tests and demos.

Spark's stream reader runs in its own process, so a source object in the test process is not
reachable from it. :func:`file_test_source` builds a resumable ``TestSource`` from a JSON spec
and replays, then follows, a JSONL change file: every line is one transaction, a list of
``[action, "schema.table", new_values, old_values]`` with typed-JSON rows. The i-th line always
gets position i (+ the spec's initial transactions), in every process that reads the file.
:class:`ChangeFile` writes such files.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterable, Sequence
from typing import Any

from laredo.serialization import encode_value, object_hook
from laredo.testing.source import TestSource, columns
from laredo.types import Row

__all__ = ["ChangeFile", "file_test_source", "read_acks"]

_loads = json.JSONDecoder(object_hook=object_hook).decode


def _enc(row: Row | None) -> Any:
    return None if row is None else {k: encode_value(v) for k, v in row.items()}


class ChangeFile:
    """Writes the spec and the transactions a :func:`file_test_source` reads."""

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.dir = os.fspath(directory)
        os.makedirs(self.dir, exist_ok=True)
        self.spec_path = os.path.join(self.dir, "spec.json")
        self.changes_path = os.path.join(self.dir, "changes.jsonl")
        self.count = 0

    def define(self, tables: dict[str, dict[str, Any]]) -> None:
        """``{"public.users": {"columns": ["id", "name"], "pk": ["id"], "rows": [...]}}``."""
        spec = {t: {**d, "rows": [_enc(r) for r in d.get("rows", [])]} for t, d in tables.items()}
        with open(self.spec_path, "w", encoding="utf-8") as f:
            json.dump(spec, f)
        open(self.changes_path, "a", encoding="utf-8").close()

    def transaction(self, changes: Iterable[Sequence[Any]]) -> int:
        """Append one transaction; returns its position in the source."""
        line = json.dumps([[a, t, _enc(n), _enc(o)] for a, t, n, o in changes])
        with open(self.changes_path, "a", encoding="utf-8") as f:
            f.write(line + "\n")
            f.flush()
            os.fsync(f.fileno())
        self.count += 1
        return self.count

    def args(self) -> dict[str, Any]:
        return {"directory": self.dir}


def file_test_source(directory: str, poll: float = 0.05) -> TestSource:
    """A resumable ``TestSource`` following ``<directory>/changes.jsonl`` (see module doc)."""
    with open(os.path.join(directory, "spec.json"), encoding="utf-8") as f:
        spec = json.load(f)
    src = TestSource(supports_resume=True, heartbeat_interval=0.2)
    for table, d in spec.items():
        rows = [_loads(json.dumps(r)) for r in d.get("rows", [])]
        src.add_table(table, columns(*d["columns"], pk=d.get("pk", ["id"])), rows)
    path = os.path.join(directory, "changes.jsonl")
    stop = threading.Event()

    def follow() -> None:
        offset = 0
        buf = ""
        while not stop.is_set():
            try:
                with open(path, encoding="utf-8") as fh:
                    fh.seek(offset)
                    data = fh.read()
                    offset = fh.tell()
            except FileNotFoundError:
                data = ""
            buf += data
            while "\n" in buf:
                line, buf = buf.split("\n", 1)
                if line.strip():
                    txn = json.loads(line, object_hook=object_hook)
                    src.transaction([(a, t, n, o) for a, t, n, o in txn])
            stop.wait(poll)

    threading.Thread(target=follow, name="laredo-file-test-source", daemon=True).start()
    orig_close = src.close

    def close() -> None:
        stop.set()
        orig_close()

    src.close = close  # type: ignore[method-assign]
    orig_ack = src.ack
    acks_path = os.path.join(directory, "acks.jsonl")

    def ack(position: Any) -> None:
        orig_ack(position)
        with open(acks_path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(int(position)) + "\n")

    src.ack = ack  # type: ignore[method-assign]
    return src


def read_acks(directory: str | os.PathLike[str]) -> list[int]:
    """Positions the file-driven source was acknowledged at, in order (every process)."""
    path = os.path.join(os.fspath(directory), "acks.jsonl")
    if not os.path.exists(path):
        return []
    with open(path, encoding="utf-8") as f:
        return [int(line) for line in f if line.strip()]
