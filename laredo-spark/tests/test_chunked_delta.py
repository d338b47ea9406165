"""The resumable (``baseline.mode = chunked``) Spark baseline into a ``delta`` target: each
wave of chunks is one Delta commit carrying its progress, so a lost driver is resumed by the
next run (reading only the unfinished chunks: PostgreSQL's own table counters), or by
``laredo serve`` itself (the engine's chunked baseline continues after the last key the
table records); either way the table then streams on from the slot and ends equal to
PostgreSQL."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import laredo
import pytest
from laredo.testing import ServedLaredo, free_port, wait_until

pytest.importorskip("laredo_target_delta")
from laredo_spark.delta_baseline import (
    SPARK_PLAN,
    SPARK_RUN,
    DeltaChunkSink,
    plan_digest,
    recorded_run,
    spark_delta_baseline,
)
from laredo_spark.pg.progress import ChunkRun
from laredo_target_delta import DeltaTarget, DeltaTargetOptions, history
from laredo_target_delta.archive import open_table, progress_of

from ._support import DriverLost, delta_rows, lose_driver_after_two_waves, pg_rows
from .test_chunked_resume import (
    ACCOUNTS,
    CHUNK_ROWS,
    KILL_CHUNK_ROWS,
    ROWS,
    in_range,
    kill_resume_serve,
    make_regional_accounts,
    rows_read,
    source_config,
    table_rows,
)
from .test_serve_restore import make_accounts

pytestmark = [pytest.mark.spark, pytest.mark.integration, pytest.mark.xdist_group("jvm")]


def regional_rows(uri: str) -> dict[Any, dict[str, Any]]:
    return delta_rows(uri, ("region", "id"))


def delta_run(uri: str) -> ChunkRun | None:
    """The run the table's last commit records, its plan found (None: none)."""
    return recorded_run(uri)


@pytest.mark.parametrize("resume", ["spark", "engine"])
def test_chunked_delta_baseline_resumes_after_a_lost_driver(
    spark: Any, pg_database: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, resume: str
) -> None:
    db = pg_database
    make_regional_accounts(db)
    cfg = source_config(db)
    uri = str(tmp_path / "lake" / "accounts")
    waves = lose_driver_after_two_waves(monkeypatch, DeltaChunkSink)
    pipeline = laredo.Pipeline("pg", ACCOUNTS, DeltaTarget(DeltaTargetOptions(uri=uri)))
    with pytest.raises(DriverLost):
        spark_delta_baseline(spark, cfg, [pipeline], source_id="pg", partitions=2)
    monkeypatch.undo()
    assert waves == [2, 2]
    run = delta_run(uri)
    assert run is not None and run.chunks_done() == 4
    (plan,) = run.tables.values()
    assert plan.count == ROWS // CHUNK_ROWS
    # at the slot's position: the plan (an empty version, "begun, no chunk yet"), then a commit
    # per wave with its chunks' rows and the engine's progress record: the last key done
    commits = history(uri)
    assert [(c.kind, c.position) for c in commits] == [("baseline", run.position)] * 3
    assert json.loads(commits[0].progress or "") == {"last_key": None}
    # the plan is in the first commit's run record only: each wave's names its digest
    infos = sorted(open_table(uri).history(), key=lambda i: int(i["version"]))
    plans = [json.loads(i[SPARK_RUN])["tables"] for i in infos]
    assert plans == [json.loads(json.dumps({str(ACCOUNTS): plan.to_json()})), {}, {}]
    records = [json.loads(i[SPARK_RUN])["done"]["pipeline-0000"] for i in infos]
    assert [sorted(r) for r in records] == [[], ["0", "1"], ["2", "3"]]  # each chunk once
    assert {i[SPARK_PLAN] for i in infos} == {plan_digest(run)}
    region, key_id = plan.bounds[3]
    assert json.loads(progress_of(commits) or "") == {"last_key": [region, int(key_id)]}
    done = " OR ".join(in_range(*plan.chunk(c)) for c in range(4))
    ((in_done,),) = db.execute(f"SELECT count(*) FROM accounts WHERE {done}")
    assert len(regional_rows(uri)) == in_done
    (slot,) = db.execute(
        "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = %s",
        (db.slot_name,),
    )
    assert slot[0] == run.position  # the slot survives, still at the run's position

    # meanwhile: changes in finished and unfinished key ranges, a key change across them
    db.execute("UPDATE accounts SET balance = -1 WHERE id % 7 = 0")
    db.execute("DELETE FROM accounts WHERE id % 11 = 0")
    db.execute("INSERT INTO accounts VALUES ('eu west', 100001, 'new', 5, now())")
    db.execute("UPDATE accounts SET region = 'zz', id = 200002 WHERE id = 2")
    db.execute("UPDATE accounts SET region = 'eu west', id = 2 WHERE id = 3999")

    if resume == "spark":
        unfinished = [c for c in range(plan.count) if c not in run.done["pipeline-0000"]]
        conds = [in_range(*plan.chunk(c)) for c in unfinished]
        ((want_read,),) = db.execute(f"SELECT count(*) FROM accounts WHERE {' OR '.join(conds)}")
        before = rows_read(db)
        result = spark_delta_baseline(spark, cfg, [pipeline], source_id="pg", partitions=2)
        read = rows_read(db) - before
        assert result.chunks == (len(unfinished), plan.count)
        assert result.position == run.position
        assert read == want_read, (read, want_read)  # only the unfinished chunks were read
        kinds = [(c.kind, c.position) for c in history(uri)]
        assert kinds == [("baseline", run.position)] * 6  # appended: 3 more waves
        assert progress_of(history(uri)) is None  # the last wave: finished
        assert result.row_counts[pipeline.pipeline_id()] == len(regional_rows(uri))

    # laredo serve's engine: streams from the slot's P0 (resume = spark), or first continues
    # the chunked baseline after the recorded key itself (resume = engine)
    db.execute("UPDATE accounts SET name = 'after' WHERE id % 13 = 0")
    src = laredo.source("postgresql", **{k: v for k, v in cfg.items() if k != "type"})
    target = DeltaTarget(DeltaTargetOptions(uri=uri, flush_interval=0.1))
    eng = laredo.Engine(sources={"pg": src}, pipelines=[laredo.Pipeline("pg", ACCOUNTS, target)])
    eng.start()
    try:
        assert eng.await_ready(90)
        wait_until(
            lambda: regional_rows(uri) == table_rows(db), 60, "delta == SELECT *", interval=0.2
        )
    finally:
        eng.stop()
    after = history(uri)
    # never baselined again from scratch: the Spark waves stay the table's first versions
    assert [c.kind for c in after].count("baseline") == (6 if resume == "spark" else 3)
    assert progress_of(after) is None


