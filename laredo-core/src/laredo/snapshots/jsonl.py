"""JSONL snapshot serializer (format id ``jsonl``).

A table file is UTF-8 text: the first line is the table header (``TableSnapshotInfo`` as JSON,
see :func:`laredo.serialization.encode_table_info`), then one encoded row per line
(:mod:`laredo.serialization`: plain JSON plus tagged objects for Decimal, datetime, UUID, bytes
and the other non-JSON types), each line ending in ``\\n``. The header's ``row_count`` is the
number of row lines: reading checks it, so a file cut short at a line boundary is rejected too.

:meth:`JsonlSerializer.write_batches` takes Arrow record batches (:mod:`laredo.snapshots.arrow`):
a batch of one ``row`` column (typed-JSON row texts, e.g. built by Spark) is written line by line
as it is, without decoding; other batches are decoded into rows first.
"""

from __future__ import annotations

import io
import itertools
import json
import shutil
import tempfile
from collections.abc import Iterable, Iterator, Mapping, Sized
from typing import IO, Any

from laredo.errors import SnapshotError
from laredo.serialization import RowEncoder, decode_table_info, encode_table_info, object_hook
from laredo.types import Row, TableSnapshotInfo

from .arrow import ROW, batches_rows, check_encodings

__all__ = ["JsonlSerializer"]

_CHUNK = 2000
_SPOOL = 64 * 1024 * 1024


def _name(stream: Any) -> str:
    name = getattr(stream, "name", None)
    return str(name) if isinstance(name, str) else "<stream>"


class JsonlSerializer:
    """Writes and reads JSONL table files; see the module docstring for the format."""

    def format_id(self) -> str:
        return "jsonl"

    def write(self, info: TableSnapshotInfo, rows: Iterable[Row], out: IO[bytes]) -> int:
        """Write the header and the rows; returns the number of rows written.

        The header needs the row count first, so an iterable without ``len()`` is collected
        into a list before writing.
        """
        if not isinstance(rows, Sized):
            rows = list(rows)
        count = len(rows)
        header = encode_table_info(info)
        header["row_count"] = count
        out.write(json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode() + b"\n")
        dumps = RowEncoder().dumps
        buf: list[str] = []
        written = 0
        for row in rows:
            try:
                buf.append(dumps(row))
            except TypeError as exc:
                raise SnapshotError(
                    f"cannot write row {written + len(buf) + 1} of {info.table}: {exc}"
                ) from None
            if len(buf) >= _CHUNK:
                buf.append("")
                out.write("\n".join(buf).encode())
                written += len(buf) - 1
                buf = []
        if buf:
            buf.append("")
            out.write("\n".join(buf).encode())
            written += len(buf) - 1
        if written != count:
            raise SnapshotError(
                f"rows of {info.table} changed while being written ({count} expected, "
                f"{written} written)"
            )
        return written

    def write_batches(
        self,
        info: TableSnapshotInfo,
        batches: Iterable[Any],
        out: IO[bytes],
        encoded: Mapping[str, str],
    ) -> int:
        """Write Arrow record batches (see the module docstring); returns the rows written.

        ``row`` texts are trusted to be typed-JSON objects on one line (NULLs are skipped);
        they are spooled (in memory up to 64 MiB, then a temporary file) until the row count
        for the header is known."""
        check_encodings(encoded)
        it = iter(batches)
        first = next(it, None)
        if first is None:
            return self.write(info, [], out)
        names = list(first.schema.names)
        if len(names) != 1 or encoded.get(names[0]) != ROW:
            return self.write(info, list(batches_rows(itertools.chain([first], it), encoded)), out)
        count = 0
        with tempfile.SpooledTemporaryFile(max_size=_SPOOL) as spool:
            for batch in itertools.chain([first], it):
                lines = [t for t in batch.column(0).to_pylist() if t is not None]
                if lines:
                    lines.append("")
                    spool.write("\n".join(lines).encode())
                    count += len(lines) - 1
            header = encode_table_info(info)
            header["row_count"] = count
            out.write(json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode())
            out.write(b"\n")
            spool.seek(0)
            shutil.copyfileobj(spool, out, 1 << 20)
        return count

    def read(self, inp: IO[bytes]) -> tuple[TableSnapshotInfo, Iterator[Row]]:
        """Parse the header now; rows are parsed lazily by the returned iterator.

        A malformed header or row, a row count that does not match the header, or a file
        cut short raises ``SnapshotError`` naming the file and the line.
        """
        name = _name(inp)
        text = io.TextIOWrapper(inp, encoding="utf-8", newline="\n")
        try:
            first = text.readline()
        except UnicodeDecodeError as exc:
            raise SnapshotError(f"{name}: line 1: not UTF-8 text: {exc}") from None
        if not first:
            raise SnapshotError(f"{name}: empty file, expected a JSONL snapshot header line")
        try:
            info = decode_table_info(json.loads(first))
        except ValueError as exc:
            raise SnapshotError(f"{name}: line 1: malformed snapshot header: {exc}") from None
        return info, self._rows(text, info, name)

    @staticmethod
    def _rows(text: io.TextIOWrapper, info: TableSnapshotInfo, name: str) -> Iterator[Row]:
        decode = json.JSONDecoder(object_hook=object_hook).decode
        expected = info.row_count
        count = 0
        try:
            for line in text:
                count += 1
                if not line.endswith("\n"):
                    raise SnapshotError(
                        f"{name}: line {count + 1}: last line has no newline: the file is truncated"
                    )
                try:
                    row = decode(line)
                except ValueError as exc:
                    raise SnapshotError(f"{name}: line {count + 1}: malformed row: {exc}") from None
                if type(row) is not dict:
                    raise SnapshotError(
                        f"{name}: line {count + 1}: expected a JSON object, "
                        f"got {type(row).__name__}"
                    )
                if count > expected:
                    raise SnapshotError(
                        f"{name}: line {count + 1}: the header promises {expected} rows but "
                        "the file has more: it was modified"
                    )
                yield row
        except UnicodeDecodeError as exc:
            raise SnapshotError(f"{name}: line {count + 1}: not UTF-8 text: {exc}") from None
        finally:
            if not text.closed:
                text.detach()
        if count != expected:
            raise SnapshotError(
                f"{name}: line {count + 2}: the header promises {expected} rows but the file "
                f"has {count}: the file is truncated or was modified"
            )
