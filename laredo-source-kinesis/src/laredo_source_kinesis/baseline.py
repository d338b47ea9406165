"""The S3 baseline: a manifest plus objects per table.

Layout under ``s3://<bucket>/<prefix>``::

    manifest.json                         optional (key set by ``manifest_key``)
    <schema>.<table>.jsonl                one object per table, or
    <schema>.<table>.jsonl.gz             gzip-compressed, or
    <schema>.<table>.parquet              Parquet (needs pyarrow), or
    <schema>.<table>/<part>.jsonl[.gz]    several parts (also .parquet), read in key order

A JSONL object holds one row per line in Laredo's typed JSON encoding (the same as the stream's
``new`` values, see :mod:`laredo_source_kinesis.records`); blank lines are skipped. A table
with no rows is an empty object: a table with no object at all fails validation.

``manifest.json``::

    {"tables": {"public.users": {"columns": [
         {"name": "id", "type": "int8", "nullable": false, "primary_key": true}, ...]}},
     "source_sequence": 1234}

``columns`` become the table's ``ColumnDefinition``s (primary-key columns also define which
columns a change record must carry). ``source_sequence`` (optional) is the producer sequence
the baseline includes: stream records with ``seq`` at or below it are skipped.

Objects are read as listed: every GET carries ``IfMatch`` with the listed ETag, so an object
replaced during the baseline fails the baseline instead of mixing versions. The baseline's
marker (in the position) is a digest of the keys and ETags read.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import logging
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from laredo import serialization
from laredo.errors import ConfigError, MissingDependencyError, SourceError, aws_error_code
from laredo.types import ColumnDefinition, Row, TableIdentifier, primary_key_columns

logger = logging.getLogger(__name__)

EXTENSIONS = (".jsonl", ".jsonl.gz", ".parquet")


@dataclass(frozen=True, slots=True)
class Manifest:
    columns: dict[TableIdentifier, list[ColumnDefinition]]
    source_sequence: int | None
    version: str | None


@dataclass(frozen=True, slots=True)
class BaselineObject:
    key: str
    etag: str
    size: int


class S3Body(io.RawIOBase):
    """A boto3 ``StreamingBody`` as a raw stream (wrap it in ``io.BufferedReader``)."""

    def __init__(self, body: Any) -> None:
        super().__init__()
        self._body = body

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        data = self._body.read(len(view))
        view[: len(data)] = data
        return len(data)

    def close(self) -> None:
        if not self.closed:
            self._body.close()
            super().close()


def parse_manifest(data: bytes, where: str, version: str | None = None) -> Manifest:
    try:
        doc = json.loads(data)
    except ValueError as exc:
        raise ConfigError(f"{where}: manifest is not valid JSON: {exc}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("tables", {}), dict):
        raise ConfigError(f"{where}: manifest must be an object with a 'tables' object")
    problems = []
    columns: dict[TableIdentifier, list[ColumnDefinition]] = {}
    for name, spec in doc.get("tables", {}).items():
        try:
            table = TableIdentifier.parse(name)
        except ValueError as exc:
            problems.append(f"{where}: tables.{name}: {exc}")
            continue
        cols = spec.get("columns", []) if isinstance(spec, dict) else None
        if not isinstance(cols, list):
            problems.append(f"{where}: tables.{name}.columns must be a list")
            continue
        out = []
        pk_ord = 0
        for i, c in enumerate(cols, start=1):
            if not isinstance(c, dict) or not isinstance(c.get("name"), str):
                problems.append(f"{where}: tables.{name}.columns[{i - 1}] needs a 'name'")
                continue
            pk = bool(c.get("primary_key", False))
            if pk:
                pk_ord += 1
            out.append(
                ColumnDefinition(
                    name=c["name"],
                    type=str(c.get("type", "text")),
                    ordinal_position=i,
                    nullable=bool(c.get("nullable", not pk)),
                    primary_key=pk,
                    primary_key_ordinal=int(c.get("primary_key_ordinal", pk_ord if pk else 0)),
                )
            )
        columns[table] = out
    seq = doc.get("source_sequence")
    if seq is not None and type(seq) is not int:
        problems.append(f"{where}: source_sequence must be an integer (got {seq!r})")
    if problems:
        raise ConfigError(problems)
    return Manifest(columns, seq, version)


class S3Baseline:
    """Reads the manifest and the per-table baseline objects (see the module docstring)."""

    def __init__(self, s3: Any, bucket: str, prefix: str, manifest_key: str | None) -> None:
        self.s3 = s3
        self.bucket = bucket
        self.prefix = prefix
        self.manifest_key = manifest_key

    def url(self, key: str = "") -> str:
        return f"s3://{self.bucket}/{key}"

    def read_manifest(self, required: bool) -> Manifest | None:
        key = self.manifest_key or f"{self.prefix}manifest.json"
        try:
            resp = self.s3.get_object(Bucket=self.bucket, Key=key)
        except Exception as exc:
            if aws_error_code(exc) in {"NoSuchKey", "404"} and not required:
                return None
            if aws_error_code(exc) in {"NoSuchKey", "404"}:
                raise ConfigError(
                    f"manifest {self.url(key)} not found: upload it or unset manifest_key"
                ) from None
            raise SourceError(f"reading manifest {self.url(key)}: {exc}") from exc
        version = resp.get("VersionId") or resp.get("ETag", "").strip('"') or None
        return parse_manifest(resp["Body"].read(), self.url(key), version)

    def objects(self, table: TableIdentifier) -> list[BaselineObject]:
        base = f"{self.prefix}{table.schema}.{table.table}"
        found = []
        paginator = self.s3.get_paginator("list_objects_v2")
        for page in paginator.paginate(Bucket=self.bucket, Prefix=base):
            for obj in page.get("Contents", []):
                key = obj["Key"]
                rest = key[len(base) :]
                single = rest in EXTENSIONS
                part = rest.startswith("/") and rest.endswith(EXTENSIONS)
                if single or part:
                    found.append(BaselineObject(key, str(obj.get("ETag", "")), int(obj["Size"])))
        found.sort(key=lambda o: o.key)
        return found

    def expected_location(self, table: TableIdentifier) -> str:
        return self.url(f"{self.prefix}{table.schema}.{table.table}.jsonl")

    @staticmethod
    def marker(
        objects: dict[TableIdentifier, list[BaselineObject]], manifest: Manifest | None
    ) -> str:
        h = hashlib.sha256()
        if manifest is not None and manifest.version:
            h.update(f"manifest={manifest.version}\n".encode())
        for table in sorted(objects):
            for o in objects[table]:
                h.update(f"{o.key}={o.etag}\n".encode())
        return h.hexdigest()[:20]

    def _get(self, obj: BaselineObject) -> Any:
        try:
            return self.s3.get_object(Bucket=self.bucket, Key=obj.key, IfMatch=obj.etag)
        except Exception as exc:
            if aws_error_code(exc) in {"PreconditionFailed", "412"}:
                raise SourceError(
                    f"baseline object {self.url(obj.key)} changed while the baseline was read; "
                    f"run the baseline again"
                ) from None
            raise SourceError(f"reading baseline object {self.url(obj.key)}: {exc}") from exc

    def read_rows(self, obj: BaselineObject, batch_size: int) -> Iterator[list[Row]]:
        """Rows of one object in lists of up to ``batch_size`` (streamed, never all at once)."""
        if obj.key.endswith(".parquet"):
            for rb in self.read_batches(obj, batch_size):
                yield rb.to_pylist()
            return
        raw = io.BufferedReader(S3Body(self._get(obj)["Body"]), buffer_size=256 * 1024)
        with raw:
            stream: Any = gzip.GzipFile(fileobj=raw) if obj.key.endswith(".gz") else raw
            yield from self._jsonl_rows(stream, obj, batch_size)

    def read_batches(self, obj: BaselineObject, batch_size: int) -> Iterator[Any]:
        """The Arrow record batches of a ``.parquet`` object (up to ``batch_size`` rows each),
        as pyarrow reads them (needs pyarrow)."""
        try:
            import pyarrow.parquet as pq  # noqa: PLC0415 - lazy: optional extra (laredo-source-kinesis[parquet])
        except ImportError as exc:
            raise MissingDependencyError(
                "laredo-source-kinesis[parquet]", f"Parquet baseline {obj.key}"
            ) from exc
        raw = io.BufferedReader(S3Body(self._get(obj)["Body"]), buffer_size=256 * 1024)
        # Parquet needs random access: spool to a temporary file (memory up to 64 MiB).
        with raw, tempfile.SpooledTemporaryFile(max_size=64 * 1024 * 1024) as spool:
            while chunk := raw.read(1024 * 1024):
                spool.write(chunk)
            spool.seek(0)
            yield from pq.ParquetFile(spool).iter_batches(batch_size=batch_size)

    def _jsonl_rows(self, stream: Any, obj: BaselineObject, batch_size: int) -> Iterator[list[Row]]:
        loads: Callable[[bytes], Row] = serialization.loads_row
        batch: list[Row] = []
        for lineno, line in enumerate(stream, start=1):
            if not line.strip():
                continue
            try:
                batch.append(loads(line))
            except ValueError as exc:
                raise SourceError(
                    f"baseline object {self.url(obj.key)} line {lineno}: not a JSON row: {exc}"
                ) from None
            if len(batch) >= batch_size:
                yield batch
                batch = []
        if batch:
            yield batch


def key_columns(
    columns: dict[TableIdentifier, list[ColumnDefinition]],
) -> dict[TableIdentifier, list[str]]:
    return {t: primary_key_columns(cols) for t, cols in columns.items()}
