"""One implementation of snapshot layout v2 (:mod:`laredo.snapshots.manifest`) over any storage.

:class:`ManifestSnapshotStore` is a complete ``SnapshotStore`` built on a small
:class:`SnapshotFiles` backend (a directory, an S3 prefix, ...). Besides ``save``/``load`` it
offers the multi-part protocol many writers use (the Spark runner's tasks):

1. :meth:`ManifestSnapshotStore.write_part` — each writer writes its own part file (name it with
   something unique per attempt, e.g. ``part-00003-<attempt>``); parts are *staged*: invisible
   to ``list``/``load`` until committed.
2. :meth:`ManifestSnapshotStore.commit` — one caller records the parts it accepts (each checked
   for existence and size) in the manifest, removes every other staged file of the snapshot
   (failed or speculative attempts), and writes ``metadata.json`` last, atomically: the
   snapshot is listed complete or not at all.
3. :meth:`ManifestSnapshotStore.abort` — removes staged parts (of failed attempts, or all).

Writers holding Arrow record batches use :meth:`ManifestSnapshotStore.write_part_batches`
(:mod:`laredo.snapshots.arrow`); :meth:`ManifestSnapshotStore.write_part_raw` hands the part's
file to any writing function. When the parts of one snapshot are accepted by several jobs (one
Spark job per table), each job records its accepted parts with
:meth:`ManifestSnapshotStore.stage_artifact` and the final committer reads them back with
:meth:`ManifestSnapshotStore.staged_artifacts`; those records are staged files too, removed by
``commit`` like any file it does not list.

Reading: :meth:`ManifestSnapshotStore.manifest` gives the artifacts and their parts,
:meth:`ManifestSnapshotStore.read_part` one part's rows (size checked first; checksum checked
before the first row when the backend says reading twice is cheap, else while streaming, failing
at the part's end) and :meth:`ManifestSnapshotStore.read_part_batches` its Arrow record batches;
``load`` chains a table's parts in manifest order (as fast as one file of the same rows:
decoding is bound by building Python rows, which threads cannot share).
"""

from __future__ import annotations

import builtins
import contextlib
import hashlib
import io
import json
import logging
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import IO, Any, Protocol
from urllib.parse import quote

from ..contracts import SnapshotSerializer
from ..errors import LaredoError, SnapshotError, SnapshotNotFoundError
from ..plugins import registry
from ..types import (
    Row,
    SnapshotDescriptor,
    SnapshotMetadata,
    TableIdentifier,
    TableSnapshotInfo,
)
from .arrow import BatchReadSerializer, BatchWriteSerializer, batches_rows, check_encodings
from .manifest import (
    TABLE,
    Manifest,
    SnapshotArtifact,
    SnapshotPart,
    decode_artifact,
    decode_manifest,
    encode_artifact,
    encode_manifest,
    table_headers,
)

logger = logging.getLogger(__name__)

__all__ = [
    "METADATA",
    "HashingReader",
    "HashingWriter",
    "ManifestSnapshotStore",
    "SnapshotFiles",
    "check_snapshot_id",
    "part_path",
    "table_stem",
]

METADATA = "metadata.json"
ARTIFACTS_DIR = "_artifacts"
"""Staged artifact records (:meth:`ManifestSnapshotStore.stage_artifact`); never published."""
_ID_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._:=+-]{0,199}$")
_PART_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._=+-]{0,150}$")


def check_snapshot_id(snapshot_id: str) -> None:
    """Reject ids that are not a single safe path component (every store uses it)."""
    if not isinstance(snapshot_id, str) or not _ID_RE.match(snapshot_id):
        raise SnapshotError(
            f"invalid snapshot id {snapshot_id!r}: use letters, digits and . _ : = + - "
            "('.' not first, no '/'), at most 200 characters"
        )


def table_stem(table: TableIdentifier) -> str:
    """``<schema>.<table>`` with unsafe characters (and dots) percent-encoded."""

    def enc(name: str) -> str:
        return quote(name, safe="").replace(".", "%2E")

    return f"{enc(table.schema)}.{enc(table.table)}"


def part_path(table: TableIdentifier, name: str, format_id: str) -> str:
    """Where a part lives inside its snapshot: ``<table stem>/<name>.<format>``."""
    if not _PART_RE.match(name or ""):
        raise SnapshotError(
            f"invalid part name {name!r}: use letters, digits and . _ = + - , at most 150 "
            "characters (e.g. part-00003-<attempt>)"
        )
    return f"{table_stem(table)}/{name}.{format_id}"


