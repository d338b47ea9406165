"""Per-table ``baseline { mode, chunk_rows }`` (issue 32): a table's section overrides its
source's, keys come from the primary key or the ``REPLICA IDENTITY USING INDEX`` index, and
``laredo check`` warns about a chunked table without either."""

from __future__ import annotations

import logging
from typing import Any

import laredo
import psycopg
import pytest
from laredo.config import build_engine, load_engine_config, run_checks
from laredo.errors import ConfigError
from laredo.testing import Churn
from laredo_source_pg import PostgresSource
from laredo_source_pg.pytest_plugin import PgTestDb
from laredo_target_memory import IndexedTarget

pytestmark = pytest.mark.integration


def _config(db: PgTestDb, source_mode: str, tables: list[dict[str, Any]]) -> dict[str, Any]:
    source = {
        "type": "postgresql",
        "connection": db.dsn,
        "slot_name": db.slot_name,
        "publication": {"create": True},
        "baseline": {"mode": source_mode, "chunk_rows": 1000},
    }
    return {"sources": {"pg": source}, "tables": tables}


def _table(name: str, **extra: Any) -> dict[str, Any]:
    return {"source": "pg", "table": name, "targets": [{"type": "indexed-memory"}], **extra}


def _chunk_lines(caplog: pytest.LogCaptureFixture) -> dict[str, str]:
    out = {}
    for r in caplog.records:
        text = r.getMessage()
        if text.startswith("backfill of public."):
            out[text.split()[2].rstrip(":")] = text
    return out


def test_a_table_section_overrides_the_source_baseline_mode(
    pg_database: PgTestDb, caplog: pytest.LogCaptureFixture
) -> None:
    db = pg_database
    for name in ("a", "b", "c"):
        db.execute(f"CREATE TABLE {name} (id int PRIMARY KEY, v text)")
        db.execute(f"INSERT INTO {name} SELECT g, 'x' FROM generate_series(1, 2500) g")
    caplog.set_level(logging.INFO, logger="laredo.engine.backfiller")
    # a snapshot source: only the table that asks for chunks is read in chunks, in its size
    tables = [_table("a", baseline={"mode": "chunked", "chunk_rows": 700}), _table("b")]
    built = build_engine(load_engine_config(_config(db, "snapshot", tables)))
    try:
        built.engine.start()
        assert built.engine.await_ready(60)
        counts = [p.target.count() for p in built.engine.pipeline_configs]
        assert counts == [2500, 2500]
        # a table joining (hot reload, add_pipeline) with its own mode: read in chunks too
        joined = IndexedTarget()
        built.engine.add_pipeline(
            laredo.Pipeline(
                "pg", "public.c", joined, baseline_mode="chunked", baseline_chunk_rows=900
            ),
            timeout=60,
        )
        assert joined.count() == 2500
    finally:
        built.engine.stop()
    lines = _chunk_lines(caplog)
    assert set(lines) == {"public.a", "public.c"}, lines
    assert "4 chunk(s), 2500 row(s) read" in lines["public.a"]  # 700, 700, 700, 400
    assert "3 chunk(s), 2500 row(s) read" in lines["public.c"]  # 900, 900, 700
    caplog.clear()
    # a chunked source: a table's mode = snapshot keeps it out, chunk_rows alone resizes
    tables = [
        _table("a", baseline={"mode": "snapshot"}),
        _table("b", baseline={"chunk_rows": 500}),
        _table("c"),
    ]
    built = build_engine(load_engine_config(_config(db, "chunked", tables)))
    try:
        built.engine.start()
        assert built.engine.await_ready(60)
        assert [p.target.count() for p in built.engine.pipeline_configs] == [2500] * 3
    finally:
        built.engine.stop()
    lines = _chunk_lines(caplog)
    assert set(lines) == {"public.b", "public.c"}, lines
    assert "6 chunk(s), 2500 row(s) read" in lines["public.b"]  # 5 x 500, then an empty one
    assert "3 chunk(s), 2500 row(s) read" in lines["public.c"]


