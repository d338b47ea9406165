"""Local-disk snapshot store (plugin type ``local``, options ``path``, ``fsync``).

Layout (v2, see :mod:`laredo.snapshots.manifest`), one directory per snapshot::

    <path>/<snapshot_id>/metadata.json                     the manifest, written last
    <path>/<snapshot_id>/<schema>.<table>/<part>.<ext>     the parts of each table

Parts are staged in ``<path>/.tmp-<snapshot_id>/``; publishing writes ``metadata.json`` there,
fsyncs, and renames the directory into place: a snapshot is listed only once complete, and a
crash mid-write leaves only a ``.tmp-`` directory that is never listed (removed by the next save
of that id, and once an hour old when a store is opened or pruned). Files are created 0600 and
directories 0700; a part path in a manifest must resolve inside its snapshot's directory, and
only a regular file is read. Each part's size and SHA-256 are
in the manifest, so ``load`` rejects a truncated, corrupted or replaced part before handing out a
row. Layout-1 snapshots (``<schema>.<table>.<ext>`` files next to ``metadata.json``) still load.
In names, ``%``, ``/``, ``.`` and other unsafe characters of schema and table names are
percent-encoded. Several processes on one host (or a shared file system) may write parts of the
same snapshot concurrently (the Spark runner's tasks); one of them commits.
"""

from __future__ import annotations

import builtins
import contextlib
import errno
import logging
import os
import shutil
import stat
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import IO

import pydantic
from pydantic import ConfigDict

from laredo.errors import SnapshotError, SnapshotNotFoundError
from laredo.types import TableIdentifier

from .layout import METADATA, ManifestSnapshotStore, check_snapshot_id, table_stem
from .manifest import check_part_path

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


_FSYNC_UNSUPPORTED = frozenset({errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EBADF})
FILE_MODE = 0o600
"""Snapshot files hold whole rows: only the owner may read them (directories: 0700)."""
DIR_MODE = 0o700
STALE_TEMP_AFTER = 3600.0
"""A ``.tmp-`` folder in which nothing changed this long (seconds) was left by a crash: it is
removed when a store is opened and after each prune (a concurrent writer's is younger)."""


def _fsync_dir(path: Path) -> None:
    """Make a directory's entries durable. A file system that cannot fsync a directory is
    tolerated; any other failure raises ``SnapshotError`` (the rename may not be durable, so
    the save must not be reported, and retention must not delete the previous snapshot)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError as exc:
        raise SnapshotError(f"cannot open {path} to make it durable: {exc}") from exc
    try:
        os.fsync(fd)
    except OSError as exc:
        if exc.errno not in _FSYNC_UNSUPPORTED:
            raise SnapshotError(f"cannot fsync {path}: {exc}") from exc
    finally:
        os.close(fd)


def _changed_since(folder: Path, cutoff: float) -> bool:
    """Whether ``folder`` or anything in it was modified after ``cutoff`` (stops at the first
    such entry, so a folder being written is not walked whole)."""
    if folder.stat().st_mtime > cutoff:
        return True
    for p in folder.rglob("*"):
        with contextlib.suppress(OSError):
            if p.stat().st_mtime > cutoff:
                return True
    return False


def _mkdirs(path: Path) -> None:
    """``mkdir -p`` with mode 0700 for every directory it creates (pathlib gives the parents
    it creates the umask's default)."""
    missing = []
    while not path.is_dir():
        missing.append(path)
        path = path.parent
    for d in reversed(missing):
        d.mkdir(mode=DIR_MODE, exist_ok=True)


def _create(path: Path) -> IO[bytes]:
    """A new file opened for writing, mode 0600 whatever the umask (truncated if it exists)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, FILE_MODE)
    os.fchmod(fd, FILE_MODE)
    return os.fdopen(fd, "wb")


class LocalFiles:
    """The :class:`~laredo.snapshots.layout.SnapshotFiles` backend of a directory."""

    verify_before_read = True

    def __init__(self, base: Path, fsync: bool = True) -> None:
        self.base = base
        self.fsync = fsync
        self.where = str(base)

    def _staging(self, snapshot_id: str) -> Path:
        return self.base / f"{TMP_PREFIX}{snapshot_id}"

    def resolve_part(self, snapshot_id: str, path: str) -> Path:
        """The file of a committed part, which must resolve (symbolic links followed) inside
        the snapshot's directory; ``SnapshotError`` otherwise."""
        folder = self.base / snapshot_id
        try:
            target = (folder / check_part_path(path)).resolve()
            inside = target.is_relative_to(folder.resolve())
        except (ValueError, OSError) as exc:
            raise SnapshotError(f"{folder}: {exc}") from None
        if not inside:
            raise SnapshotError(
                f"{folder}: part {path[:200]!r} resolves outside the snapshot's directory"
            )
        return target

    @contextlib.contextmanager
    def open_write(self, snapshot_id: str, path: str) -> Iterator[IO[bytes]]:
        target = self._staging(snapshot_id) / path
        _mkdirs(target.parent)
        try:
            with _create(target) as f:
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
        _mkdirs(root)
        with _create(root / METADATA) as f:
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
        target = self.resolve_part(snapshot_id, path)
        if not target.is_file():  # never a FIFO or a device: a read could hang or never end
            raise SnapshotError(f"{target}: not a regular file")
        return open(target, "rb")

    def size(self, snapshot_id: str, path: str) -> int | None:
        try:
            st = self.resolve_part(snapshot_id, path).stat()
        except OSError:
            return None
        return st.st_size if stat.S_ISREG(st.st_mode) else None

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
        self.remove_stale_temp()

    def prune(self, keep: int, table: TableIdentifier | None = None) -> builtins.list[str]:
        """Delete all but the newest ``keep`` snapshots; then remove stale staging folders."""
        removed = super().prune(keep, table)
        self.remove_stale_temp()
        return removed

    def __repr__(self) -> str:
        return f"LocalSnapshotStore({str(self.base)!r})"

    def part_file(self, snapshot_id: str, path: str) -> Path:
        """The local file of a committed snapshot's part (for readers that split files);
        ``SnapshotError`` when the path leaves the snapshot's directory."""
        check_snapshot_id(snapshot_id)
        files = self.files
        assert isinstance(files, LocalFiles)
        return files.resolve_part(snapshot_id, path)

    def remove_stale_temp(self, older_than: float = STALE_TEMP_AFTER) -> builtins.list[str]:
        """Remove the ``.tmp-`` folders (staging of a save, trash of a delete) that crashed
        writes and deletes left: those in which nothing changed for ``older_than`` seconds (a
        younger one may be a concurrent writer's, e.g. a Spark task's). Failures are logged."""
        removed: builtins.list[str] = []
        now = time.time()
        if not self.base.is_dir():
            return removed
        for entry in self.base.iterdir():
            if entry.name.startswith(TMP_PREFIX) and entry.is_dir():
                try:
                    if not _changed_since(entry, now - older_than):
                        shutil.rmtree(entry)
                        removed.append(entry.name)
                except OSError as exc:
                    logger.warning("cannot remove stale snapshot directory %s: %s", entry, exc)
        return removed