class HashingWriter(io.RawIOBase):
    """A write-only binary file that counts and hashes what passes through to ``out``.

    Closing it (some writers, like pyarrow's, close their sink) flushes ``out`` but leaves it
    open: the store owns the real file."""

    def __init__(self, out: IO[bytes]) -> None:
        super().__init__()
        self._out = out
        self._sha = hashlib.sha256()
        self.size = 0

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        view = memoryview(data).cast("B")
        self._sha.update(view)
        self.size += len(view)
        self._out.write(view)
        return len(view)

    def flush(self) -> None:
        if not self.closed:
            self._out.flush()

    def close(self) -> None:
        if not self.closed:
            self._out.flush()
        super().close()

    @property
    def sha256(self) -> str:
        return self._sha.hexdigest()


class HashingReader(io.RawIOBase):
    """A raw binary file over ``inp`` that checks the part's size and SHA-256 when it reaches
    the end (raising ``SnapshotError``); wrap it in ``io.BufferedReader`` for line reading."""

    def __init__(self, inp: IO[bytes], part: SnapshotPart, where: str) -> None:
        super().__init__()
        self._inp = inp
        self._sha = hashlib.sha256()
        self._size = 0
        self._part = part
        self._checked = False
        self.name = where

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        data = self._inp.read(len(view))
        n = len(data)
        if n:
            view[:n] = data
            self._sha.update(data)
            self._size += n
        elif len(view) and not self._checked:
            self._checked = True
            self._check()
        return n

    def _check(self) -> None:
        p = self._part
        if self._size != p.size_bytes:
            raise SnapshotError(
                f"{self.name}: {self._size} bytes read but {p.size_bytes} were written: the "
                "part is truncated or was modified"
            )
        if p.sha256 is not None and self._sha.hexdigest() != p.sha256:
            raise SnapshotError(
                f"{self.name}: checksum mismatch (sha256 differs from the one recorded at "
                "write): the part is corrupt or was modified"
            )

    def close(self) -> None:
        if not self.closed:
            try:
                self._inp.close()
            finally:
                super().close()


class SnapshotFiles(Protocol):
    """Where one store keeps its snapshots' files (a directory, an S3 prefix, ...).

    Paths are relative to a snapshot (``<table stem>/<part>.<ext>``, ``metadata.json``).
    Staged files of a snapshot are invisible to :meth:`snapshot_ids` until :meth:`publish`.
    """

    where: str
    """Human-readable location for messages (``/var/lib/snaps``, ``s3://bucket/prefix/``)."""
    verify_before_read: bool
    """True when reading a part twice is cheap (local disk): checksums are verified before the
    first row; else while streaming."""

    def open_write(
        self, snapshot_id: str, path: str
    ) -> contextlib.AbstractContextManager[IO[bytes]]:
        """A writer for a staged file; durable once the block exits cleanly, removed (or never
        visible) when it raises."""
        ...

    def staged_size(self, snapshot_id: str, path: str) -> int | None:
        """Size of a staged file, ``None`` when it does not exist."""
        ...

    def staged_paths(self, snapshot_id: str) -> builtins.list[str]:
        """Every staged file of a snapshot (before publish)."""
        ...

    def read_staged(self, snapshot_id: str, path: str) -> bytes:
        """The content of a (small) staged file; ``SnapshotError`` when it cannot be read."""
        ...

    def remove_staged(self, snapshot_id: str, paths: Sequence[str] | None) -> None:
        """Remove staged files (all of the snapshot's when ``paths`` is ``None``)."""
        ...

    def publish(self, snapshot_id: str, metadata: bytes) -> None:
        """Write ``metadata.json`` and make the snapshot complete, atomically."""
        ...

    def exists(self, snapshot_id: str) -> bool: ...

    def read_metadata(self, snapshot_id: str) -> bytes:
        """The complete snapshot's ``metadata.json``; ``SnapshotNotFoundError`` if absent."""
        ...

    def open_read(self, snapshot_id: str, path: str) -> IO[bytes]: ...

    def size(self, snapshot_id: str, path: str) -> int | None: ...

    def snapshot_ids(self) -> builtins.list[str]:
        """Ids that may be complete snapshots (``read_metadata`` decides)."""
        ...

    def delete(self, snapshot_id: str) -> None:
        """Delete a complete snapshot so it is never seen half-deleted."""
        ...

    def layout1_name(self, table: TableIdentifier, format_id: str) -> str:
        """A layout-1 table file's name when its metadata does not record it."""
        ...


