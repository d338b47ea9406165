"""Security review N7: a Delta log naming data files outside the table is refused by every
reader of rows (``read_as_of``, ``laredo archive reconstruct``, the ``delta`` source
baseline), locally; object-store roots are checked by the same rule (``test_s3.py`` forges an
S3 log)."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import typer
from laredo.errors import SourceError
from laredo.types import SourceConfig
from laredo_target_delta import ArchiveError, DeltaSource, DeltaSourceOptions, read_as_of
from laredo_target_delta.cli import register
from laredo_target_delta.paths import outside
from typer.testing import CliRunner

from .conftest import ITEMS, Archive

SECRET_ROW = "SECRET-OUTSIDE-TABLE"


def forge(uri: str, path: str) -> None:
    """Append a commit whose ``add`` names ``path`` (what anyone who can write the log can)."""
    log = Path(uri, "_delta_log")
    version = max(int(p.stem) for p in log.glob("*.json")) + 1
    add = {
        "path": path,
        "size": 1,
        "partitionValues": {},
        "modificationTime": int(time.time() * 1000),
        "dataChange": True,
        "stats": json.dumps({"numRecords": 1}),
    }
    info = {
        "timestamp": int(time.time() * 1000),
        "operation": "WRITE",
        "operationParameters": {},
        "laredo.position": "500",  # so that a point-in-time read chooses this version
        "laredo.position_order": 500,
        "laredo.kind": "changes",
    }
    lines = [json.dumps({"add": add}), json.dumps({"commitInfo": info})]
    (log / f"{version:020d}.json").write_text("\n".join(lines) + "\n")


@pytest.fixture
def elsewhere(tmp_path: Path) -> Path:
    """A Parquet file outside the table with a row the table never held."""
    d = tmp_path / "elsewhere"
    d.mkdir()
    pq.write_table(pa.table({"id": [666], "name": [SECRET_ROW]}), d / "other.parquet")
    return d / "other.parquet"


@pytest.mark.parametrize(
    "form", ["relative", "encoded", "file-uri", "absolute", "sibling-prefix", "symlink"]
)
def test_a_forged_log_pointing_outside_is_refused(
    tmp_path: Path, elsewhere: Path, form: str
) -> None:
    a = Archive(str(tmp_path / "items"))
    a.close()
    if form == "sibling-prefix":  # items2/ shares the prefix "items" but is not inside items/
        (tmp_path / "items2").mkdir()
        shutil.copy(elsewhere, tmp_path / "items2" / "other.parquet")
    if form == "symlink":  # a link inside the table pointing out of it
        (tmp_path / "items" / "link.parquet").symlink_to(elsewhere)
    path = {
        "relative": "../elsewhere/other.parquet",
        "encoded": "%2E%2E/elsewhere/other.parquet",
        "file-uri": elsewhere.as_uri(),
        "absolute": str(elsewhere),
        "sibling-prefix": (tmp_path / "items2" / "other.parquet").as_uri(),
        "symlink": "link.parquet",
    }[form]
    forge(a.uri, path)

    with pytest.raises(ArchiveError, match=r"names .*refused.*only name files inside"):
        read_as_of(a.uri, 999)
    source = DeltaSource(DeltaSourceOptions(uri=a.uri, follow=False))
    source.init(SourceConfig(tables=[ITEMS]))
    with pytest.raises(SourceError, match=r"outside|another store|climbs"):
        source.baseline([ITEMS], lambda t, r: None)
    app = typer.Typer()
    register(app)
    res = CliRunner().invoke(app, ["archive", "reconstruct", a.uri, "--as-of", "latest"])
    assert res.exit_code == 1 and "refused" in res.output and SECRET_ROW not in res.output


def test_files_inside_the_table_are_read(tmp_path: Path) -> None:
    a = Archive(str(tmp_path / "items"))
    a.commit(("insert", {"id": 9, "name": "n9"}))
    a.close()
    table, _ = read_as_of(a.uri, 999)
    assert sorted(table.column("id").to_pylist()) == [0, 1, 2, 9]


@pytest.mark.parametrize(
    ("root", "path", "refused"),
    [
        ("s3://lake/t", "part-0.parquet", False),
        ("s3://lake/t/", "a/b/part-0.parquet", False),
        ("s3://lake/t", "s3://lake/t/part-0.parquet", False),
        ("s3://lake/t", "../u/part-0.parquet", True),
        ("s3://lake/t", "a/../../u/part-0.parquet", True),
        ("s3://lake/t", "%2e%2e/u/part-0.parquet", True),
        ("s3://lake/t", "s3://other/t/part-0.parquet", True),
        ("s3://lake/t", "s3://lake/t2/part-0.parquet", True),
        ("s3://lake/t", "s3://lake/t/../u/part-0.parquet", True),
        ("s3://lake/t", "gs://lake/t/part-0.parquet", True),
        ("s3://lake/t", "/etc/part-0.parquet", True),
        ("s3://lake/t", "file:///etc/part-0.parquet", True),
        ("s3://lake/t", "", True),
        ("file:///data/t", "file:///data/t/x.parquet", False),
        ("file:///data/t", "file:///data/u/x.parquet", True),
        ("file:///data/t", "s3://data/t/x.parquet", True),
    ],
)
def test_the_confinement_rule(root: str, path: str, refused: bool) -> None:
    assert (outside(root, path) is not None) == refused
