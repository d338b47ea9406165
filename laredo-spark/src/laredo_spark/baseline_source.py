"""``spark.read.format("laredo-baseline")``: a table of an S3 baseline as a DataFrame.

Reads the baseline layout of the ``kinesis`` source (:mod:`laredo_source_kinesis.baseline`):
``<prefix><schema>.<table>.jsonl`` / ``.jsonl.gz`` / ``.parquet`` or several parts under
``<prefix><schema>.<table>/``, with an optional ``manifest.json``, over boto3 in the Python data
source (Spark's S3A connector is not needed). Options:

===================  ========================================================================
``bucket``           required
``table``            required, ``schema.table``
``prefix``           key prefix (default ``""``), as the source's ``baseline_prefix``
``manifest_key``     default ``<prefix>manifest.json`` (optional object)
``endpoint_url``,    where and how to reach S3 (default: the AWS chain on every executor;
``region``,          credentials given here travel in the plan: prefer the executors' own
``aws_access_key_id``, ``aws_secret_access_key``, ``aws_session_token``   chain on a cluster)
``kinds``            JSON ``{column: kind}`` (see :mod:`laredo_spark.frame`), or ``declared``:
                     native kinds from the manifest's column types; default: every column
                     ``json`` (typed-JSON text), as ``laredo-snapshot`` reads
``columns``          comma-separated column names when there is no manifest (default: the
                     keys of the first rows read)
``split_bytes``      uncompressed JSONL objects above this size are read by several tasks in
                     byte ranges (default 64 MiB); other objects are one task each
===================  ========================================================================

Every object is read with ``IfMatch`` on the ETag listed when the query was planned: an object
replaced in between fails the read instead of mixing versions.
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from laredo.errors import ConfigError, MissingDependencyError, SourceError, aws_error_code
from laredo.serialization import loads_row
from laredo.types import TableIdentifier
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from .batches import BATCH_ROWS, convert_batch, rows_batch
from .kinds import CLASSIC_KINDS, KINDS, base_kind, kind_of_column, spark_schema, value_kind

try:  # the laredo-spark[s3] extra
    from laredo_source_kinesis.baseline import BaselineObject, S3Baseline, S3Body
except ImportError:  # pragma: no cover - depends on the installed extras
    HAVE_KINESIS = False
else:
    HAVE_KINESIS = True

__all__ = ["BaselineDataSource"]

DEFAULT_SPLIT_BYTES = 64 * 1024 * 1024
_AWS_KEYS = ("aws_access_key_id", "aws_secret_access_key", "aws_session_token")


def _s3(options: Mapping[str, str]) -> Any:
    try:
        import boto3  # noqa: PLC0415 - lazy: heavy SDK of the [s3] extra; this module loads with every session
    except ImportError as exc:
        raise MissingDependencyError("laredo-spark[s3]", "the laredo-baseline reader") from exc
    kwargs: dict[str, Any] = {k: options[k] for k in _AWS_KEYS if options.get(k)}
    if options.get("endpoint_url"):
        kwargs["endpoint_url"] = options["endpoint_url"]
    if options.get("region"):
        kwargs["region_name"] = options["region"]
    return boto3.client("s3", **kwargs)


def _baseline(options: Mapping[str, str]) -> Any:
    if not HAVE_KINESIS:
        raise MissingDependencyError("laredo-spark[s3]", "the laredo-baseline reader")
    missing = [k for k in ("bucket", "table") if not options.get(k)]
    if missing:
        raise ConfigError(
            [
                f"laredo-baseline: option {k!r} is required (e.g. .option({k!r}, ...))"
                for k in missing
            ]
        )
    return S3Baseline(
        _s3(options), options["bucket"], options.get("prefix", ""), options.get("manifest_key")
    )


@dataclass
class _Part(InputPartition):
    key: str
    etag: str
    start: int = 0
    end: int | None = None  # exclusive; None: the whole object


def _plan(options: Mapping[str, str]) -> tuple[dict[str, str], list[_Part]]:
    """Column kinds and partitions (driver side)."""
    base = _baseline(options)
    table = TableIdentifier.parse(options["table"])
    objects = base.objects(table)
    if not objects:
        raise ConfigError(
            f"laredo-baseline: no baseline object for {table} under "
            f"{base.url(options.get('prefix', ''))}: expected {base.expected_location(table)} "
            f"(or .jsonl.gz, .parquet, or parts under {table.schema}.{table.table}/)"
        )
    manifest = base.read_manifest(required=bool(options.get("manifest_key")))
    declared = manifest.columns.get(table) if manifest is not None else None
    if options.get("columns"):
        names = [c.strip() for c in options["columns"].split(",") if c.strip()]
    elif declared:
        names = [c.name for c in declared]
    else:
        names = []
        for obj in objects:
            for batch in base.read_rows(obj, 100):
                for row in batch:
                    names.extend(k for k in row if k not in names)
                break
            if names:
                break
        if not names:
            raise ConfigError(
                f"laredo-baseline: {table} has no manifest columns and no rows to take column "
                f"names from: set .option('columns', 'a,b,...')"
            )
    kinds = _kinds(options, names, declared, table)
    split = int(options.get("split_bytes", DEFAULT_SPLIT_BYTES))
    if split <= 0:
        raise ConfigError(f"laredo-baseline: split_bytes must be positive (got {split})")
    parts: list[_Part] = []
    for obj in objects:
        if obj.key.endswith(".jsonl") and obj.size > split:
            parts.extend(
                _Part(obj.key, obj.etag, s, min(s + split, obj.size))
                for s in range(0, obj.size, split)
            )
        else:
            parts.append(_Part(obj.key, obj.etag))
    return kinds, parts


def _kinds(
    options: Mapping[str, str], names: list[str], declared: Any, table: TableIdentifier
) -> dict[str, str]:
    spec = options.get("kinds", "")
    if not spec:
        return dict.fromkeys(names, "json")
    if spec == "declared":
        if not declared:
            raise ConfigError(
                f"laredo-baseline: kinds='declared' needs the manifest to list {table}'s columns"
            )
        by_name = {c.name: kind_of_column(c, kinds=CLASSIC_KINDS) for c in declared}
        return {n: by_name.get(n, "json") for n in names}
    given = json.loads(spec)
    bad = [f"{k}={v!r}" for k, v in given.items() if v not in KINDS]
    if bad:
        raise ConfigError(f"laredo-baseline: unknown kinds {', '.join(bad)} (use one of {KINDS})")
    return {n: str(given.get(n, "json")) for n in names}


class _Reader(DataSourceReader):
    def __init__(self, options: Mapping[str, str], kinds: dict[str, str], parts: list[_Part]):
        self.options = dict(options)
        self.kinds = kinds
        self.parts = parts

    def partitions(self) -> list[_Part]:
        return self.parts

    def read(self, partition: Any) -> Iterator[Any]:
        base = _baseline(self.options)
        p: _Part = partition
        where = f"laredo-baseline: s3://{base.bucket}/{p.key}"
        if p.end is None and p.key.endswith(".parquet"):
            for batch in base.read_batches(BaselineObject(p.key, p.etag, 0), BATCH_ROWS):
                try:
                    yield convert_batch(self.kinds, batch, {})
                except (TypeError, pa.ArrowException) as exc:
                    raise SourceError(
                        f"{where}: {exc}; give the column kind 'json' in the 'kinds' option"
                    ) from None
            return
        if p.end is None:
            batches: Iterator[list[Any]] = base.read_rows(
                BaselineObject(p.key, p.etag, 0), BATCH_ROWS
            )
        else:
            batches = _range_rows(base, p)
        native = {n: base_kind(k) for n, k in self.kinds.items() if k != "json"}
        for rows in batches:
            for row in rows:
                for n, k in native.items():
                    v = row.get(n)
                    if v is not None and base_kind(value_kind(v)) != k:
                        raise SourceError(
                            f"{where}: column {n!r} has {type(v).__name__} value {v!r:.40} but "
                            f"its kind is {k!r}; give it kind 'json' in the 'kinds' option"
                        )
            yield rows_batch(self.kinds, rows)


def _range_rows(base: Any, p: _Part) -> Iterator[list[Any]]:
    """Rows of the lines that *start* in ``[p.start, p.end)`` of an uncompressed JSONL object:
    the range reader before it owns a line crossing ``p.start``; the last line may run past
    ``p.end``."""
    assert p.end is not None
    first = max(p.start - 1, 0)
    try:
        resp = base.s3.get_object(
            Bucket=base.bucket, Key=p.key, IfMatch=p.etag, Range=f"bytes={first}-"
        )
    except Exception as exc:
        if aws_error_code(exc) in {"PreconditionFailed", "412"}:
            raise SourceError(
                f"baseline object s3://{base.bucket}/{p.key} changed after the read was "
                f"planned; read it again"
            ) from None
        raise SourceError(f"reading baseline object s3://{base.bucket}/{p.key}: {exc}") from exc
    body = resp["Body"]
    stream = io.BufferedReader(S3Body(body), buffer_size=256 * 1024)
    try:
        pos = first
        if p.start > 0:
            # the byte before the range: a newline there means a line starts at p.start
            skipped = stream.readline()
            pos += len(skipped)
        batch: list[Any] = []
        while pos < p.end:
            line = stream.readline()
            if not line:
                break
            pos += len(line)
            if line.strip():
                try:
                    batch.append(loads_row(line))
                except ValueError as exc:
                    raise SourceError(
                        f"baseline object s3://{base.bucket}/{p.key} at byte {pos - len(line)}: "
                        f"not a JSON row: {exc}"
                    ) from None
                if len(batch) >= BATCH_ROWS:
                    yield batch
                    batch = []
        if batch:
            yield batch
    finally:
        body.close()


class BaselineDataSource(DataSource):
    """See the module docstring."""

    @classmethod
    def name(cls) -> str:
        return "laredo-baseline"

    def schema(self) -> Any:
        kinds, _parts = _plan(self.options)
        return spark_schema(kinds)

    def reader(self, schema: Any) -> _Reader:
        kinds, parts = _plan(self.options)
        names = [f.name for f in schema.fields]
        if names != list(kinds):
            # a user-given schema: its names, typed-JSON unless the kinds say otherwise
            kinds = {n: kinds.get(n, "json") for n in names}
        return _Reader(self.options, kinds, parts)
