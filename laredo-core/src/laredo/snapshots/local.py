"""Local-disk snapshot store (plugin type ``local``, option ``path``).

Layout, one directory per snapshot::

    <path>/<snapshot_id>/metadata.json           snapshot metadata (indented JSON)
    <path>/<snapshot_id>/<schema>.<table>.<ext>  one file per table (``ext`` = format id)

``save`` writes everything into ``<path>/.tmp-<snapshot_id>/``, fsyncs the files, then renames
the directory into place: a snapshot is listed only once complete, and a crash mid-write leaves
only a ``.tmp-`` directory that is never listed (and is removed by the next ``save`` of that id
or by :meth:`LocalSnapshotStore.remove_stale_temp`). ``metadata.json`` also records each table
file's name, size and SHA-256, so ``load`` rejects a truncated, corrupted or replaced file
before handing out a row (the check reads each file once more; snapshots are restored rarely).
In file names, ``%``, ``/``, ``.`` and other unsafe characters of schema and table names are
percent-encoded.
"""

from __future__ import annotations

import builtins
import contextlib
import dataclasses
import hashlib
import json
import logging
import os
import shutil
import time
from collections.abc import Iterable, Iterator, Mapping, Sized
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pydantic
from pydantic import ConfigDict

from laredo.errors import LaredoError, SnapshotError, SnapshotNotFoundError
from laredo.serialization import decode_metadata, encode_metadata
from laredo.types import (
    Row,
    SnapshotDescriptor,
    SnapshotMetadata,
    TableIdentifier,
    TableSnapshotInfo,
)

logger = logging.getLogger(__name__)

__all__ = [
    "LocalSnapshotStore",
    "LocalSnapshotStoreOptions",
    "SnapshotNotFoundError",
    "check_snapshot_id",
    "table_file_name",
]

METADATA = "metadata.json"
TMP_PREFIX = ".tmp-"


class LocalSnapshotStoreOptions(pydantic.BaseModel):
    model_config = ConfigDict(extra="forbid")
    path: str
    fsync: bool = True


def check_snapshot_id(snapshot_id: str) -> None:
    """Reject ids that are not a single safe path component (used by every store)."""
    if (
        not isinstance(snapshot_id, str)
        or not snapshot_id
        or snapshot_id.startswith(".")
        or "/" in snapshot_id
        or "\\" in snapshot_id
        or "\x00" in snapshot_id
        or len(snapshot_id) > 200
    ):
        raise SnapshotError(
            f"invalid snapshot id {snapshot_id!r}: use letters, digits, '-', '_' and '.' "
            "(not first), at most 200 characters"
        )


def _part(name: str) -> str:
    return quote(name, safe="").replace(".", "%2E")


def table_file_name(table: TableIdentifier, ext: str) -> str:
    """``<schema>.<table>.<ext>`` with unsafe characters (and dots) percent-encoded."""
    return f"{_part(table.schema)}.{_part(table.table)}.{ext}"


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _serializer_for(fmt: str, given: Any) -> Any:
    if given is not None and given.format_id() == fmt:
        return given
    from laredo.plugins import registry

    try:
        return registry("serializer").build(fmt)
    except LaredoError as exc:
        raise SnapshotError(
            f"snapshot was written as {fmt!r}, and no serializer for it is available: {exc}"
        ) from None


