"""Point-in-time reads of a Delta archive: ``read_as_of``, ``history`` and the CLI."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from decimal import Decimal
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import typer
from laredo.serialization import loads_row
from laredo_target_delta import ArchiveError, history, read_as_of, rows_as_of
from laredo_target_delta.cli import reconstruct, register
from typer.testing import CliRunner

from .conftest import Archive, item

LAREDO = str(Path(sys.executable).parent / "laredo")


def _ids(uri: str, position: object) -> list[int]:
    rows, _, _ = rows_as_of(uri, position)
    return sorted(r["id"] for r in rows)


def test_read_as_of_gives_the_last_commit_at_or_before(archive: Archive) -> None:
    p1 = archive.commit(("insert", item(5)))
    p2 = archive.commit(("delete", {"id": 0}), ("update", item(1, name="renamed")))
    table, position = read_as_of(archive.uri, p1)
    assert position == str(p1) and table.num_rows == 4
    assert _ids(archive.uri, 10) == [0, 1, 2]
    assert _ids(archive.uri, p1 + 5) == [0, 1, 2, 5]  # between commits: the earlier one
    assert _ids(archive.uri, p2) == [1, 2, 5]
    rows, _, desc = rows_as_of(archive.uri, str(p2))
    by_id = {r["id"]: r for r in rows}
    assert by_id[1]["name"] == "renamed" and by_id[1]["price"] == Decimal("1.50")
    assert by_id[5]["doc"] == {"i": 5}
    assert str(desc.table) == "public.items"


def test_a_position_before_the_archive_is_a_clear_error(archive: Archive) -> None:
    with pytest.raises(ArchiveError, match=r"--as-of 5: .*predates the archive"):
        read_as_of(archive.uri, 5)


def test_history_lists_positions_and_row_counts(archive: Archive) -> None:
    archive.commit(("insert", item(5)), ("insert", item(6)))
    archive.commit(("delete", {"id": 0}), ("update", item(1, name="x")))
    commits = history(archive.uri)
    assert [c.kind for c in commits] == ["baseline", "changes", "changes"]
    assert [c.position for c in commits] == ["10", "20", "30"]
    assert (commits[0].inserted, commits[1].inserted) == (3, 2)
    assert (commits[2].updated, commits[2].deleted) == (1, 1)


def test_not_a_laredo_table_or_no_table_names_the_uri(tmp_path: Path) -> None:
    import pyarrow as pa
    from deltalake import write_deltalake

    other = tmp_path / "other"
    write_deltalake(str(other), pa.table({"x": [1]}))
    with pytest.raises(ArchiveError, match=r"uri = .*other.*not written by a laredo"):
        read_as_of(str(other), 1)
    with pytest.raises(ArchiveError, match=r"uri = .*missing.*no readable Delta table"):
        history(str(tmp_path / "missing"))


def test_cli_reconstruct_and_history(archive: Archive, tmp_path: Path) -> None:
    p1 = archive.commit(("insert", item(7, price=Decimal("-0.01"))))
    archive.commit(("delete", {"id": 7}))

    # in processes of their own: reading once aborted the process at exit (an Arrow thread
    # freeing Python buffers during interpreter shutdown), one run in two
    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [LAREDO, "archive", "reconstruct", archive.uri, "--as-of", str(p1), *args],
            capture_output=True,
            text=True,
            check=False,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        return done

    out = cli()
    rows = [loads_row(line) for line in out.stdout.splitlines()]
    assert sorted(r["id"] for r in rows) == [0, 1, 2, 7]
    assert {r["id"]: r["price"] for r in rows}[7] == Decimal("-0.01")
    assert f"as of position {p1}" in out.stderr
    path = tmp_path / "at.parquet"
    cli("--format", "parquet", "--output", str(path))
    assert sorted(pq.read_table(path).column("id").to_pylist()) == [0, 1, 2, 7]

    # the other commands in-process (each `laredo` process pays ~3 s of delta-rs start-up)
    app = typer.Typer()
    register(app)
    runner = CliRunner()
    res = runner.invoke(app, ["archive", "history", archive.uri, "--json"])
    data = json.loads(res.stdout)
    assert [d["position"] for d in data] == ["10", str(p1), str(p1 + 10)]
    assert data[2]["deleted"] == 1

    secret = ["--storage-option", "AWS_SECRET_ACCESS_KEY=hunter2"]
    bad = runner.invoke(app, ["archive", "reconstruct", archive.uri, "--as-of", "1", *secret])
    assert bad.exit_code == 1 and "predates the archive" in bad.output
    assert "hunter2" not in bad.output
    bad = runner.invoke(app, ["archive", "history", archive.uri + "-nope", *secret])
    assert bad.exit_code == 1 and "no readable Delta table" in bad.output
    assert "hunter2" not in bad.output and "***" in bad.output


def test_cli_registers_on_a_click_group(archive: Archive) -> None:
    import click
    from click.testing import CliRunner as ClickRunner

    group = click.Group("laredo")
    register(group)
    res = ClickRunner().invoke(group, ["archive", "history", archive.uri])
    assert res.exit_code == 0 and "baseline" in res.output


def test_reconstruct_past_the_last_commit_says_how_far_the_archive_reaches(
    archive: Archive,
) -> None:
    """The archive cannot know what the source did after its last commit: a later ``--as-of``
    fails naming the last commit's position instead of answering with that older version."""
    p1 = archive.commit(("insert", item(7)))
    app = typer.Typer()
    register(app)
    res = CliRunner().invoke(app, ["archive", "reconstruct", archive.uri, "--as-of", str(p1 + 5)])
    assert res.exit_code == 1
    assert f"reaches only position {p1}" in res.output and "--as-of latest" not in res.output
    assert f"--as-of {p1} (or latest)" in res.output
    out = io.BytesIO()
    assert reconstruct(archive.uri, "latest", out=out) == (4, str(p1))
    assert reconstruct(archive.uri, str(p1), out=io.BytesIO()) == (4, str(p1))
