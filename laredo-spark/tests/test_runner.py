"""run_spark over the server's config dict; laredo-snapshot batch reads; the CLI entry."""

from __future__ import annotations

import importlib.metadata
import json
import logging
from decimal import Decimal
from typing import Any

import laredo
import pytest
from laredo.observers import RecordingObserver
from laredo.types import TableIdentifier
from laredo_spark import run_spark, spark_baseline
from laredo_spark.cli import main as cli_main
from laredo_spark.runner import build_plan

pytestmark = [pytest.mark.spark, pytest.mark.integration]

ITEMS = TableIdentifier("public", "items")


def _config(db: Any, path: Any) -> dict[str, Any]:
    return {
        "sources": {
            "pg": {
                "type": "postgresql",
                "connection": db.dsn,
                "slot_mode": "stateful",
                "slot_name": db.slot_name,
                "publication": {"create": True},
            }
        },
        "tables": [
            {
                "source": "pg",
                "schema": "public",
                "table": "items",
                "targets": [
                    {
                        "type": "indexed-memory",
                        "filters": [{"type": "field-prefix", "field": "sku", "prefix": "A"}],
                        "transforms": [{"type": "drop-fields", "fields": ["secret"]}],
                    },
                    {"type": "indexed-memory", "id": "all-items"},
                ],
            }
        ],
        "snapshot": {"store": "local", "store_config": {"path": str(path)}, "serializer": "jsonl"},
        "spark": {"partitions": 2},
    }


def test_run_spark_from_config_then_read_the_snapshot_back(
    spark: Any, pg_database: Any, tmp_path: Any
) -> None:
    db = pg_database
    db.execute("CREATE TABLE items (id int PRIMARY KEY, sku text, price numeric, secret text)")
    db.execute(
        "INSERT INTO items SELECT g, CASE WHEN g % 2 = 0 THEN 'A' ELSE 'B' END || g, g / 4.0, "
        "'s' FROM generate_series(1, 400) g"
    )
    cfg = _config(db, tmp_path / "snaps")
    (result,) = run_spark(cfg, spark=spark)
    assert result.row_counts == {"pg:public.items:indexed-memory": 200, "all-items": 400}
    assert set(result.phases) == {"init", "slot", "write", "commit"}
    store = laredo.snapshot_store("local", path=str(tmp_path / "snaps"))
    meta, data = store.load(result.snapshot_id)
    assert [i.pipeline_id for i in meta.tables] == ["pg:public.items:indexed-memory", "all-items"]
    filtered = sorted(data[ITEMS], key=lambda r: r["id"])
    assert filtered[0] == {"id": 2, "sku": "A2", "price": Decimal("0.50000000000000000000")}
    assert len(list(data[TableIdentifier("public", "items~1")])) == 400

    df = (
        spark.read.format("laredo-snapshot")
        .option("store", "local")
        .option("store_config", json.dumps({"path": str(tmp_path / "snaps")}))
        .option("table", "public.items")
        .option("kinds", json.dumps({"id": "int", "sku": "str", "price": "json"}))
        .load()
    )
    assert df.count() == 200
    price = df.where("sku = 'A10'").collect()[0]["price"]
    assert price == '{"$type":"decimal","value":"2.5000000000000000"}'


def test_serving_keys_are_validated_and_left_to_laredo_serve(tmp_path: Any, caplog: Any) -> None:
    """The file of ``laredo serve`` is accepted whole: the server's sections and the streaming
    phase's keys are validated by the server's own models and named in one INFO line; a wrong
    key in any of them is still an error."""

    class Db:
        dsn = "postgresql://nobody@127.0.0.1:1/none"
        slot_name = "unused"

    cfg = _config(Db(), tmp_path / "snaps")
    target = cfg["tables"][0]["targets"][0]
    target["buffer"] = {"max_size": 10}
    target["error_handling"] = {"max_retries": 2}
    cfg["tables"][0]["ttl"] = {"field": "expires_at"}
    cfg["snapshot"]["schedule"] = "1h"
    cfg["snapshot"]["retention"] = {"keep_count": 3}
    cfg["grpc"] = {"port": 4001}
    cfg["health"] = {"port": 8089}
    cfg["observability"] = {"log_level": "debug"}
    cfg["shutdown"] = {"grace_period": "5s"}
    with caplog.at_level(logging.INFO, logger="laredo_spark.runner"):
        plan = build_plan(cfg)  # no Spark session, no database connection
    assert [p.pipeline_id() for p in plan.pipelines] == [
        "pg:public.items:indexed-memory",
        "all-items",
    ]
    (line,) = [r.getMessage() for r in caplog.records if "laredo serve" in r.getMessage()]
    assert line == (
        "left to laredo serve (the Spark baseline does not use them): grpc, health, "
        "observability, shutdown, snapshot.schedule, snapshot.retention, tables.0.ttl, "
        "tables.0.targets.0.buffer, tables.0.targets.0.error_handling"
    )

    target["buffer"] = {"max_sise": 10}
    target["lookup_feilds"] = ["sku"]
    cfg["grpc"] = {"prot": 4001}
    cfg["spark"]["partitons"] = 4
    with pytest.raises(laredo.ConfigError) as ei:
        run_spark(cfg)
    problems = ei.value.problems
    assert any(p.startswith("tables.0.targets.0.buffer.max_sise") for p in problems), problems
    assert any(p.startswith("grpc.prot") for p in problems), problems
    assert any(p.startswith("tables.0.targets.0.lookup_feilds: unknown option") for p in problems)
    assert any(p.startswith("spark.partitons: unknown key") for p in problems)
    assert len(problems) == 4, problems