class LocalSnapshotStore:
    """Snapshots in a local directory; see the module docstring for the layout."""

    def __init__(self, path: str | os.PathLike[str], fsync: bool = True) -> None:
        self.base = Path(path)
        self.fsync = fsync

    def __repr__(self) -> str:
        return f"LocalSnapshotStore({str(self.base)!r})"

    # -- writing --------------------------------------------------------------------------
    def save(
        self,
        snapshot_id: str,
        metadata: SnapshotMetadata,
        tables: Mapping[TableIdentifier, Iterable[Row]],
        serializer: Any,
    ) -> SnapshotDescriptor:
        """Write the snapshot atomically; the table headers get the actual row counts."""
        check_snapshot_id(snapshot_id)
        final = self.base / snapshot_id
        if final.exists():
            raise SnapshotError(f"snapshot {snapshot_id!r} already exists in {self.base}")
        tmp = self.base / f"{TMP_PREFIX}{snapshot_id}"
        fmt = serializer.format_id()
        infos = {t.table: t for t in metadata.tables}
        missing = [str(t) for t in infos if t not in tables]
        if missing:
            raise SnapshotError(
                f"snapshot {snapshot_id!r}: metadata lists tables {missing} but no rows were "
                "given for them"
            )
        try:
            self.base.mkdir(parents=True, exist_ok=True)
            if tmp.exists():
                shutil.rmtree(tmp)
            tmp.mkdir()
            written: list[TableSnapshotInfo] = []
            files: dict[str, dict[str, Any]] = {}
            for table, rows in tables.items():
                info = infos.get(table) or TableSnapshotInfo(table=table, row_count=0)
                if not isinstance(rows, Sized):
                    rows = list(rows)
                info = dataclasses.replace(info, row_count=len(rows))
                name = table_file_name(table, fmt)
                path = tmp / name
                with open(path, "wb") as f:
                    serializer.write(info, rows, f)
                    f.flush()
                    if self.fsync:
                        os.fsync(f.fileno())
                files[str(table)] = {
                    "schema": table.schema,
                    "table": table.table,
                    "file": name,
                    "size_bytes": path.stat().st_size,
                    "sha256": _sha256(path),
                }
                written.append(info)
            meta = dataclasses.replace(
                metadata, snapshot_id=snapshot_id, format=fmt, tables=tuple(written)
            )
            doc = encode_metadata(meta)
            doc["files"] = files
            meta_path = tmp / METADATA
            with open(meta_path, "w", encoding="utf-8") as mf:
                json.dump(doc, mf, indent=2, ensure_ascii=False)
                mf.write("\n")
                mf.flush()
                if self.fsync:
                    os.fsync(mf.fileno())
            if self.fsync:
                _fsync_dir(tmp)
            os.rename(tmp, final)
            if self.fsync:
                _fsync_dir(self.base)
        except BaseException as exc:
            shutil.rmtree(tmp, ignore_errors=True)
            if isinstance(exc, SnapshotError) or not isinstance(exc, Exception):
                raise
            raise SnapshotError(
                f"cannot save snapshot {snapshot_id!r} to {self.base}: {exc}"
            ) from exc
        logger.info("saved snapshot %s to %s", snapshot_id, final)
        return self._descriptor(meta, sum(f["size_bytes"] for f in files.values()))

    def remove_stale_temp(self, older_than: float = 3600.0) -> list[str]:
        """Remove ``.tmp-`` directories left by crashed writes older than ``older_than`` s."""
        removed: builtins.list[str] = []
        now = time.time()
        if not self.base.is_dir():
            return removed
        for entry in self.base.iterdir():
            if entry.name.startswith(TMP_PREFIX) and entry.is_dir():
                try:
                    if now - entry.stat().st_mtime >= older_than:
                        shutil.rmtree(entry)
                        removed.append(entry.name)
                except OSError as exc:
                    logger.warning("cannot remove stale snapshot directory %s: %s", entry, exc)
        return removed

    # -- reading --------------------------------------------------------------------------
    def _read_doc(self, snapshot_id: str) -> dict[str, Any]:
        check_snapshot_id(snapshot_id)
        path = self.base / snapshot_id / METADATA
        try:
            with open(path, encoding="utf-8") as f:
                doc = json.load(f)
        except FileNotFoundError:
            raise SnapshotNotFoundError(snapshot_id, str(self.base)) from None
        except (OSError, ValueError) as exc:
            raise SnapshotError(f"{path}: unreadable snapshot metadata: {exc}") from None
        if not isinstance(doc, dict):
            raise SnapshotError(f"{path}: snapshot metadata is not a JSON object")
        return doc

    def _read_meta(self, snapshot_id: str) -> tuple[SnapshotMetadata, dict[str, Any]]:
        doc = self._read_doc(snapshot_id)
        try:
            meta = decode_metadata(doc)
        except (ValueError, KeyError, TypeError) as exc:
            path = self.base / snapshot_id / METADATA
            raise SnapshotError(f"{path}: malformed snapshot metadata: {exc}") from None
        files = doc.get("files")
        return meta, files if isinstance(files, dict) else {}

    def _descriptor(self, meta: SnapshotMetadata, size: int) -> SnapshotDescriptor:
        return SnapshotDescriptor(
            snapshot_id=meta.snapshot_id,
            created_at=meta.created_at,
            format=meta.format,
            tables=meta.tables,
            size_bytes=size,
            source_positions=dict(meta.source_positions),
            user_meta=dict(meta.user_meta),
        )

    def _size(self, snapshot_id: str) -> int:
        total = 0
        for entry in (self.base / snapshot_id).iterdir():
            with contextlib.suppress(OSError):
                total += entry.stat().st_size
        return total

    def describe(self, snapshot_id: str) -> SnapshotDescriptor:
        """Metadata and the total size on disk (``size_bytes``, metadata file included)."""
        meta, _ = self._read_meta(snapshot_id)
        return self._descriptor(meta, self._size(snapshot_id))

    def list(self, table: TableIdentifier | None = None) -> builtins.list[SnapshotDescriptor]:
        """Complete snapshots, newest first (by ``created_at``, then id); snapshots whose
        metadata cannot be read are skipped with a warning. ``table`` keeps those holding it."""
        if not self.base.is_dir():
            return []
        out = []
        for entry in self.base.iterdir():
            if entry.name.startswith(".") or not entry.is_dir():
                continue
            try:
                desc = self.describe(entry.name)
            except SnapshotError as exc:
                logger.warning("skipping snapshot %s: %s", entry.name, exc)
                continue
            if table is not None and all(t.table != table for t in desc.tables):
                continue
            out.append(desc)
        out.sort(key=lambda d: (d.created_at.timestamp(), d.snapshot_id), reverse=True)
        return out

    def load(
        self, snapshot_id: str, serializer: Any = None
    ) -> tuple[SnapshotMetadata, dict[TableIdentifier, Iterator[Row]]]:
        """Metadata and one lazy row iterator per table.

        Missing, truncated (size differs from the recorded one) or malformed table files raise
        ``SnapshotError`` naming the file: the size and each file's header are checked here,
        rows while iterating. A snapshot written in another format is read with that format's
        registered serializer.
        """
        meta, files = self._read_meta(snapshot_id)
        ser = _serializer_for(meta.format, serializer)
        folder = self.base / snapshot_id
        out: dict[TableIdentifier, Iterator[Row]] = {}
        for info in meta.tables:
            rec = files.get(str(info.table)) or {}
            name = rec.get("file") or table_file_name(info.table, meta.format)
            path = folder / name
            try:
                size = path.stat().st_size
            except FileNotFoundError:
                raise SnapshotError(
                    f"{path}: table file of {info.table} is missing from snapshot {snapshot_id!r}"
                ) from None
            want = rec.get("size_bytes")
            if isinstance(want, int) and want != size:
                raise SnapshotError(
                    f"{path}: {size} bytes on disk but {want} were written: the file is "
                    "truncated or was modified"
                )
            want_hash = rec.get("sha256")
            if isinstance(want_hash, str) and _sha256(path) != want_hash:
                raise SnapshotError(
                    f"{path}: checksum mismatch (sha256 differs from the one recorded at save): "
                    "the file is corrupt or was modified"
                )
            with open(path, "rb") as f:
                header, rows = ser.read(f)
                close = getattr(rows, "close", None)
                if close is not None:
                    close()
            if header.table != info.table:
                raise SnapshotError(
                    f"{path}: holds table {header.table}, but the metadata says {info.table}"
                )
            out[info.table] = _iter_file(ser, path)
        return meta, out

    # -- deleting -------------------------------------------------------------------------
    def delete(self, snapshot_id: str) -> None:
        check_snapshot_id(snapshot_id)
        folder = self.base / snapshot_id
        if not folder.is_dir():
            raise SnapshotNotFoundError(snapshot_id, str(self.base))
        # rename first so a half-deleted snapshot is never listed
        trash = self.base / f"{TMP_PREFIX}del-{snapshot_id}-{os.getpid()}-{time.monotonic_ns()}"
        os.rename(folder, trash)
        shutil.rmtree(trash, ignore_errors=True)
        logger.info("deleted snapshot %s from %s", snapshot_id, self.base)

    def prune(self, keep: int, table: TableIdentifier | None = None) -> builtins.list[str]:
        """Delete all but the ``keep`` newest snapshots (of ``table`` if given); returns the
        deleted ids."""
        if keep < 0:
            raise SnapshotError(f"prune: keep must be >= 0, got {keep}")
        doomed = [d.snapshot_id for d in self.list(table)[keep:]]
        for sid in doomed:
            with contextlib.suppress(SnapshotNotFoundError):
                self.delete(sid)
        return doomed


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def _iter_file(serializer: Any, path: Path) -> Iterator[Row]:
    with open(path, "rb") as f:
        _, rows = serializer.read(f)
        yield from rows
