"""Snapshot layout v2: a manifest of artifacts, each made of independently written parts.

``metadata.json`` (written last, atomically) is the snapshot's manifest::

    {
      "layout": 2,
      "snapshot_id": "...", "created_at": "...", "format": "jsonl",
      "source_positions": {"pg": "0/16B3748"}, "user_meta": {...},
      "tables": [ <table header: columns, row_count, position, pipeline_id, ...> ],
      "artifacts": [
        {"kind": "table", "table": {"schema": "public", "table": "users"},
         "pipeline_id": "...", "from_position": null, "to_position": "0/16B3748",
         "parts": [{"path": "public.users/part-00000-a1.parquet", "format": "parquet",
                    "rows": 500000, "size_bytes": 41231234, "sha256": "..."}, ...]}
      ]
    }

* An **artifact** is one unit of data of a snapshot. ``kind = "table"``: a table's rows as of
  ``to_position`` (today's only kind). The format reserves ``kind = "changes"`` for a diff: the
  changes of ``table`` in ``(from_position, to_position]``, so that an archive of base snapshots
  plus change diffs fits without another format change. A reader that meets a kind it cannot
  apply refuses the snapshot (``SnapshotError`` naming the kind) instead of skipping it.
* A **part** is one file (object) written by one writer (a Spark task, the engine), in one
  serializer format, with its row count, byte size and SHA-256. A table's rows are the
  concatenation of its parts in manifest order. Parts are verified against the recorded size
  (always) and checksum (before or while reading, per store) before their rows are trusted.
* Layout 1 (``files`` instead of ``artifacts``: one file per table) is still read: each table
  becomes a ``table`` artifact with one part.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..errors import SnapshotError
from ..serialization import decode_metadata, decode_table, encode_metadata, encode_table
from ..types import SnapshotMetadata, TableIdentifier, TableSnapshotInfo

__all__ = [
    "CHANGES",
    "LAYOUT",
    "TABLE",
    "Manifest",
    "SnapshotArtifact",
    "SnapshotPart",
    "check_part_path",
    "decode_artifact",
    "decode_manifest",
    "encode_artifact",
    "encode_manifest",
]

LAYOUT = 2
TABLE = "table"
CHANGES = "changes"
"""Reserved: a diff of one table between two positions (not written yet)."""


@dataclass(frozen=True, slots=True)
class SnapshotPart:
    """One independently written file of an artifact."""

    path: str
    """Relative to the snapshot's location (directory or key prefix)."""
    format: str
    """The serializer's format id (``jsonl``, ``parquet``)."""
    rows: int
    size_bytes: int
    sha256: str | None = None
    """Hex SHA-256 of the file's bytes (``None`` only for layout-1 S3 snapshots)."""


@dataclass(frozen=True, slots=True)
class SnapshotArtifact:
    """A unit of a snapshot's data (see the module docstring for the kinds)."""

    kind: str
    table: TableIdentifier
    parts: tuple[SnapshotPart, ...]
    pipeline_id: str = ""
    from_position: str | None = None
    to_position: str | None = None

    @property
    def rows(self) -> int:
        return sum(p.rows for p in self.parts)

    @property
    def size_bytes(self) -> int:
        return sum(p.size_bytes for p in self.parts)


@dataclass(frozen=True, slots=True)
class Manifest:
    """A snapshot's metadata and its artifacts."""

    metadata: SnapshotMetadata
    artifacts: tuple[SnapshotArtifact, ...] = field(default_factory=tuple)
    layout: int = LAYOUT

    def table_artifacts(self) -> dict[TableIdentifier, SnapshotArtifact]:
        """The ``table`` artifacts by table; raises ``SnapshotError`` for a kind this Laredo
        cannot apply."""
        out: dict[TableIdentifier, SnapshotArtifact] = {}
        for a in self.artifacts:
            if a.kind != TABLE:
                raise SnapshotError(
                    f"snapshot {self.metadata.snapshot_id!r} holds a {a.kind!r} artifact for "
                    f"{a.table}, which this version of Laredo cannot apply; upgrade Laredo"
                )
            out[a.table] = a
        return out

    @property
    def size_bytes(self) -> int:
        return sum(a.size_bytes for a in self.artifacts)


def _part_doc(p: SnapshotPart) -> dict[str, Any]:
    return {
        "path": p.path,
        "format": p.format,
        "rows": p.rows,
        "size_bytes": p.size_bytes,
        "sha256": p.sha256,
    }


def encode_artifact(a: SnapshotArtifact) -> dict[str, Any]:
    """One entry of the manifest's ``artifacts`` list."""
    return {
        "kind": a.kind,
        "table": encode_table(a.table),
        "pipeline_id": a.pipeline_id,
        "from_position": a.from_position,
        "to_position": a.to_position,
        "parts": [_part_doc(p) for p in a.parts],
    }


def decode_artifact(a: Any) -> SnapshotArtifact:
    """The inverse of :func:`encode_artifact` (``ValueError`` when malformed)."""
    if not isinstance(a, dict) or not isinstance(a.get("kind"), str):
        raise ValueError(f"bad artifact entry {a!r}")
    return SnapshotArtifact(
        kind=a["kind"],
        table=decode_table(a.get("table")),
        parts=tuple(_decode_part(p) for p in a.get("parts") or []),
        pipeline_id=str(a.get("pipeline_id") or ""),
        from_position=a.get("from_position"),
        to_position=a.get("to_position"),
    )