def serializer_for(format_id: str, given: SnapshotSerializer | None = None) -> SnapshotSerializer:
    """``given`` when it writes ``format_id``, else the registered serializer of that format."""
    if given is not None and given.format_id() == format_id:
        return given
    try:
        ser: SnapshotSerializer = registry("serializer").build(format_id)
    except LaredoError as exc:
        raise SnapshotError(
            f"snapshot part was written as {format_id!r}, and no serializer for it is "
            f"available: {exc}"
        ) from None
    return ser


class ManifestSnapshotStore:
    """A ``SnapshotStore`` writing layout 2 and reading layouts 1 and 2 over ``files``."""

    def __init__(self, files: SnapshotFiles) -> None:
        self.files = files

    # -- multi-part writing -----------------------------------------------------------------
    def write_part_raw(
        self,
        snapshot_id: str,
        table: TableIdentifier,
        name: str,
        format_id: str,
        write: Callable[[IO[bytes]], int],
    ) -> SnapshotPart:
        """Write one staged part of ``table`` with ``write(file) -> rows`` (the file counts and
        hashes every byte); returns what :meth:`commit` needs to record it. A failing writer
        leaves no staged file."""
        check_snapshot_id(snapshot_id)
        path = part_path(table, name, format_id)
        try:
            with self.files.open_write(snapshot_id, path) as out:
                hashing = HashingWriter(out)
                count = write(hashing)  # type: ignore[arg-type]
        except SnapshotError:
            raise
        except Exception as exc:
            raise SnapshotError(
                f"cannot write part {path} of snapshot {snapshot_id!r} to {self.files.where}: {exc}"
            ) from exc
        return SnapshotPart(path, format_id, int(count), hashing.size, hashing.sha256)

    def write_part(
        self,
        snapshot_id: str,
        table: TableIdentifier,
        name: str,
        info: TableSnapshotInfo,
        rows: Iterable[Row],
        *,
        serializer: SnapshotSerializer,
    ) -> SnapshotPart:
        """Write one staged part of ``table`` from rows (see the module docstring); returns
        what :meth:`commit` needs to record it."""
        return self.write_part_raw(
            snapshot_id,
            table,
            name,
            serializer.format_id(),
            lambda out: serializer.write(info, rows, out),
        )

    def write_part_batches(
        self,
        snapshot_id: str,
        table: TableIdentifier,
        name: str,
        info: TableSnapshotInfo,
        batches: Iterable[Any],
        *,
        serializer: SnapshotSerializer,
        encoded: Mapping[str, str] | None = None,
    ) -> SnapshotPart:
        """Write one staged part of ``table`` from Arrow record batches (column encodings in
        ``encoded``, see :mod:`laredo.snapshots.arrow`). A serializer with ``write_batches``
        writes them as they are; any other is given the decoded rows."""
        enc = dict(encoded or {})
        try:
            check_encodings(enc)
        except ValueError as exc:
            raise SnapshotError(f"snapshot {snapshot_id!r}, {table}: {exc}") from None
        if isinstance(serializer, BatchWriteSerializer):
            ser = serializer

            def write(out: IO[bytes]) -> int:
                return ser.write_batches(info, batches, out, enc)

        else:

            def write(out: IO[bytes]) -> int:
                return serializer.write(info, batches_rows(batches, enc), out)

        return self.write_part_raw(snapshot_id, table, name, serializer.format_id(), write)

    def stage_artifact(self, snapshot_id: str, name: str, artifact: SnapshotArtifact) -> None:
        """Record an artifact whose parts one job accepted (e.g. a Spark job's committed
        tasks), for :meth:`staged_artifacts`. Recording ``name`` again replaces it."""
        if not _PART_RE.match(name or ""):
            raise SnapshotError(f"invalid artifact record name {name!r}")
        check_snapshot_id(snapshot_id)
        body = json.dumps(encode_artifact(artifact), ensure_ascii=False).encode()
        path = f"{ARTIFACTS_DIR}/{name}.json"
        try:
            with self.files.open_write(snapshot_id, path) as out:
                out.write(body)
        except Exception as exc:
            raise SnapshotError(
                f"cannot record artifact {name!r} of snapshot {snapshot_id!r} in "
                f"{self.files.where}: {exc}"
            ) from exc

    def staged_artifacts(self, snapshot_id: str) -> dict[str, SnapshotArtifact]:
        """The artifacts recorded with :meth:`stage_artifact`, by record name."""
        check_snapshot_id(snapshot_id)
        out: dict[str, SnapshotArtifact] = {}
        prefix = f"{ARTIFACTS_DIR}/"
        for path in self.files.staged_paths(snapshot_id):
            if not (path.startswith(prefix) and path.endswith(".json")):
                continue
            data = self.files.read_staged(snapshot_id, path)
            try:
                out[path[len(prefix) : -len(".json")]] = decode_artifact(json.loads(data))
            except (ValueError, KeyError, TypeError) as exc:
                raise SnapshotError(
                    f"snapshot {snapshot_id!r}: malformed artifact record {path}: {exc}"
                ) from None
        return out

    def check_writable(self, snapshot_id: str) -> None:
        """Write and remove a small staged file: ``SnapshotError`` naming the location when
        this process cannot write the store (call it before costly work)."""

        def probe(out: IO[bytes]) -> int:
            out.write(b"probe")
            return 0

        part = self.write_part_raw(
            snapshot_id, TableIdentifier("laredo", "probe"), "probe", "tmp", probe
        )
        self.abort(snapshot_id, [part.path])

    def commit(
        self,
        snapshot_id: str,
        metadata: SnapshotMetadata,
        artifacts: Sequence[SnapshotArtifact],
    ) -> SnapshotDescriptor:
        """Record ``artifacts`` and publish the snapshot (see the module docstring). Raises
        ``SnapshotError`` (publishing nothing) when a listed part is missing or has another
        size than recorded."""
        check_snapshot_id(snapshot_id)
        if self.files.exists(snapshot_id):
            raise SnapshotError(f"snapshot {snapshot_id!r} already exists in {self.files.where}")
        listed: set[str] = set()
        for a in artifacts:
            for p in a.parts:
                size = self.files.staged_size(snapshot_id, p.path)
                if size is None:
                    raise SnapshotError(
                        f"snapshot {snapshot_id!r}: part {p.path} was not written (its writer "
                        "failed or wrote elsewhere); nothing was published"
                    )
                if size != p.size_bytes:
                    raise SnapshotError(
                        f"snapshot {snapshot_id!r}: part {p.path} has {size} bytes, "
                        f"{p.size_bytes} were reported; nothing was published"
                    )
                listed.add(p.path)
        strays = [p for p in self.files.staged_paths(snapshot_id) if p not in listed]
        if strays:
            self.files.remove_staged(snapshot_id, strays)
        formats = {p.format for a in artifacts for p in a.parts}
        fmt = formats.pop() if len(formats) == 1 else metadata.format
        meta = SnapshotMetadata(
            snapshot_id=snapshot_id,
            created_at=metadata.created_at,
            source_positions=dict(metadata.source_positions),
            tables=table_headers(metadata, artifacts),
            format=fmt,
            user_meta=dict(metadata.user_meta),
        )
        manifest = Manifest(meta, tuple(artifacts))
        body = json.dumps(encode_manifest(manifest), indent=2, ensure_ascii=False).encode()
        self.files.publish(snapshot_id, body + b"\n")
        logger.info("saved snapshot %s to %s", snapshot_id, self.files.where)
        return self._descriptor(manifest, len(body) + 1)

    def abort(self, snapshot_id: str, paths: Sequence[str] | None = None) -> None:
        """Remove staged parts of a snapshot that was not (or will not be) committed."""
        check_snapshot_id(snapshot_id)
        with contextlib.suppress(Exception):
            self.files.remove_staged(snapshot_id, paths)

    # -- SnapshotStore ----------------------------------------------------------------------
    def save(
        self,
        snapshot_id: str,
        metadata: SnapshotMetadata,
        tables: Mapping[TableIdentifier, Iterable[Row]],
        serializer: SnapshotSerializer,
    ) -> SnapshotDescriptor:
        """Write every table as one part, then publish: atomic (listed complete or never)."""
        check_snapshot_id(snapshot_id)
        if self.files.exists(snapshot_id):
            raise SnapshotError(f"snapshot {snapshot_id!r} already exists in {self.files.where}")
        infos = {t.table: t for t in metadata.tables}
        missing = [str(t) for t in infos if t not in tables]
        if missing:
            raise SnapshotError(
                f"snapshot {snapshot_id!r}: metadata lists tables {missing} but no rows were "
                "given for them"
            )
        self.abort(snapshot_id)  # leftovers of a crashed save of the same id
        try:
            artifacts = []
            for table, rows in tables.items():
                info = infos.get(table) or TableSnapshotInfo(table=table, row_count=0)
                part = self.write_part(
                    snapshot_id, table, "part-00000", info, rows, serializer=serializer
                )
                artifacts.append(
                    SnapshotArtifact(TABLE, table, (part,), info.pipeline_id, None, info.position)
                )
            return self.commit(snapshot_id, metadata, artifacts)
        except BaseException as exc:
            self.abort(snapshot_id)
            if isinstance(exc, SnapshotError) or not isinstance(exc, Exception):
                raise
            raise SnapshotError(
                f"cannot save snapshot {snapshot_id!r} to {self.files.where}: {exc}"
            ) from exc

    def manifest(self, snapshot_id: str) -> Manifest:
        """The snapshot's metadata and artifacts (layout 1 or 2)."""
        check_snapshot_id(snapshot_id)
        data = self.files.read_metadata(snapshot_id)
        try:
            return decode_manifest(json.loads(data), self.files.layout1_name)
        except (
            ValueError,
            KeyError,
            TypeError,
            AttributeError,
            IndexError,
            ArithmeticError,
            RecursionError,
        ) as exc:
            where = f"{self.files.where.rstrip('/')}/{snapshot_id}/{METADATA}"
            raise SnapshotError(f"{where}: malformed snapshot metadata: {exc}") from None

    def _descriptor(self, manifest: Manifest, metadata_size: int = 0) -> SnapshotDescriptor:
        meta = manifest.metadata
        return SnapshotDescriptor(
            snapshot_id=meta.snapshot_id,
            created_at=meta.created_at,
            format=meta.format,
            tables=meta.tables,
            size_bytes=manifest.size_bytes + metadata_size,
            source_positions=dict(meta.source_positions),
            user_meta=dict(meta.user_meta),
        )

    def describe(self, snapshot_id: str) -> SnapshotDescriptor:
        """Metadata and the total size of the snapshot's files."""
        manifest = self.manifest(snapshot_id)
        return self._descriptor(manifest, self.files.size(snapshot_id, METADATA) or 0)

    def list(self, table: TableIdentifier | None = None) -> builtins.list[SnapshotDescriptor]:
        """Complete snapshots, newest first (by ``created_at``, then id); unreadable ones are
        skipped with a warning. ``table`` keeps those holding it."""
        out = []
        for sid in self.files.snapshot_ids():
            try:
                desc = self.describe(sid)
            except SnapshotNotFoundError:
                continue
            except SnapshotError as exc:
                logger.warning("skipping snapshot %s: %s", sid, exc)
                continue
            if table is not None and all(t.table != table for t in desc.tables):
                continue
            out.append(desc)
        out.sort(key=lambda d: (d.created_at.timestamp(), d.snapshot_id), reverse=True)
        return out

    def check_part(self, snapshot_id: str, part: SnapshotPart) -> None:
        """Size check, and the checksum when the backend verifies before reading."""
        where = f"{self.files.where.rstrip('/')}/{snapshot_id}/{part.path}"
        size = self.files.size(snapshot_id, part.path)
        if size is None:
            raise SnapshotError(f"{where}: part is missing from snapshot {snapshot_id!r}")
        if size != part.size_bytes:
            raise SnapshotError(
                f"{where}: {size} bytes stored but {part.size_bytes} were written: the part "
                "is truncated or was modified"
            )
        if self.files.verify_before_read and part.sha256 is not None:
            sha = hashlib.sha256()
            with self.files.open_read(snapshot_id, part.path) as f:
                while chunk := f.read(1 << 20):
                    sha.update(chunk)
            if sha.hexdigest() != part.sha256:
                raise SnapshotError(
                    f"{where}: checksum mismatch (sha256 differs from the one recorded at "
                    "save): the part is corrupt or was modified"
                )

    def read_part(
        self,
        snapshot_id: str,
        table: TableIdentifier,
        part: SnapshotPart,
        serializer: SnapshotSerializer | None = None,
        *,
        checked: bool = False,
    ) -> Iterator[Row]:
        """One part's rows (lazily). Verifies the part unless ``checked``."""
        ser = serializer_for(part.format, serializer)
        where = f"{self.files.where.rstrip('/')}/{snapshot_id}/{part.path}"
        with contextlib.closing(self.open_part(snapshot_id, part, checked=checked)) as inp:
            header, rows = ser.read(inp)
            if header.table != table:
                raise SnapshotError(f"{where}: holds table {header.table}, expected {table}")
            yield from rows
            while inp.read(1 << 16):  # trailing bytes still count for the checksum
                pass

    def open_part(
        self, snapshot_id: str, part: SnapshotPart, *, checked: bool = False
    ) -> IO[bytes]:
        """A part's bytes, verified: size (and checksum when the backend verifies before
        reading) now unless ``checked``; else size and checksum when the stream reaches its
        end (``SnapshotError`` then). Read it to the end before trusting what it gave."""
        if not checked:
            self.check_part(snapshot_id, part)
        raw = self.files.open_read(snapshot_id, part.path)
        if self.files.verify_before_read:
            return raw
        where = f"{self.files.where.rstrip('/')}/{snapshot_id}/{part.path}"
        return io.BufferedReader(HashingReader(raw, part, where), 1 << 20)

    def read_part_batches(
        self,
        snapshot_id: str,
        table: TableIdentifier,
        part: SnapshotPart,
        serializer: SnapshotSerializer | None = None,
        *,
        checked: bool = False,
    ) -> tuple[dict[str, str], Iterator[Any]] | None:
        """One part's encoding map and Arrow record batches (lazily), or ``None`` when its
        format has no batch reader (use :meth:`read_part`). Verifies the part unless
        ``checked``; the checksum is verified before the first batch."""
        ser = serializer_for(part.format, serializer)
        if not isinstance(ser, BatchReadSerializer):
            return None
        if not checked:
            self.check_part(snapshot_id, part)
        where = f"{self.files.where.rstrip('/')}/{snapshot_id}/{part.path}"
        raw = self.files.open_read(snapshot_id, part.path)
        inp: IO[bytes] = raw
        try:
            if not self.files.verify_before_read:
                inp = io.BufferedReader(HashingReader(raw, part, where), 1 << 20)
                data = inp.read()  # Parquet needs random access: hash the whole part first
                inp.close()
                inp = io.BytesIO(data)
                inp.name = where
            header, encoded, batches = ser.read_batches(inp)
        except BaseException:
            inp.close()
            raise
        if header.table != table:
            inp.close()
            raise SnapshotError(f"{where}: holds table {header.table}, expected {table}")

        def gen() -> Iterator[Any]:
            with contextlib.closing(inp):
                yield from batches

        return encoded, gen()

    def load(
        self, snapshot_id: str, serializer: SnapshotSerializer | None = None
    ) -> tuple[SnapshotMetadata, dict[TableIdentifier, Iterator[Row]]]:
        """Metadata and one lazy row iterator per table (its parts in order). Every part is
        size-checked here (and checksummed when cheap), rows are parsed while iterating. A part
        written in another format is read with that format's registered serializer."""
        manifest = self.manifest(snapshot_id)
        by_table = manifest.table_artifacts()
        for a in by_table.values():
            for p in a.parts:
                self.check_part(snapshot_id, p)
        out: dict[TableIdentifier, Iterator[Row]] = {}
        for info in manifest.metadata.tables:
            artifact = by_table.get(info.table)
            if artifact is None:
                raise SnapshotError(
                    f"snapshot {snapshot_id!r}: no data recorded for table {info.table}"
                )
            out[info.table] = self._chain(snapshot_id, artifact, serializer)
        return manifest.metadata, out

    def _chain(
        self,
        snapshot_id: str,
        artifact: SnapshotArtifact,
        serializer: SnapshotSerializer | None,
    ) -> Iterator[Row]:
        for part in artifact.parts:
            yield from self.read_part(snapshot_id, artifact.table, part, serializer, checked=True)

    def delete(self, snapshot_id: str) -> None:
        check_snapshot_id(snapshot_id)
        if not self.files.exists(snapshot_id):
            raise SnapshotNotFoundError(snapshot_id, self.files.where)
        self.files.delete(snapshot_id)
        logger.info("deleted snapshot %s from %s", snapshot_id, self.files.where)

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
