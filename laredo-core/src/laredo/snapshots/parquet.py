"""Parquet snapshot serializer (format id ``parquet``), an optional extra:
``pip install laredo-core[parquet]`` (pyarrow).

One Parquet file per table. A column is stored with a native Parquet type when every non-null
value of it has the same Python type that reads back unchanged:

=================================  ==========================================
Python values                      Parquet / Arrow type
=================================  ==========================================
``bool``                           ``bool``
``int`` within int64               ``int64``
``float``                          ``float64``
``str``                            ``string``
``bytes``                          ``binary``
``date``                           ``date32``
``time`` (naive)                   ``time64[us]``
``timedelta``                      ``duration[us]``
``datetime`` all naive             ``timestamp[us]``
``datetime`` all one zone          ``timestamp[us, tz]`` (fixed offset or zone name)
only ``None``                      ``null``
=================================  ==========================================

A column of only ``Decimal`` (or only ``UUID``) values is a ``string`` column of
``str(value)`` (exact: ``Decimal("1.50")`` keeps its exponent), listed in ``laredo.text_columns``
(JSON object column -> ``"decimal"`` / ``"uuid"``). Every other column (dicts, lists, big ints,
mixed types) is a ``string`` column holding the typed JSON encoding of
:mod:`laredo.serialization` per value, listed in ``laredo.json_columns`` (JSON list), so the
round trip gives back the same Python types. Other file metadata keys: ``laredo.table_info``
(the table header as JSON) and ``laredo.absent`` (present only when rows have different key
sets: a hidden ``__laredo_absent`` column then lists, per row, the columns that row lacks).
The keys are file-level key-value metadata (``laredo.table_info`` is added when the last row
group is written, so a part can be streamed without knowing its row count first).

:meth:`ParquetSerializer.write_batches` writes the same format straight from Arrow record
batches (see :mod:`laredo.snapshots.arrow` for the column encodings: ``json`` columns are the
typed JSON columns above, ``decimal``/``uuid`` the text columns), without a Python object per
value; :meth:`ParquetSerializer.read_batches` gives the row groups back as record batches.
"""

from __future__ import annotations

import io
import itertools
import json
import uuid
from collections.abc import Iterable, Iterator, Mapping
from datetime import UTC, date, datetime, time, timedelta, timezone
from decimal import Decimal
from typing import IO, Any, Literal
from zoneinfo import ZoneInfo

import pydantic
from pydantic import ConfigDict

from laredo.errors import MissingDependencyError, SnapshotError
from laredo.serialization import (
    decode_table_info,
    encode_table_info,
    encode_value,
    object_hook,
)
from laredo.types import Row, TableSnapshotInfo

from .arrow import DECIMAL, JSON, ROW, UUID, batches_rows, check_encodings, zone_name

__all__ = ["ParquetSerializer", "ParquetSerializerOptions"]

_INFO_KEY = b"laredo.table_info"
_JSON_KEY = b"laredo.json_columns"
_TEXT_KEY = b"laredo.text_columns"
# columns whose values all have one of these types are stored as their canonical text
_TEXT_KINDS: dict[type, str] = {Decimal: "decimal", uuid.UUID: "uuid"}
_TEXT_DECODERS: dict[str, Any] = {"decimal": Decimal, "uuid": uuid.UUID}
_ABSENT_KEY = b"laredo.absent"
_ABSENT_COL = "__laredo_absent"
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


def _pyarrow() -> Any:
    try:
        import pyarrow as pa  # noqa: PLC0415 - lazy: optional extra, loaded on first use
        import pyarrow.parquet as pq  # noqa: PLC0415 - lazy: optional extra, loaded on first use
    except ImportError:
        raise MissingDependencyError("laredo-core[parquet]", "Parquet snapshots") from None
    return pa, pq


