"""The README's library example runs as written (against a real PostgreSQL)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from laredo_source_pg.pytest_plugin import PgTestDb

pytestmark = pytest.mark.integration
README = Path(__file__).resolve().parent.parent / "README.md"


def test_readme_library_example_runs(
    pg_database: PgTestDb, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)
    assert blocks, "README has no python example"
    code = blocks[0]
    assert len(code.strip().splitlines()) <= 25
    db = pg_database
    db.execute(
        "CREATE TABLE users (id int PRIMARY KEY, email text, team_id int, active bool, "
        "password text)"
    )
    db.execute(
        "INSERT INTO users VALUES (1, 'ann@example.com', 7, true, 'x'), "
        "(2, 'bob@example.com', 7, false, 'y')"
    )
    code = (
        code.replace("postgresql://app@db/app", db.dsn)
        .replace("/var/lib/app/snapshots", str(tmp_path))
        .replace("app_replica", db.slot_name)
        .replace("app_pub", db.publication)
    )
    exec(compile(code, str(README), "exec"), {"__name__": "readme"})
    out = capsys.readouterr().out
    assert "'email': 'ann@example.com'" in out and "password" not in out
    assert "bob@example.com" not in out  # filtered out (active = false)