# -- kill -9 of a `laredo spark baseline` into a delta target, then the same command again ---

DELTA_CONFIG = """
sources {{
  pg {{
    type = postgresql
    connection = "{connection}"
    slot_mode = stateful
    slot_name = {slot}
    publication {{ create = true }}
    status_interval = 200ms
    baseline {{ mode = chunked, chunk_rows = 1000 }}
  }}
}}
tables = [
  {{ source = pg, schema = public, table = accounts,
     targets = [ {{ type = delta, uri = "{uri}", flush_interval = 100ms }} ] }}
]
grpc {{ port = {grpc} }}
health {{ port = {health} }}
shutdown {{ grace_period = 20s }}
spark {{
  partitions = 2
  conf {{ spark.sql.shuffle.partitions = 2, spark.executor.memory = 768m }}
}}
"""


class DeltaOutput:
    """The baseline's output is a Delta table; `laredo serve` streams on into it."""

    def __init__(self, uri: str) -> None:
        self.uri = uri

    def load(self) -> ChunkRun | None:
        return delta_run(self.uri)

    def killed(self, run: ChunkRun) -> None:
        commits = history(self.uri)
        assert commits and progress_of(commits) is not None  # unfinished, as the engine sees
        assert {c.position for c in commits} == {run.position}

    def resumed(self, run: ChunkRun) -> None:
        assert progress_of(history(self.uri)) is None  # finished
        assert delta_run(self.uri) is not None
        assert delta_run(self.uri).output_id == run.output_id  # type: ignore[union-attr]

    def serve(
        self, db: Any, config: Path, tmp_path: Path, *, counter: list[int], stop: Any, w: Any
    ) -> None:
        served = ServedLaredo(config, log=tmp_path / "serve.log", timeout=90)
        try:
            writes = counter[0]
            wait_until(lambda: counter[0] > writes + 200, 60, "writes while serving", interval=0.1)
            stop.set()
            w.join()
            want = pg_rows(db, "accounts")
            wait_until(lambda: delta_rows(self.uri) == want, 60, "delta == SELECT *", interval=0.2)
            assert [c.kind for c in history(self.uri)].count("baseline") >= 2  # no re-baseline
        finally:
            served.stop(timeout=30)


def test_kill_9_of_a_chunked_delta_baseline_then_the_same_command_resumes(
    pg_database: Any, tmp_path: Path
) -> None:
    db = pg_database
    make_accounts(db)
    uri = str(tmp_path / "lake" / "accounts")
    config = tmp_path / "laredo.conf"
    config.write_text(
        DELTA_CONFIG.format(
            connection=db.dsn, slot=db.slot_name, uri=uri, grpc=free_port(), health=free_port()
        )
    )
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"}
    # --chunk-rows overrides the source's chunk_rows (1000: 3 chunks) with 300: 10 chunks
    args = ["--master", "local[2]", "--chunk-rows", str(KILL_CHUNK_ROWS)]
    kill_resume_serve(db, config, DeltaOutput(uri), tmp_path, args=args, env=env)