def _arrow_type(pa: Any, values: list[Any]) -> Any:
    """The native Arrow type for a column, or None when it must be JSON-encoded."""
    kinds = {type(v) for v in values if v is not None}
    if not kinds:
        return pa.null()
    if len(kinds) != 1:
        return None
    kind = kinds.pop()
    if kind is bool:
        return pa.bool_()
    if kind is int:
        ok = all(v is None or _INT64_MIN <= v <= _INT64_MAX for v in values)
        return pa.int64() if ok else None
    if kind is float:
        return pa.float64()
    if kind is str:
        return pa.string()
    if kind is bytes:
        return pa.binary()
    if kind is date:
        return pa.date32()
    if kind is time:
        return pa.time64("us") if all(v is None or v.tzinfo is None for v in values) else None
    if kind is timedelta:
        one = timedelta(microseconds=1)
        ok = all(v is None or _INT64_MIN <= v // one <= _INT64_MAX for v in values)
        return pa.duration("us") if ok else None
    if kind is datetime:
        zones = {v.tzinfo for v in values if v is not None}
        if zones == {None}:
            return pa.timestamp("us")
        if len(zones) == 1:
            name = zone_name(zones.pop())
            if name is not None:
                return pa.timestamp("us", tz=name)
        return None
    return None


def _file_schema(
    pa: Any, info: TableSnapshotInfo, schema: Any, encoded: Mapping[str, str]
) -> tuple[Any, dict[bytes, bytes | str]]:
    """The Parquet schema of batches with ``schema`` (``large_string``/``large_binary`` stored
    as ``string``/``binary``) and the file metadata naming its JSON and text-encoded
    columns."""
    names = list(schema.names)
    if _ABSENT_COL in names:
        raise SnapshotError(f"{info.table}: column name {_ABSENT_COL!r} is reserved")
    fields = []
    for f in schema:
        typ = f.type
        if pa.types.is_large_string(typ):
            typ = pa.string()
        elif pa.types.is_large_binary(typ):
            typ = pa.binary()
        fields.append(pa.field(f.name, typ))
    text_cols = {n: e for n in names if (e := encoded.get(n)) in (DECIMAL, UUID)}
    meta: dict[bytes, bytes | str] = {
        _JSON_KEY: json.dumps([n for n in names if encoded.get(n) == JSON]),
        _TEXT_KEY: json.dumps(text_cols),
    }
    return pa.schema(fields), meta


class ParquetSerializerOptions(pydantic.BaseModel):
    model_config = ConfigDict(extra="forbid")
    row_group_size: int = pydantic.Field(default=100_000, gt=0)
    compression: Literal["zstd", "snappy", "gzip", "lz4", "brotli", "none"] = "zstd"


class ParquetSerializer:
    """Writes and reads one Parquet file per table; see the module docstring for the format."""

    def __init__(self, row_group_size: int = 100_000, compression: str = "zstd") -> None:
        self.row_group_size = row_group_size
        self.compression = compression

    def format_id(self) -> str:
        return "parquet"

    def write(self, info: TableSnapshotInfo, rows: Iterable[Row], out: IO[bytes]) -> int:
        """Write the rows as one Parquet file; returns the number of rows written."""
        pa, pq = _pyarrow()
        rows = rows if isinstance(rows, list) else list(rows)
        names: dict[str, None] = {}
        for row in rows:
            for k in row:
                if k not in names:
                    names[k] = None
        if _ABSENT_COL in names:
            raise SnapshotError(f"{info.table}: column name {_ABSENT_COL!r} is reserved")
        width = len(names)
        ragged = any(len(row) != width for row in rows) or (width == 0 and bool(rows))
        arrays: list[Any] = []
        fields: list[Any] = []
        json_cols: list[str] = []
        text_cols: dict[str, str] = {}
        for name in names:
            values = [row.get(name) for row in rows]
            typ = _arrow_type(pa, values)
            kinds = {type(v) for v in values if v is not None} if typ is None else set()
            text_kind = _TEXT_KINDS.get(kinds.pop()) if len(kinds) == 1 else None
            if text_kind is not None:
                arrays.append(pa.array([None if v is None else str(v) for v in values]))
                fields.append(pa.field(name, pa.string()))
                text_cols[name] = text_kind
            elif typ is None:
                try:
                    encoded = [None if v is None else _json(v) for v in values]
                except TypeError as exc:
                    raise SnapshotError(f"{info.table}: column {name!r}: {exc}") from None
                arrays.append(pa.array(encoded, type=pa.string()))
                fields.append(pa.field(name, pa.string()))
                json_cols.append(name)
            else:
                arrays.append(pa.array(values, type=typ))
                fields.append(pa.field(name, typ))
        meta: dict[bytes, bytes | str] = {
            _INFO_KEY: json.dumps({**encode_table_info(info), "row_count": len(rows)}),
            _JSON_KEY: json.dumps(json_cols),
            _TEXT_KEY: json.dumps(text_cols),
        }
        if ragged:
            absent = [[k for k in names if k not in row] or None for row in rows]
            arrays.append(pa.array(absent, type=pa.list_(pa.string())))
            fields.append(pa.field(_ABSENT_COL, pa.list_(pa.string())))
            meta[_ABSENT_KEY] = b"1"
        schema = pa.schema(fields, metadata=meta)
        table = pa.Table.from_arrays(arrays, schema=schema)
        try:
            pq.write_table(
                table,
                out,
                row_group_size=self.row_group_size,
                compression=self.compression,
                write_page_checksum=True,
            )
        except (pa.ArrowException, OSError) as exc:
            raise SnapshotError(f"{info.table}: cannot write Parquet: {exc}") from exc
        return len(rows)

    def read(self, inp: IO[bytes]) -> tuple[TableSnapshotInfo, Iterator[Row]]:
        """Read the schema and header now; rows are decoded lazily, one row group at a time."""
        pa, pf, label = _open(inp)
        info, json_cols, text_names = _header(pf, label)
        text_cols = {k: _TEXT_DECODERS[v] for k, v in text_names.items()}
        return info, _rows(pa, pf, set(json_cols), text_cols, label)

    def write_batches(
        self,
        info: TableSnapshotInfo,
        batches: Iterable[Any],
        out: IO[bytes],
        encoded: Mapping[str, str],
    ) -> int:
        """Write Arrow record batches as one Parquet file of this format (see
        :mod:`laredo.snapshots.arrow` for ``encoded``); returns the number of rows written.

        Batches are gathered into row groups of ``row_group_size`` rows; ``large_string`` /
        ``large_binary`` columns are stored as ``string`` / ``binary``. A batch of one ``row``
        column is decoded and written like :meth:`write` (rows may differ in their keys)."""
        check_encodings(encoded)
        pa, pq = _pyarrow()
        it = iter(batches)
        first = next(it, None)
        if first is None:
            return self.write(info, [], out)
        names = list(first.schema.names)
        if len(names) == 1 and encoded.get(names[0]) == ROW:
            return self.write(info, batches_rows(itertools.chain([first], it), encoded), out)
        schema, meta = _file_schema(pa, info, first.schema, encoded)
        streaming = hasattr(pq.ParquetWriter, "add_key_value_metadata")
        pending: list[Any] = []
        held: list[Any] = []  # every table, when the writer cannot add metadata at the end
        pending_rows = 0
        count = 0
        writer: Any = None

        def header(rows: int) -> str:
            return json.dumps({**encode_table_info(info), "row_count": rows})

        def flush(final: bool = False) -> None:
            """Write whole row groups of what is pending (and the rest when ``final``)."""
            nonlocal pending, pending_rows, writer
            if not pending:
                return
            table = pa.concat_tables(pending) if len(pending) > 1 else pending[0]
            size = self.row_group_size
            keep = 0 if final else table.num_rows % size
            if keep:
                pending, pending_rows = [table.slice(table.num_rows - keep)], keep
                table = table.slice(0, table.num_rows - keep)
            else:
                pending, pending_rows = [], 0
            if not streaming:
                held.append(table)
                return
            if writer is None:
                writer = pq.ParquetWriter(
                    out,
                    schema.with_metadata(meta),
                    compression=self.compression,
                    write_page_checksum=True,
                )
            writer.write_table(table, row_group_size=self.row_group_size)

        try:
            for batch in itertools.chain([first], it):
                if list(batch.schema.names) != names:
                    raise SnapshotError(
                        f"{info.table}: record batches with different columns in one part "
                        f"({names} then {list(batch.schema.names)})"
                    )
                table = pa.Table.from_batches([batch])
                if not table.schema.equals(schema, check_metadata=False):
                    table = table.cast(schema)
                pending.append(table)
                pending_rows += batch.num_rows
                count += batch.num_rows
                if pending_rows >= self.row_group_size:
                    flush()
            flush(final=True)
            if not streaming:
                whole = pa.concat_tables(held) if held else schema.empty_table()
                pq.write_table(
                    whole.replace_schema_metadata({**meta, _INFO_KEY: header(count)}),
                    out,
                    row_group_size=self.row_group_size,
                    compression=self.compression,
                    write_page_checksum=True,
                )
                return count
            if writer is None:  # batches without rows
                writer = pq.ParquetWriter(
                    out,
                    schema.with_metadata(meta),
                    compression=self.compression,
                    write_page_checksum=True,
                )
                writer.write_table(schema.empty_table())
            writer.add_key_value_metadata({_INFO_KEY: header(count)})
            writer.close()
            writer = None
        except (pa.ArrowException, OSError) as exc:
            raise SnapshotError(f"{info.table}: cannot write Parquet: {exc}") from exc
        finally:
            if writer is not None:
                writer.close()
        return count

    def read_batches(
        self, inp: IO[bytes]
    ) -> tuple[TableSnapshotInfo, dict[str, str], Iterator[Any]]:
        """The header, the encoding map (``json`` / ``decimal`` / ``uuid`` columns) and the row
        groups as record batches. Rows written without some keys (``laredo.absent``) come back
        with NULL there: batches have one set of columns."""
        pa, pf, label = _open(inp)
        info, json_cols, text_cols = _header(pf, label)
        encoded = {**dict.fromkeys(json_cols, JSON), **text_cols}
        return info, encoded, _batches(pa, pf, label)


def _header(pf: Any, label: str) -> tuple[TableSnapshotInfo, list[str], dict[str, str]]:
    meta = pf.metadata.metadata or {}
    try:
        info = decode_table_info(json.loads(meta[_INFO_KEY]))
        json_cols = list(json.loads(meta.get(_JSON_KEY, b"[]")))
        text_cols = dict(json.loads(meta.get(_TEXT_KEY, b"{}")))
        if any(v not in _TEXT_DECODERS for v in text_cols.values()):
            raise ValueError(f"unknown text column kinds {text_cols}")
    except (KeyError, ValueError) as exc:
        raise SnapshotError(
            f"{label}: Parquet file without a valid laredo.table_info header: {exc}"
        ) from None
    if pf.metadata.num_rows != info.row_count:
        raise SnapshotError(
            f"{label}: the header promises {info.row_count} rows but the file has "
            f"{pf.metadata.num_rows}"
        )
    return info, json_cols, text_cols


def _batches(pa: Any, pf: Any, label: str) -> Iterator[Any]:
    try:
        for group in range(pf.num_row_groups):
            table = pf.read_row_group(group)
            if _ABSENT_COL in table.column_names:
                table = table.drop_columns([_ABSENT_COL])
            yield from table.to_batches()
    except (pa.ArrowException, OSError) as exc:
        raise SnapshotError(f"{label}: row group {group}: malformed Parquet data: {exc}") from None


def _json(v: Any) -> str:
    return json.dumps(encode_value(v), separators=(",", ":"), ensure_ascii=False)


def _open(inp: IO[bytes]) -> tuple[Any, Any, str]:
    """``(pyarrow, ParquetFile with page checksums verified, label for messages)``."""
    pa, pq = _pyarrow()
    name = getattr(inp, "name", None)
    label = name if isinstance(name, str) else "<stream>"
    if not _seekable(inp):
        inp = io.BytesIO(inp.read())
    try:
        pf = pq.ParquetFile(inp, page_checksum_verification=True)
    except (pa.ArrowException, OSError) as exc:
        raise SnapshotError(f"{label}: not a readable Parquet file: {exc}") from None
    return pa, pf, label


def _seekable(inp: Any) -> bool:
    try:
        return bool(inp.seekable())
    except (AttributeError, ValueError, OSError):
        return False


_EPOCH_UTC = datetime(1970, 1, 1, tzinfo=UTC)
_EPOCH = datetime(1970, 1, 1)
_UNITS = {"s": 1_000_000, "ms": 1_000, "us": 1}


def _zone(name: str) -> Any:
    """The tzinfo an Arrow time zone string stands for (``+01:00`` or an IANA name)."""
    if name[:1] in "+-" and len(name) == 6 and name[3] == ":":
        sign = -1 if name[0] == "-" else 1
        return timezone(sign * timedelta(hours=int(name[1:3]), minutes=int(name[4:6])))
    return ZoneInfo(name)


def column_values(pa: Any, column: Any) -> list[Any]:
    """``column.to_pylist()``, several times faster for timestamp columns (the same values:
    naive, or aware in the column's zone)."""
    typ = column.type
    unit = _UNITS.get(getattr(typ, "unit", ""), 0) if pa.types.is_timestamp(typ) else 0
    if not unit:
        return list(column.to_pylist())
    micros = column.cast(pa.int64()).to_pylist()
    step = timedelta(microseconds=unit)
    if typ.tz is None:
        return [None if v is None else _EPOCH + v * step for v in micros]
    zone = _zone(typ.tz)
    return [None if v is None else (_EPOCH_UTC + v * step).astimezone(zone) for v in micros]


def _rows(
    pa: Any, pf: Any, json_cols: set[str], text_cols: dict[str, Any], label: str
) -> Iterator[Row]:
    decode = json.JSONDecoder(object_hook=object_hook).decode
    done = 0
    try:
        for group in range(pf.num_row_groups):
            batch = pf.read_row_group(group)
            names = batch.column_names
            columns: list[list[Any]] = []
            for col_name in names:
                values = column_values(pa, batch.column(col_name))
                if col_name in json_cols:
                    values = [None if v is None else decode(v) for v in values]
                elif col_name in text_cols:
                    conv = text_cols[col_name]
                    values = [None if v is None else conv(v) for v in values]
                columns.append(values)
            absent_idx = names.index(_ABSENT_COL) if _ABSENT_COL in names else -1
            for row_values in zip(*columns, strict=True):
                row = dict(zip(names, row_values, strict=True))
                if absent_idx >= 0:
                    missing = row.pop(_ABSENT_COL)
                    for k in missing or ():
                        del row[k]
                done += 1
                yield row
    except (pa.ArrowException, OSError, ValueError, KeyError) as exc:
        raise SnapshotError(f"{label}: row {done + 1}: malformed Parquet data: {exc}") from None
