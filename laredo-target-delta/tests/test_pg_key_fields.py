"""A ``delta`` target on a PostgreSQL table without a primary key: ``laredo check`` makes it a
preflight error naming ``key_fields``; with ``key_fields`` (and REPLICA IDENTITY FULL) the
Delta table follows every insert, update and delete."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import laredo
import pytest
from laredo.config import load_engine_config, run_checks
from laredo.testing import wait_until
from laredo.types import TableIdentifier
from laredo_source_pg.source import PostgresSource
from laredo_target_delta import DeltaTarget, DeltaTargetOptions, rows_as_of

pytestmark = pytest.mark.integration

NOTES = TableIdentifier("public", "notes")


def _findings(db: Any, uri: str, **target: Any) -> list[Any]:
    model = load_engine_config(
        {
            "sources": {
                "pg": {
                    "type": "postgresql",
                    "connection": db.dsn,
                    "slot_mode": "stateful",
                    "slot_name": db.slot_name,
                }
            },
            "tables": [
                {
                    "source": "pg",
                    "table": "notes",
                    "targets": [{"type": "delta", "uri": uri, **target}],
                }
            ],
        }
    )
    return [f for f in run_checks(model).findings if f.severity.value == "error"]


def test_a_table_without_a_key_needs_key_fields(pg_database: Any, tmp_path: Path) -> None:
    db = pg_database
    db.execute("CREATE TABLE notes (id int NOT NULL, body text)")
    db.execute("ALTER TABLE notes REPLICA IDENTITY FULL")
    db.execute("INSERT INTO notes VALUES (1, 'a'), (2, 'b'), (3, 'c')")
    uri = str(tmp_path / "lake" / "notes")

    (found,) = _findings(db, uri)
    assert (found.code, found.where) == ("KEY_REQUIRED", "tables.0.targets.0")
    assert "key_fields" in found.fix and "REPLICA IDENTITY FULL" in found.fix
    assert _findings(db, uri, key_fields=["id"]) == []
    (typo,) = _findings(db, uri, key_fields=["idd"])
    assert (typo.code, typo.where) == ("COLUMN_NOT_FOUND", "tables.0.targets.0.key_fields.0")

    src = PostgresSource(
        connection=db.dsn,
        slot_mode="stateful",
        slot_name=db.slot_name,
        publication={"create": True},
    )
    target = DeltaTarget(DeltaTargetOptions(uri=uri, key_fields=["id"], flush_interval=0.2))
    eng = laredo.Engine(sources={"pg": src}, pipelines=[laredo.Pipeline("pg", NOTES, target)])
    eng.start()
    try:
        assert eng.await_ready(60)
        db.execute("UPDATE notes SET body = 'B' WHERE id = 2")
        db.execute("DELETE FROM notes WHERE id = 1")
        db.execute("INSERT INTO notes VALUES (4, 'd')")
        want = {2: "B", 3: "c", 4: "d"}

        def table() -> tuple[list[Any], dict[Any, Any]]:
            rows, _, _ = rows_as_of(uri, "FFFFFFFF/FFFFFFFF")
            return rows, {r["id"]: r["body"] for r in rows}

        wait_until(lambda: table()[1] == want, 30, "the Delta table", interval=0.1)
        rows, got = table()
        assert got == want
        assert len(rows) == 3  # no key twice
    finally:
        eng.stop()


def test_without_key_fields_the_target_names_the_fix(pg_database: Any, tmp_path: Path) -> None:
    """Started anyway (no preflight): the pipeline fails with the same fix."""
    db = pg_database
    db.execute("CREATE TABLE notes (id int NOT NULL, body text)")
    db.execute("ALTER TABLE notes REPLICA IDENTITY FULL")
    src = PostgresSource(
        connection=db.dsn,
        slot_mode="stateful",
        slot_name=db.slot_name,
        publication={"create": True},
    )
    target = DeltaTarget(DeltaTargetOptions(uri=str(tmp_path / "notes")))
    eng = laredo.Engine(sources={"pg": src}, pipelines=[laredo.Pipeline("pg", NOTES, target)])
    eng.start()
    try:
        (p,) = wait_until(  # a snapshot of the pipeline's state
            lambda: [p for p in eng.pipelines() if p.state is laredo.PipelineState.ERROR],
            30,
            "the pipeline's ERROR",
            interval=0.05,
        )
        assert "set key_fields" in (p.error or "") and "REPLICA IDENTITY FULL" in (p.error or "")
    finally:
        eng.stop()