def test_table_baseline_settings_are_validated_with_their_key_paths(
    pg_database: PgTestDb,
) -> None:
    db = pg_database
    bad = [
        _table("a", baseline={"mode": "chunky"}),
        _table("a", baseline={"chunk_rows": 0}),
        _table("a", baseline={"chunk_size": 10}),
    ]
    with pytest.raises(ConfigError) as err:
        load_engine_config(_config(db, "snapshot", bad))
    text = "\n".join(err.value.problems)
    assert "tables.0.baseline.mode" in text and "'snapshot' or 'chunked'" in text, text
    assert "tables.1.baseline.chunk_rows" in text and "greater than or equal to 1" in text, text
    assert "tables.2.baseline.chunk_size" in text, text
    pipe = laredo.Pipeline(
        "pg", "public.a", IndexedTarget(), baseline_mode="chunky", baseline_chunk_rows=0
    )
    assert [p.split(":")[0] for p in pipe.problems(0)] == [
        "pipelines[0].baseline_mode",
        "pipelines[0].baseline_chunk_rows",
    ]


def test_check_warns_about_a_chunked_table_without_a_key(pg_database: PgTestDb) -> None:
    db = pg_database
    db.execute("CREATE TABLE keyed (id int PRIMARY KEY)")
    db.execute("CREATE TABLE nokey (id int, v text)")
    db.execute("ALTER TABLE nokey REPLICA IDENTITY FULL")
    db.execute("CREATE TABLE ident (a int NOT NULL, b text NOT NULL, UNIQUE (a, b))")
    db.execute("ALTER TABLE ident REPLICA IDENTITY USING INDEX ident_a_b_key")

    def warnings(source_mode: str, tables: list[dict[str, Any]]) -> list[Any]:
        report = run_checks(load_engine_config(_config(db, source_mode, tables)))
        return [f for f in report.findings if f.code == "CHUNKED_WITHOUT_KEY"]

    memory = [{"type": "indexed-memory", "lookup_fields": ["id"]}]
    nokey = {"source": "pg", "table": "nokey", "targets": memory}
    (found,) = warnings("snapshot", [_table("keyed"), {**nokey, "baseline": {"mode": "chunked"}}])
    assert found.severity.value == "warning" and found.where == "tables.1.baseline.mode"
    assert "public.nokey" in found.message and "REPLICA IDENTITY USING INDEX" in found.fix
    (found,) = warnings("chunked", [_table("keyed"), nokey, _table("ident")])
    assert found.where == "sources.pg.baseline.mode" and "public.nokey" in found.message
    assert warnings("chunked", [{**nokey, "baseline": {"mode": "snapshot"}}]) == []


# random single-row writes on ident, keyed by its replica identity index (a, b)
IDENT_WRITES = (
    "INSERT INTO ident VALUES (%(k)s, 'k', 0) ON CONFLICT (a, b) DO UPDATE SET v = ident.v + 1",
    "UPDATE ident SET v = v + 1 WHERE a = %(k)s",
    "DELETE FROM ident WHERE a = %(k)s",
    # a key change
    "UPDATE ident SET a = %(k)s + 5000 WHERE a = %(k)s AND NOT EXISTS "
    "(SELECT 1 FROM ident WHERE a = %(k)s + 5000)",
)


def test_a_table_keyed_by_its_replica_identity_index_is_read_in_chunks(
    pg_database: PgTestDb, caplog: pytest.LogCaptureFixture
) -> None:
    db = pg_database
    db.execute("CREATE TABLE ident (a int NOT NULL, b text NOT NULL, v int, UNIQUE (a, b))")
    db.execute("ALTER TABLE ident REPLICA IDENTITY USING INDEX ident_a_b_key")
    db.execute("INSERT INTO ident SELECT g, 'k', 0 FROM generate_series(1, 2500) g")
    writers = Churn(db, 2, lambda rnd: rnd.randrange(1, 3000), IDENT_WRITES)
    src = PostgresSource(
        db.dsn,
        slot_name=db.slot_name,
        publication={"create": True},
        baseline={"mode": "chunked", "chunk_rows": 100},
    )
    assert src.chunk_key(laredo.Table("public", "ident")) == ["a", "b"]
    target = IndexedTarget(lookup_fields=["a", "b"])
    eng = laredo.Engine(
        sources={"pg": src},
        pipelines=[laredo.Pipeline("pg", laredo.Table("public", "ident"), target)],
    )
    caplog.set_level(logging.INFO, logger="laredo.engine.backfiller")
    writers.start()
    try:
        eng.start()
        assert eng.await_ready(120)
        writers.settle(eng)
        with db.connect() as conn, conn.cursor(row_factory=psycopg.rows.dict_row) as cur:
            expected = {(r["a"], r["b"]): dict(r) for r in cur.execute("SELECT * FROM ident")}
        assert {k: dict(v) for k, v in target.items()} == expected
    finally:
        writers.stop()
        eng.stop()
    assert sum(writers.counts) > 20, writers.counts
    assert "public.ident" in _chunk_lines(caplog)
