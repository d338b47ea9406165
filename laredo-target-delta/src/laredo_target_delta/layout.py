"""Merge-on-read: the table's rows are a compacted state plus appended change rows.

delta-rs (1.x) writes no deletion vectors: its MERGE rewrites every Parquet file that holds a
changed key, and changes to random keys touch every file, so a MERGE per flush costs the whole
table. So a flush *appends* one row per changed key instead, with two more columns:

* ``_laredo_seq`` (long): the Delta version that appended the row (NULL in compacted rows);
* ``_laredo_op`` (string): ``insert``, ``update`` or ``delete`` (a delete row holds the key).

The current state is, per key, the row with the highest ``_laredo_seq`` (compacted rows,
NULL, rank lowest), unless that row is a delete. :func:`state_sql` is that view; any Delta
reader can run it (see the package README), at any version (time travel included). When the
appended rows reach a fraction of the compacted ones, the target *compacts*: one overwrite
commit (``laredo.kind = compaction``, the last commit's position) holding the state, both
columns NULL. Tables keep both columns from their first version on (so a reader's view never
loses them); a table written before this layout gains them at its first change flush.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import pyarrow as pa

__all__ = [
    "META",
    "OP",
    "SEQ",
    "has_changes",
    "latest",
    "meta_schema",
    "reader_view_sql",
    "state_sql",
    "with_meta",
]

SEQ = "_laredo_seq"
OP = "_laredo_op"
META = (SEQ, OP)
_RANK = "__laredo_rank"


def _q(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def meta_schema(schema: pa.Schema) -> pa.Schema:
    """``schema`` with the two columns."""
    return schema.append(pa.field(SEQ, pa.int64())).append(pa.field(OP, pa.string()))


def with_meta(batch: pa.RecordBatch, schema: pa.Schema) -> pa.RecordBatch:
    """A batch of plain rows (compacted: both columns NULL) in ``meta_schema``."""
    n = batch.num_rows
    arrays = [*batch.columns, pa.nulls(n, pa.int64()), pa.nulls(n, pa.string())]
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def has_changes(names: Iterable[str]) -> bool:
    """Whether a table of these column names holds appended change rows (the columns)."""
    return SEQ in set(names)


def state_sql(columns: Sequence[str], key_columns: Sequence[str], table: str = "t") -> str:
    """SQL (DataFusion; the README gives the DuckDB/Spark spelling) selecting ``columns`` of
    the current state of a table holding change rows: compacted rows whose key no change row
    holds, plus the newest change row of each key unless it is a delete."""
    cols = ", ".join(_q(c) for c in columns)
    keys = ", ".join(_q(k) for k in key_columns)
    same = " AND ".join(f"c.{_q(k)} = b.{_q(k)}" for k in key_columns)
    return (
        f"WITH c AS (SELECT * FROM {table} WHERE {_q(SEQ)} IS NOT NULL), "
        f"l AS (SELECT * FROM (SELECT *, row_number() OVER (PARTITION BY {keys} "
        f"ORDER BY {_q(SEQ)} DESC) AS {_RANK} FROM c) WHERE {_RANK} = 1) "
        f"SELECT {cols} FROM {table} b WHERE b.{_q(SEQ)} IS NULL "
        f"AND NOT EXISTS (SELECT 1 FROM c WHERE {same}) "
        f"UNION ALL SELECT {cols} FROM l WHERE {_q(OP)} <> 'delete'"
    )


def latest(
    rows: Iterable[dict[str, Any]], key_columns: Sequence[str]
) -> dict[tuple[Any, ...], dict[str, Any] | None]:
    """Per key, the current row among ``rows`` (raw rows of the table, any order), or None
    when the newest is a delete; the two columns are removed."""
    best: dict[tuple[Any, ...], tuple[int, dict[str, Any]]] = {}
    for r in rows:
        key = tuple(r[k] for k in key_columns)
        seq = r.get(SEQ)
        rank = -1 if seq is None else int(seq)
        if key not in best or rank > best[key][0]:
            best[key] = (rank, r)
    out: dict[tuple[Any, ...], dict[str, Any] | None] = {}
    for key, (_, r) in best.items():
        if r.get(OP) == "delete":
            out[key] = None
        else:
            out[key] = {k: v for k, v in r.items() if k not in META}
    return out


def reader_view_sql(table: str, columns: Sequence[str], key_columns: Sequence[str]) -> str:
    """The current state for readers outside Laredo (DuckDB, Spark SQL, DataFusion, Polars'
    SQL): the newest row per key, unless it is a delete."""
    cols = ", ".join(_q(c) for c in columns)
    keys = ", ".join(_q(k) for k in key_columns)
    return (
        f"SELECT {cols} FROM (SELECT *, row_number() OVER (PARTITION BY {keys} "
        f"ORDER BY {_q(SEQ)} DESC NULLS LAST) AS {_RANK} FROM {table}) "
        f"WHERE {_RANK} = 1 AND ({_q(OP)} IS NULL OR {_q(OP)} <> 'delete')"
    )