def test_the_spark_section_is_checked_by_the_runner_when_its_plugin_is_not_loaded(
    tmp_path: Any,
) -> None:
    """``laredo serve`` knows ``spark`` only through the plugin hook; with laredo-spark's plugin
    not loaded (autoload off) the runner still accepts its own section and checks it once."""
    import laredo_spark._plugin as spark_plugin

    class Db:
        dsn = "postgresql://nobody@127.0.0.1:1/none"
        slot_name = "unused"

    pm = laredo.get_plugin_manager()
    assert "spark" in laredo.plugins.registry("config_section").names()
    pm.unregister(spark_plugin)
    try:
        assert "spark" not in laredo.plugins.registry("config_section").names()
        cfg = _config(Db(), tmp_path / "snaps")
        assert build_plan(cfg).spark == {"partitions": 2}
        cfg["spark"]["partitons"] = 4
        with pytest.raises(laredo.ConfigError) as ei:
            build_plan(cfg)
        assert [p.split(" (")[0] for p in ei.value.problems] == [
            "spark.partitons: unknown key; did you mean 'partitions'?"
        ]
    finally:
        dist = importlib.metadata.distribution("laredo-spark")
        pm.register(spark_plugin, name="ep:spark", provider=f"{dist.name} {dist.version}")


def test_observer_progress_and_cli_argument_errors(
    spark: Any, pg_database: Any, tmp_path: Any, caplog: Any
) -> None:
    db = pg_database
    db.execute("CREATE TABLE items (id int PRIMARY KEY, sku text)")
    db.execute("INSERT INTO items SELECT g, 'A' || g FROM generate_series(1, 3000) g")
    plan = build_plan(_config(db, tmp_path / "snaps"))
    parts: list[tuple[str, int, int, int, int]] = []

    class PartitionObserver(RecordingObserver):
        def on_spark_partition_done(self, *args: Any) -> None:
            parts.append(args)

    obs = PartitionObserver()
    with caplog.at_level(logging.INFO, logger="laredo_spark.pg"):
        res = spark_baseline(
            spark,
            plan.sources["pg"],
            plan.pipelines[:1],
            snapshot_store=plan.snapshot_store,
            observer=obs,
            partitions=2,
        )
    pid = "pg:public.items:indexed-memory"
    assert res.row_counts == {pid: 3000}
    # one event per part written by a task, with its rows, once the job is committed
    assert len(parts) == 2 and sum(p[2] for p in parts) == 3000
    assert [(p[0], p[1], p[3], p[4]) for p in parts] == [(pid, 0, 1, 2), (pid, 1, 2, 2)]
    assert any("3000 rows in 2 parts" in r.getMessage() for r in caplog.records)
    assert obs.of("baseline_started") == [(pid, ITEMS)]
    assert [a[2] for a in obs.of("baseline_row_loaded")] == [3000]
    ((got_pid, table, total, _duration),) = obs.of("baseline_completed")
    assert (got_pid, table, total) == (pid, ITEMS, 3000)
    with pytest.raises(SystemExit):
        cli_main(["baseline"])  # --config is required