def encode_manifest(manifest: Manifest) -> dict[str, Any]:
    """The ``metadata.json`` document of a layout-2 snapshot."""
    doc = encode_metadata(manifest.metadata)
    doc["layout"] = LAYOUT
    doc["artifacts"] = [encode_artifact(a) for a in manifest.artifacts]
    return doc


def _int(value: Any, what: str) -> int:
    if type(value) is not int or value < 0:
        raise ValueError(f"{what}: expected a non-negative integer, got {value!r}")
    return value


_SHA256 = re.compile(r"[0-9a-f]{64}")


def check_part_path(path: Any) -> str:
    """``path`` when it is a relative part path that stays inside its snapshot's directory or
    key prefix: ``/``-separated, no empty, ``.`` or ``..`` component, not absolute, no
    backslash or NUL. Else ``ValueError`` (a manifest must not point a part anywhere else)."""
    if (
        not isinstance(path, str)
        or not path
        or path.startswith("/")
        or "\\" in path
        or "\0" in path
        or any(c in ("", ".", "..") for c in path.split("/"))
    ):
        raise ValueError(
            f"part path {str(path)[:200]!r} leaves the snapshot (absolute, '..', '.', an empty "
            "component or a backslash)"
        )
    return path


def _decode_part(doc: Any) -> SnapshotPart:
    if not isinstance(doc, dict) or not isinstance(doc.get("path"), str):
        raise ValueError(f"bad part entry {str(doc)[:200]}")
    path = check_part_path(doc["path"])
    sha = doc.get("sha256")
    if not isinstance(sha, str) or not _SHA256.fullmatch(sha):
        raise ValueError(
            f"part {path[:200]!r} has no valid sha256 (layout 2 records the SHA-256 of every "
            "part; the manifest was edited or damaged)"
        )
    return SnapshotPart(
        path=path,
        format=str(doc.get("format", "")),
        rows=_int(doc.get("rows", 0), "part rows"),
        size_bytes=_int(doc.get("size_bytes", 0), "part size_bytes"),
        sha256=sha,
    )


def _layout1_artifacts(
    meta: SnapshotMetadata,
    files: Mapping[str, Any],
    default_name: Callable[[TableIdentifier, str], str],
) -> tuple[SnapshotArtifact, ...]:
    out = []
    for info in meta.tables:
        rec = files.get(str(info.table))
        rec = rec if isinstance(rec, dict) else {}
        size = rec.get("size_bytes", rec.get("size", 0))
        sha = rec.get("sha256")
        part = SnapshotPart(
            path=check_part_path(str(rec.get("file") or default_name(info.table, meta.format))),
            format=meta.format,
            rows=info.row_count,
            size_bytes=size if type(size) is int else 0,
            sha256=sha if isinstance(sha, str) else None,
        )
        out.append(
            SnapshotArtifact(TABLE, info.table, (part,), info.pipeline_id, None, info.position)
        )
    return tuple(out)


def decode_manifest(doc: Any, layout1_name: Callable[[TableIdentifier, str], str]) -> Manifest:
    """Read a ``metadata.json`` document of layout 2, or of layout 1 (``layout1_name`` gives a
    layout-1 table file's name when the document does not record it)."""
    if not isinstance(doc, dict):
        raise ValueError("snapshot metadata is not a JSON object")
    meta = decode_metadata(doc)
    layout = doc.get("layout", 1)
    if layout == 1 or "artifacts" not in doc:
        files = doc.get("files")
        return Manifest(meta, _layout1_artifacts(meta, files or {}, layout1_name), 1)
    if layout != LAYOUT:
        raise ValueError(f"snapshot layout {layout!r} is newer than this Laredo reads ({LAYOUT})")
    artifacts = tuple(decode_artifact(a) for a in doc.get("artifacts") or [])
    return Manifest(meta, artifacts, LAYOUT)


def table_headers(
    metadata: SnapshotMetadata, artifacts: Iterable[SnapshotArtifact]
) -> tuple[TableSnapshotInfo, ...]:
    """The metadata's table headers with each table's row count taken from its artifact."""
    rows = {a.table: a.rows for a in artifacts if a.kind == TABLE}
    out = []
    seen = set()
    for info in metadata.tables:
        seen.add(info.table)
        count = rows.get(info.table, info.row_count)
        out.append(info if count == info.row_count else _with_rows(info, count))
    for table, count in rows.items():
        if table not in seen:
            out.append(TableSnapshotInfo(table=table, row_count=count))
    return tuple(out)


def _with_rows(info: TableSnapshotInfo, count: int) -> TableSnapshotInfo:
    return TableSnapshotInfo(
        table=info.table,
        row_count=count,
        columns=info.columns,
        target_type=info.target_type,
        indexes=info.indexes,
        position=info.position,
        pipeline_id=info.pipeline_id,
        progress=info.progress,
    )
