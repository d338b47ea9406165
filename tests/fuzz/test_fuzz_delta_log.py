"""The Delta archive's log readers (commit info, table description, the data-file paths a log
names) raise only ``ArchiveError`` on a forged or damaged log, and read no file outside the
table (security review N7). Each example forges one commit into a real Delta table."""

from __future__ import annotations

import contextlib
import json
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from laredo.types import ColumnDefinition, TableIdentifier
from laredo_target_delta import ArchiveError, DeltaTarget, DeltaTargetOptions, history, read_as_of
from laredo_target_delta.columns import DescriptionError, decode_description
from laredo_target_delta.paths import outside

pytestmark = pytest.mark.fuzz

ITEMS = TableIdentifier("public", "items")
COLUMNS = [
    ColumnDefinition("id", "int4", 1, False, True, 1, 23),
    ColumnDefinition("name", "text", 2, True, False, 0, 25),
]
_BASE = Path(tempfile.mkdtemp(prefix="laredo-fuzz-delta-"))
_TEMPLATE = _BASE / "template"
_OUTSIDE = _BASE / "outside.parquet"


def _template() -> None:
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"id": [666], "name": ["SECRET"]}), _OUTSIDE)
    t = DeltaTarget(DeltaTargetOptions(uri=str(_TEMPLATE), flush_interval=0))
    t.on_init(ITEMS, COLUMNS)
    t.on_baseline_rows(ITEMS, [{"id": 1, "name": "a"}])
    t.set_change_position(10)
    t.on_baseline_complete(ITEMS)
    t.on_close(ITEMS)


_template()

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats()
    | st.text(max_size=12)
    | st.sampled_from(["500", "0/16B3748", "changes", "compaction", "WRITE", "MERGE", "-1"]),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=12,
)
info_keys = st.sampled_from(
    [
        "timestamp",
        "operation",
        "operationMetrics",
        "laredo.position",
        "laredo.position_order",
        "laredo.kind",
        "laredo.partial",
        "laredo.inserted",
        "laredo.source_id",
    ]
)
paths = st.one_of(
    st.text(max_size=40),
    st.sampled_from(
        [
            "../outside.parquet",
            "%2E%2E/outside.parquet",
            _OUTSIDE.as_uri(),
            str(_OUTSIDE),
            "s3://other/x.parquet",
            "a/../../outside.parquet",
        ]
    ),
)


def _forge(info: dict[str, Any], path: str | None) -> str:
    d = Path(tempfile.mkdtemp(dir=_BASE))
    shutil.copytree(_TEMPLATE, d / "t")
    lines = []
    if path is not None:
        add = {
            "path": path,
            "size": 1,
            "partitionValues": {},
            "modificationTime": int(time.time() * 1000),
            "dataChange": True,
        }
        lines.append(json.dumps({"add": add}))
    lines.append(json.dumps({"commitInfo": info}))
    (d / "t" / "_delta_log" / f"{1:020d}.json").write_text("\n".join(lines) + "\n")
    return str(d / "t")


@settings.get_profile("laredo-fuzz")
@given(st.dictionaries(info_keys, json_values, max_size=6), st.none() | paths)
@example({"laredo.position": "500", "laredo.position_order": 500}, "../outside.parquet")
@example({"laredo.position": "500", "laredo.position_order": 500}, _OUTSIDE.as_uri())
@example({"timestamp": 10**30, "laredo.position": "500"}, None)
@example({"laredo.position_order": "x"}, None)
@example({"operationMetrics": [1]}, None)
def test_log_readers_raise_only_archive_error(info: dict[str, Any], path: str | None) -> None:
    uri = _forge(info, path)
    try:
        with contextlib.suppress(ArchiveError):
            history(uri)
        try:
            table, _ = read_as_of(uri, "999999")
        except ArchiveError:
            return
        assert "SECRET" not in str(table.to_pylist())  # never a row from outside the table
    finally:
        shutil.rmtree(Path(uri).parent, ignore_errors=True)


@settings.get_profile("laredo-fuzz")
@given(st.one_of(st.text(max_size=200), json_values.map(json.dumps)))
@example('{"laredo": 1, "table": "public.items", "columns": [{"name": 1}]}')
@example('{"laredo": 1, "table": 5, "columns": []}')
@example('{"laredo": 1, "table": "x", "columns": [{"nope": 1}]}')
@example('{"laredo": 1}')
@example("[" * 5000)
def test_the_description_reader_raises_only_description_error(text: str) -> None:
    with contextlib.suppress(DescriptionError):
        decode_description(text)


@settings.get_profile("laredo-fuzz")
@given(
    st.sampled_from(["s3://lake/t", "gs://b/p/t/", "file:///data/t", "az://c/t"]),
    paths | st.text(alphabet="./%2Ees3:/ab", max_size=30),
)
def test_the_confinement_rule_only_admits_paths_inside(root: str, path: str) -> None:
    why = outside(root, path)
    if why is None:  # admitted: it must resolve strictly inside the root
        assert ".." not in path.replace("%2E", ".").replace("%2e", ".").split("/")
        assert "://" not in path or path.startswith(root.rstrip("/") + "/")