def test_the_spark_section_drives_laredo_spark_baseline(tmp_path: Any, monkeypatch: Any) -> None:
    """``spark { master, partitions, conf }`` of the config file reaches the session and the
    baseline; ``--master`` / ``--partitions`` override them."""
    from laredo_spark import runner

    class Db:
        dsn = "postgresql://nobody@127.0.0.1:1/none"
        slot_name = "unused"

    cfg = _config(Db(), tmp_path / "snaps")
    del cfg["spark"]
    path = tmp_path / "spark.conf"
    # HOCON: the JSON body without its braces, then the section as a person would write it
    path.write_text(
        json.dumps(cfg)[1:-1]
        + '\nspark { master = "local[3]", partitions = 5\n'
        + '  conf { spark.sql.shuffle.partitions = 3, "spark.x.y" = z, spark.ui.enabled = false }'
        + "\n  conf { spark.executor.memory = 768m, spark.network.timeout = 30s, "
        + "spark.driver.maxResultSize = 4g }\n}\n"
    )
    want = {
        "spark.sql.shuffle.partitions": "3",
        "spark.x.y": "z",
        "spark.ui.enabled": "false",
        # HOCON reads 768m and 30s as durations: Spark gets them as written
        "spark.executor.memory": "768m",
        "spark.network.timeout": "30s",
        "spark.driver.maxResultSize": "4g",
    }
    seen: dict[str, Any] = {}

    def fake_session(master: str, app: str, conf: Any) -> Any:
        seen["session"] = (master, dict(conf or {}))
        return object()

    def fake_baseline(session: Any, source: Any, pipes: Any, **kw: Any) -> Any:
        seen["partitions"] = kw["partitions"]
        raise SystemExit(7)

    assert (
        runner.build_plan(
            {**cfg, "snapshot": {"store": "local", "store_config": {"path": "x"}}}
        ).serializer
        is None
    )  # Parquet, the runner's default
    monkeypatch.setattr(runner, "spark_session", fake_session)
    monkeypatch.setattr(runner, "spark_baseline", fake_baseline)
    with pytest.raises(SystemExit):
        cli_main(["baseline", "--config", str(path)])
    assert seen == {"session": ("local[3]", want), "partitions": 5}
    with pytest.raises(SystemExit):
        cli_main(["baseline", "--config", str(path), "--master", "local[1]", "--partitions", "2"])
    assert seen == {"session": ("local[1]", want), "partitions": 2}


def test_cli_group_registers_on_a_typer_app() -> None:
    typer = pytest.importorskip("typer")
    from laredo_spark.cli import register
    from typer.testing import CliRunner

    app = typer.Typer()

    @app.command()
    def version() -> None:  # a second command so typer keeps sub-groups
        pass

    register(app)
    out = CliRunner().invoke(app, ["spark", "baseline", "--help"])
    assert out.exit_code == 0, out.output
    assert "--partitions" in out.output


def test_laredo_snapshot_reads_a_layout_1_snapshot(spark: Any, tmp_path: Any) -> None:
    """A snapshot written by Laredo 0.1 (one file per table, no parts) reads as one task."""
    import hashlib
    import io

    from laredo.serialization import encode_metadata
    from laredo.snapshots.parquet import ParquetSerializer
    from laredo.types import SnapshotMetadata, TableSnapshotInfo

    rows = [{"id": i, "price": Decimal(i) / 4} for i in range(1, 51)]
    info = TableSnapshotInfo(ITEMS, len(rows), position="0/5")
    buf = io.BytesIO()
    ParquetSerializer().write(info, rows, buf)
    folder = tmp_path / "old"
    folder.mkdir()
    (folder / "public.items.parquet").write_bytes(buf.getvalue())
    from datetime import UTC, datetime

    doc = encode_metadata(
        SnapshotMetadata("old", datetime.now(UTC), {"pg": "0/5"}, (info,), "parquet")
    )
    doc["files"] = {
        "public.items": {
            "file": "public.items.parquet",
            "size_bytes": len(buf.getvalue()),
            "sha256": hashlib.sha256(buf.getvalue()).hexdigest(),
        }
    }
    (folder / "metadata.json").write_text(json.dumps(doc))
    df = (
        spark.read.format("laredo-snapshot")
        .option("store", "local")
        .option("store_config", json.dumps({"path": str(tmp_path)}))
        .option("table", "public.items")
        .option("kinds", json.dumps({"id": "int", "price": "decimal"}))
        .load()
    )
    assert df.rdd.getNumPartitions() == 1
    assert sorted((r["id"], r["price"]) for r in df.collect()) == [
        (r["id"], str(r["price"])) for r in rows
    ]
