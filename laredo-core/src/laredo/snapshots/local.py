"""Local-disk snapshot store (plugin type ``local``, options ``path``, ``fsync``).

Layout (v2, see :mod:`laredo.snapshots.manifest`), one directory per snapshot::

    <path>/<snapshot_id>/metadata.json                     the manifest, written last
    <path>/<snapshot_id>/<schema>.<table>/<part>.<ext>     the parts of each table

Parts are staged in ``<path>/.tmp-<snapshot_id>/``; publishing writes ``metadata.json`` there,
fsyncs, and renames the directory into place: a snapshot is listed only once complete, and a
crash mid-write leaves only a ``.tmp-`` directory that is never listed (removed by the next save
of that id or by :meth:`LocalSnapshotStore.remove_stale_temp`). Each part's size and SHA-256 are
in the manifest, so ``load`` rejects a truncated, corrupted or replaced part before handing out a
row. Layout-1 snapshots (``<schema>.<table>.<ext>`` files next to ``metadata.json``) still load.
In names, ``%``, ``/``, ``.`` and other unsafe characters of schema and table names are
percent-encoded. Several processes on one host (or a shared file system) may write parts of the
same snapshot concurrently (the Spark runner's tasks); one of them commits.
"""

from __future__ import annotations

import builtins
import contextlib
import logging
import os
import shutil
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import IO

import pydantic
from pydantic import ConfigDict

from laredo.errors import SnapshotError, SnapshotNotFoundError
from laredo.types import TableIdentifier

from .layout import METADATA, ManifestSnapshotStore, check_snapshot_id, table_stem

__all__ = [
    "METADATA",
    "TMP_PREFIX",
    "LocalFiles",
    "LocalSnapshotStore",
    "LocalSnapshotStoreOptions",
    "SnapshotNotFoundError",
    "check_snapshot_id",
    "table_file_name",
]

logger = logging.getLogger(__name__)

TMP_PREFIX = ".tmp-"


class LocalSnapshotStoreOptions(pydantic.BaseModel):
    model_config = ConfigDict(extra="forbid")
    path: str
    fsync: bool = True


def table_file_name(table: TableIdentifier, ext: str) -> str:
    """A layout-1 table file: ``<schema>.<table>.<ext>``, unsafe characters percent-encoded."""
    return f"{table_stem(table)}.{ext}"


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


class LocalFiles:
    """The :class:`~laredo.snapshots.layout.SnapshotFiles` backend of a directory."""

    verify_before_read = True

    def __init__(self, base: Path, fsync: bool = True) -> None:
        self.base = base
        self.fsync = fsync
        self.where = str(base)

    def _staging(self, snapshot_id: str) -> Path:
        return self.base / f"{TMP_PREFIX}{snapshot_id}"

    @contextlib.contextmanager
    def open_write(self, snapshot_id: str, path: str) -> Iterator[IO[bytes]]:
        target = self._staging(snapshot_id) / path
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            with open(target, "wb") as f:
                yield f
                f.flush()
                if self.fsync:
                    os.fsync(f.fileno())
        except BaseException:
            with contextlib.suppress(OSError):
                target.unlink()
            raise

    def staged_size(self, snapshot_id: str, path: str) -> int | None:
        try:
            return (self._staging(snapshot_id) / path).stat().st_size
        except OSError:
            return None

    def staged_paths(self, snapshot_id: str) -> builtins.list[str]:
        root = self._staging(snapshot_id)
        if not root.is_dir():
            return []
        return sorted(
            str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() and p.name != METADATA
        )

    def read_staged(self, snapshot_id: str, path: str) -> bytes:
        try:
            return (self._staging(snapshot_id) / path).read_bytes()
        except OSError as exc:
            raise SnapshotError(
                f"cannot read staged file {path} of {snapshot_id!r}: {exc}"
            ) from None

    def remove_staged(self, snapshot_id: str, paths: Sequence[str] | None = None) -> None:
        root = self._staging(snapshot_id)
        if paths is None:
            shutil.rmtree(root, ignore_errors=True)
            return
        parents: set[Path] = set()
        for rel in paths:
            with contextlib.suppress(OSError):
                (root / rel).unlink()
                parents.add((root / rel).parent)
        for d in sorted(parents, key=lambda p: len(p.parts), reverse=True):
            while d != root and d.is_relative_to(root):
                try:
                    d.rmdir()  # only when empty
                except OSError:
                    break
                d = d.parent

    def publish(self, snapshot_id: str, metadata: bytes) -> None:
        root = self._staging(snapshot_id)
        root.mkdir(parents=True, exist_ok=True)
        with open(root / METADATA, "wb") as f:
            f.write(metadata)
            f.flush()
            if self.fsync:
                os.fsync(f.fileno())
        if self.fsync:
            for d in [p for p in root.rglob("*") if p.is_dir()]:
                _fsync_dir(d)
            _fsync_dir(root)
        final = self.base / snapshot_id
        if final.exists():
            raise SnapshotError(f"snapshot {snapshot_id!r} already exists in {self.base}")
        os.rename(root, final)
        if self.fsync:
            _fsync_dir(self.base)

    def exists(self, snapshot_id: str) -> bool:
        return (self.base / snapshot_id / METADATA).is_file()

    def read_metadata(self, snapshot_id: str) -> bytes:
        path = self.base / snapshot_id / METADATA
        try:
            return path.read_bytes()
        except FileNotFoundError:
            raise SnapshotNotFoundError(snapshot_id, str(self.base)) from None
        except OSError as exc:
            raise SnapshotError(f"{path}: unreadable snapshot metadata: {exc}") from None

    def open_read(self, snapshot_id: str, path: str) -> IO[bytes]:
        return open(self.base / snapshot_id / path, "rb")

    def size(self, snapshot_id: str, path: str) -> int | None:
        try:
            return (self.base / snapshot_id / path).stat().st_size
        except OSError:
            return None

    def snapshot_ids(self) -> builtins.list[str]:
        if not self.base.is_dir():
            return []
        return [e.name for e in self.base.iterdir() if not e.name.startswith(".") and e.is_dir()]

    def delete(self, snapshot_id: str) -> None:
        # rename first so a half-deleted snapshot is never listed
        folder = self.base / snapshot_id
        trash = self.base / f"{TMP_PREFIX}del-{snapshot_id}-{os.getpid()}-{time.monotonic_ns()}"
        os.rename(folder, trash)
        shutil.rmtree(trash, ignore_errors=True)

    def layout1_name(self, table: TableIdentifier, format_id: str) -> str:
        return table_file_name(table, format_id)


class LocalSnapshotStore(ManifestSnapshotStore):
    """Snapshots in a local directory; see the module docstring for the layout."""

    def __init__(self, path: str | os.PathLike[str], fsync: bool = True) -> None:
        self.base = Path(path)
        self.fsync = fsync
        super().__init__(LocalFiles(self.base, fsync))

    def __repr__(self) -> str:
        return f"LocalSnapshotStore({str(self.base)!r})"

    def part_file(self, snapshot_id: str, path: str) -> Path:
        """The local file of a committed snapshot's part (for readers that split files)."""
        check_snapshot_id(snapshot_id)
        return self.base / snapshot_id / path

    def remove_stale_temp(self, older_than: float = 3600.0) -> builtins.list[str]:
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
